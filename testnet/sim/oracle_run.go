package sim

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"

	"github.com/micra-crawler/micra/delegation"
)

// Oracle computes the oracle's frontier on w for cfg's seed and Train (see
// the comment at the top of oracle.go). In matrix mode it returns a report
// with Skipped set: a measured RTT is not the stretch formula, so there is
// no "everything but the stretch" to know.
func (w *World) Oracle(ctx context.Context, cfg Config, oc OracleConfig) (*OracleReport, error) {
	cfg = cfg.withDefaults()
	rep := &OracleReport{OracleSetup: OracleSetup{Seed: cfg.Seed, Seeds: 1, Crawlers: len(w.Crawlers), Hosts: len(w.Hosts), Train: cfg.Train,
		HostDist: cfg.HostDist, HostInfo: cmp.Or(oc.HostInfo, OracleHostPosition)},
		At15: math.NaN(), ProbesFor95: math.NaN(), At15All: math.NaN(), ProbesFor95All: math.NaN(), MaxPct: math.NaN()}
	if rep.HostDist == "" {
		rep.HostDist = HostsUniform
	}
	if w.Model.Matrix() != nil {
		rep.Skipped = "the oracle bound is formula-only: with a matrix (--sites/--rtt or --latency hubs) a pair's RTT is a measurement, not distance × stretch, so an oracle that knows everything but the stretch cannot be defined honestly"
		return rep, nil
	}
	if len(w.Crawlers) == 0 || len(w.Hosts) == 0 {
		return nil, fmt.Errorf("sim: oracle: empty world")
	}
	eps := oc.Eps
	if eps == nil {
		eps = OracleEps
	}
	for _, e := range eps {
		if e < 0 || math.IsNaN(e) || math.IsInf(e, 0) {
			return nil, fmt.Errorf("sim: oracle: stop threshold ε = %g: want a finite number ≥ 0", e)
		}
	}
	ks := oc.Ks
	if ks == nil {
		ks = []int{2}
	}
	kAll := min(len(w.Crawlers), oracleMaxTrace)
	sweepEps := append(oracleSweepEps(), eps...)
	epsMin := slices.Min(sweepEps)
	// printed rows, then the sweep; caps at or above kAll are the "all" row
	settings := []oracleSetting{{rule: OracleRuleNearest}, {rule: OracleRulePrior}, {rule: OracleRuleTwoNearest, k: 2}}
	var capped []int
	for _, k := range ks {
		if k >= 1 && k < kAll && !slices.Contains(capped, k) {
			capped = append(capped, k)
		}
	}
	for _, k := range append(capped, kAll) {
		for _, e := range eps {
			settings = append(settings, oracleSetting{rule: OracleRuleBayes, eps: e, k: k})
		}
	}
	for _, g := range OracleGates {
		settings = append(settings, oracleSetting{rule: OracleRuleGate, tau: g[0], eps: g[1], k: kAll})
	}
	printed := len(settings)
	sweepKs := []int{kAll}
	for _, k := range []int{1, 2, 3, 4, 6} {
		if k < kAll {
			sweepKs = append(sweepKs, k)
		}
	}
	for _, k := range sweepKs {
		for _, e := range sweepEps {
			settings = append(settings, oracleSetting{rule: OracleRuleBayes, eps: e, k: k})
			for _, tau := range oracleSweepTau {
				settings = append(settings, oracleSetting{rule: OracleRuleGate, tau: tau, eps: e, k: k})
			}
		}
	}

	var o *oracleModel
	var view func(i int) hostView
	switch rep.HostInfo {
	case OracleHostPosition:
		o = newOracleModel(w, oracleCells, oraclePost)
		view = func(i int) hostView { return o.view(&w.Hosts[i]) }
	case OracleHostCountry:
		o = newOracleModel(w, oracleCells, oraclePost)
		priors, fallbacks, err := w.countryPriors(ctx, cfg, o, cmp.Or(oc.CountrySamples, 256), cmp.Or(oc.PoolDraws, oraclePoolDraws))
		if err != nil {
			return nil, err
		}
		rep.CountryFallbacks, rep.PoolDraws = fallbacks, cmp.Or(oc.PoolDraws, oraclePoolDraws)
		view = func(i int) hostView {
			cp := priors[i]
			return o.mixView(w.Hosts[i].AccessMs, cp.pi, cp.d, cp.prior)
		}
	default:
		return nil, fmt.Errorf("sim: oracle: unknown host information %q (want %s or %s)", oc.HostInfo, OracleHostPosition, OracleHostCountry)
	}
	n := len(w.Hosts)
	// per host and setting: probes spent and whether the choice is optimal
	probes := make([][]uint8, n)
	hits := make([][]bool, n)
	base := seedOf("probe/oracle")
	// a host is milliseconds of work (up to a second with a large country
	// prior): ctx is looked at before each, and in its trace before each probe
	_ = parallelCtx(ctx, cfg.Workers, n, 1, func(i int) {
		h := &w.Hosts[i]
		v := view(i)
		asker := func(tag uint64) func(c int32) (float64, bool) {
			if oc.Answer != nil {
				return func(c int32) (float64, bool) { return oc.Answer(i, c) }
			}
			pr := &prober{w: w, rng: rand.New(rand.NewPCG(cfg.Seed^tag, base^uint64(i))), host: i}
			ids := []delegation.CrawlerID{""}
			return func(c int32) (float64, bool) {
				ids[0] = w.Crawlers[c].ID
				r := pr.Probe(ctx, h.Addr, ids)[0]
				return float64(r.RTT.Nanoseconds()) / 1e6, r.OK
			}
		}
		t, err := o.traceCtx(ctx, &v, asker(0), epsMin, kAll)
		if err != nil {
			return // cut short: the ctx.Err() below ends the run
		}
		// the fixed rules: the nearest crawler by (expected) distance, and
		// the better answer of the two lowest expected RTTs
		dist := make([]float64, len(w.Crawlers))
		for m, p := range v.pi {
			for c := range dist {
				dist[c] += p * v.d[m][c]
			}
		}
		nearest := int32(0)
		for c := range dist {
			if dist[c] < dist[nearest] {
				nearest = int32(c)
			}
		}
		exp := func(c int32) float64 { return dist[c]*o.meanS + v.base[c] }
		byExp := slices.Clone(v.byLB)
		slices.SortStableFunc(byExp, func(a, b int32) int { return cmp.Compare(exp(a), exp(b)) })
		two := byExp[0]
		if len(byExp) > 1 {
			ask := asker(0x74776f)
			y0, ok0 := ask(byExp[0])
			y1, ok1 := ask(byExp[1])
			if ok1 && (!ok0 || y1 < y0) {
				two = byExp[1]
			}
		}
		probes[i] = make([]uint8, len(settings))
		hits[i] = make([]bool, len(settings))
		opt := w.Optimal[i]
		for s, st := range settings {
			var k int
			var choice int32
			switch st.rule {
			case OracleRuleNearest:
				k, choice = 0, nearest
			case OracleRulePrior:
				k, choice = 0, t.prior.choice
			case OracleRuleTwoNearest:
				k, choice = min(2, len(byExp)), two
			default:
				k, choice = t.decide(st)
			}
			probes[i][s] = uint8(k)
			hits[i][s] = choice == opt
		}
	})
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	rows := make([]OracleRow, len(settings))
	eval := n - cfg.Train
	for s, st := range settings {
		var hitE, hitA, prE, prA int
		for i := range n {
			pr, hit := int(probes[i][s]), hits[i][s]
			prA += pr
			if hit {
				hitA++
			}
			if i >= cfg.Train {
				prE += pr
				if hit {
					hitE++
				}
			}
		}
		r := OracleRow{Rule: st.rule, K: st.k, OptimalPct: pct(hitE, eval), ProbesPerURL: float64(prE) / float64(max(1, eval)),
			OptimalPctAll: pct(hitA, n), ProbesPerURLAll: float64(prA) / float64(n)}
		if st.rule == OracleRuleBayes || st.rule == OracleRuleGate {
			e := st.eps
			r.Eps = &e
		}
		if st.rule == OracleRuleGate {
			tau := st.tau
			r.Tau = &tau
		}
		rows[s] = r
	}
	rep.Rows, rep.Sweep = rows[:printed], rows[printed:]
	rep.summarise()
	return rep, nil
}
