package overlay

import (
	"context"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// tableMeasurer answers from a table of prefixes (the first that holds the
// target wins) and from the model elsewhere.
type tableMeasurer struct {
	modelMeasurer
	table []prefixRTT
}

type prefixRTT struct {
	p   netip.Prefix
	rtt time.Duration
}

func (m tableMeasurer) Measure(ctx context.Context, t ProbeTarget) (time.Duration, error) {
	for _, e := range m.table {
		if e.p.Contains(t.Addr) {
			return e.rtt, nil
		}
	}
	return m.modelMeasurer.Measure(ctx, t)
}

// TestReviewHandsOverOnTheOverlay: with micra on three real peers, the
// owner's own timings of further hosts of its subnet go to Peer.Review; when
// another crawler is nearest for most of them, the subnet is handed over by
// a record published like a decision, and every peer ends up with it. An
// IPMicra peer does not review.
func TestReviewHandsOverOnTheOverlay(t *testing.T) {
	ms := time.Millisecond
	table := [][2]time.Duration{{5 * ms, 90 * ms}, {20 * ms, 6 * ms}, {100 * ms, 100 * ms}}
	pages := []*memPages{{pages: map[hierarchy.NodeID][]PageState{}}, {}, {}}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		s.Pages = pages[i]
		// the reviewed /24: its first host nearest crawler 0, its other
		// hosts nearest crawler 1
		s.Measurer = tableMeasurer{modelMeasurer{i: i}, []prefixRTT{
			{netip.MustParsePrefix("127.5.2.10/32"), table[i][0]},
			{netip.MustParsePrefix("127.5.2.0/24"), table[i][1]},
		}}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, reviewed, err := tn.peers[0].Review(ctx, netip.MustParseAddr("127.5.2.11"), 90*ms); err != nil || reviewed {
		t.Fatalf("IPMicra reviewed (%v, %v)", reviewed, err)
	}
	for _, p := range tn.peers {
		// no block delegations: the subnet is one /24, where a clear
		// margin would hand it over on the first review (the tally is
		// what this test is about)
		p.NewPolicy(delegation.NewMicra, delegation.Config{Micra: delegation.MicraConfig{BlockMargin: -1}})
	}
	p0, p1 := tn.peers[0], tn.peers[1]
	d, err := p0.Delegate(ctx, netip.MustParseAddr("127.5.2.10"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != p0.CrawlerID() {
		t.Fatalf("first host: want crawler 0 (5 ms), got %v", d)
	}
	epoch := d.Record.Epoch
	d1, reviewed, err := p0.Review(ctx, netip.MustParseAddr("127.5.2.11"), table[0][1])
	if err != nil || !reviewed {
		t.Fatalf("review 1: %v %v", reviewed, err)
	}
	if d1.Reason != delegation.ReasonKept || d1.Owner != p0.CrawlerID() || d1.Probes == 0 {
		t.Fatalf("review 1: crawler 1 nearest for 1 host, 0 for 1: want kept after probing, got %v", d1)
	}
	decided := counterValue(t, p0.metrics.delegations)
	d2, _, err := p0.Review(ctx, netip.MustParseAddr("127.5.2.12"), table[0][1])
	if err != nil {
		t.Fatal(err)
	}
	if got := counterValue(t, p0.metrics.delegations); got != decided+1 {
		t.Fatalf("a hand-over is a decision of this peer: delegations %v → %v", decided, got)
	}
	if d2.Reason != delegation.ReasonHandedOver || d2.Owner != p1.CrawlerID() || d2.Record.Epoch <= epoch {
		t.Fatalf("review 2: crawler 1 nearest for 2 hosts: want the subnet handed to it, got %v", d2)
	}
	// every peer learns the new owner (gossip and the DHT), as for a decision
	deadline := time.Now().Add(10 * time.Second)
	for _, p := range tn.peers {
		for {
			got, err := p.Delegate(ctx, netip.MustParseAddr("127.5.2.13"))
			if err != nil {
				t.Fatal(err)
			}
			if got.Owner == p1.CrawlerID() && got.Cached {
				break
			}
			if time.Now().After(deadline) {
				t.Fatalf("peer %s: owner of the handed-over subnet is %v", p.CrawlerID(), got)
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
}

func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// TestBlockHandoffOnTheOverlay: with block delegations on three real peers,
// a review gives a /24 of crawler 0's subnet to crawler 1; every peer learns
// the record with its block (signed, on the wire), and URLs of the block's
// hosts handed off by any peer — the subnet's owner included — reach
// crawler 1, while the subnet's other hosts still reach crawler 0. The
// subnet's owner refuses a batch of the block.
func TestBlockHandoffOnTheOverlay(t *testing.T) {
	ms := time.Millisecond
	table := [][2]time.Duration{{5 * ms, 90 * ms}, {20 * ms, 6 * ms}, {100 * ms, 100 * ms}}
	pages := []*memPages{{pages: map[hierarchy.NodeID][]PageState{}}, {}, {}}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		s.Pages = pages[i]
		// subnet 127.5.0.0/16 outside its four /24 children: the first
		// host's /24 nearest crawler 0, 127.5.11.0/24 nearest crawler 1
		s.Measurer = tableMeasurer{modelMeasurer{i: i}, []prefixRTT{
			{netip.MustParsePrefix("127.5.10.0/24"), table[i][0]},
			{netip.MustParsePrefix("127.5.11.0/24"), table[i][1]},
		}}
	})
	for _, p := range tn.peers {
		p.NewPolicy(delegation.NewMicra, delegation.Config{Micra: delegation.MicraConfig{BlockMargin: 0.2}})
	}
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	p0, p1, p2 := tn.peers[0], tn.peers[1], tn.peers[2]
	first, inBlock, other := netip.MustParseAddr("127.5.10.10"), netip.MustParseAddr("127.5.11.77"), netip.MustParseAddr("127.5.12.1")
	// crawler 0 has crawled pages of three /24s of the subnet
	sub := tn.tree.SmallestNonUnary(first)
	pages[0].mu.Lock()
	for _, u := range []string{"http://127.5.10.10/", "http://127.5.11.77/a", "http://127.5.11.5/b", "http://127.5.12.1/"} {
		pages[0].pages[sub] = append(pages[0].pages[sub], PageState{URL: u, ETag: `"v1"`, LastFetch: time.Unix(1700000000, 0), HTTPStatus: 200})
	}
	pages[0].mu.Unlock()
	d, err := p0.Delegate(ctx, first)
	if err != nil {
		t.Fatal(err)
	}
	// crawler 1 knows the record before the block is made (a block's page
	// history moves from the crawler a peer saw crawling it)
	waitFor(t, slowdown*10*time.Second, func() bool { _, ok := p1.dir.Cached(sub); return ok })
	if d.Owner != p0.CrawlerID() || d.Subnet != tn.tree.SmallestNonUnary(inBlock) || d.Subnet != tn.tree.SmallestNonUnary(other) {
		t.Fatalf("first host: want crawler 0 to own the subnet of all three hosts, got %v", d)
	}
	d1, reviewed, err := p0.Review(ctx, netip.MustParseAddr("127.5.11.5"), table[0][1])
	if err != nil || !reviewed {
		t.Fatalf("review: %v %v", reviewed, err)
	}
	if d1.Reason != delegation.ReasonBlockDelegated || d1.Owner != p1.CrawlerID() || d1.Record.Owner != p0.CrawlerID() || len(d1.Record.Blocks) != 1 {
		t.Fatalf("review: want 127.5.11.0/24 delegated to crawler 1 in crawler 0's record, got %v %+v", d1, d1.Record)
	}
	// every peer learns the record with its block
	waitFor(t, slowdown*10*time.Second, func() bool {
		for _, p := range tn.peers {
			db, err1 := p.Delegate(ctx, inBlock)
			do, err2 := p.Delegate(ctx, other)
			if err1 != nil || err2 != nil || db.Owner != p1.CrawlerID() || do.Owner != p0.CrawlerID() {
				return false
			}
		}
		return true
	})
	// the cached owner, as a crawler asks it before fetching a queued URL,
	// is block-aware on every peer
	for i, p := range tn.peers {
		ob, ok1 := p.CachedOwner(inBlock)
		oo, ok2 := p.CachedOwner(other)
		if !ok1 || !ok2 || ob != p1.CrawlerID() || oo != p0.CrawlerID() {
			t.Fatalf("peer %d: cached owners %q %v / %q %v; want crawler 1 for the block, crawler 0 for the rest", i, ob, ok1, oo, ok2)
		}
	}
	// crawler 1 recovered the block's page history from crawler 0, and only
	// the block's
	waitFor(t, slowdown*10*time.Second, func() bool {
		pages[1].mu.Lock()
		defer pages[1].mu.Unlock()
		return len(pages[1].imported[sub]) >= 2
	})
	pages[1].mu.Lock()
	var urls []string
	for _, p := range pages[1].imported[sub] {
		urls = append(urls, p.URL)
	}
	pages[1].mu.Unlock()
	if !slices.Equal(urls, []string{"http://127.5.11.77/a", "http://127.5.11.5/b"}) {
		t.Fatalf("crawler 1 recovered %v, want the two pages of its block 127.5.11.0/24", urls)
	}
	// the subnet's owner refuses a batch of the block, accepts the rest
	st, _, acc, refused := p0.acceptHandoff(&pb.HandoffRequest{Snapshot: p0.snap[:], Batches: []*pb.HandoffBatch{
		{Subnet: uint32(d.Subnet), Urls: []string{"http://127.5.11.77/x"}, Addr: inBlock.AsSlice()},
		{Subnet: uint32(d.Subnet), Urls: []string{"http://127.5.12.1/direct"}, Addr: other.AsSlice()},
	}})
	if st != pb.Status_OK || acc != 1 || !slices.Equal(refused, []uint32{0}) {
		t.Fatalf("crawler 0 given a batch of crawler 1's block and one of its own: status %v, accepted %d, refused %v", st, acc, refused)
	}
	// hand-offs follow the block
	for _, p := range []*Peer{p0, p2} {
		if err := p.Handoff(ctx, d.Subnet, inBlock, "http://127.5.11.77/from-"+string(p.CrawlerID()[:8])); err != nil {
			t.Fatal(err)
		}
	}
	if err := p2.Handoff(ctx, d.Subnet, other, "http://127.5.12.1/from-2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*10*time.Second, func() bool {
		return len(tn.sinks[1].got()) == 2 && len(tn.sinks[0].got()) == 2
	})
	for _, u := range tn.sinks[1].got() {
		if !strings.HasPrefix(u, "http://127.5.11.77/") {
			t.Fatalf("crawler 1 got %q, which is not in its block", u)
		}
	}
	if got := tn.sinks[0].got(); !slices.Contains(got, "http://127.5.12.1/from-2") {
		t.Fatalf("crawler 0 got %v, want the subnet's other host's URL", got)
	}
}
