package sim

import (
	"context"
	"fmt"
	"math/rand/v2"
	"runtime"
	"slices"
	"syscall"
	"testing"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/micra-crawler/micra/delegation"
)

// BenchmarkDecisions measures delegation decisions per second of every
// policy inside the simulator (engine + MemDirectory + simulated prober),
// side by side in one run, with 12 and 1000 crawlers and 10,000 uniform hosts
// (nearly every decision a new subnet), and with 12 crawlers and zipf hosts
// (as web hosting concentrates: about half the hosts land in a subnet already
// delegated, a lookup):
//
//	go test -run '^$' -bench Decisions -benchtime 3x ./testnet/sim
func BenchmarkDecisions(b *testing.B) {
	for _, run := range []struct {
		crawlers int
		hosts    string
	}{{12, HostsUniform}, {1000, HostsUniform}, {12, HostsZipf}} {
		crawlers := run.crawlers
		cfg := Config{Seed: 1, Crawlers: crawlers, Hosts: 10000, HostDist: run.hosts, Threshold: 50 * time.Millisecond, Logger: quiet()}.withDefaults()
		w, err := NewWorld(cfg)
		if err != nil {
			b.Fatal(err)
		}
		name := fmt.Sprintf("crawlers=%d", crawlers)
		if run.hosts != HostsUniform {
			name += "/hosts=" + run.hosts
		}
		specs := Policies
		if crawlers > 100 {
			// the pair-learning cap meant for large overlays, beside micra
			// (docs/delegation.md: MicraConfig.PairFromLowest)
			specs = append(slices.Clip(Policies), PolicySpec{Name: "micra-pairfrom8", New: delegation.NewMicra,
				Tweak: func(c *delegation.Config) { c.Micra.PairFromLowest = 8 }})
		}
		for _, spec := range specs {
			if spec.Brute && crawlers > 100 {
				continue
			}
			b.Run(name+"/"+spec.Name, func(b *testing.B) {
				var probes int64
				var took, cpu time.Duration
				for range b.N {
					c0 := cpuTime()
					r, err := w.runPolicy(context.Background(), cfg, spec)
					cpu += cpuTime() - c0
					if err != nil {
						b.Fatal(err)
					}
					probes += r.total
					took += r.elapsed
				}
				n := float64(b.N * len(w.Hosts))
				b.ReportMetric(n/took.Seconds(), "decisions/s")
				if cpu > 0 {
					b.ReportMetric(n/cpu.Seconds(), "decisions/cpu-s")
				}
				b.ReportMetric(float64(probes)/n, "probes/URL")
			})
		}
	}
}

// BenchmarkProber measures the simulator's own share of a decision: one
// Probe call asking 5 crawlers (IPMicra's average at 12 crawlers), so it can
// be set beside BenchmarkDecisions.
func BenchmarkProber(b *testing.B) {
	cfg := Config{Seed: 1, Crawlers: 12, Hosts: 10000, Logger: quiet()}.withDefaults()
	w, err := NewWorld(cfg)
	if err != nil {
		b.Fatal(err)
	}
	pr := &prober{w: w, rng: rand.New(rand.NewPCG(1, 1))}
	ids := []delegation.CrawlerID{w.Crawlers[0].ID, w.Crawlers[3].ID, w.Crawlers[5].ID, w.Crawlers[7].ID, w.Crawlers[11].ID}
	ctx := context.Background()
	b.ResetTimer()
	for i := range b.N {
		pr.Probe(ctx, w.Hosts[i%len(w.Hosts)].Addr, ids)
	}
	b.ReportMetric(float64(b.N)/b.Elapsed().Seconds(), "calls/s")
}

// cpuTime is the process's user+system CPU time: on the shared machine wall
// time swings with other people's load, CPU time is what the code costs (the
// collector's share included; runPolicy's scoring is not inside it).
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkSimulatorThroughput measures the simulator's decisions per
// wall-clock second with every core busy: one independent world per core
// (as `micra sim --seeds N` runs them, RunSeeds), 12 crawlers and 10,000
// uniform hosts each, micra beside IPMicra in the same run. One decision
// stream is BenchmarkDecisions; this is what the simulator as a whole gets
// out of the machine. decisions/cpu-s stays the per-stream cost.
//
//	go test -run '^$' -bench SimulatorThroughput -benchtime 5x ./testnet/sim
func BenchmarkSimulatorThroughput(b *testing.B) {
	workers := runtime.GOMAXPROCS(0)
	worlds := make([]*World, workers)
	cfgs := make([]Config, workers)
	for k := range worlds {
		cfgs[k] = Config{Seed: uint64(1 + k), Crawlers: 12, Hosts: 10000, Threshold: 50 * time.Millisecond, Logger: quiet()}.withDefaults()
		w, err := NewWorld(cfgs[k])
		if err != nil {
			b.Fatal(err)
		}
		worlds[k] = w
	}
	for _, name := range []string{"ipmicra", "micra"} {
		spec, _ := LookupPolicy(name)
		b.Run(fmt.Sprintf("worlds=%d/%s", workers, name), func(b *testing.B) {
			var decisions int64
			var wall, cpu time.Duration
			for range b.N {
				c0, t0 := cpuTime(), time.Now()
				g, ctx := errgroup.WithContext(context.Background())
				for k, w := range worlds {
					g.Go(func() error {
						_, err := w.runPolicy(ctx, cfgs[k], spec)
						return err
					})
				}
				if err := g.Wait(); err != nil {
					b.Fatal(err)
				}
				wall += time.Since(t0)
				cpu += cpuTime() - c0
				for _, w := range worlds {
					decisions += int64(len(w.Hosts))
				}
			}
			b.ReportMetric(float64(decisions)/wall.Seconds(), "decisions/s")
			if cpu > 0 {
				b.ReportMetric(float64(decisions)/cpu.Seconds(), "decisions/cpu-s")
			}
		})
	}
}

// BenchmarkLearnedState measures the heap micra's learned state holds after
// 200,000 uniform hosts (12 crawlers) under MicraConfig.MaxContexts: the
// default bound beside unbounded and a small bound, with consistent hashing
// (which learns nothing) as the floor — the directory's records and the
// simulator's own state are in every figure.
//
//	go test -run '^$' -bench LearnedState -benchtime 1x ./testnet/sim
func BenchmarkLearnedState(b *testing.B) {
	cfg := Config{Seed: 1, Crawlers: 12, Hosts: 200000, Train: 190000, Threshold: 50 * time.Millisecond, Logger: quiet()}.withDefaults()
	w, err := NewWorld(cfg)
	if err != nil {
		b.Fatal(err)
	}
	heap := func() uint64 {
		runtime.GC()
		runtime.GC()
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		return ms.HeapAlloc
	}
	for _, v := range []struct {
		name  string
		bound int
	}{{"hash", 0}, {"micra-unbounded", -1}, {"micra-default", 0}, {"micra-16384", 16384}} {
		b.Run(v.name, func(b *testing.B) {
			for range b.N {
				var keep delegation.Policy
				// one name: the same probe jitter for every variant
				spec := PolicySpec{Name: "micra", New: func(d delegation.Deps, c delegation.Config) delegation.Policy {
					if v.name == "hash" {
						keep = delegation.NewConsistentHash(d, c)
					} else {
						c.Micra.MaxContexts = v.bound
						keep = delegation.NewMicra(d, c)
					}
					return keep
				}}
				h0 := heap()
				r, err := w.runPolicy(context.Background(), cfg, spec)
				if err != nil {
					b.Fatal(err)
				}
				b.ReportMetric((float64(heap())-float64(h0))/1e6, "heap-MB")
				hits := 0
				for i := cfg.Train; i < len(w.Hosts); i++ {
					if r.owner[i] == w.Optimal[i] {
						hits++
					}
				}
				b.ReportMetric(100*float64(hits)/float64(len(w.Hosts)-cfg.Train), "optimal-%")
				runtime.KeepAlive(keep)
			}
		})
	}
}
