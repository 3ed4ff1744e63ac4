package delegation

import (
	"math"
	"testing"
	"time"
)

// MicraConfig.withDefaults guards PriorSigma, MissFirst and Shift against
// NaN (`!(x > 0)`), but Miss, PairBandwidth, PairPrior, BlindMinObs,
// GeoAfter and PooledAfter use `x <= 0` / `x == 0`, false for NaN: a NaN
// from a library caller stays, and the pairwise model's probability (the
// stop rule's risk) comes out NaN. +Inf PairPrior gives Inf/Inf = NaN too.
func TestMicraConfigNaNNotKept(t *testing.T) {
	nan := math.NaN()
	c := MicraConfig{Miss: nan, PairBandwidth: nan, PairPrior: nan, BlindMinObs: nan, GeoAfter: nan}.withDefaults()
	for name, v := range map[string]float64{"Miss": c.Miss, "PairBandwidth": c.PairBandwidth, "PairPrior": c.PairPrior,
		"BlindMinObs": c.BlindMinObs, "GeoAfter": c.GeoAfter} {
		if math.IsNaN(v) {
			t.Errorf("withDefaults kept %s = NaN", name)
		}
	}
	ps := []ProbeResult{{Crawler: "a", RTT: 20 * time.Millisecond, OK: true}, {Crawler: "b", RTT: 30 * time.Millisecond, OK: true}}
	for _, mc := range []MicraConfig{{PairBandwidth: nan}, {PairPrior: nan}, {PairPrior: math.Inf(1)}} {
		mc = mc.withDefaults()
		ci := newCrawlerIndex()
		pm := newPairModel(ci, mc.PairSamples, mc.PairBandwidth, mc.PairPrior)
		cis := []uint32{ci.id("a"), ci.id("b")}
		xs := []float64{lnMs(ps[0].RTT), lnMs(ps[1].RTT)}
		pm.learn(ps, cis, xs, math.Inf(1))
		if p, _ := pm.beat(cis[0], cis[1], xs[0], lnMs(25*time.Millisecond), 0.5); math.IsNaN(p) {
			t.Errorf("bandwidth %v, prior weight %v: P(b beats 25 ms) = NaN", mc.PairBandwidth, mc.PairPrior)
		}
	}
}

// docs/delegation.md: "round(HashReplicas · capacity / HashCapacityUnit)
// replicas per crawler, at most 65,536". With HashCapacityUnit 0 (the
// default) or a crawler stating no capacity, HashReplicas is used uncapped:
// HashReplicas = 1<<24 builds 16 M ring points per crawler.
func TestRingReplicasCapped(t *testing.T) {
	for _, tc := range []struct{ unit, capacity int }{{0, 100}, {1000, 0}} {
		if n := (RingConfig{Replicas: 1 << 24, CapacityUnit: tc.unit}).ReplicasFor(tc.capacity); n > maxReplicas {
			t.Errorf("CapacityUnit %d, capacity %d: %d replicas, documented cap %d", tc.unit, tc.capacity, n, maxReplicas)
		}
	}
}
