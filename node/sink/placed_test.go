package sink

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/overlay"
)

// placedCarrier encodes records of pages /p<from>… of host h<i%hosts>,
// each placed at 10.0.<i%hosts>.1, by crawler in carrier seq.
func placedCarrier(crawler string, seq uint64, from, n, hosts int) []byte {
	recs := make([]pack.Record, n)
	for i := range recs {
		h := (from + i) % hosts
		recs[i] = pack.Record{URL: fmt.Sprintf("http://h%d.example/p%d", h, from+i), Status: 200, Change: pack.ChangeNew,
			FetchedAt: time.Unix(1_800_000_000+int64(from+i), 0), CrawlerID: crawler, ETag: fmt.Sprintf(`"e%d"`, from+i),
			ContentHash: [16]byte{byte(from + i)}, Timing: pack.Timing{Total: 7 * time.Millisecond},
			Addr: netip.AddrFrom4([4]byte{10, 0, byte(h), 1}), OutLinks: 1, Links: []string{fmt.Sprintf("http://h%d.example/p%d", h, from+i+hosts)}}
		if i%2 == 1 {
			recs[i].Flags = pack.FlagNoFollow
		}
	}
	return pack.EncodeCarrier(crawler, seq, time.Unix(1_800_000_000, 0), recs).Data
}

// allPlaced pages through a range with limit and returns the URLs in the
// order answered and the queries it took.
func allPlaced(t *testing.T, s *Store, first, last string, limit int) ([]string, int) {
	t.Helper()
	var urls []string
	q := PlacedQuery{First: netip.MustParseAddr(first), Last: netip.MustParseAddr(last), Limit: limit}
	for n := 1; ; n++ {
		a, err := s.PlacedPages(q)
		if err != nil {
			t.Fatal(err)
		}
		if len(a.Pages) > limit {
			t.Fatalf("%d pages for a limit of %d", len(a.Pages), limit)
		}
		for _, p := range a.Pages {
			urls = append(urls, p.Record.URL)
		}
		if a.Done {
			return urls, n
		}
		q.After = a.Next
	}
}

// The sink answers which pages were placed in an address range from its
// address index, page by page: every page of the range once, each as its
// latest record (a revisit's validators, not the first fetch's), none of
// the range's neighbours; a page whose latest record places it elsewhere
// leaves the old range; the index survives a restart.
func TestPlacedPagesByRange(t *testing.T) {
	dir := t.TempDir()
	s := openStore(t, dir)
	// 60 pages on 6 hosts (10.0.0.1 … 10.0.5.1), 10 each
	if _, err := s.Commit("c1", placedCarrier("c1", 0, 0, 60, 6)); err != nil {
		t.Fatal(err)
	}
	// a revisit of /p6 (host h0) by another crawler, with a new validator
	rev := pack.Record{URL: "http://h0.example/p6", Status: 200, Change: pack.ChangeChanged, FetchedAt: time.Unix(1_900_000_000, 0),
		CrawlerID: "c2", ETag: `"new"`, Addr: netip.MustParseAddr("10.0.0.1")}
	// h5's page /p5 moved: its host is placed at 10.9.0.1 now
	moved := pack.Record{URL: "http://h5.example/p5", Status: 200, FetchedAt: time.Unix(1_900_000_000, 0), CrawlerID: "c2",
		Addr: netip.MustParseAddr("10.9.0.1")}
	if _, err := s.Commit("c2", pack.EncodeCarrier("c2", 0, time.Now(), []pack.Record{rev, moved}).Data); err != nil {
		t.Fatal(err)
	}

	urls, queries := allPlaced(t, s, "10.0.0.0", "10.0.1.255", 3)
	if len(urls) != 20 || queries < 7 {
		t.Fatalf("10.0.0.0–10.0.1.255: %d pages in %d queries, want h0's and h1's 20 in pages of 3", len(urls), queries)
	}
	seen := map[string]bool{}
	for _, u := range urls {
		if seen[u] || !(strings.HasPrefix(u, "http://h0.") || strings.HasPrefix(u, "http://h1.")) {
			t.Fatalf("page %s answered twice or outside the range", u)
		}
		seen[u] = true
	}
	a, err := s.PlacedPages(PlacedQuery{First: netip.MustParseAddr("10.0.0.1"), Last: netip.MustParseAddr("10.0.0.1"), Limit: MaxPlacedLimit})
	if err != nil || !a.Done || len(a.Pages) != 10 {
		t.Fatalf("h0: %d pages, done %v, %v", len(a.Pages), a.Done, err)
	}
	for _, p := range a.Pages {
		if p.Record.URL == "http://h0.example/p6" && (p.Record.ETag != `"new"` || p.Record.CrawlerID != "c2" || p.Seq != 61) {
			t.Fatalf("h0/p6 answered as %+v (seq %d), want its revisit, seq 61", p.Record, p.Seq)
		}
	}
	if urls, _ := allPlaced(t, s, "10.0.5.0", "10.0.5.255", 4); len(urls) != 9 {
		t.Fatalf("h5's range after /p5 moved: %d pages, want 9", len(urls))
	}
	if urls, _ := allPlaced(t, s, "10.9.0.0", "10.9.255.255", 4); len(urls) != 1 || urls[0] != "http://h5.example/p5" {
		t.Fatalf("the moved page's new range: %v", urls)
	}
	if urls, _ := allPlaced(t, s, "2001:db8::", "2001:db8::ffff", 4); len(urls) != 0 {
		t.Fatalf("an IPv6 range holds %v", urls)
	}
	s.Close()
	s = openStore(t, dir)
	defer s.Close()
	if urls, _ := allPlaced(t, s, "10.0.0.0", "10.255.255.255", MaxPlacedLimit); len(urls) != 60 {
		t.Fatalf("after a restart: %d pages placed in 10/8, want 60 (one moved within it)", len(urls))
	}
}

// A query reads only its range's keys and at most placedScanFactor×limit
// of them: a range full of pages that moved away answers in bounded steps
// that each move the cursor on.
func TestPlacedPagesBounded(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Commit("c1", placedCarrier("c1", 0, 0, 50, 1)); err != nil { // 50 pages at 10.0.0.1
		t.Fatal(err)
	}
	var recs []pack.Record
	for i := range 50 {
		recs = append(recs, pack.Record{URL: fmt.Sprintf("http://h0.example/p%d", i), Status: 200, CrawlerID: "c1",
			FetchedAt: time.Unix(1_900_000_000, 0), Addr: netip.MustParseAddr("10.1.0.1")})
	}
	if _, err := s.Commit("c1", pack.EncodeCarrier("c1", 1, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
	q := PlacedQuery{First: netip.MustParseAddr("10.0.0.0"), Last: netip.MustParseAddr("10.0.0.255"), Limit: 2}
	steps := 0
	for {
		a, err := s.PlacedPages(q)
		if err != nil || len(a.Pages) != 0 {
			t.Fatalf("pages %d, %v: every page of the range moved away", len(a.Pages), err)
		}
		steps++
		if a.Done {
			break
		}
		if string(a.Next) == string(q.After) {
			t.Fatal("an answer that is not done left the cursor where it was")
		}
		q.After = a.Next
	}
	if want := (50 + 2*placedScanFactor - 1) / (2 * placedScanFactor); steps != want && steps != want+1 {
		t.Fatalf("%d steps through 50 stale keys at %d keys a step", steps, 2*placedScanFactor)
	}
}

// Bad queries are refused with the reason, naming what is wrong.
func TestPlacedPagesBadQuery(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	a4, b4, a6 := netip.MustParseAddr("10.0.0.0"), netip.MustParseAddr("10.0.0.255"), netip.MustParseAddr("2001:db8::")
	for _, c := range []struct {
		q    PlacedQuery
		want string
	}{
		{PlacedQuery{Last: b4, Limit: 1}, "first and last addresses are required"},
		{PlacedQuery{First: a4, Last: a6, Limit: 1}, "different families"},
		{PlacedQuery{First: b4, Last: a4, Limit: 1}, "last before first"},
		{PlacedQuery{First: a4, Last: b4, Limit: 0}, "limit 0: want 1 to 1000"},
		{PlacedQuery{First: a4, Last: b4, Limit: MaxPlacedLimit + 1}, "limit 1001"},
		{PlacedQuery{First: a4, Last: b4, Limit: 1, After: []byte{1, 2, 3}}, "cursor of 3 bytes: want 32"},
		{PlacedQuery{First: a4, Last: b4, Limit: 1, After: placedKey(netip.MustParseAddr("10.0.1.0"), pageID{})[len(pPlaced):]}, "cursor outside the range"},
	} {
		_, err := s.PlacedPages(c.q)
		var bq *BadQueryError
		if !errors.As(err, &bq) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%+v: %v, want a bad query saying %q", c.q, err, c.want)
		}
	}
}

// Over /micra/pages/1 a live member pages through a range, following the
// cursors, each page with its state and links; a stranger is refused NOT_MEMBER with the reason (it may pass:
// the sink may not have heard it yet), a bad request MALFORMED with its
// reason, and neither reads a page.
func TestPlacedPagesOverTheProtocol(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if _, err := s.Commit("c1", placedCarrier("c1", 0, 0, 1200, 4)); err != nil {
		t.Fatal(err)
	}
	sinkHost, memberHost, strangerHost := newHost(t), newHost(t), newHost(t)
	lm := joinTest(t, sinkHost, true)
	(&Server{Store: s, Timeout: 5 * time.Second, Admit: AdmitMembers(lm.Members())}).Register(sinkHost)
	sinkInfo := peer.AddrInfo{ID: sinkHost.ID(), Addrs: sinkHost.Addrs()}
	joinTest(t, memberHost, false, sinkHost.Addrs()[0].String()+"/p2p/"+sinkHost.ID().String())
	waitUntil(t, "the sink to hear the member", func() bool {
		mi, ok := lm.Members().Member(memberHost.ID())
		return ok && !mi.Dead
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()

	first, last := netip.MustParseAddr("10.0.1.0"), netip.MustParseAddr("10.0.2.255")
	var got []PlacedPage
	calls := 0
	var err error
	for a := (PlacedAnswer{}); err == nil && (calls == 0 || !a.Done); calls++ {
		a, err = (&Client{Host: memberHost, Sink: sinkInfo, Timeout: 5 * time.Second}).QueryPlaced(ctx, first, last, a.Next)
		got = append(got, a.Pages...)
	}
	if err != nil || len(got) != 600 || calls != 2 {
		t.Fatalf("hosts h1 and h2: %d pages in %d answers, %v; want 600 in 2 (%d a query)", len(got), calls, err, PageLimit)
	}
	urls := map[string]bool{}
	nofollow := 0
	for _, p := range got {
		r := p.Record
		if urls[r.URL] || !first.Unmap().Less(r.Addr) && first != r.Addr || last.Less(r.Addr) || r.ETag == "" || r.FetchedAt.IsZero() ||
			r.Timing.Total != 7*time.Millisecond || r.ContentHash == ([16]byte{}) && !strings.HasSuffix(r.URL, "/p0") || r.CrawlerID != "c1" || p.Seq == 0 ||
			len(r.Links) != 1 || r.OutLinks != 1 || !strings.HasPrefix(r.Links[0], r.URL[:len("http://h1.example/")]) {
			t.Fatalf("page %+v (seq %d): answered twice or without its state", r, p.Seq)
		}
		urls[r.URL] = true
		if r.Flags&pack.FlagNoFollow != 0 {
			nofollow++
		}
	}
	if nofollow != 300 {
		t.Fatalf("%d pages answered nofollow, want every other one", nofollow)
	}

	var qe *QueryError
	a, err := (&Client{Host: strangerHost, Sink: sinkInfo, Timeout: 5 * time.Second}).QueryPlaced(ctx, first, last, nil)
	if !errors.As(err, &qe) || qe.Status != pb.Status_NOT_MEMBER || !strings.Contains(qe.Reason, "heard no heartbeat") || qe.Permanent() || len(a.Pages) != 0 {
		t.Fatalf("a stranger's query: %v, want NOT_MEMBER with the reason", err)
	}
	var ans pb.PagesAnswer
	if err := overlay.RoundTrip(ctx, memberHost, sinkHost.ID(), ProtoPages, maxPagesMsg, 5*time.Second,
		&pb.PagesRequest{Version: wireVersion, First: []byte{10, 0, 0}, Last: last.AsSlice(), Limit: 10}, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Status != pb.Status_MALFORMED || !strings.Contains(ans.Reason, "addresses of 3 and 4 bytes") || len(ans.Pages) != 0 {
		t.Fatalf("a 3-byte address: %v %q", ans.Status, ans.Reason)
	}
	if err := overlay.RoundTrip(ctx, memberHost, sinkHost.ID(), ProtoPages, maxPagesMsg, 5*time.Second,
		&pb.PagesRequest{Version: wireVersion, First: first.AsSlice(), Last: last.AsSlice(), Limit: 5000}, &ans); err != nil {
		t.Fatal(err)
	}
	if ans.Status != pb.Status_MALFORMED || !strings.Contains(ans.Reason, "limit 5000: want 1 to 1000") {
		t.Fatalf("a limit of 5000: %v %q", ans.Status, ans.Reason)
	}
}
