package sim

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// BenchmarkDecisions measures delegation decisions per second of every
// policy inside the simulator (engine + MemDirectory + simulated prober),
// side by side in one run, with 12 and 1000 crawlers and 10,000 hosts:
//
//	go test -run '^$' -bench Decisions -benchtime 3x ./testnet/sim
func BenchmarkDecisions(b *testing.B) {
	for _, crawlers := range []int{12, 1000} {
		cfg := Config{Seed: 1, Crawlers: crawlers, Hosts: 10000, Threshold: 50 * time.Millisecond, Logger: quiet()}.withDefaults()
		w, err := NewWorld(cfg)
		if err != nil {
			b.Fatal(err)
		}
		for _, spec := range Policies {
			if spec.Brute && crawlers > 100 {
				continue
			}
			b.Run(fmt.Sprintf("crawlers=%d/%s", crawlers, spec.Name), func(b *testing.B) {
				var probes int64
				var took time.Duration
				for range b.N {
					r, err := w.runPolicy(context.Background(), cfg, spec)
					if err != nil {
						b.Fatal(err)
					}
					probes += r.total
					took += r.elapsed
				}
				n := float64(b.N * len(w.Hosts))
				b.ReportMetric(n/took.Seconds(), "decisions/s")
				b.ReportMetric(float64(probes)/n, "probes/URL")
			})
		}
	}
}
