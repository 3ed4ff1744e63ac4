package node

import (
	"context"
	"testing"
	"time"

	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// Three crawler nodes deliver to a real sink over /micra/carrier/1: every
// page fetched reaches the change log once, under the peer id of the node
// that fetched it, with no overlap.
func TestClusterDeliversToSink(t *testing.T) {
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	(&sink.Server{Store: store, Logger: quiet}).Register(h)
	addr := h.Addrs()[0].String() + "/p2p/" + h.ID().String()

	web := startWeb(t, synthweb.Config{Hosts: 12, HostsPerIP: 2, PagesPerHost: 10, CanonicalLinks: true})
	c := startCluster(t, web, 3, func(_ int, cfg *Config) {
		cfg.Sink = addr
		cfg.Crawl.MaxCarrierHold = 50 * time.Millisecond
	})
	c.waitCoverage(t, 40*time.Second)
	pages := web.Stats().PageFetches
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	for store.Head() < uint64(pages) && store.Wait(ctx, store.Head()) {
	}
	counts, crawlers := store.Counts()
	ids := map[string]bool{}
	for _, nd := range c.nodes {
		ids[nd.Peer().ID().String()] = true
	}
	for _, cc := range crawlers {
		if !ids[cc.Crawler] {
			t.Errorf("records from %q, not a node's peer id", cc.Crawler)
		}
	}
	if counts.Records != int64(pages) || counts.Pages != int64(pages) || counts.Overlap != 0 || len(crawlers) < 2 {
		t.Fatalf("sink counts %+v, crawlers %+v; want the %d pages fetched, once each, from the nodes", counts, crawlers, pages)
	}
}
