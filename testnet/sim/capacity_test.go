package sim

import (
	"context"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// TestCapacities: equal capacities are factor × hosts / crawlers; log-normal
// ones keep that mean, spread as asked, and are a function of the seed.
func TestCapacities(t *testing.T) {
	eq := capacities(1, 10, 1000, 2, 0)
	for _, c := range eq {
		if c != 200 {
			t.Fatalf("equal capacities: %v, want 200 each", eq)
		}
	}
	ln := capacities(1, 20000, 2_000_000, 1.5, 0.5)
	var sum, sq float64
	for _, c := range ln {
		sum += float64(c)
		sq += math.Log(float64(c)) * math.Log(float64(c))
	}
	mean := sum / float64(len(ln))
	var mlog float64
	for _, c := range ln {
		mlog += math.Log(float64(c))
	}
	mlog /= float64(len(ln))
	sd := math.Sqrt(sq/float64(len(ln)) - mlog*mlog)
	if math.Abs(mean-150)/150 > 0.02 || math.Abs(sd-0.5) > 0.02 {
		t.Errorf("log-normal capacities: mean %.1f (want 150), σ of ln %.3f (want 0.5)", mean, sd)
	}
	again := capacities(1, 20000, 2_000_000, 1.5, 0.5)
	for i := range ln {
		if ln[i] != again[i] {
			t.Fatal("capacities differ for the same seed")
		}
	}
}

// TestRoomRefMatchesScan: the k-d tree search for the nearest crawler with
// room gives the floor RTT a scan of every crawler gives, for hosts whose
// crawlers are chosen at random and crawlers half of which are full.
func TestRoomRefMatchesScan(t *testing.T) {
	cfg := small(5)
	cfg.Crawlers, cfg.Hosts, cfg.Train = 60, 400, 100
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(5, 5))
	full := make([]bool, len(w.Crawlers))
	for i := range full {
		full[i] = rng.IntN(2) == 0
	}
	hasRoom := func(c int32) bool { return !full[c] }
	ref := newRoomRef(w, hasRoom)
	for h := range w.Hosts {
		owner := int32(rng.IntN(len(w.Crawlers)))
		want := w.Model.FloorRTT(&w.CrawlerE[owner], &w.Hosts[h])
		for c := range w.CrawlerE {
			if hasRoom(int32(c)) {
				want = math.Min(want, w.Model.FloorRTT(&w.CrawlerE[c], &w.Hosts[h]))
			}
		}
		if got := ref.floor(h, owner); math.Abs(got-want) > 1e-9 {
			t.Fatalf("host %d: nearest with room %.6f ms, scan %.6f ms", h, got, want)
		}
	}
}

// TestBalancedRunWithinCapacity: with log-normal capacities and
// second-best balancing, micra leaves no crawler above its capacity, so
// its utilisation is at most 1 (max/mean ≤ Σ capacity / pages); its Σ
// download time is at least the exact min-cost assignment's, and its
// excess over the nearest crawler with room is at most the excess over the
// optimal crawler.
func TestBalancedRunWithinCapacity(t *testing.T) {
	cfg := small(7)
	cfg.Crawlers, cfg.Hosts, cfg.Train = 30, 900, 600
	cfg.CapacityFactor, cfg.CapacitySigma = 1.2, 0.5
	cfg.Engine.Balance = delegation.BalanceSecondBest
	cfg.Policies = []string{"micra", "hash"}
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	capSum := 0
	for _, c := range w.Crawlers {
		capSum += c.Capacity
	}
	bound := float64(capSum) / float64(cfg.Hosts)
	for _, r := range rep.Results {
		t.Logf("%s: over capacity %v (%v pages), util max/mean %.2f, cost vs min-cost %.3f, room excess %.1f/%.1f ms, excess %.1f ms",
			r.Policy, r.OverCapacity, r.OverPages, r.UtilImbalance, r.CostVsMinCost, r.ExcessRoomMeanMs, r.ExcessRoomP95Ms, r.ExcessMeanMs)
		if r.CostVsMinCost == 0 {
			t.Errorf("%s: no min-cost reference on a world this small", r.Policy)
		}
		if r.OverCapacity == 0 && r.CostVsMinCost < 1-1e-3 {
			t.Errorf("%s: within capacity yet %.4f of the exact min-cost", r.Policy, r.CostVsMinCost)
		}
		if r.ExcessRoomMeanMs > r.ExcessMeanMs+1e-3 {
			t.Errorf("%s: excess over the nearest with room %.3f above the excess over the optimal %.3f", r.Policy, r.ExcessRoomMeanMs, r.ExcessMeanMs)
		}
		if r.Policy == "micra" && (r.OverCapacity != 0 || r.UtilImbalance > bound+1e-3) {
			t.Errorf("micra: %v crawlers above capacity, util max/mean %.3f (want ≤ %.3f)", r.OverCapacity, r.UtilImbalance, bound)
		}
	}
	if rep.Capacity == "" || rep.Balance != "second-best" {
		t.Errorf("report: capacity %q, balance %q", rep.Capacity, rep.Balance)
	}
}

// TestSubnetOracle: the subnet-oracle row keeps every crawler within its
// capacity (where every subnet fits one crawler), gives each subnet one
// owner, probes nothing, and with room to spare puts every subnet at the
// optimal crawler of its first host; Run reports it as a row; and it
// refuses a matrix world. (It is no bound: moving a whole large subnet to
// the nearest crawler with room for it all can cost more than micra's
// least-cost moves of smaller ones.)
func TestSubnetOracle(t *testing.T) {
	ctx := context.Background()
	for _, factor := range []float64{2, 1000} {
		cfg := small(5)
		cfg.Crawlers, cfg.Hosts, cfg.Train = 20, 2000, 1300
		cfg.HostDist, cfg.CapacityFactor = HostsZipf, factor
		cfg.Engine.Balance = delegation.BalanceLeastCost
		cfg.Policies = []string{"micra", "subnet-oracle"}
		w, err := NewWorldContext(ctx, cfg.withDefaults())
		if err != nil {
			t.Fatal(err)
		}
		r, err := w.subnetOracle(ctx, cfg.withDefaults())
		if err != nil {
			t.Fatal(err)
		}
		size := map[hierarchy.NodeID]int{}
		for i := range w.Hosts {
			size[r.subnet[i]]++
		}
		if big := slices.Max(slices.Collect(maps.Values(size))); big > w.Crawlers[0].Capacity {
			// (no one-owner assignment then fits: the case would test nothing)
			t.Fatalf("factor %g: a subnet of %d hosts, capacity %d", factor, big, w.Crawlers[0].Capacity)
		}
		load := make([]int, len(w.Crawlers))
		owner := map[hierarchy.NodeID]int32{}
		first := map[hierarchy.NodeID]int{}
		for i := range w.Hosts {
			load[r.owner[i]]++
			if r.probes[i] != 0 {
				t.Fatalf("host %d: %d probes", i, r.probes[i])
			}
			s := r.subnet[i]
			if o, ok := owner[s]; ok && o != r.owner[i] {
				t.Fatalf("subnet %d has owners %d and %d", s, o, r.owner[i])
			}
			owner[s] = r.owner[i]
			if _, ok := first[s]; !ok {
				first[s] = i
			}
		}
		for c, l := range load {
			if l > max(1, w.Crawlers[c].Capacity) {
				t.Fatalf("factor %g: crawler %d carries %d pages over its capacity %d", factor, c, l, w.Crawlers[c].Capacity)
			}
		}
		if factor == 1000 {
			for s, i := range first {
				if owner[s] != w.Optimal[i] {
					t.Fatalf("room to spare: subnet %d went to %d, not its first host's optimal crawler %d", s, owner[s], w.Optimal[i])
				}
			}
			continue
		}
		rep, _, err := Run(ctx, cfg, w)
		if err != nil {
			t.Fatal(err)
		}
		got := map[string]Result{}
		for _, x := range rep.Results {
			got[x.Policy] = x
		}
		o, m := got["subnet-oracle"], got["micra"]
		t.Logf("room excess: oracle %.2f / %.2f ms, micra %.2f / %.2f ms", o.ExcessRoomMeanMs, o.ExcessRoomP95Ms, m.ExcessRoomMeanMs, m.ExcessRoomP95Ms)
		if o.Policy != "subnet-oracle" || o.ProbesPerURL != 0 || o.OverCapacity != 0 || o.URLs != cfg.Hosts {
			t.Fatalf("oracle row %+v", o)
		}
	}
	cfg := small(5)
	mx, err := world.HubMatrix(1, 0.08)
	if err != nil {
		t.Fatal(err)
	}
	cfg.Matrix, cfg.Policies = mx, []string{"subnet-oracle"}
	if _, _, err := Run(ctx, cfg, nil); err == nil || !strings.Contains(err.Error(), "formula latency") {
		t.Fatalf("a matrix world: want the formula-latency error, got %v", err)
	}
}
