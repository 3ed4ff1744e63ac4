package sim

import (
	"context"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/micra-crawler/micra/delegation"
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
