package overlay

import (
	"context"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// slowMeasurer answers a probe after rtt, as a crawler across the Internet
// would (an emulated round trip on top of modelMeasurer's figure).
type slowMeasurer struct {
	modelMeasurer
	rtt time.Duration
}

func (m slowMeasurer) Measure(ctx context.Context, t ProbeTarget) (time.Duration, error) {
	select {
	case <-time.After(m.rtt):
	case <-ctx.Done():
		return 0, ctx.Err()
	}
	return m.modelMeasurer.Measure(ctx, t)
}

// BenchmarkRoutingUnderLatency routes URLs on a 4-peer loopback network
// whose DHT reads take 100 ms and whose probes take 50 ms, with the micra
// policy, and prints, measured in the same run:
//   - serial-decisions/s: new subnets decided one after the other (the
//     rate a single policy lock held across the network allows);
//   - parallel-decisions/s and speedup: 64 crawl workers meeting new
//     subnets at once;
//   - cached-p99-µs: the 99th percentile of a routing call for a URL whose
//     owner is cached, made while the 64 workers' decisions are in flight.
//
// go test -run '^$' -bench RoutingUnderLatency -benchtime 1x ./overlay
func BenchmarkRoutingUnderLatency(b *testing.B) {
	const (
		dhtRTT   = 100 * time.Millisecond
		probeRTT = 50 * time.Millisecond
		workers  = 64
		serialN  = 6
		parN     = 128
	)
	for b.Loop() {
		tn := newTestNetOn(b, loopbackTree(b, 64, 4), 4, func(i int, c *Config, s *Services) {
			s.Measurer = slowMeasurer{modelMeasurer{i: i}, probeRTT}
		})
		ctx := context.Background()
		tn.joinWithMicra(b)
		p := tn.peers[0]
		p.dhtDelay = func(ctx context.Context) error {
			select {
			case <-time.After(dhtRTT):
				return nil
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		// distinct /24 subnets: 127.i.j.0/24, i ≥ 8 (the peers sit in 127.0-3)
		var fresh []netip.Addr
		for i := 8; i < 64; i++ {
			for j := range 4 {
				fresh = append(fresh, netip.AddrFrom4([4]byte{127, byte(i), byte(j), 80}))
			}
		}
		take := func(n int) []netip.Addr { out := fresh[:n]; fresh = fresh[n:]; return out }
		known := take(16)
		for _, ip := range known {
			if _, err := p.Delegate(ctx, ip); err != nil {
				b.Fatal(err)
			}
		}

		start := time.Now()
		for _, ip := range take(serialN) {
			if d, err := p.Delegate(ctx, ip); err != nil || d.Cached {
				b.Fatalf("serial decision: %v %v", d, err)
			}
		}
		serial := float64(serialN) / time.Since(start).Seconds()

		queue := make(chan netip.Addr, parN)
		for _, ip := range take(parN) {
			queue <- ip
		}
		close(queue)
		var done atomic.Bool
		var lmu sync.Mutex
		var cached []time.Duration
		var cwg sync.WaitGroup
		for c := range 4 {
			cwg.Go(func() {
				for i := c; !done.Load(); i++ {
					t0 := time.Now()
					d, err := p.Delegate(ctx, known[i%len(known)])
					took := time.Since(t0)
					if err != nil || !d.Cached {
						b.Errorf("cached lookup: %v %v", d, err)
						return
					}
					lmu.Lock()
					cached = append(cached, took)
					lmu.Unlock()
					time.Sleep(time.Millisecond)
				}
			})
		}
		var wg sync.WaitGroup
		var failed atomic.Int32
		start = time.Now()
		for range workers {
			wg.Go(func() {
				for ip := range queue {
					if _, err := p.Delegate(ctx, ip); err != nil {
						failed.Add(1)
					}
				}
			})
		}
		wg.Wait()
		par := float64(parN) / time.Since(start).Seconds()
		done.Store(true)
		cwg.Wait()
		if failed.Load() > 0 {
			b.Fatalf("%d parallel decisions failed", failed.Load())
		}
		slices.Sort(cached)
		p99 := cached[len(cached)*99/100]
		b.ReportMetric(serial, "serial-decisions/s")
		b.ReportMetric(par, "parallel-decisions/s")
		b.ReportMetric(par/serial, "speedup")
		b.ReportMetric(float64(p99.Nanoseconds())/1e3, "cached-p99-µs")
		b.ReportMetric(float64(len(cached)), "cached-lookups")
	}
}
