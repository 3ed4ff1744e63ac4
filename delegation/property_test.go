package delegation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
)

var allPolicies = []func(Deps, Config) Policy{NewRandom, NewConsistentHash, NewOptimal, NewIPMicra, NewMicra}

// TestOwnerAlwaysLive: crawlers join and die at random; every decision of
// every policy names a live crawler.
func TestOwnerAlwaysLive(t *testing.T) {
	w := newSynthWorld(t, 3, 16, 1500)
	ctx := context.Background()
	for _, mk := range allPolicies {
		for _, bal := range []BalanceMode{BalanceOff, BalanceRelease, BalanceSecondBest} {
			members := NewMemMembership()
			dir := NewMemDirectory(w.tree, members)
			rng := rand.New(rand.NewPCG(5, 5))
			p := mk(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(1, 1))}, Config{Balance: bal})
			for i, c := range w.crawlers {
				if i < 8 {
					c.Capacity = 150
					members.Add(c)
					if _, err := p.Join(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
			}
			for i, h := range w.hosts {
				if i%100 == 50 { // churn: one dies, one (re)joins
					live := members.Live()
					if len(live) > 2 {
						members.Remove(live[rng.IntN(len(live))].ID)
					}
					c := w.crawlers[rng.IntN(len(w.crawlers))]
					c.Capacity = 150
					members.Add(c)
					if _, err := p.Join(ctx, c); err != nil {
						t.Fatal(err)
					}
				}
				d, err := p.Delegate(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				if !members.IsLive(d.Owner) {
					t.Fatalf("%s/%v: owner %q is not live: %v", p.Name(), bal, d.Owner, d)
				}
				for _, m := range d.Moved {
					if !members.IsLive(m.Owner) {
						t.Fatalf("%s: moved subnet to dead %s", p.Name(), m.Owner)
					}
				}
			}
		}
	}
}

// TestLowerDelegationsWinProperty: for random hosts, the owner is the record
// of the host's smallest non-unary subnet, whatever ancestors hold.
func TestLowerDelegationsWinProperty(t *testing.T) {
	w := newSynthWorld(t, 4, 12, 800)
	ctx := context.Background()
	members := NewMemMembership(w.crawlers...)
	dir := NewMemDirectory(w.tree, members)
	p := NewIPMicra(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(1, 1))}, Config{})
	for _, c := range w.crawlers {
		p.Join(ctx, c)
	}
	for _, h := range w.hosts {
		p.Delegate(ctx, h)
	}
	// give every delegated subnet's ancestors a record with a huge epoch
	for _, r := range dir.Records() {
		for _, a := range w.tree.Ancestors(r.Subnet) {
			if _, ok := dir.Get(a); !ok && a != 0 {
				dir.Publish(ctx, Record{Subnet: a, Owner: w.crawlers[0].ID, Epoch: 1 << 40})
			}
		}
	}
	for _, h := range w.hosts {
		s := w.tree.SmallestNonUnary(h)
		rec, _ := dir.Get(s)
		d, _ := p.Delegate(ctx, h)
		if d.Subnet != s || d.Owner != rec.Owner || !d.Cached {
			t.Fatalf("host %v: decision %v, but its own subnet %d is delegated to %s", h, d, s, rec.Owner)
		}
	}
}

// TestDeterminism: same inputs and seed → the same decisions, explanations
// included.
func TestDeterminism(t *testing.T) {
	run := func(mk func(Deps, Config) Policy) []string {
		w := newSynthWorld(t, 6, 12, 400)
		members := NewMemMembership(w.crawlers...)
		dir := NewMemDirectory(w.tree, members)
		p := mk(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(9, 9))}, Config{Balance: BalanceRelease})
		ctx := context.Background()
		var out []string
		for _, c := range w.crawlers {
			c.Capacity = 60
			members.Add(c)
			d, _ := p.Join(ctx, c)
			out = append(out, d.String())
		}
		for _, h := range w.hosts {
			d, _ := p.Delegate(ctx, h)
			out = append(out, fmt.Sprintf("%s moved=%d", d, len(d.Moved)))
		}
		return out
	}
	for _, mk := range allPolicies {
		a, b := run(mk), run(mk)
		if !slices.Equal(a, b) {
			for i := range a {
				if a[i] != b[i] {
					t.Fatalf("run diverges at decision %d:\n%s\n%s", i, a[i], b[i])
				}
			}
		}
	}
}

// TestHashBalance: deviation from perfect balance at 200 replicas.
func TestHashBalance(t *testing.T) {
	for _, n := range []int{4, 12, 50} {
		var cs []Crawler
		for i := range n {
			cs = append(cs, Crawler{ID: CrawlerID(fmt.Sprintf("12D3KooWcrawler%04d", i))})
		}
		for _, probes := range []int{1, 21} {
			dev := ringDeviation(NewRing(cs, RingConfig{Replicas: 200, Probes: probes}), cs, 200_000)
			t.Logf("%d crawlers, 200 replicas, %d probe(s)/key: deviation %.2f%%", n, probes, 100*dev)
			if probes == 21 && dev > 0.045 {
				t.Errorf("deviation %.2f%% > 4.5%%", 100*dev)
			}
		}
	}
}

// ringDeviation is the relative standard deviation of the hosts each
// crawler receives, over keys sample hosts.
func ringDeviation(r *Ring, cs []Crawler, keys int) float64 {
	cnt := map[CrawlerID]float64{}
	rng := rand.New(rand.NewPCG(42, 42))
	for range keys {
		c, _ := r.Owner(rng.Uint64())
		cnt[c]++
	}
	ideal := float64(keys) / float64(len(cs))
	var ss float64
	for _, c := range cs {
		d := cnt[c.ID] - ideal
		ss += d * d
	}
	return math.Sqrt(ss/float64(len(cs))) / ideal
}

func TestHashCapacityProportional(t *testing.T) {
	cs := []Crawler{{ID: "a", Capacity: 1000}, {ID: "b", Capacity: 2000}, {ID: "c", Capacity: 1000}}
	r := NewRing(cs, RingConfig{Replicas: 200, CapacityUnit: 1000, Probes: 21})
	cnt := map[CrawlerID]float64{}
	rng := rand.New(rand.NewPCG(1, 2))
	for range 100_000 {
		c, _ := r.Owner(rng.Uint64())
		cnt[c]++
	}
	if ratio := cnt["b"] / cnt["a"]; math.Abs(ratio-2) > 0.15 {
		t.Fatalf("twice the capacity should get twice the hosts; got ratio %.2f (%v)", ratio, cnt)
	}
}

// TestHashContravariance: adding crawlers never moves a host between two
// old crawlers — only to a new one.
func TestHashContravariance(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	var cs []Crawler
	for i := range 5 {
		cs = append(cs, Crawler{ID: CrawlerID(fmt.Sprintf("old-%d", i)), Capacity: 1 + rng.IntN(4)})
	}
	keys := make([]uint64, 20000)
	for i := range keys {
		keys[i] = rng.Uint64()
	}
	for _, probes := range []int{1, 21} {
		cfg := RingConfig{Replicas: 100, CapacityUnit: 2, Probes: probes}
		cur := slices.Clone(cs)
		before := NewRing(cur, cfg)
		for step := range 10 {
			added := Crawler{ID: CrawlerID(fmt.Sprintf("new-%d", step)), Capacity: 1 + rng.IntN(4)}
			cur = append(cur, added)
			after := NewRing(cur, cfg)
			moved := 0
			for _, k := range keys {
				a, _ := before.Owner(k)
				b, _ := after.Owner(k)
				if a != b {
					moved++
					if b != added.ID {
						t.Fatalf("probes=%d: adding %s moved a host from %s to old crawler %s", probes, added.ID, a, b)
					}
				}
			}
			if moved == 0 {
				t.Fatalf("probes=%d: new crawler %s got nothing", probes, added.ID)
			}
			before = after
		}
	}
}
