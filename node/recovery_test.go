package node

import (
	"fmt"
	"path/filepath"
	"slices"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// A crawler is killed mid-crawl (its host closed, no leave) while the
// three deliver to an index sink, shipping their pages' links: the new
// owners of its subnets find it dead and recover what it had delivered
// from the sink's address index, pages and links, so every page is still
// fetched, no page reaches the sink twice, and the only pages fetched
// twice are those still in its outbox (held 50 ms here) or in flight.
func TestKilledOwnersPagesRecoveredFromSink(t *testing.T) {
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	web := startWeb(t, synthweb.Config{Hosts: 24, HostsPerIP: 2, PagesPerHost: 30, CanonicalLinks: true,
		Latency: 15 * time.Millisecond})
	c := openCluster(t, web, 3, true, func(_ int, cfg *Config) {
		cfg.Crawl.Receiver = nil // the network's sink
		cfg.Crawl.MaxCarrierHold = 50 * time.Millisecond
		cfg.Crawl.ShipLinks = true // the URLs only the dead node had queued are found through its pages' links
	})
	boot := c.nodes[0].Peer().Host().Addrs()[0].String() + "/p2p/" + c.nodes[0].Peer().ID().String()
	startTestSink(t, store, filepath.Join(t.TempDir(), "sink.key"), c.emu.tree, boot)
	waitUntil(t, "the nodes to hear the sink", func() bool {
		for _, nd := range c.nodes {
			if len(nd.Peer().Members().Sinks()) == 0 {
				return false
			}
		}
		return true
	})
	c.runAll()
	total := int64(web.TotalPages())
	waitFor(t, 30*time.Second, "a third of the pages", func() bool { return web.Stats().UniquePages >= total/3 })

	victim := 2
	id := c.nodes[victim].Peer().ID().String()
	if err := c.nodes[victim].Peer().Kill(); err != nil { // a crash: connections closed, no leave
		t.Fatal(err)
	}
	c.halt(t, victim)
	fetched := int64(0) // every page it had fetched, whatever the answer
	if err := c.nodes[victim].Engine().Frontier().EachHistory(func(h *frontier.History) error {
		if h.Fetches > 0 {
			fetched++
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	c.stop(t, victim)
	c.waitCoverage(t, 60*time.Second)
	waitUntil(t, "every page at the sink", func() bool { cn, _ := store.Counts(); return cn.Pages >= total })

	counts, crawlers := store.Counts()
	delivered := int64(0)
	for _, cc := range crawlers {
		if cc.Crawler == id {
			delivered = cc.Records
		}
	}
	var archived float64
	for _, nd := range c.nodes {
		if nd != nil {
			archived += gathered(t, nd, "micra_overlay_pages_recovered_archive_total")
		}
	}
	st := web.Stats()
	t.Logf("the killed node had fetched %d pages and delivered %d; %v page states recovered from the sink; %d pages fetched twice, sink overlap %d",
		fetched, delivered, archived, st.DuplicateFetches, counts.Overlap)
	if delivered == 0 || archived == 0 {
		t.Fatalf("the killed node delivered %d records and %v page states were recovered from the sink: nothing tested", delivered, archived)
	}
	if counts.Overlap != 0 {
		t.Errorf("%d records of pages at the sink twice: the killed node's delivered pages were fetched again", counts.Overlap)
	}
	// not delivered: fetched again (needed: the sink never had them), plus
	// the fetches the kill cut short (served, not recorded: at most its
	// concurrency, 8)
	if undelivered := max(0, fetched-delivered); st.DuplicateFetches > undelivered+8 {
		t.Errorf("%d pages fetched twice: more than the %d the killed node had not delivered plus its in-flight fetches", st.DuplicateFetches, undelivered)
	}
}

// gathered is the value of the counter family name in nd's registry.
func gathered(t *testing.T, nd *Node, name string) float64 {
	t.Helper()
	mfs, err := nd.Registry().Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() == name {
			var v float64
			for _, m := range mf.GetMetric() {
				v += m.GetCounter().GetValue()
			}
			return v
		}
	}
	t.Fatalf("no metric %s", name)
	return 0
}

// A page from the sink is recovered only with what finds the URLs its dead
// crawler had queued: its links, or none to find (no out-links, or
// nofollow); a page whose links were not shipped is left to be fetched
// again. A redirect within the host recovers its target too.
func TestPageStatesFromTheSink(t *testing.T) {
	at := time.Unix(1_800_000_000, 0)
	ps := pageStates([]sink.PlacedPage{
		{Record: pack.Record{URL: "http://a.test/1", OutLinks: 2, Links: []string{"http://a.test/2", "http://b.test/"}, ETag: `"e"`, FetchedAt: at, Status: 200}},
		{Record: pack.Record{URL: "http://a.test/2", OutLinks: 3, FetchedAt: at, Status: 200}},
		{Record: pack.Record{URL: "http://a.test/3", OutLinks: 3, Flags: pack.FlagNoFollow, FetchedAt: at, Status: 200}},
		{Record: pack.Record{URL: "http://a.test/4", FinalURL: "http://a.test/5", FetchedAt: at, Status: 200}},
		{Record: pack.Record{URL: "http://a.test/6", FinalURL: "http://c.test/", FetchedAt: at, Status: 200}},
	})
	var got []string
	for _, p := range ps {
		got = append(got, fmt.Sprintf("%s %d", p.URL, len(p.Links)))
	}
	want := []string{"http://a.test/1 2", "http://a.test/3 0", "http://a.test/4 0", "http://a.test/5 0", "http://a.test/6 0"}
	if !slices.Equal(got, want) {
		t.Fatalf("recovered %v, want %v", got, want)
	}
	if ps[0].ETag != `"e"` || !ps[0].LastFetch.Equal(at) || ps[0].HTTPStatus != 200 {
		t.Fatalf("state %+v", ps[0])
	}
}
