package overlay

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/micra-crawler/micra/delegation"
)

// reviewMeasurer answers from a table for the reviewed /24 (its first host
// nearest crawler 0, its other hosts nearest crawler 1) and from the model
// elsewhere.
type reviewMeasurer struct {
	modelMeasurer
	first, later time.Duration
}

func (m reviewMeasurer) Measure(ctx context.Context, t ProbeTarget) (time.Duration, error) {
	b := t.Addr.As4()
	if b[0] == 127 && b[1] == 5 && b[2] == 2 {
		if b[3] == 10 {
			return m.first, nil
		}
		return m.later, nil
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
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		s.Measurer = reviewMeasurer{modelMeasurer: modelMeasurer{i: i}, first: table[i][0], later: table[i][1]}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if _, reviewed, err := tn.peers[0].Review(ctx, netip.MustParseAddr("127.5.2.11"), 90*ms); err != nil || reviewed {
		t.Fatalf("IPMicra reviewed (%v, %v)", reviewed, err)
	}
	for _, p := range tn.peers {
		p.NewPolicy(delegation.NewMicra, delegation.Config{})
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
	if d2.Reason != delegation.ReasonHandedOver || d2.Owner != p1.CrawlerID() || d2.Record.Epoch != epoch+1 {
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
