package delegation

import (
	"context"
	"math"
	"testing"
)

// TestReplicasForHugeCapacity: replicas must grow with capacity; a
// huge capacity overflows the float→int conversion and gets one replica
// (and capacities just below that ask NewRing for ~10^18 points).
func TestReplicasForHugeCapacity(t *testing.T) {
	cfg := RingConfig{Replicas: 200, CapacityUnit: 1}
	big := cfg.ReplicasFor(1 << 20)
	huge := cfg.ReplicasFor(math.MaxInt)
	if huge < big {
		t.Fatalf("ReplicasFor(MaxInt) = %d < ReplicasFor(1<<20) = %d: replica count overflowed", huge, big)
	}
	if n := cfg.ReplicasFor(1 << 40); n > 1<<24 {
		t.Fatalf("ReplicasFor(1<<40) = %d replicas for one crawler: NewRing would allocate %d bytes", n, n*16)
	}
}

// TestJoinAfterRandomSelfPickTakesOwnSubnet: under the random baseline, a decider
// that picks itself publishes a record (OwnerRTT 0, DecidedBy == Owner)
// that Join takes for a placement, so a crawler joining that subnet never
// owns its own subnet.
func TestJoinAfterRandomSelfPickTakesOwnSubnet(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewRandom(w.deps(1), Config{Self: "c1"})
	w.join(t, p, smallCrawlers[0], smallCrawlers[2]) // c1, c3
	d, err := p.Delegate(ctx, ip("10.2.1.77"))       // c2's future subnet
	if err != nil || d.Owner != "c1" {
		t.Fatalf("setup: the seed must make c1 pick itself: %v %v", d, err)
	}
	w.join(t, p, smallCrawlers[1]) // c2 sits in 10.2.1.0/24
	d, err = p.Delegate(ctx, smallCrawlers[1].Addr)
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != "c2" {
		t.Fatalf("c2 joined its own subnet but it stays with c1 (a random pick taken for a placement): %v", d)
	}
}
