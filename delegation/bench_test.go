package delegation

import (
	"context"
	"math/rand/v2"
	"syscall"
	"testing"
	"time"
)

// cpuTime is the process's user+system CPU time. On the shared 2-core
// machine wall time swings with other people's load; CPU time per decision
// is what the code costs (the GC's share included).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

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
			cpu0, paused := cpuTime(), time.Duration(0)
			for i := range b.N {
				if i > 0 && i%len(w.hosts) == 0 {
					b.StopTimer()
					c := cpuTime()
					reset()
					paused += cpuTime() - c
					b.StartTimer()
				}
				if _, err := p.Delegate(ctx, w.hosts[i%len(w.hosts)]); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "decisions/s")
			if cpu := cpuTime() - cpu0 - paused; cpu > 0 {
				b.ReportMetric(float64(b.N)/cpu.Seconds(), "decisions/cpu-s")
			}
			b.ReportMetric(float64(w.probes-probes0)/float64(b.N), "probes/decision")
		})
	}
}
