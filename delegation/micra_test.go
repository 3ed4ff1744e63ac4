package delegation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// TestMicraExplains: a micra decision says what it probed and why it stopped.
func TestMicraExplains(t *testing.T) {
	w := newSmallWorld(t)
	p := NewMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	d, err := p.Delegate(context.Background(), ip("20.2.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	var pred *Step
	for i := range d.Steps {
		if d.Steps[i].Kind == StepPredict {
			pred = &d.Steps[i]
		}
	}
	if pred == nil || len(pred.Probes) != d.Probes || d.Probes == 0 {
		t.Fatalf("want a predict step holding every probe: %v", d)
	}
	if d.Owner != "c3" || (d.Reason != ReasonConfident && d.Reason != ReasonAllProbed) {
		t.Fatalf("c3 (70 ms) is the nearest of three: %v", d)
	}
	if !strings.Contains(pred.Note, "candidates") || !strings.Contains(pred.Note, "predicted from") {
		t.Fatalf("note should explain the prediction: %q", pred.Note)
	}
}

// TestMicraLearns: on the synthetic world micra stays close to brute force
// in accuracy with a fraction of its probes, and probes less once trained.
func TestMicraLearns(t *testing.T) {
	w := newSynthWorld(t, 2, 12, 1000)
	brute := runSynth(t, w, 2, Config{}, NewOptimal)
	ours := runSynth(t, w, 2, Config{}, NewMicra)
	ipm := runSynth(t, w, 2, Config{}, NewIPMicra)
	t.Logf("brute %.1f%% %.2f probes; ipmicra %.1f%% %.2f; micra %.1f%% %.2f (all URLs %.2f)",
		brute.optPct, brute.probes, ipm.optPct, ipm.probes, ours.optPct, ours.probes, ours.probesAll)
	if ours.optPct < brute.optPct-6 {
		t.Errorf("micra %.1f%% optimal, more than 6 points below brute force %.1f%%", ours.optPct, brute.optPct)
	}
	if ours.probes > 0.35*brute.probes || ours.probes > ipm.probes {
		t.Errorf("micra uses %.2f probes/URL (brute force %.2f, IPMicra %.2f)", ours.probes, brute.probes, ipm.probes)
	}
	if ours.probes >= ours.probesAll {
		t.Errorf("training should pay: %.2f probes/URL evaluated vs %.2f overall", ours.probes, ours.probesAll)
	}
}

// TestMicraGeoPrior: the distance prior is a least-squares line of ln RTT on
// ln distance, distances are great-circle, and the centroid table holds
// valid ISO codes and coordinates.
func TestMicraGeoPrior(t *testing.T) {
	if d := greatCircleKm(48.8566, 2.3522, 51.5074, -0.1278); d < 330 || d > 350 {
		t.Errorf("Paris–London %.0f km, want ≈ 344", d)
	}
	if d := greatCircleKm(0, 0, 0, 180); d < 20000 || d > 20040 {
		t.Errorf("half the equator %.0f km", d)
	}
	m := &micraChooser{cfg: MicraConfig{}.withDefaults()}
	if _, _, ok := m.geoPrior(5); ok {
		t.Fatal("prior before any observation")
	}
	// ln RTT = 0.5 + 0.6·x exactly: the fit recovers it with a small spread
	for i := range 100 {
		x := 4.6 + float64(i%40)*0.1
		m.geo.add(x, 0.5+0.6*x)
	}
	mu, vr, ok := m.geoPrior(7)
	if !ok || mu < 4.699 || mu > 4.701 || vr > 0.011 {
		t.Errorf("prior at 7: %.4f ± %.4f (%v), want 4.7 with the floor spread", mu, vr, ok)
	}
	for cc, p := range countryCentroids {
		if len(cc) != 2 || cc[0] < 'A' || cc[0] > 'Z' || cc[1] < 'A' || cc[1] > 'Z' || p[0] < -90 || p[0] > 90 || p[1] < -180 || p[1] > 180 {
			t.Errorf("centroid %q %v", cc, p)
		}
	}
	if len(countryCentroids) < 240 {
		t.Errorf("%d centroids", len(countryCentroids))
	}
}

// TestMicraPruningKeepsDecisions: computing a pairwise estimate only where
// the marginal bounds leave the stop or the next probe open decides exactly
// as computing every estimate each round.
func TestMicraPruningKeepsDecisions(t *testing.T) {
	bounded := 0 // stops the marginal bound decided (pruned run)
	run := func(refineAll bool) []string {
		w := newSynthWorld(t, 11, 12, 600)
		members := NewMemMembership(w.crawlers...)
		dir := NewMemDirectory(w.tree, members)
		// the jittered prober: answers differ from the learned means
		deps := Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(3, 1))}
		p := NewMicra(deps, Config{Micra: MicraConfig{refineAll: refineAll}})
		ctx := context.Background()
		for _, c := range w.crawlers {
			if _, err := p.Join(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		var out []string
		for _, h := range w.hosts {
			d, err := p.Delegate(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, fmt.Sprintf("%v %s %s probes=%d", h, d.Owner, d.Reason, d.Probes))
			for _, st := range d.Steps {
				if !refineAll && strings.Contains(st.Note, ") ≤ ") {
					bounded++
				}
			}
		}
		return out
	}
	pruned, all := run(false), run(true)
	for i := range all {
		if pruned[i] != all[i] {
			t.Fatalf("decision %d differs:\npruned: %s\nall:    %s", i, pruned[i], all[i])
		}
	}
	if bounded < len(all)/4 {
		t.Fatalf("the marginal bound decided only %d of %d stops: the pruning was hardly exercised", bounded, len(all))
	}
	t.Logf("%d decisions identical; the bound decided %d stops", len(all), bounded)
}

// TestMicraDeepSubnet: a subnet with more contexts than the scratch room of
// a decision (a tree much deeper than the default snapshot's four levels:
// hierarchy.MaxDepth allows 255) is decided, not a panic.
func TestMicraDeepSubnet(t *testing.T) {
	var rs []hierarchy.Range
	for bits := 8; bits <= 30; bits++ {
		rs = append(rs, pfx(t, netip.PrefixFrom(ip("10.0.0.0"), bits).String(), fmt.Sprintf("org%d", bits), "DE"))
	}
	rs = append(rs, pfx(t, "40.1.0.0/16", "far", "US"))
	tree := mustBuild(t, rs...)
	crawlers := []Crawler{{ID: "near", Addr: ip("10.0.0.9")}, {ID: "far", Addr: ip("40.1.0.1")}}
	members := NewMemMembership(crawlers...)
	prober := &tableProber{rtt: func(c CrawlerID, _ netip.Addr) (time.Duration, bool) {
		if c == "near" {
			return 2 * time.Millisecond, true
		}
		return 90 * time.Millisecond, true
	}}
	p := NewMicra(Deps{Tree: tree, Dir: NewMemDirectory(tree, members), Prober: prober, Members: members}, Config{})
	for _, c := range crawlers {
		if _, err := p.Join(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	if d := tree.Node(tree.SmallestNonUnary(ip("10.0.0.1"))).Depth; d < 20 {
		t.Fatalf("the test wants a deep subnet, got depth %d", d)
	}
	d, err := p.Delegate(context.Background(), ip("10.0.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != "near" {
		t.Fatalf("the crawler 2 ms away should own it: %v", d)
	}
}

// TestMicraConstantLatencies: with every repeated observation identical
// (every crawler answers every host in 50 ms: ties, so micra keeps
// probing and learning), the pooled spreads stay positive and every
// prediction finite — a zero spread made the shrinkage 0/0 and every
// prediction NaN. The same with a configured PriorSigma that squares to
// zero and no pooling.
func TestMicraConstantLatencies(t *testing.T) {
	t.Run("pooled", func(t *testing.T) { testMicraConstantLatencies(t, MicraConfig{}, true) })
	t.Run("tiny-prior", func(t *testing.T) {
		testMicraConstantLatencies(t, MicraConfig{PriorSigma: 1e-200, PooledAfter: -1}, false)
	})
}

func testMicraConstantLatencies(t *testing.T, mc MicraConfig, wantPooled bool) {
	rs := []hierarchy.Range{pfx(t, "10.0.0.0/8", "A", "DE")}
	for i := range 120 {
		rs = append(rs, pfx(t, fmt.Sprintf("10.%d.%d.0/24", 1+i/100, i%100), fmt.Sprintf("O%d", i), "DE"))
	}
	tr := mustBuild(t, rs...)
	members := NewMemMembership()
	rtt := map[CrawlerID]time.Duration{"c1": 50 * time.Millisecond, "c2": 50 * time.Millisecond, "c3": 50 * time.Millisecond}
	deps := Deps{Tree: tr, Dir: NewMemDirectory(tr, members), Members: members, Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)},
		Rand:   rand.New(rand.NewPCG(1, 1)),
		Prober: &tableProber{rtt: func(c CrawlerID, _ netip.Addr) (time.Duration, bool) { d, ok := rtt[c]; return d, ok }}}
	p := NewMicra(deps, Config{Self: "c1", Micra: mc})
	ctx := context.Background()
	for i, c := range []CrawlerID{"c1", "c2", "c3"} {
		cr := Crawler{ID: c, Addr: netip.AddrFrom4([4]byte{20, 0, 0, byte(i + 1)})} // outside the tree
		members.Add(cr)
		if _, err := p.Join(ctx, cr); err != nil {
			t.Fatal(err)
		}
	}
	for i := range 120 {
		ip := netip.AddrFrom4([4]byte{10, byte(1 + i/100), byte(i % 100), 7})
		d, err := p.Delegate(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		if _, ok := rtt[d.Owner]; !ok || (d.OwnerRTT != 0 && d.OwnerRTT != 50*time.Millisecond) {
			t.Fatalf("host %v: owner %q at %v (%v)", ip, d.Owner, d.OwnerRTT, d)
		}
	}
	m := p.(learningEngine).ch.(*micraChooser)
	e := p.(learningEngine).engine
	ip := netip.MustParseAddr("10.1.50.9")
	var d Decision
	if _, err := m.rank(ctx, e, ip, tr.SmallestNonUnary(ip), &d); err != nil {
		t.Fatal(err)
	}
	if len(m.candBuf) == 0 {
		t.Fatal("no candidates ranked")
	}
	for _, c := range m.candBuf {
		if math.IsNaN(c.mu) || math.IsNaN(c.sd) || math.IsInf(c.mu, 0) {
			t.Fatalf("candidate %s predicted %v ± %v (%v)", c.id, c.mu, c.sd, d)
		}
	}
	pooled := 0
	for k := range scopeKinds {
		if s := m.sigma0(k); !(s > 0) {
			t.Fatalf("kind %d: spread %v", k, s)
		}
		if m.pooled[k].dof >= m.cfg.PooledAfter {
			pooled++
		}
	}
	if wantPooled && pooled == 0 {
		t.Fatalf("no kind of context has a pooled spread yet: the test exercises nothing (%v, after %v)", m.pooled, m.cfg.PooledAfter)
	}
}

// TestMicraMissFirst: MissFirst is the stop rule's risk after a decision's
// first probe only. At 100 (any risk) every probed decision stops after one
// probe; a negative value means Miss; the default changes some decisions.
func TestMicraMissFirst(t *testing.T) {
	run := func(mc MicraConfig) (out []string, probes []int) {
		w := newSynthWorld(t, 11, 12, 400)
		members := NewMemMembership(w.crawlers...)
		dir := NewMemDirectory(w.tree, members)
		deps := Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(3, 1))}
		p := NewMicra(deps, Config{Micra: mc})
		ctx := context.Background()
		for _, c := range w.crawlers {
			if _, err := p.Join(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range w.hosts {
			d, err := p.Delegate(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if d.Reason == ReasonCached {
				continue
			}
			out = append(out, fmt.Sprintf("%v %s %s probes=%d", h, d.Owner, d.Reason, d.Probes))
			probes = append(probes, d.Probes)
		}
		return out, probes
	}
	_, loose := run(MicraConfig{MissFirst: 100})
	for i, n := range loose {
		if n > 1 {
			t.Fatalf("decision %d probed %d times with MissFirst 100: the first answer must stop it", i, n)
		}
	}
	asMiss, _ := run(MicraConfig{MissFirst: 0.06})
	off, _ := run(MicraConfig{MissFirst: -1})
	if !slices.Equal(asMiss, off) {
		t.Fatal("MissFirst −1 does not decide as MissFirst = Miss")
	}
	def, _ := run(MicraConfig{})
	if slices.Equal(def, off) {
		t.Fatal("the default MissFirst changed no decision")
	}
}

// A neighbour's prediction stays finite and no better than the answer it
// is moved from, even when the distance fit is nearly flat (measured
// latencies that hardly depend on distance) and inverting it overflows.
func TestNeighbourPredictionFinite(t *testing.T) {
	for _, f := range []geoFit{
		{valid: true, ok: true, a: 1, b: 0.6},   // a formula-like world
		{valid: true, ok: true, a: 1, b: 1e-4},  // flat: exp((xa-a)/b) overflows
		{valid: true, ok: true, a: 9, b: 1e-12}, // flat, answer below the intercept
	} {
		for _, xa := range []float64{lnMs(0), lnMs(time.Millisecond), lnMs(80 * time.Millisecond), lnMs(time.Minute)} {
			for _, d := range []float64{0, 1, 500, maxSurfaceKm, 2 * maxSurfaceKm} {
				mu := f.neighbourMu(xa, d)
				if math.IsNaN(mu) || math.IsInf(mu, 0) {
					t.Fatalf("fit a=%g b=%g, answer %g, %g km: prediction %g", f.a, f.b, xa, d, mu)
				}
				if mu < xa-1e-9 {
					t.Fatalf("fit a=%g b=%g, answer %g, %g km: prediction %g beats the answer", f.a, f.b, xa, d, mu)
				}
			}
		}
	}
}
