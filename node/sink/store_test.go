package sink

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

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

// The page filter never forgets a key, and grows.
func TestPageFilter(t *testing.T) {
	f := newPageFilter(10)
	var fp int
	for i := range 3 * minFilterKey / 2 {
		k := pageKey(fmt.Sprintf("http://h/%d", i))
		if i%2 == 0 {
			f.add(k)
		}
		if i%2 == 1 && f.mayContain(k) {
			fp++
		}
	}
	for i := 0; i < 3*minFilterKey/2; i += 2 {
		if !f.mayContain(pageKey(fmt.Sprintf("http://h/%d", i))) {
			t.Fatalf("key %d forgotten", i)
		}
	}
	if rate := float64(fp) / float64(3*minFilterKey/4); rate > 0.01 {
		t.Fatalf("false positives %.4f", rate)
	}
}
