package bench

import (
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

// BenchmarkTriangleBoundOnTheWorld measures the audit's rule
// (delegation.ImpossibleRTT) on the simulator's world, whose paths violate
// the triangle inequality as the Internet's do (per-pair stretch, jitter):
// over every (decider, crawler, host) triple of the paper preset, the
// share of honest answers judged impossible, and of a 1 ms liar's caught,
// beside the plain bound with 10 % slack and smaller detour factors,
// measured on the same samples.
//
//	go test -run '^$' -bench TriangleBound -benchtime 1x ./testnet/bench
func BenchmarkTriangleBoundOnTheWorld(b *testing.B) {
	cfg, _ := sim.Preset("paper")
	cfg.Seed, cfg.Crawlers, cfg.Hosts = 1, 20, 300
	w, err := sim.NewWorld(cfg)
	if err != nil {
		b.Fatal(err)
	}
	rules := []struct {
		name string
		imp  func(claimed, toTarget, toClaimant time.Duration) bool
	}{
		{"plain+10%", func(c, t, d time.Duration) bool { return c+2*time.Millisecond+t/10 < t-d }},
		{"detour2", func(c, t, d time.Duration) bool { return 2*(c+d)+delegation.RTTSlack < t }},
		{"detour3", func(c, t, d time.Duration) bool { return 3*(c+d)+delegation.RTTSlack < t }},
		{"ImpossibleRTT", delegation.ImpossibleRTT},
	}
	for range b.N {
		r := rand.New(rand.NewPCG(1, 2))
		honest, liar := make([]int, len(rules)), make([]int, len(rules))
		n := 0
		smp := func(a, e *world.Endpoint) time.Duration { return world.Duration(w.Model.SampleRTT(a, e, r)) }
		for h := range w.Hosts {
			for d := range w.CrawlerE {
				own := smp(&w.CrawlerE[d], &w.Hosts[h])
				for c := range w.CrawlerE {
					if c == d {
						continue
					}
					claim := smp(&w.CrawlerE[c], &w.Hosts[h])
					toC := smp(&w.CrawlerE[d], &w.CrawlerE[c])
					n++
					for k, rule := range rules {
						if rule.imp(claim, own, toC) {
							honest[k]++
						}
						if rule.imp(time.Millisecond, own, toC) {
							liar[k]++
						}
					}
				}
			}
		}
		for k, rule := range rules {
			b.ReportMetric(100*float64(honest[k])/float64(n), "%honest-judged-impossible:"+rule.name)
			b.ReportMetric(100*float64(liar[k])/float64(n), "%liar-caught:"+rule.name)
		}
		if b.N == 1 {
			fmt.Printf("%d triples (decider, crawler, host)\n", n)
		}
	}
}
