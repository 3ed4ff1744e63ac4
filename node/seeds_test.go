package node

import (
	"context"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// barrierMeasurer answers a probe only once `need` probes are in flight at
// once across the cluster (or, failing that, after a bound), and records
// the most it saw: seeds routed one after another never have more probes
// in flight than one decision asks for.
type barrierMeasurer struct {
	mu      sync.Mutex
	cond    *sync.Cond
	need    int
	now     int
	maxSeen int
}

func newBarrierMeasurer(need int) *barrierMeasurer {
	m := &barrierMeasurer{need: need}
	m.cond = sync.NewCond(&m.mu)
	return m
}

func (m *barrierMeasurer) Measure(ctx context.Context, _ overlay.ProbeTarget) (time.Duration, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.now++
	m.maxSeen = max(m.maxSeen, m.now)
	m.cond.Broadcast()
	bound := time.AfterFunc(2*time.Second, func() { m.mu.Lock(); m.cond.Broadcast(); m.mu.Unlock() })
	defer bound.Stop()
	for start := time.Now(); m.maxSeen < m.need && time.Since(start) < 2*time.Second && ctx.Err() == nil; {
		m.cond.Wait()
	}
	m.now--
	return 10 * time.Millisecond, nil
}

// TestSeedsRoutedSideBySide: routing seeds may delegate each one's subnet
// (probes that take a round trip each); RouteSeeds routes them side by
// side, not one decision after another (seen on the testnet: 200 seeds
// took a minute to route before the first page was fetched).
func TestSeedsRoutedSideBySide(t *testing.T) {
	web, err := synthweb.Start(synthweb.Config{Hosts: 8, HostsPerIP: 1, PagesPerHost: 1})
	if err != nil {
		t.Fatal(err)
	}
	defer web.Close()
	m := newBarrierMeasurer(3) // one decision asks the 2 crawlers at most
	c := openCluster(t, web, 2, false, func(_ int, cfg *Config) { cfg.Measurer = m })
	c.runAll()
	res, err := c.nodes[0].RouteSeeds(context.Background(), web.Seeds())
	if err != nil {
		t.Fatal(err)
	}
	for _, r := range res {
		if r.Status == SeedRejected {
			t.Fatalf("seed rejected: %+v", r)
		}
	}
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.maxSeen < 3 {
		t.Fatalf("at most %d probes in flight while routing 8 seeds: seeds were routed one at a time", m.maxSeen)
	}
}
