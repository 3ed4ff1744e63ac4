package node

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/hierarchy"
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
		cfg.Sink, cfg.Crawl.Receiver = addr, nil
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

// testSink is an in-process index sink on the network: a store, a host
// with a fixed identity (keyFile) serving /micra/carrier/1 to live members
// only, and a light member announcing it, bootstrapped to boot.
type testSink struct {
	h  host.Host
	lm *overlay.LightMember
}

func startTestSink(t *testing.T, store *sink.Store, keyFile string, tree *hierarchy.Tree, boot string) *testSink {
	t.Helper()
	hc := overlay.TestnetConfig()
	hc.KeyFile = keyFile
	h, err := overlay.NewHost(hc)
	if err != nil {
		t.Fatal(err)
	}
	lm, err := overlay.JoinMembership(context.Background(), h, overlay.LightConfig{Snapshot: tree.ID(), Nodes: tree.Len(), Sink: true,
		Bootstrap: []string{boot}, LoopbackTestnet: true, Logger: quiet})
	if err != nil {
		h.Close()
		t.Fatal(err)
	}
	(&sink.Server{Store: store, Logger: quiet, Admit: sink.AdmitMembers(lm.Members())}).Register(h)
	s := &testSink{h: h, lm: lm}
	t.Cleanup(s.stop)
	return s
}

// stop stops the sink as `micra sink` does: its leave, then its host.
func (s *testSink) stop() {
	s.lm.Close()
	s.h.Close()
}

// Nodes with no sink setting find the sink on the network: before it is
// there, their carriers wait in the outbox; once it joins, every page
// fetched reaches its log once. When it comes back on another address
// (same identity) they deliver there; while it is gone a delivery fails
// without rejecting the carrier (the outbox keeps it). A configured sink
// wins over the announced one.
func TestNodesFindTheSinkOnTheNetwork(t *testing.T) {
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	web := startWeb(t, synthweb.Config{Hosts: 12, HostsPerIP: 2, PagesPerHost: 10, CanonicalLinks: true})
	c := openCluster(t, web, 3, true, func(_ int, cfg *Config) {
		cfg.Crawl.Receiver = nil // no sink setting, no carriers directory: the network's sink
		cfg.Crawl.MaxCarrierHold = 50 * time.Millisecond
	})
	c.runAll()
	c.waitCoverage(t, 40*time.Second)
	pages := web.Stats().PageFetches
	waitUntil(t, "the outboxes to seal every record", func() bool {
		var records int64
		for _, nd := range c.nodes {
			st := nd.Engine().Stats()
			if st.PendingRecords > 0 || st.CarriersDelivered > 0 {
				return false
			}
			records += st.Records
		}
		return records == pages
	})
	if st := c.nodes[0].Status().Sink; st.Source != "network" || st.Addr != "" {
		t.Fatalf("sink status before any sink: %+v, want source network and no address", st)
	}

	key := filepath.Join(t.TempDir(), "sink.key")
	boot := func(i int) string {
		nd := c.nodes[i]
		return nd.Peer().Host().Addrs()[0].String() + "/p2p/" + nd.Peer().ID().String()
	}
	s := startTestSink(t, store, key, c.emu.tree, boot(0))
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
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
	if counts.Records != int64(pages) || counts.Pages != int64(pages) || counts.Overlap != 0 {
		t.Fatalf("sink counts %+v, crawlers %+v; want the %d pages fetched, once each", counts, crawlers, pages)
	}
	if st := c.nodes[0].Status().Sink; st.Source != "network" || !strings.HasSuffix(st.Addr, "/p2p/"+s.h.ID().String()) {
		t.Fatalf("sink status: %+v, want the sink found on the network", st)
	}

	// a configured sink wins; /p2p/<id> alone takes its addresses from
	// its heartbeats
	other := rawID(t)
	f := &sinkFinder{pinned: &peer.AddrInfo{ID: other}, members: c.nodes[0].Peer().Members()}
	if ai, ok := f.target(); !ok || ai.ID != other {
		t.Fatalf("a configured sink: target %v, want %s", ai, other)
	}
	f.pinned = &peer.AddrInfo{ID: s.h.ID()}
	if ai, ok := f.target(); !ok || len(ai.Addrs) == 0 || !ai.Addrs[0].Equal(s.h.Addrs()[0]) {
		t.Fatalf("a sink pinned by id: target %v, want its advertised %v", ai, s.h.Addrs())
	}

	// the sink restarts elsewhere: same identity, another port, joined
	// through another node
	old := s.h.Addrs()[0]
	s.stop()
	s = startTestSink(t, store, key, c.emu.tree, boot(1))
	if s.h.Addrs()[0].Equal(old) {
		t.Fatalf("the restarted sink listens at %s again", old)
	}
	nd := c.nodes[0]
	id := nd.Peer().ID().String()
	car := pack.EncodeCarrier(id, 1<<40, time.Now(), []pack.Record{{URL: "http://moved.example/", Status: 200,
		Change: pack.ChangeNew, FetchedAt: time.Now(), CrawlerID: id}})
	head := store.Head()
	// as the outbox does: again until it is taken (the sink may not have
	// heard this node yet: NOT_MEMBER), never rejected
	for err := nd.recv.Deliver(ctx, car); err != nil; err = nd.recv.Deliver(ctx, car) {
		if errors.Is(err, pack.ErrRejected) || ctx.Err() != nil {
			t.Fatalf("delivery to the sink at its new address: %v", err)
		}
		time.Sleep(50 * time.Millisecond)
	}
	if store.Head() != head+1 {
		t.Fatalf("head %d after the delivery, want %d", store.Head(), head+1)
	}
	if st := nd.Status().Sink; !strings.HasPrefix(st.Addr, s.h.Addrs()[0].String()) {
		t.Fatalf("sink status %+v after the move, want its new address %s", st, s.h.Addrs()[0])
	}

	// gone: a delivery waits for a sink until its deadline, then fails
	// without a rejection, so the outbox keeps the carrier
	s.stop()
	waitUntil(t, "the nodes to hear the sink leave", func() bool { return len(nd.Peer().Members().Sinks()) == 0 })
	dctx, dcancel := context.WithTimeout(ctx, 300*time.Millisecond)
	err = nd.recv.Deliver(dctx, pack.EncodeCarrier(id, 1<<40+1, time.Now(), []pack.Record{{URL: "http://gone.example/", Status: 200,
		Change: pack.ChangeNew, FetchedAt: time.Now(), CrawlerID: id}}))
	dcancel()
	if !errors.Is(err, errNoSink) || errors.Is(err, pack.ErrRejected) {
		t.Fatalf("a delivery with no sink: %v, want errNoSink, not a rejection", err)
	}
	if st := nd.Status().Sink; st.Addr != "" || st.Source != "network" {
		t.Fatalf("sink status with the sink gone: %+v", st)
	}
}

func rawID(t *testing.T) peer.ID {
	t.Helper()
	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	return h.ID()
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(30 * time.Second); !cond(); time.Sleep(20 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}
