package delegation

import (
	"context"
	"math/rand/v2"
	"testing"
)

// BenchmarkDecisions measures delegation decisions per second in the
// simulator setting (12 crawlers, synthetic world, in-memory directory,
// a fresh host stream that mixes new and already-delegated subnets), for
// every policy in the same run, so the figures compare as ratios: the
// brute-force "optimal" policy is the reference.
//
//	go test -run '^$' -bench Decisions -benchtime 200000x ./delegation
func BenchmarkDecisions(b *testing.B) {
	w := newSynthWorld(b, 1, 12, 20000)
	for _, mk := range allPolicies {
		name := mk(Deps{Tree: w.tree}, Config{}).Name()
		b.Run(name, func(b *testing.B) {
			members := NewMemMembership(w.crawlers...)
			ctx := context.Background()
			var p Policy
			reset := func() {
				dir := NewMemDirectory(w.tree, members)
				p = mk(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(1, 1))}, Config{})
				for _, c := range w.crawlers {
					p.Join(ctx, c)
				}
			}
			reset()
			probes0 := w.probes
			b.ResetTimer()
			for i := range b.N {
				if i > 0 && i%len(w.hosts) == 0 {
					b.StopTimer()
					reset()
					b.StartTimer()
				}
				if _, err := p.Delegate(ctx, w.hosts[i%len(w.hosts)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			b.ReportMetric(float64(w.probes-probes0)/float64(b.N), "probes/decision")
		})
	}
}
