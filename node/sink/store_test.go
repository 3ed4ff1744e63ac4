package sink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func openStore(t *testing.T, dir string) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

// carrier encodes n records of crawler's pages /p<from>…, in carrier seq.
func carrier(crawler string, seq uint64, from, n int) []byte {
	recs := make([]pack.Record, n)
	for i := range recs {
		recs[i] = pack.Record{URL: fmt.Sprintf("http://h%d.example/p%d", (from+i)%3, from+i), Status: 200,
			Change: pack.ChangeNew, FetchedAt: time.Unix(1_800_000_000, 0), CrawlerID: crawler, Lang: "en",
			Title: fmt.Sprintf("page %d", from+i), Keywords: []pack.Keyword{{Term: "alpha", Weight: 3}, {Term: fmt.Sprintf("k%d", (from+i)%2), Weight: 1}}}
	}
	return pack.EncodeCarrier(crawler, seq, time.Unix(1_800_000_000, 0), recs).Data
}

func wantStatus(t *testing.T, err error, st pb.Status) {
	t.Helper()
	var re *RefusedError
	if !errors.As(err, &re) || re.Status != st {
		t.Fatalf("error %v, want a refusal with status %s", err, st)
	}
}

// A carrier is committed once: its records get consecutive sequences, and
// a redelivery (after a lost acknowledgement, a crash on either side) is
// acknowledged with the same sequences and adds nothing, before and after
// a restart.
func TestCommitIdempotent(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	a, err := s.Commit("c1", carrier("c1", 0, 0, 5))
	if err != nil || a.First != 1 || a.Records != 5 || a.Duplicate {
		t.Fatalf("first commit: %+v, %v", a, err)
	}
	b, err := s.Commit("c1", carrier("c1", 1, 5, 3))
	if err != nil || b.First != 6 || b.Records != 3 {
		t.Fatalf("second carrier: %+v, %v", b, err)
	}
	again, err := s.Commit("c1", carrier("c1", 0, 0, 5))
	if err != nil || !again.Duplicate || again.First != 1 || again.Records != 5 || s.Head() != 8 {
		t.Fatalf("redelivery: %+v, %v (head %d)", again, err, s.Head())
	}
	s.Close()
	s = openStore(t, dir)
	defer s.Close()
	again, err = s.Commit("c1", carrier("c1", 1, 5, 3))
	c, crawlers := s.Counts()
	if err != nil || !again.Duplicate || s.Head() != 8 || c.Records != 8 || c.Pages != 8 || c.Carriers != 2 || c.Duplicates != 2 ||
		len(crawlers) != 1 || crawlers[0].Records != 8 {
		t.Fatalf("after a restart: ack %+v %v, head %d, counts %+v, crawlers %+v", again, err, s.Head(), c, crawlers)
	}
	es, last, err := s.Read(0, 100, Filter{})
	if err != nil || len(es) != 8 || last != 8 || es[0].Seq != 1 || es[7].Seq != 8 || es[7].Record.URL != "http://h1.example/p7" ||
		es[0].Carrier != "c1-00000000000000000000" {
		t.Fatalf("log: %d entries, last %d, %v", len(es), last, err)
	}
}

// Bad input is refused with a reason and a status, and touches nothing
// already stored.
func TestCommitRefusesBadCarriers(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 2)); err != nil {
		t.Fatal(err)
	}
	good := carrier("c1", 1, 2, 2)
	_, err := s.Commit("c2", good)
	wantStatus(t, err, pb.Status_WRONG_SENDER)
	_, err = s.Commit("c1", good[:len(good)-3])
	wantStatus(t, err, pb.Status_MALFORMED)
	_, err = s.Commit("c1", []byte("not a carrier"))
	wantStatus(t, err, pb.Status_MALFORMED)
	forged := pack.EncodeCarrier("c1", 2, time.Now(), []pack.Record{{URL: "http://x/", CrawlerID: "c9"}}).Data
	_, err = s.Commit("c1", forged)
	wantStatus(t, err, pb.Status_MALFORMED)
	big := pack.Seal("c1", 3, time.Now(), 1, make([]byte, 5<<20))
	_, err = s.Commit("c1", big.Data)
	wantStatus(t, err, pb.Status_TOO_LARGE)
	c, _ := s.Counts()
	if s.Head() != 2 || c.Records != 2 || c.Rejected != 5 {
		t.Fatalf("after refusals: head %d, counts %+v", s.Head(), c)
	}
	if a, err := s.Commit("c1", good); err != nil || a.First != 3 {
		t.Fatalf("the good carrier after the bad ones: %+v, %v", a, err)
	}
}

// A page delivered by a second crawler is overlap, counted for it.
func TestOverlapCounted(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	for _, c := range []string{"c1", "c1", "c2"} {
		seq := map[string]uint64{"c1": 0, "c2": 0}[c]
		if c == "c1" {
			if _, err := s.Commit(c, carrier(c, seq, 0, 3)); err != nil {
				t.Fatal(err)
			}
			continue
		}
		if _, err := s.Commit(c, carrier(c, seq, 1, 3)); err != nil { // pages 1, 2 overlap, 3 is new
			t.Fatal(err)
		}
	}
	c, crawlers := s.Counts()
	es, _, _ := s.Read(3, 10, Filter{})
	if c.Overlap != 2 || c.Pages != 4 || len(es) != 3 || !es[0].Overlap || es[2].Overlap {
		t.Fatalf("counts %+v, crawlers %+v, entries %+v", c, crawlers, es)
	}
	for _, cc := range crawlers {
		if (cc.Crawler == "c2") != (cc.Overlap == 2) {
			t.Fatalf("crawler counts %+v", crawlers)
		}
	}
}

// Filters select by host, domain suffix, keyword, language and change; the
// cursor moves past what they refuse.
func TestReadFilters(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 9)); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		f    Filter
		want int
	}{
		{Filter{}, 9}, {Filter{Host: "h1.example"}, 3}, {Filter{Suffix: "example"}, 9}, {Filter{Suffix: ".h2.example"}, 3},
		{Filter{Suffix: "ample"}, 0}, {Filter{Keyword: "k1"}, 4}, {Filter{Keyword: "ALPHA"}, 9}, {Filter{Lang: "fr"}, 0},
		{Filter{Changed: true, Host: "h0.example", Keyword: "k0"}, 2},
	} {
		es, last, err := s.Read(0, 100, tc.f)
		if err != nil || len(es) != tc.want || last != 9 {
			t.Errorf("filter %+v: %d entries (last %d, %v), want %d", tc.f, len(es), last, err, tc.want)
		}
	}
}

// Two crawls under one crawler id (each state restarts its carrier
// sequence) send different carriers with the same name: the second is
// refused with a reason, never acknowledged as a redelivery and dropped.
func TestCarrierNameReusedIsRefused(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Commit("vm", carrier("vm", 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	_, err := s.Commit("vm", carrier("vm", 0, 100, 2))
	wantStatus(t, err, pb.Status_REFUSED)
	if s.Head() != 3 {
		t.Fatalf("head %d after the refusal", s.Head())
	}
}

// Carriers pushed at once are committed in groups (one transaction, one
// fsync): every record once, each carrier's records consecutive, and a
// redelivery inside a group acknowledged with its first commit's sequences.
func TestConcurrentCommitsGrouped(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	const crawlers, per, recs = 6, 15, 7
	var wg sync.WaitGroup
	acks := make([][]Ack, crawlers)
	for c := range crawlers {
		id := fmt.Sprintf("c%d", c)
		wg.Go(func() {
			for i := range per {
				data := carrier(id, uint64(i), c*1000+i*recs, recs)
				for range 2 { // each carrier twice: the second is a redelivery
					a, err := s.Commit(id, data)
					if err != nil {
						t.Error(err)
						return
					}
					acks[c] = append(acks[c], a)
				}
			}
		})
	}
	wg.Wait()
	if s.Head() != crawlers*per*recs {
		t.Fatalf("head %d, want %d", s.Head(), crawlers*per*recs)
	}
	for c := range acks {
		for i := 0; i < len(acks[c]); i += 2 {
			first, again := acks[c][i], acks[c][i+1]
			if first.Duplicate || !again.Duplicate || again.First != first.First || first.Records != recs {
				t.Fatalf("crawler %d carrier %d: %+v then %+v", c, i/2, first, again)
			}
		}
	}
	es, _, _ := s.Read(0, 10_000, Filter{})
	byCarrier := map[string][]uint64{}
	for _, e := range es {
		byCarrier[e.Carrier] = append(byCarrier[e.Carrier], e.Seq)
	}
	for id, seqs := range byCarrier {
		if len(seqs) != recs || seqs[recs-1]-seqs[0] != recs-1 {
			t.Fatalf("carrier %s: sequences %v, want %d consecutive", id, seqs, recs)
		}
	}
	if c, _ := s.Counts(); c.Duplicates != crawlers*per || c.Carriers != crawlers*per {
		t.Fatalf("counts %+v", c)
	}
}

// A carrier claiming more records than a carrier may hold is refused
// before it is decoded (the outbox never seals one).
func TestCommitRefusesTooManyRecords(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	_, err := s.Commit("c1", carrier("c1", 0, 0, pack.MaxCarrierRecords+1))
	wantStatus(t, err, pb.Status_TOO_LARGE)
}

// Pages known before a restart are still known after it (the page filter
// is rebuilt from the store): a second crawler's delivery is overlap.
func TestOverlapAcrossRestart(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	s.Close()
	s = openStore(t, dir)
	defer s.Close()
	if _, err := s.Commit("c2", carrier("c2", 0, 0, 3)); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Counts(); c.Overlap != 3 || c.Pages != 3 {
		t.Fatalf("counts %+v: want the 3 pages as overlap", c)
	}
}

func commitOK(t *testing.T, s *Store, crawler string, seq uint64, from, n int) {
	t.Helper()
	if _, err := s.Commit(crawler, carrier(crawler, seq, from, n)); err != nil {
		t.Fatal(err)
	}
}

func wantPage(t *testing.T, s *Store, url string, history []uint64, crawlers ...string) {
	t.Helper()
	p, ok, err := s.Page(url)
	if err != nil || !ok || !slices.Equal(p.History, history) || !slices.Equal(p.Crawlers, crawlers) || p.Latest != history[0] {
		t.Fatalf("page %s: %+v, %v, %v; want history %v, crawlers %v", url, p, ok, err, history, crawlers)
	}
}

// Per page the sink keeps its latest records, newest first and bounded,
// and the crawlers that delivered it; each entry links to its page's
// previous one.
func TestPageHistoryAndCrawlers(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true, History: 3})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	p0 := "http://h0.example/p0"
	for seq := range uint64(4) { // page 0 is sequence 1, 3, 5, 7 (two pages a carrier)
		commitOK(t, s, "c1", seq, 0, 2)
	}
	commitOK(t, s, "c2", 0, 0, 1) // 9
	wantPage(t, s, p0, []uint64{9, 7, 5}, "c1", "c2")
	wantPage(t, s, "http://h1.example/p1", []uint64{8, 6, 4}, "c1")
	if _, ok, err := s.Page("http://h0.example/nowhere"); ok || err != nil {
		t.Fatalf("an unknown page: %v, %v", ok, err)
	}
	es, _, err := s.Read(6, 10, Filter{})
	if err != nil || len(es) != 3 || es[0].Prev != 5 || es[1].Prev != 6 || es[2].Prev != 7 || !es[2].Overlap || es[0].Overlap {
		t.Fatalf("entries 7-9: %+v, %v", es, err)
	}
	if es, _, _ := s.Read(0, 1, Filter{}); es[0].Prev != 0 {
		t.Fatalf("a page's first entry links to %d", es[0].Prev)
	}
}

// crash closes the store's database without what a clean Close saves.
func crash(s *Store) {
	s.Stop()
	s.mu.Lock()
	defer s.mu.Unlock()
	s.db.Close()
}

// After a crash the page table is its last snapshot plus the log past it:
// overlap, page counts and histories are as if nothing had happened,
// whether the snapshot was taken at the open or every few records.
func TestPageTableAfterCrash(t *testing.T) {
	for _, every := range []uint64{snapshotEvery, 7} {
		t.Run(fmt.Sprintf("snapshot every %d records", every), func(t *testing.T) {
			dir := t.TempDir()
			open := func() *Store {
				s, err := Open(Options{Dir: dir, NoSync: true, snapshotEvery: every})
				if err != nil {
					t.Fatal(err)
				}
				return s
			}
			s := open()
			commitOK(t, s, "c1", 0, 0, 3)
			commitOK(t, s, "c1", 1, 0, 5)
			commitOK(t, s, "c2", 0, 3, 3)
			crash(s)
			s = open()
			defer s.Close()
			if c, _ := s.Counts(); c.Pages != 6 || c.Overlap != 2 {
				t.Fatalf("counts after the crash: %+v", c)
			}
			commitOK(t, s, "c3", 0, 0, 6) // every page again: all overlap
			if c, _ := s.Counts(); c.Pages != 6 || c.Overlap != 8 {
				t.Fatalf("counts: %+v", c)
			}
			wantPage(t, s, "http://h0.example/p3", []uint64{15, 9, 7}, "c1", "c2", "c3")
			wantPage(t, s, "http://h2.example/p5", []uint64{17, 11}, "c2", "c3")
		})
	}
}

// A store written before the page table (its entries unlinked, every
// page's state an sp/ key) is read as it was: its pages, their crawlers
// and their histories, the older part from the sp/ states.
func TestStoreBeforePageTable(t *testing.T) {
	dir := t.TempDir()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	a, b := "http://h0.example/a", "http://h1.example/b"
	err = db.Update(func(txn *badger.Txn) error {
		for seq, rec := range map[uint64]struct{ url, crawler string }{1: {a, "c1"}, 2: {b, "c1"}, 3: {a, "c1"}} {
			v := binary.AppendUvarint(nil, entryVersion1)
			v = appendString(v, "c1-00000000000000000000")
			v = binary.AppendVarint(v, time.Unix(1_800_000_000, 0).UnixMicro())
			v = append(v, 0)
			r := pack.Record{URL: rec.url, Status: 200, Change: pack.ChangeNew, CrawlerID: rec.crawler, FetchedAt: time.Unix(1_800_000_000, 0)}
			if err := txn.Set(logKey(seq), r.AppendBinary(v)); err != nil {
				return err
			}
		}
		for url, ps := range map[string]pageState{a: {history: []uint64{1, 3}, crawlers: []string{"c1"}}, b: {history: []uint64{2}, crawlers: []string{"c1"}}} {
			if err := txn.Set(pageKey(url), ps.encode()); err != nil {
				return err
			}
		}
		if err := txn.Set(kNext, binary.BigEndian.AppendUint64(nil, 4)); err != nil {
			return err
		}
		return txn.Set(kCounts, Counts{Records: 3, Pages: 2, Carriers: 1}.encode())
	})
	if err != nil {
		t.Fatal(err)
	}
	db.Close()

	s := openStore(t, dir)
	if _, err := s.Commit("c2", pack.EncodeCarrier("c2", 1, time.Now(), []pack.Record{{URL: a, Status: 200, Change: pack.ChangeChanged}}).Data); err != nil {
		t.Fatal(err)
	}
	if c, _ := s.Counts(); c.Pages != 2 || c.Overlap != 1 {
		t.Fatalf("counts %+v", c)
	}
	wantPage(t, s, a, []uint64{4, 3, 1}, "c1", "c2")
	wantPage(t, s, b, []uint64{2}, "c1")
	crash(s) // the snapshot of the open holds the pages before the crawler c2
	s = openStore(t, dir)
	defer s.Close()
	wantPage(t, s, a, []uint64{4, 3, 1}, "c1", "c2")
	if c, _ := s.Counts(); c.Pages != 2 || c.Overlap != 1 {
		t.Fatalf("counts after a crash %+v", c)
	}
}

// An entry decodes as it was encoded: its carrier id kept as a sequence
// when it is its crawler's (the sink's entries), as the id otherwise;
// entries of version 1 (the id, no link) still decode.
func TestEntryEncoding(t *testing.T) {
	r := pack.Record{URL: "http://a.example/", Status: 200, Change: pack.ChangeNew, CrawlerID: "12D3KooWabc", FetchedAt: time.Unix(1_800_000_000, 0).UTC(),
		Keywords: []pack.Keyword{{Term: "alpha", Weight: 3}}}
	at := time.Unix(1_800_000_100, 0).UTC()
	for _, carrier := range []string{pack.Carrier{CrawlerID: r.CrawlerID, Seq: 42}.ID(), "someone-else-00000000000000000042", "12D3KooWabc-42"} {
		e := Entry{Carrier: carrier, IngestedAt: at, Overlap: true, Prev: 7, Record: r}
		var got Entry
		if err := got.decode(e.encode()); err != nil {
			t.Fatal(err)
		}
		got.Seq = e.Seq
		if got.Carrier != carrier || !got.IngestedAt.Equal(at) || !got.Overlap || got.Prev != 7 || got.Record.URL != r.URL || got.Record.Keywords[0] != r.Keywords[0] {
			t.Fatalf("carrier %q: decoded %+v", carrier, got)
		}
	}
	if n := len((&Entry{Carrier: pack.Carrier{CrawlerID: r.CrawlerID, Seq: 42}.ID(), Record: r}).encode()); n > len(r.AppendBinary(nil))+16 {
		t.Fatalf("an entry of %d bytes for a record of %d: the carrier id is not kept as its sequence", n, len(r.AppendBinary(nil)))
	}
	v1 := binary.AppendUvarint(nil, entryVersion1)
	v1 = appendString(v1, "c1-00000000000000000003")
	v1 = binary.AppendVarint(v1, at.UnixMicro())
	v1 = append(v1, 0)
	var got Entry
	if err := got.decode(r.AppendBinary(v1)); err != nil || got.Carrier != "c1-00000000000000000003" || got.Prev != 0 || got.Record.URL != r.URL {
		t.Fatalf("version 1: %+v, %v", got, err)
	}
}

// The largest carrier the sink takes (10,000 records, 4 MiB of them) is
// one transaction.
func TestLargestCarrierCommits(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	recs := make([]pack.Record, pack.MaxCarrierRecords)
	pad := strings.Repeat("x", (4<<20)/pack.MaxCarrierRecords-100)
	for i := range recs {
		recs[i] = pack.Record{URL: fmt.Sprintf("http://h.example/%d", i), Status: 200, Change: pack.ChangeNew, Title: pad}
	}
	car := pack.EncodeCarrier("c1", 0, time.Now(), recs)
	h, _, _ := pack.DecodeHeader(car.Data)
	if h.RawBytes > 4<<20 || h.RawBytes < 4<<20-200_000 {
		t.Fatalf("a carrier of %d raw bytes: not the largest", h.RawBytes)
	}
	if a, err := s.Commit("c1", car.Data); err != nil || a.Records != pack.MaxCarrierRecords {
		t.Fatalf("%+v, %v", a, err)
	}
}
