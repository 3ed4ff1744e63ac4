package delegation

import (
	"context"
	"math/rand/v2"
	"testing"
)

// TestPredictDenseMatchesLookups: predicting many candidates at once (the
// contexts spread into tables by crawler index) gives each candidate what
// predicting it alone (binary searches) gives, bit for bit, over the
// contexts of many subnets after a run of 300 crawlers.
func TestPredictDenseMatchesLookups(t *testing.T) {
	w := newSynthWorld(t, 7, 300, 3000)
	members := NewMemMembership(w.crawlers...)
	deps := Deps{Tree: w.tree, Dir: NewMemDirectory(w.tree, members), Prober: w, Members: members,
		Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(7, 1))}
	p := NewMicra(deps, Config{})
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, h := range w.hosts {
		if _, err := p.Delegate(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	e := p.(learningEngine).engine
	m := e.ch.(*micraChooser)
	m.locate(e)
	ids := append([]uint32(nil), m.liveOrd...)
	if len(ids) < predictDenseFrom {
		t.Fatalf("%d live crawlers: fewer than predictDenseFrom (%d), the dense path never runs", len(ids), predictDenseFrom)
	}
	learned, sits := 0, 0
	for hi := 0; hi < len(w.hosts); hi += 97 {
		s := w.tree.SmallestNonUnary(w.hosts[hi])
		_, cc := m.subnetScopes(e.d.Tree, s)
		infos, kinds := m.subnetScopeStats(false), m.scopeKind
		if infos == nil {
			continue
		}
		sig := m.spreads(kinds, nil)
		all := make([]micraCand, len(ids))
		m.predict(all, ids, infos, kinds, sig, m.globalMean(), cc)
		for k, ci := range ids {
			one := make([]micraCand, 1)
			m.predict(one, []uint32{ci}, infos, kinds, sig, m.globalMean(), cc)
			a, b := all[k], one[0]
			if a.mu != b.mu || a.sd != b.sd || a.n != b.n || a.from != b.from {
				t.Fatalf("host %d, crawler %d: together mu %v sd %v n %v from %s; alone mu %v sd %v n %v from %s",
					hi, ci, a.mu, a.sd, a.n, a.from, b.mu, b.sd, b.n, b.from)
			}
			switch {
			case len(a.from) > 5 && a.from[:5] == "sits-":
				sits++
			case a.from != "unknown" && a.from != "all" && a.from != "distance":
				learned++
			}
		}
	}
	if learned == 0 || sits == 0 {
		t.Fatalf("%d predictions from a context's statistics, %d from sitting there: the test compares nothing specific", learned, sits)
	}
}
