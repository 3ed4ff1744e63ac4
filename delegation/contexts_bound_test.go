package delegation

import (
	"context"
	"math/rand/v2"
	"testing"
	"time"
)

// checkContexts verifies the bookkeeping MaxContexts relies on: every
// record sits under its own key once, forgotten records are out of the map,
// no cache refers to a forgotten record, and the forgettable count is exact.
func checkContexts(t *testing.T, m *micraChooser) {
	t.Helper()
	seen := map[*scopeStats]bool{}
	n := 0
	for k, c := range m.scopes {
		if c.key != k {
			t.Fatalf("context %x holds a record keyed %x", k, c.key)
		}
		if seen[c] {
			t.Fatalf("context record of %x is in the map twice", k)
		}
		seen[c] = true
		if forgettable(k) {
			n++
		}
	}
	if n != m.forgettable {
		t.Fatalf("forgettable count %d, map holds %d", m.forgettable, n)
	}
	for _, c := range m.freeScopes {
		if seen[c] {
			t.Fatalf("forgotten record %x is still in the map", c.key)
		}
	}
	for c := range m.liveTops {
		if !seen[c] {
			t.Fatalf("live-top cache keeps a forgotten record")
		}
	}
	for _, c := range m.locScopes {
		if !seen[c] {
			t.Fatalf("a context where live crawlers sit was forgotten")
		}
	}
	if m.scopeOK {
		for i, c := range m.scopeRecs {
			if c != nil && m.scopes[m.scopeKs[i]] != c {
				t.Fatalf("the last subnet's cached context %x is not the map's", m.scopeKs[i])
			}
		}
	}
}

// oldContexts counts the contexts the bound applies to: forgettable, where
// no live crawler sits, not read by the last decision.
func oldContexts(m *micraChooser) int {
	n := 0
	for k, c := range m.scopes {
		if forgettable(k) && len(c.located) == 0 && c.used < m.tick {
			n++
		}
	}
	return n
}

// runBounded delegates and reviews every host of w with micra at the given
// bound, checking the bookkeeping after each call; it returns the owners.
func runBounded(t *testing.T, w *synthWorld, bound int) ([]CrawlerID, *micraChooser, *engine) {
	t.Helper()
	members := NewMemMembership(w.crawlers...)
	dir := NewMemDirectory(w.tree, members)
	deps := Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(1, 1))}
	p := NewMicra(deps, Config{Micra: MicraConfig{MaxContexts: bound}})
	m := p.(learningEngine).ch.(*micraChooser)
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	var owners []CrawlerID
	for i, h := range w.hosts {
		switch i {
		case len(w.hosts) / 3:
			// the fastest crawlers of many contexts leave (their top
			// lists then need the live-top cache), one comes back later
			for _, c := range w.crawlers[:3] {
				members.Remove(c.ID)
			}
		case 2 * len(w.hosts) / 3:
			members.Add(w.crawlers[1])
			if _, err := p.Join(ctx, w.crawlers[1]); err != nil {
				t.Fatal(err)
			}
		}
		d, err := p.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := members.Get(d.Owner); !ok {
			t.Fatalf("host %d: owner %q is no live crawler", i, d.Owner)
		}
		checkContexts(t, m)
		// the owner times the host: a review (repeated subnets build tallies)
		took := time.Duration(w.meanRTT(w.crawler(d.Owner), h) * float64(time.Millisecond))
		r, err := p.(Reviewer).Review(ctx, h, d.Owner, took)
		if err != nil {
			t.Fatal(err)
		}
		checkContexts(t, m)
		owners = append(owners, r.Owner)
		if n := oldContexts(m); bound > 0 && n > bound {
			t.Fatalf("host %d: %d forgettable contexts over the bound %d", i, n, bound)
		}
		e := p.(learningEngine).engine
		if n := len(e.learnedAt); bound > 0 && n > 2*bound {
			t.Fatalf("host %d: learn dedup memory holds %d subnets, over twice the bound %d", i, n, bound)
		}
		// the record just published is known: offered again, it is not
		// learned twice
		if !d.Cached && d.Record.Owner != "" && p.(Learner).Learn(d.Record) {
			t.Fatalf("host %d: the record just made was learned again", i)
		}
	}
	return owners, m, p.(learningEngine).engine
}

func TestMaxContextsBoundsLearnedState(t *testing.T) {
	w := newSynthWorld(t, 3, 12, 1500)
	_, free, freeEng := runBounded(t, w, -1)
	if free.forgotten != 0 {
		t.Fatalf("unbounded: %d contexts forgotten", free.forgotten)
	}
	const bound = 40
	if free.forgettable <= 4*bound {
		t.Fatalf("world too small to test the bound: %d forgettable contexts unbounded", free.forgettable)
	}
	// a fresh world of the same seed: w's jitter source has moved on
	owners, m, eng := runBounded(t, newSynthWorld(t, 3, 12, 1500), bound)
	t.Logf("unbounded: %d forgettable contexts, %d tallies, %d dedup sets; bound %d: %d contexts, %d tallies, %d dedup sets, %d contexts forgotten",
		free.forgettable, len(free.tally), len(freeEng.learnedAt), bound, m.forgettable, len(m.tally), len(eng.learnedAt), m.forgotten)
	if m.forgotten == 0 {
		t.Fatal("nothing forgotten under the bound")
	}
	if len(m.tally) > bound+len(m.locScopes) {
		t.Fatalf("%d review tallies kept under a bound of %d contexts", len(m.tally), bound)
	}
	if len(freeEng.learnedAt) <= 4*bound || len(eng.learnedAt) > 2*bound {
		t.Fatalf("learn dedup memory: %d subnets unbounded, %d under the bound %d", len(freeEng.learnedAt), len(eng.learnedAt), bound)
	}
	if len(free.tally) <= len(m.tally) {
		t.Fatalf("tallies not forgotten: %d bounded, %d unbounded", len(m.tally), len(free.tally))
	}
	// same inputs, same forgetting, same decisions
	again, _, _ := runBounded(t, newSynthWorld(t, 3, 12, 1500), bound)
	for i := range owners {
		if owners[i] != again[i] {
			t.Fatalf("host %d: %q then %q with the same inputs", i, owners[i], again[i])
		}
	}
}

// A bound of one context forgets at nearly every decision, including in the
// middle of one (creating a subnet's contexts): no record the decision
// holds may be recycled under it.
func TestMaxContextsTinyBound(t *testing.T) {
	w := newSynthWorld(t, 4, 12, 300)
	runBounded(t, w, 1)
}
