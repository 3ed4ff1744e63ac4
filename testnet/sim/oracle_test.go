package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"math"
	"math/rand/v2"
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/testnet/world"
)

// probeFunc asks w's prober (seeded) for host i, one crawler at a time.
func probeFunc(w *World, i int, seed uint64) func(c int32) (float64, bool) {
	pr := &prober{w: w, rng: rand.New(rand.NewPCG(seed, uint64(i))), host: i}
	return func(c int32) (float64, bool) {
		r := pr.Probe(context.Background(), w.Hosts[i].Addr, []delegation.CrawlerID{w.Crawlers[c].ID})[0]
		return float64(r.RTT.Nanoseconds()) / 1e6, r.OK
	}
}

// scriptedProbes answers each crawler once from ask and then repeats that
// answer, so two oracles fed the same script see the same answers.
func scriptedProbes(ask func(c int32) (float64, bool)) func(c int32) (float64, bool) {
	answers := map[int32]float64{}
	return func(c int32) (float64, bool) {
		if y, ok := answers[c]; ok {
			return y, true
		}
		y, ok := ask(c)
		answers[c] = y
		return y, ok
	}
}

// The oracle's decomposition floor = distance × 2/fibre × stretch + access
// delays must be the world's, and StretchCDF must describe the draws.
func TestOracleModelMatchesWorld(t *testing.T) {
	w, err := NewWorld(small(5))
	if err != nil {
		t.Fatal(err)
	}
	o := newOracleModel(w, oracleCells, oraclePost)
	var stretches []float64
	for i := range w.Hosts {
		h := &w.Hosts[i]
		v := o.view(h)
		for c := range w.CrawlerE {
			s := w.Model.Stretch(&w.CrawlerE[c], h) // test only: the oracle never reads it
			want := w.Model.FloorRTT(&w.CrawlerE[c], h)
			if got := v.d[0][c]*s + v.base[c]; math.Abs(got-want) > 1e-9*want {
				t.Fatalf("host %d crawler %d: oracle's decomposition %.6f ms, world's floor %.6f ms", i, c, got, want)
			}
			stretches = append(stretches, s)
		}
	}
	slices.Sort(stretches)
	// Kolmogorov–Smirnov distance of the draws from StretchCDF
	var ks float64
	for k, s := range stretches {
		f := w.Model.StretchCDF(s)
		ks = math.Max(ks, math.Max(math.Abs(f-float64(k)/float64(len(stretches))), math.Abs(f-float64(k+1)/float64(len(stretches)))))
	}
	if crit := 1.63 / math.Sqrt(float64(len(stretches))); ks > crit { // 1 % level
		t.Fatalf("stretch draws differ from StretchCDF: KS %.4f > %.4f over %d pairs", ks, crit, len(stretches))
	}
	for _, u := range []float64{0.1, 0.5, 0.9} {
		if got := w.Model.StretchCDF(w.Model.StretchQuantile(u)); math.Abs(got-u) > 1e-9 {
			t.Errorf("CDF(Quantile(%g)) = %g", u, got)
		}
	}
	// the atom at 1: every quantile below CDF(1) is exactly 1, none above
	if a := o.atom; a <= 0 || w.Model.StretchQuantile(a/2) != 1 || w.Model.StretchQuantile(math.Min(1-1e-9, a+1e-6)) <= 1 {
		t.Errorf("atom P(stretch = 1) = %g does not match the quantiles", a)
	}
	// the tabulated CDF the oracle integrates with
	for s := 0.5; s < 40; s += 0.00731 {
		if got, want := o.stretchCDF(s), w.Model.StretchCDF(s); math.Abs(got-want) > 1e-6 {
			t.Fatalf("stretchCDF(%g) = %.9f, StretchCDF %.9f", s, got, want)
		}
	}
	// the density integrates to the CDF above 1
	var integ float64
	for s := 1.0; s < 30; s += 1e-3 {
		integ += w.Model.StretchPDF(s+5e-4) * 1e-3
	}
	if want := 1 - w.Model.StretchCDF(1); math.Abs(integ-want) > 1e-3 {
		t.Errorf("∫ StretchPDF above 1 = %.5f, want %.5f", integ, want)
	}
}

// With ε = 0 and every crawler allowed the oracle probes every crawler that
// could possibly win, so it can miss only through probe jitter, and it is at
// least as accurate as brute force (within noise).
func TestOracleAllProbesIsBruteForce(t *testing.T) {
	ctx := context.Background()
	cfg := small(7)
	cfg.Policies = []string{"optimal"}
	rep, w, err := Run(ctx, cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	brute := rep.Results[0].OptimalPctAll
	o := newOracleModel(w, oracleCells, oraclePost)
	cfgJ := w.Model.Config()
	misses, probesSum := 0, 0
	for i := range w.Hosts {
		v := o.view(&w.Hosts[i])
		tr := o.trace(&v, probeFunc(w, i, 99), 0, len(w.Crawlers))
		got := tr.choice[len(tr.choice)-1]
		// ε = 0 leaves out only crawlers that provably cannot win: even at
		// stretch 1 their floor exceeds the chosen crawler's answer
		yGot := tr.answer[slices.Index(tr.order, got)]
		for c := range w.CrawlerE {
			if !slices.Contains(tr.order, int32(c)) && v.d[0][c]+v.base[c] <= yGot {
				t.Fatalf("host %d: ε = 0 left crawler %d unprobed although it could beat %d", i, c, got)
			}
		}
		if !slices.Contains(tr.order, w.Optimal[i]) {
			t.Fatalf("host %d: ε = 0 never probed the optimal crawler %d (probed %v)", i, w.Optimal[i], tr.order)
		}
		probesSum += len(tr.order)
		if got == w.Optimal[i] {
			continue
		}
		misses++
		excess := w.Model.MeanRTT(&w.CrawlerE[got], &w.Hosts[i]) - w.OptimalRTT[i]
		if jit := cfgJ.JitterFrac*w.OptimalRTT[i] + cfgJ.JitterMinMs; excess > 6*jit {
			t.Errorf("host %d: chose %d at +%.2f ms over optimal %d with every answer in hand — more than jitter (%.2f ms mean) explains",
				i, got, excess, w.Optimal[i], jit)
		}
	}
	acc := pct(len(w.Hosts)-misses, len(w.Hosts))
	t.Logf("oracle, ε = 0: %.1f %% optimal at %.2f probes/URL; brute force %.1f %% at %d", acc,
		float64(probesSum)/float64(len(w.Hosts)), brute, len(w.Crawlers))
	if acc < 90 {
		t.Errorf("oracle with every answer: %.1f %% optimal, jitter alone should not cost 10 points", acc)
	}
	if acc < brute-2.5 {
		t.Errorf("oracle with every answer %.1f %% < brute force %.1f %% beyond noise", acc, brute)
	}
	// the same through the public entry point
	orep, err := w.Oracle(ctx, cfg, OracleConfig{Eps: []float64{0}, Ks: []int{}})
	if err != nil {
		t.Fatal(err)
	}
	bayes := rowsOf(orep, OracleRuleBayes, 0)
	last := bayes[len(bayes)-1]
	if last.Rule != OracleRuleBayes || *last.Eps != 0 || last.ProbesPerURLAll > float64(len(w.Crawlers)) || last.OptimalPctAll < brute-2.5 {
		t.Fatalf("ε = 0, K = all row: %+v; brute force %.1f %% at %d probes/URL", last, brute, len(w.Crawlers))
	}
}

func rowsOf(rep *OracleReport, rule string, k int) []OracleRow {
	var out []OracleRow
	for _, r := range rep.Rows {
		if r.Rule == rule && (k == 0 || r.K == k) {
			out = append(out, r)
		}
	}
	return out
}

// The frontier: a smaller ε never spends fewer probes (per host, since the
// traces are shared), the fixed rules spend exactly their probes, and the
// most careful rule is more accurate than the first probe alone.
func TestOracleFrontier(t *testing.T) {
	cfg, _ := Preset("paper")
	cfg.Logger = quiet()
	w, rep, buf := oracleOn(t, cfg)
	t.Log("\n" + buf.String())
	if !strings.Contains(buf.String(), "ORACLE BOUND") || !strings.Contains(buf.String(), "Not a policy") {
		t.Error("the oracle's table must be labelled as a bound that reads the world model")
	}
	// the fixed rules that never look at an answer cost nothing
	for _, rule := range []string{OracleRuleNearest, OracleRulePrior} {
		r := rowsOf(rep, rule, 0)[0]
		if r.ProbesPerURL != 0 || r.ProbesPerURLAll != 0 {
			t.Errorf("%s: %.3f probes/URL, want 0 (it looks at no answer)", rule, r.ProbesPerURLAll)
		}
	}
	if r := rowsOf(rep, OracleRuleTwoNearest, 0)[0]; r.ProbesPerURLAll != 2 {
		t.Errorf("two nearest: %.3f probes/URL, want 2", r.ProbesPerURLAll)
	}
	for _, k := range []int{2, len(w.Crawlers)} {
		rows := rowsOf(rep, OracleRuleBayes, k)
		if len(rows) != len(OracleEps) {
			t.Fatalf("K=%d: %d rows, want %d", k, len(rows), len(OracleEps))
		}
		for j := 1; j < len(rows); j++ {
			if *rows[j].Eps >= *rows[j-1].Eps {
				t.Fatal("rows not in decreasing ε")
			}
			if rows[j].ProbesPerURLAll < rows[j-1].ProbesPerURLAll || rows[j].ProbesPerURL < rows[j-1].ProbesPerURL {
				t.Errorf("K=%d: ε %g spends %.3f probes/URL, fewer than ε %g (%.3f)", k, *rows[j].Eps, rows[j].ProbesPerURLAll, *rows[j-1].Eps, rows[j-1].ProbesPerURLAll)
			}
			if rows[j].ProbesPerURLAll > float64(k) {
				t.Errorf("K=%d: %.3f probes/URL", k, rows[j].ProbesPerURLAll)
			}
		}
		first, last := rows[0], rows[len(rows)-1]
		if last.OptimalPctAll < first.OptimalPctAll {
			t.Errorf("K=%d: ε %g %.1f %% < ε %g %.1f %%", k, *last.Eps, last.OptimalPctAll, *first.Eps, first.OptimalPctAll)
		}
		if fp := rowsOf(rep, OracleRulePrior, 0)[0]; last.OptimalPctAll < fp.OptimalPctAll+3 {
			t.Errorf("K=%d ε %g: %.1f %% is hardly above the first probe alone (%.1f %%)", k, *last.Eps, last.OptimalPctAll, fp.OptimalPctAll)
		}
	}
	// per host: stopping points are nested across ε
	o := newOracleModel(w, oracleCells, oraclePost)
	for i := range 200 {
		v := o.view(&w.Hosts[i])
		tr := o.trace(&v, probeFunc(w, i, 3), 1e-4, len(w.Crawlers))
		prev := 0
		for _, e := range append([]float64{math.Inf(1)}, OracleEps...) {
			k := tr.stopAt(e, len(w.Crawlers))
			if k < prev || k < 0 {
				t.Fatalf("host %d: ε %g stops after %d probes, a larger ε after %d", i, e, k, prev)
			}
			prev = k
		}
		for k := 1; k < len(tr.order); k++ {
			if slices.Contains(tr.order[:k], tr.order[k]) {
				t.Fatalf("host %d: crawler %d probed twice", i, tr.order[k])
			}
		}
	}
	if math.IsNaN(rep.At15) || rep.At15 < rowsOf(rep, OracleRulePrior, 0)[0].OptimalPct {
		t.Errorf("best %% at 1.5 probes/URL = %v", rep.At15)
	}
	// the frontier starts at zero probes: knowing each host's position, a
	// loose ε delegates most hosts blind, and the gated rule spends fewer
	// probes than the Bayes rule it falls back to
	loose := rowsOf(rep, OracleRuleBayes, len(w.Crawlers))[0]
	if loose.ProbesPerURLAll >= 1 {
		t.Errorf("ε = %g: %.2f probes/URL — the prior's statistic should let most hosts go without a probe", *loose.Eps, loose.ProbesPerURLAll)
	}
	if math.IsNaN(rep.ProbesFor95All) || rep.ProbesFor95All >= 1 {
		t.Errorf("position oracle: 95 %% at %.2f probes/URL (all hosts), want below 1 with blind decisions", rep.ProbesFor95All)
	}
	for _, g := range rowsOf(rep, OracleRuleGate, 0) {
		if g.Tau == nil || g.Eps == nil || g.ProbesPerURLAll > float64(len(w.Crawlers)) {
			t.Errorf("gate row %+v", g)
		}
	}
	// JSON: one object per row, then the summary
	buf.Reset()
	if err := rep.WriteJSON(buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(rep.Rows)+1 {
		t.Fatalf("%d JSON lines for %d rows", len(lines), len(rep.Rows))
	}
	var row map[string]any
	if err := json.Unmarshal([]byte(lines[5]), &row); err != nil {
		t.Fatal(err)
	}
	for _, f := range []string{"oracle_eps", "optimal_pct", "probes_per_url"} {
		if _, ok := row[f]; !ok {
			t.Errorf("JSON row lacks %s: %s", f, lines[5])
		}
	}
}

// rekey returns a copy of w whose model has another seed for the pairs'
// stretch, with every position and access delay kept: the worlds differ
// only in the stretch.
func rekey(t *testing.T, w *World, seed uint64) *World {
	cfg := w.Model.Config()
	cfg.Seed = seed
	m, err := world.New(w.Model.Geo(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	re := func(in []world.Endpoint) []world.Endpoint {
		out := make([]world.Endpoint, len(in))
		for i, e := range in {
			out[i] = m.EndpointAt(e.Addr, e.Loc)
			out[i].AccessMs = e.AccessMs
		}
		return out
	}
	b := *w
	b.Model, b.CrawlerE, b.Hosts = m, re(w.CrawlerE), re(w.Hosts)
	if err := b.computeOptimal(context.Background(), 2); err != nil {
		t.Fatal(err)
	}
	return &b
}

// The oracle never reads the stretch: in two worlds that differ only in it,
// the first probe is the same for every host, and the same answers lead to
// the same decisions.
func TestOracleNeverReadsStretch(t *testing.T) {
	a, err := NewWorld(small(11))
	if err != nil {
		t.Fatal(err)
	}
	b := rekey(t, a, 12345)
	differ, optDiffer := 0, 0
	for i := range a.Hosts {
		for c := range a.CrawlerE {
			if a.Model.Stretch(&a.CrawlerE[c], &a.Hosts[i]) != b.Model.Stretch(&b.CrawlerE[c], &b.Hosts[i]) {
				differ++
			}
		}
		if a.Optimal[i] != b.Optimal[i] {
			optDiffer++
		}
	}
	if differ < len(a.Hosts)*len(a.CrawlerE)*9/10 || optDiffer == 0 {
		t.Fatalf("the rekeyed world should differ in stretch (%d pairs differ) and in optimal crawlers (%d hosts)", differ, optDiffer)
	}
	oa, ob := newOracleModel(a, oracleCells, oraclePost), newOracleModel(b, oracleCells, oraclePost)
	for i := range a.Hosts {
		va, vb := oa.view(&a.Hosts[i]), ob.view(&b.Hosts[i])
		if fa, fb := oa.priorChoice(&va), ob.priorChoice(&vb); *fa != *fb {
			t.Fatalf("host %d: prior decision %+v in one world, %+v in the other: the oracle read the stretch", i, *fa, *fb)
		}
		// scripted answers from world a, fed to both
		script := scriptedProbes(probeFunc(a, i, 1))
		ta := oa.trace(&va, script, 1e-3, len(a.Crawlers))
		tb := ob.trace(&vb, script, 1e-3, len(b.Crawlers))
		if !slices.Equal(ta.order, tb.order) || !slices.Equal(ta.choice, tb.choice) {
			t.Fatalf("host %d: same answers, different decisions (%v/%v vs %v/%v)", i, ta.order, ta.choice, tb.order, tb.choice)
		}
	}
	// and the frontier still scores against each world's own optimum
	ra, err := a.Oracle(context.Background(), small(11), OracleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	rb, err := b.Oracle(context.Background(), small(11), OracleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if ra.Rows[1].Rule != OracleRulePrior || ra.Rows[1].ProbesPerURLAll != 0 || rb.Rows[1].ProbesPerURLAll != 0 {
		t.Fatal("the prior's choice spends no probe")
	}
}

func TestOracleSummaryHull(t *testing.T) {
	e := 0.1
	rep := &OracleReport{Rows: []OracleRow{
		{Rule: OracleRulePrior, K: 0, ProbesPerURL: 1, OptimalPct: 80},
		{Rule: OracleRuleBayes, Eps: &e, K: 12, ProbesPerURL: 1.4, OptimalPct: 85}, // under the hull
		{Rule: OracleRuleBayes, Eps: &e, K: 12, ProbesPerURL: 2, OptimalPct: 96},
		{Rule: OracleRuleBayes, Eps: &e, K: 12, ProbesPerURL: 3, OptimalPct: 95.5}, // past the top
	}}
	rep.summarise()
	if math.Abs(rep.At15-88) > 1e-9 {
		t.Errorf("at 1.5: %v, want 88 (between (1, 80) and (2, 96))", rep.At15)
	}
	if want := 1 + 15.0/16; math.Abs(rep.ProbesFor95-want) > 1e-9 {
		t.Errorf("probes for 95 %%: %v, want %v", rep.ProbesFor95, want)
	}
	if rep.MaxPct != 96 {
		t.Errorf("max %v", rep.MaxPct)
	}
	// a zero-probe point lifts the hull below it
	zero := append([]OracleRow{{Rule: OracleRulePrior, ProbesPerURL: 0, OptimalPct: 70}}, rep.Rows...)
	at15, for95 := frontier(zero, func(x OracleRow) (float64, float64) { return x.ProbesPerURL, x.OptimalPct })
	if want := 70 + 26*0.75; math.Abs(at15-want) > 1e-9 || math.Abs(for95-2*25.0/26) > 1e-9 {
		t.Errorf("with (0, 70): at 1.5 %v, want %v; for 95 %v", at15, want, for95)
	}
	rep.Rows[2].OptimalPct = 94
	rep.Rows[3].OptimalPct = 94.5
	rep.summarise()
	if !math.IsNaN(rep.ProbesFor95) {
		t.Errorf("95 %% is never reached, got %v", rep.ProbesFor95)
	}
}

func TestOracleAverageAndMatrix(t *testing.T) {
	ctx := context.Background()
	var reps []*OracleReport
	for s := uint64(1); s <= 2; s++ {
		w, err := NewWorld(small(s))
		if err != nil {
			t.Fatal(err)
		}
		r, err := w.Oracle(ctx, small(s), OracleConfig{Eps: []float64{0.1}})
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, r)
	}
	avg, err := AverageOracle(reps)
	if err != nil {
		t.Fatal(err)
	}
	for i, r := range avg.Rows {
		if want := (reps[0].Rows[i].OptimalPct + reps[1].Rows[i].OptimalPct) / 2; math.Abs(r.OptimalPct-want) > 1e-9 {
			t.Errorf("row %d: mean %v, want %v", i, r.OptimalPct, want)
		}
	}
	if avg.Seeds != 2 {
		t.Errorf("seeds %d", avg.Seeds)
	}
	// rows are matched by rule, K, ε and τ, and reports by host information
	bad := *reps[1]
	bad.Rows = slices.Clone(bad.Rows)
	e := *bad.Rows[4].Eps * 2
	bad.Rows[4].Eps = &e
	if _, err := AverageOracle([]*OracleReport{reps[0], &bad}); err == nil {
		t.Error("averaged rows of different ε")
	}
	other := *reps[1]
	other.HostInfo = OracleHostCountry
	if _, err := AverageOracle([]*OracleReport{reps[0], &other}); err == nil {
		t.Error("averaged a position report with a country one")
	}
	// with two crawlers the K = 2 rows are the K = all rows: printed once
	cfg2 := small(1)
	cfg2.Crawlers = 2
	w2, err := NewWorld(cfg2)
	if err != nil {
		t.Fatal(err)
	}
	r2, err := w2.Oracle(ctx, cfg2, OracleConfig{Eps: []float64{0.1}})
	if err != nil {
		t.Fatal(err)
	}
	if n := len(rowsOf(r2, OracleRuleBayes, 0)); n != 1 {
		t.Errorf("2 crawlers: %d Bayes rows for one ε, want 1", n)
	}
	if _, err := w2.Oracle(ctx, cfg2, OracleConfig{Eps: []float64{math.NaN()}}); err == nil {
		t.Error("ε = NaN accepted")
	}

	mx, err := world.LoadMatrixFiles("../world/testdata/sites.csv", "../world/testdata/rtt.csv")
	if err != nil {
		t.Fatal(err)
	}
	cfg := small(1)
	cfg.Matrix = mx
	_, r, buf := oracleOn(t, cfg)
	if r.Skipped == "" || len(r.Rows) != 0 || !strings.Contains(buf.String(), "formula-only") {
		t.Fatalf("matrix mode must skip the oracle and say so: %q", buf.String())
	}
}

// Knowing only the host's registry country, the oracle's first probe is the
// same for every host of a country, it never reads the stretch either, and
// it is no better than knowing the exact position (within noise).
func TestOracleCountryOnly(t *testing.T) {
	ctx := context.Background()
	cfg := small(3)
	a, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	oc := OracleConfig{HostInfo: OracleHostCountry, CountrySamples: 32, PoolDraws: 5000}
	ra, err := a.Oracle(ctx, cfg, oc)
	if err != nil {
		t.Fatal(err)
	}
	rp, err := a.Oracle(ctx, cfg, OracleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	if ra.HostInfo != OracleHostCountry || rp.HostInfo != OracleHostPosition {
		t.Fatalf("host info %q / %q", ra.HostInfo, rp.HostInfo)
	}
	fc, fp := rowsOf(ra, OracleRulePrior, 0)[0], rowsOf(rp, OracleRulePrior, 0)[0]
	t.Logf("first probe: country only %.1f %%, exact position %.1f %%; at 1.5 probes/URL %.1f %% / %.1f %%", fc.OptimalPctAll, fp.OptimalPctAll, ra.At15, rp.At15)
	if fc.ProbesPerURLAll != 0 || fc.OptimalPctAll > fp.OptimalPctAll+3 {
		t.Errorf("country-only first probe %.1f %% (%.2f probes/URL) vs exact position %.1f %%", fc.OptimalPctAll, fc.ProbesPerURLAll, fp.OptimalPctAll)
	}
	var buf bytes.Buffer
	if err := ra.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(buf.String(), "HOST COUNTRY ONLY") {
		t.Error("the country-only table must say so")
	}

	o := newOracleModel(a, oracleCells, oraclePost)
	pa, _, err := a.countryPriors(context.Background(), cfg, o, 32, 5000)
	if err != nil {
		t.Fatal(err)
	}
	b := rekey(t, a, 999)
	ob := newOracleModel(b, oracleCells, oraclePost)
	pb, _, err := b.countryPriors(context.Background(), cfg, ob, 32, 5000)
	if err != nil {
		t.Fatal(err)
	}
	first := map[*countryPrior]oraclePrior{}
	for i := range a.Hosts {
		va := o.mixView(a.Hosts[i].AccessMs, pa[i].pi, pa[i].d, nil)
		f := *pa[i].prior
		if i < 40 { // uncached: the same as the country's (the host's access delay cancels)
			f = *o.priorChoice(&va)
			if f.choice != pa[i].prior.choice || math.Abs(f.pNearest-pa[i].prior.pNearest) > 1e-9 || math.Abs(f.beat-pa[i].prior.beat) > 1e-9 {
				t.Fatalf("host %d: prior decision %+v, cached %+v for its country", i, f, *pa[i].prior)
			}
		}
		if g, ok := first[pa[i]]; ok && g.choice != f.choice {
			t.Fatalf("host %d: prior decision %+v, another host of its country %+v", i, f, g)
		}
		first[pa[i]] = f
		va.prior = pa[i].prior
		if *pb[i].prior != *pa[i].prior {
			t.Fatalf("host %d: prior decision %+v in one world, %+v in a world that differs only in stretch", i, *pa[i].prior, *pb[i].prior)
		}
		script := scriptedProbes(probeFunc(a, i, 1))
		vb := ob.mixView(b.Hosts[i].AccessMs, pb[i].pi, pb[i].d, pb[i].prior)
		ta := o.trace(&va, script, 1e-3, len(a.Crawlers))
		tb := ob.trace(&vb, script, 1e-3, len(b.Crawlers))
		if !slices.Equal(ta.order, tb.order) || !slices.Equal(ta.choice, tb.choice) {
			t.Fatalf("host %d: same answers, different decisions", i)
		}
	}
	if len(first) < 3 {
		t.Errorf("only %d distinct country priors among %d hosts", len(first), len(a.Hosts))
	}
}

// The prior's statistics are calibrated: over many hosts the mean
// P(choice nearest) is the share of hosts whose prior choice is optimal, and
// the mean expected number of crawlers below the choice is the mean count
// (the test reads the world's floors; the oracle does not).
func TestOraclePriorCalibrated(t *testing.T) {
	cfg, _ := Preset("paper")
	cfg.Logger = quiet()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := newOracleModel(w, oracleCells, oraclePost)
	var pSum, beatSum, hits, below float64
	for i := range w.Hosts {
		h := &w.Hosts[i]
		v := o.view(h)
		pr := o.priorChoice(&v)
		pSum += pr.pNearest
		beatSum += pr.beat
		if pr.choice == w.Optimal[i] {
			hits++
		}
		fc := w.Model.FloorRTT(&w.CrawlerE[pr.choice], h)
		for c := range w.CrawlerE {
			if w.Model.FloorRTT(&w.CrawlerE[c], h) < fc {
				below++
			}
		}
	}
	n := float64(len(w.Hosts))
	t.Logf("prior: mean P(nearest) %.3f, share optimal %.3f; mean E[#below] %.3f, mean #below %.3f", pSum/n, hits/n, beatSum/n, below/n)
	if se := math.Sqrt(pSum / n * (1 - pSum/n) / n); math.Abs(pSum/n-hits/n) > 4*se+0.01 {
		t.Errorf("mean P(nearest) %.3f vs share optimal %.3f (±%.3f)", pSum/n, hits/n, se)
	}
	if math.Abs(beatSum/n-below/n) > 0.05 {
		t.Errorf("mean E[#below] %.3f vs mean #below %.3f", beatSum/n, below/n)
	}
}

// moveWithinCountry returns a copy of w whose hosts sit elsewhere in their
// registry country (another host's position of the same country, or the
// country's centroid), with addresses, access delays and — so the scores are
// comparable — the optimal crawlers kept; moved counts the hosts moved.
func moveWithinCountry(t *testing.T, w *World) (*World, int) {
	byCountry := map[string][]int{}
	for i := range w.Hosts {
		cc := oracleCountry(w, w.Tree.SmallestNonUnary(w.Hosts[i].Addr))
		byCountry[cc] = append(byCountry[cc], i)
	}
	b := *w
	b.Hosts = slices.Clone(w.Hosts)
	moved := 0
	for cc, hs := range byCountry {
		for k, i := range hs {
			loc := w.Hosts[hs[(k+1)%len(hs)]].Loc
			if len(hs) == 1 {
				p, ok := w.Model.Geo().CountryCentroid(cc)
				if !ok || cc == "" {
					continue
				}
				loc = p
			}
			if loc == w.Hosts[i].Loc {
				continue
			}
			b.Hosts[i] = w.Model.EndpointAt(w.Hosts[i].Addr, loc)
			b.Hosts[i].AccessMs = w.Hosts[i].AccessMs
			moved++
		}
	}
	if moved < len(w.Hosts)/2 {
		t.Fatalf("moved only %d of %d hosts", moved, len(w.Hosts))
	}
	return &b, moved
}

// The country oracle never reads a host's position: moving every host
// inside its country leaves all its decisions — hence, with the same answers
// and the same optimal crawlers, every row — unchanged, while the position
// oracle's rows do change.
func TestOracleCountryHidesPosition(t *testing.T) {
	ctx := context.Background()
	cfg := small(5)
	a, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	b, moved := moveWithinCountry(t, a)
	// scripted answers: world a's floor plus a fixed jitter per pair
	answer := func(host int, c int32) (float64, bool) {
		f := a.Model.FloorRTT(&a.CrawlerE[c], &a.Hosts[host])
		return f * (1 + 0.05*float64((host*31+int(c)*17)%7)/7), true
	}
	var rows [2][2][]OracleRow
	for k, w := range []*World{a, b} {
		for j, info := range []string{OracleHostCountry, OracleHostPosition} {
			r, err := w.Oracle(ctx, cfg, OracleConfig{HostInfo: info, CountrySamples: 32, PoolDraws: 5000, Answer: answer})
			if err != nil {
				t.Fatal(err)
			}
			rows[k][j] = append(r.Rows, r.Sweep...)
		}
	}
	key := func(r OracleRow) string { b, _ := json.Marshal(r); return string(b) }
	rowsEqual := func(x, y []OracleRow) int {
		for i := range x {
			if key(x[i]) != key(y[i]) {
				return i
			}
		}
		return -1
	}
	if len(rows[0][0]) < 100 || len(rows[0][0]) != len(rows[1][0]) {
		t.Fatalf("%d / %d rows", len(rows[0][0]), len(rows[1][0]))
	}
	if i := rowsEqual(rows[0][0], rows[1][0]); i >= 0 {
		t.Fatalf("country oracle: moving %d hosts inside their countries changed row %d: %s -> %s", moved, i, key(rows[0][0][i]), key(rows[1][0][i]))
	}
	if rowsEqual(rows[0][1], rows[1][1]) < 0 {
		t.Error("position oracle: moving hosts changed nothing — the test would not see a leak")
	}
}

// oracleOn builds cfg's world and returns it, the oracle's report on it and
// its text table.
func oracleOn(t *testing.T, cfg Config) (*World, *OracleReport, *bytes.Buffer) {
	t.Helper()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	r, err := w.Oracle(context.Background(), cfg, OracleConfig{})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := r.WriteText(&buf); err != nil {
		t.Fatal(err)
	}
	return w, r, &buf
}

// priorChoice is priorChoiceCtx for a test that does not cancel.
func (o *oracleModel) priorChoice(v *hostView) *oraclePrior {
	p, _ := o.priorChoiceCtx(context.Background(), v)
	return p
}

// trace is traceCtx for a test that does not cancel.
func (o *oracleModel) trace(v *hostView, probe func(c int32) (float64, bool), epsMin float64, kMax int) oracleTrace {
	t, _ := o.traceCtx(context.Background(), v, probe, epsMin, kMax)
	return t
}
