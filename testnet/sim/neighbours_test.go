package sim

import (
	"context"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// TestNeighbourCandidates: with more crawlers than a decision's candidates,
// the neighbours of the best answer's crawler (MicraConfig.Neighbours) find
// the optimal crawler for many more evaluation hosts, at a lower crawl
// cost (measured without locating the host, which finds many of the same
// crawlers); locating the host (MicraConfig.Locate) on top lowers the
// crawl cost again; with no more crawlers than candidates nothing changes.
func TestNeighbourCandidates(t *testing.T) {
	ctx := context.Background()
	runWith := func(cfg Config, neighbours, locate int) (*World, *run) {
		t.Helper()
		w, err := NewWorld(cfg)
		if err != nil {
			t.Fatal(err)
		}
		spec, _ := LookupPolicy("micra")
		spec.Tweak = func(c *delegation.Config) { c.Micra.Neighbours, c.Micra.Locate = neighbours, locate }
		r, err := w.runPolicy(ctx, cfg.withDefaults(), spec)
		if err != nil {
			t.Fatal(err)
		}
		return w, r
	}
	score := func(cfg Config, w *World, r *run) (optimal int, rtt float64) {
		for i := cfg.Train; i < len(w.Hosts); i++ {
			if r.owner[i] == w.Optimal[i] {
				optimal++
			}
			rtt += w.Model.MeanRTT(&w.CrawlerE[r.owner[i]], &w.Hosts[i])
		}
		return optimal, rtt
	}
	for _, seed := range []uint64{1, 2} {
		var trace strings.Builder
		cfg := Config{Seed: seed, Crawlers: 40, Hosts: 400, Train: 200, Threshold: 50 * time.Millisecond, Logger: quiet(),
			Trace: &trace, TracePolicy: "micra", TraceN: 400}
		w, on := runWith(cfg, 0, -1) // default neighbours
		if !strings.Contains(trace.String(), "neighbours of best answers' crawlers") {
			t.Fatal("no decision explains neighbour candidates")
		}
		cfg.Trace = nil
		_, off := runWith(cfg, -1, -1)
		optOn, rttOn := score(cfg, w, on)
		optOff, rttOff := score(cfg, w, off)
		t.Logf("seed %d, 40 crawlers: optimal %d vs %d of 200 evaluation hosts, mean RTT %.1f vs %.1f ms, probes %d vs %d",
			seed, optOn, optOff, rttOn/200, rttOff/200, on.total, off.total)
		if optOn < optOff+20 || rttOn >= rttOff {
			t.Errorf("seed %d: neighbours found the optimal crawler for %d hosts (without: %d), mean RTT %.1f ms (without: %.1f): want ≥ 20 more and a lower RTT",
				seed, optOn, optOff, rttOn/200, rttOff/200)
		}
		cfg.Trace, cfg.TraceN = &trace, 400
		trace.Reset()
		_, loc := runWith(cfg, 0, 0) // both by default
		if !strings.Contains(trace.String(), "near the located host") {
			t.Fatal("no decision explains located candidates")
		}
		optLoc, rttLoc := score(cfg, w, loc)
		t.Logf("seed %d, 40 crawlers, locating too: optimal %d of 200, mean RTT %.1f ms, probes %d", seed, optLoc, rttLoc/200, loc.total)
		if rttLoc >= rttOn {
			t.Errorf("seed %d: locating the host gave a mean RTT of %.1f ms, neighbours alone %.1f: want lower", seed, rttLoc/200, rttOn/200)
		}
	}
	cfg := Config{Seed: 1, Crawlers: 12, Hosts: 300, Train: 200, Threshold: 50 * time.Millisecond, Logger: quiet()}
	_, on := runWith(cfg, 0, 0)
	_, off := runWith(cfg, -1, -1)
	if !slices.Equal(on.owner, off.owner) || !slices.Equal(on.probes, off.probes) {
		t.Fatal("12 crawlers, all of them candidates: the neighbours or locating changed decisions")
	}
}
