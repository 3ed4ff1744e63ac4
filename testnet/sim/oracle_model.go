package sim

import (
	"cmp"
	"context"
	"math"
	"slices"

	"github.com/micra-crawler/micra/testnet/world"
)

// oracleModel is everything the oracle may read: exact crawler positions and
// access delays, each host's access delay and either its exact position or
// its registry country with the distribution of host positions in it, the
// stretch distribution and the jitter model. It never calls Stretch,
// FloorRTT, MeanRTT or SampleRTT and never sees World.Optimal.
type oracleModel struct {
	m        *world.Model // DistanceKm and the Stretch{CDF,PDF,Quantile} only
	crawlers []world.Endpoint
	msPerKm  float64 // round trip: 2 / fibre speed
	jf, jm   float64 // jitter mean = jf × floor + jm
	q        []float64
	qHi      float64 // a stretch above every practical draw
	atom     float64 // P(stretch == 1)
	meanS    float64
	post     int // grid points of a posterior over one answer's jitter
	// cdfTab is StretchCDF on [1, qHi] in steps of 1/cdfScale, for linear
	// interpolation: the stop statistic calls it per crawler × position ×
	// posterior point, and erfc would dominate the run time
	cdfTab   []float64
	cdfScale float64
}

// oracleCells is the resolution of the prior integral P(nearest) and
// oraclePost that of a posterior over one answer's jitter (the same whether
// the host's position is known or a mixture of its country's positions).
const (
	oracleCells = 256
	oraclePost  = 96
	oracleCDFN  = 1 << 14
)

func newOracleModel(w *World, cells, post int) *oracleModel {
	cfg := w.Model.Config()
	o := &oracleModel{m: w.Model, crawlers: w.CrawlerE, msPerKm: 2 / cfg.FibreKmPerMs, jf: cfg.JitterFrac, jm: cfg.JitterMinMs, post: post}
	o.q = make([]float64, cells)
	for i := range o.q {
		o.q[i] = w.Model.StretchQuantile((float64(i) + 0.5) / float64(cells))
		o.meanS += o.q[i] / float64(cells)
	}
	o.qHi = math.Max(1+1e-9, w.Model.StretchQuantile(1-1e-7))
	// The law has no mass below 1 and an atom at exactly 1 (the world clamps
	// its lognormal draws there: world.Model.StretchCDF counts the clamped
	// mass at 1, StretchPDF is the density above it); the posterior relies on
	// that split, so a law with mass below 1 would be misread — refuse it.
	if w.Model.StretchCDF(math.Nextafter(1, 0)) != 0 {
		panic("sim: oracle: the stretch law has mass below 1; the oracle's posterior assumes an atom at 1 and a density above it")
	}
	o.atom = w.Model.StretchCDF(1)
	o.cdfScale = float64(oracleCDFN) / (o.qHi - 1)
	o.cdfTab = make([]float64, oracleCDFN+2)
	for i := range o.cdfTab {
		o.cdfTab[i] = w.Model.StretchCDF(1 + float64(i)/o.cdfScale)
	}
	return o
}

// stretchCDF is StretchCDF by table (within 1e-6 of it, tested).
func (o *oracleModel) stretchCDF(s float64) float64 {
	if s < 1 {
		return 0
	}
	x := (s - 1) * o.cdfScale
	if x >= oracleCDFN {
		return o.m.StretchCDF(s)
	}
	i := int(x)
	f := x - float64(i)
	return o.cdfTab[i] + f*(o.cdfTab[i+1]-o.cdfTab[i])
}

// hostView is one host's prior: the host is at position m with probability
// pi[m], and then floor_c = d[m][c] × stretch + base[c].
type hostView struct {
	pi   []float64
	d    [][]float64
	base []float64
	byLB []int32 // crawlers by expected lower bound (stretch 1)
	// prior caches priorChoice (it does not depend on the host's own access
	// delay, which shifts every floor alike); nil until computed
	prior *oraclePrior
}

// oraclePrior is the decision before any probe: the crawler most likely to
// be nearest, that probability, and the expected number of crawlers whose
// floor RTT is below its (the stop statistic at zero probes).
type oraclePrior struct {
	choice   int32
	pNearest float64
	beat     float64
}

func (o *oracleModel) distances(h *world.Endpoint) []float64 {
	d := make([]float64, len(o.crawlers))
	for c := range o.crawlers {
		d[c] = o.m.DistanceKm(&o.crawlers[c], h) * o.msPerKm
	}
	return d
}

// view is the prior of a host at a known position.
func (o *oracleModel) view(h *world.Endpoint) hostView {
	return o.mixView(h.AccessMs, []float64{1}, [][]float64{o.distances(h)}, nil)
}

func (o *oracleModel) mixView(hostAccess float64, pi []float64, d [][]float64, prior *oraclePrior) hostView {
	n := len(o.crawlers)
	v := hostView{pi: pi, d: d, base: make([]float64, n), byLB: make([]int32, n), prior: prior}
	lb := make([]float64, n)
	for c := range o.crawlers {
		v.base[c] = o.crawlers[c].AccessMs + hostAccess
		v.byLB[c] = int32(c)
		for m, p := range pi {
			lb[c] += p * d[m][c]
		}
	}
	slices.SortStableFunc(v.byLB, func(a, b int32) int { return cmp.Compare(lb[a]+v.base[a], lb[b]+v.base[b]) })
	return v
}

// cdf is P(floor ≤ x) for a crawler d ms of fibre (stretch 1) and base ms of
// access delays away.
func (o *oracleModel) cdf(d, base, x float64) float64 {
	if d <= 0 {
		if x >= base {
			return 1
		}
		return 0
	}
	return o.stretchCDF((x - base) / d)
}

// oracleCtxEvery is how many positions of a prior the oracle's integrals
// go through between two looks at the context: a country's prior with
// --oracle-samples 16384 is seconds of work, a few hundred µs per position.
const oracleCtxEvery = 16

// priorChoiceCtx is the crawler with the highest prior probability of
// having the lowest floor RTT (where the Bayes rule probes first), that
// probability, and the expected number of crawlers that beat it — or nil
// and ctx.Err() when ctx ends first (v.prior is then left nil).
func (o *oracleModel) priorChoiceCtx(ctx context.Context, v *hostView) (*oraclePrior, error) {
	if v.prior != nil {
		return v.prior, nil
	}
	p := make([]float64, len(v.base))
	cands := make([]int32, 0, len(v.base))
	for m, pm := range v.pi {
		if m%oracleCtxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		d := v.d[m]
		upper := math.Inf(1)
		for c := range d {
			upper = math.Min(upper, d[c]*o.qHi+v.base[c])
		}
		cands = cands[:0]
		for c := range d {
			if d[c]+v.base[c] <= upper {
				cands = append(cands, int32(c))
			}
		}
		slices.SortStableFunc(cands, func(a, b int32) int { return cmp.Compare(d[a]+v.base[a], d[b]+v.base[b]) })
		cands = cands[:min(len(cands), oracleMaxTrace)]
		for _, c := range cands {
			s := 0.0
			for _, q := range o.q {
				x := d[c]*q + v.base[c]
				prod := 1.0
				for _, k := range cands {
					if k != c {
						prod *= 1 - o.cdf(d[k], v.base[k], x)
					}
				}
				s += prod
			}
			p[c] += pm * s / float64(len(o.q))
		}
	}
	best := v.byLB[0]
	for _, c := range v.byLB {
		if p[c] > p[best] {
			best = c
		}
	}
	// E[#crawlers below best] = Σ_m π_m Σ_j P(floor_j < floor_best | m)
	beat := 0.0
	for m, pm := range v.pi {
		if m%oracleCtxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		d := v.d[m]
		hi := d[best]*o.qHi + v.base[best]
		for j := range d {
			if int32(j) == best || d[j]+v.base[j] > hi {
				continue
			}
			s := 0.0
			for _, q := range o.q {
				s += o.cdf(d[j], v.base[j], d[best]*q+v.base[best])
			}
			beat += pm * s / float64(len(o.q))
		}
	}
	v.prior = &oraclePrior{choice: best, pNearest: p[best], beat: beat}
	return v.prior, nil
}

// posterior is the distribution of a probed crawler's floor RTT given its
// answer y (and the host's position): points f with weights w (summing to
// 1), the mean, and log p(y) (the evidence that weighs positions).
type posterior struct {
	f, w []float64
	mean float64
	logZ float64
}

func (o *oracleModel) posterior(d, base, y float64) posterior {
	jit := func(f float64) float64 { return o.jf*f + o.jm }
	lik := func(f float64) float64 { // density of answer y for floor f
		m := jit(f)
		return math.Exp(-math.Max(0, y-f)/m) / m
	}
	lo := d + base
	point := func(f, z float64) posterior {
		return posterior{f: []float64{f}, w: []float64{1}, mean: f, logZ: math.Log(z)}
	}
	const tol = 1e-6 // answers are whole nanoseconds
	switch {
	case d <= 0:
		if y < base-tol {
			return point(base, 0)
		}
		return point(base, lik(base))
	case y <= lo:
		if y < lo-tol {
			// no position explains the answer (the host is nearer than any
			// listed one): the floor is still at most the answer (jitter is
			// never negative), not the position's stretch-1 bound above it
			return point(math.Max(base, math.Min(lo, y-jit(y))), 0)
		}
		return point(lo, o.atom*lik(lo))
	}
	emax := math.Min(y-lo, 12*jit(y))
	p := posterior{f: make([]float64, 0, o.post+1), w: make([]float64, 0, o.post+1)}
	de := emax / float64(o.post)
	var total float64
	for i := range o.post {
		f := y - (float64(i)+0.5)*de
		wt := o.m.StretchPDF((f-base)/d) / d * lik(f) * de
		p.f, p.w = append(p.f, f), append(p.w, wt)
		total += wt
	}
	if y-lo <= emax && o.atom > 0 {
		wt := o.atom * lik(lo)
		p.f, p.w = append(p.f, lo), append(p.w, wt)
		total += wt
	}
	if total <= 0 || math.IsNaN(total) {
		return point(math.Max(lo, y-jit(y)), 0)
	}
	for i := range p.w {
		p.w[i] /= total
		p.mean += p.w[i] * p.f[i]
	}
	p.logZ = math.Log(total)
	return p
}

// oracleTrace is one host's run of the Bayes rule, probe by probe: after
// k+1 probes the choice is choice[k] and the expected number of unprobed
// crawlers that beat it is sum[k]; before any probe they are prior.choice and
// prior.beat.
type oracleTrace struct {
	prior  oraclePrior
	order  []int32
	answer []float64
	choice []int32
	sum    []float64
}

// traceCtx runs the Bayes rule on one host until the stop statistic falls
// below epsMin or kMax crawlers were probed; it always probes once (the
// gated rule needs the first answer even where the prior alone would
// stop). probe returns one answer (ms). It is cut short when ctx ends,
// returning ctx.Err(): it looks before each probe and, with a large prior (--oracle-samples 16384: a round
// is a good part of a second), every 1024 positions and every crawler
// weighed within the round.
func (o *oracleModel) traceCtx(ctx context.Context, v *hostView, probe func(c int32) (float64, bool), epsMin float64, kMax int) (oracleTrace, error) {
	n, M := len(v.base), len(v.pi)
	kMax = min(kMax, n)
	var t oracleTrace
	probed := make([]bool, n)
	posts := make([][]posterior, n) // per answered crawler, per position
	logpi := make([]float64, M)
	for m, p := range v.pi {
		logpi[m] = math.Log(p)
	}
	pi := slices.Clone(v.pi)
	upd := make([]float64, M)
	prior, err := o.priorChoiceCtx(ctx, v)
	if err != nil {
		return t, err
	}
	t.prior = *prior
	next := t.prior.choice
	for len(t.order) < kMax {
		if err := ctx.Err(); err != nil {
			return t, err
		}
		c := next
		probed[c] = true
		y, ok := probe(c)
		t.order, t.answer = append(t.order, c), append(t.answer, y)
		if ok {
			ps := make([]posterior, M)
			mx := math.Inf(-1)
			for m := range M {
				if m%1024 == 1023 {
					if err := ctx.Err(); err != nil {
						return t, err
					}
				}
				ps[m] = o.posterior(v.d[m][c], v.base[c], y)
				upd[m] = logpi[m] + ps[m].logZ
				mx = math.Max(mx, upd[m])
			}
			posts[c] = ps
			// an answer no listed position explains (the host is between
			// them) keeps the previous weights
			if !math.IsInf(mx, -1) {
				copy(logpi, upd)
				var s float64
				for m := range M {
					pi[m] = math.Exp(logpi[m] - mx)
					s += pi[m]
				}
				for m := range M {
					pi[m] /= s
				}
			}
		}
		b, bMean := int32(-1), math.Inf(1)
		for _, k := range t.order {
			if posts[k] == nil {
				continue
			}
			mean := 0.0
			for m := range M {
				mean += pi[m] * posts[k][m].mean
			}
			if mean < bMean || (mean == bMean && k < b) {
				b, bMean = k, mean
			}
		}
		sum := 0.0
		next = -1
		if b < 0 {
			// no answer yet: carry on in lower-bound order
			for _, j := range v.byLB {
				if !probed[j] {
					next, sum = j, math.Inf(1)
					break
				}
			}
		} else {
			yb := t.answer[slices.Index(t.order, b)]
			best := -1.0
			work := 0 // positions weighed since the last look at ctx
			for _, j := range v.byLB {
				if probed[j] {
					continue
				}
				if work += M; work >= 1024 {
					work = 0
					if err := ctx.Err(); err != nil {
						return t, err
					}
				}
				p, possible := 0.0, false
				for m := range M {
					if pi[m] < 1e-9 {
						continue
					}
					pb := &posts[b][m]
					// floor_b ≤ its answer (jitter ≥ 0): a crawler whose floor
					// at stretch 1 is above it cannot beat b
					if v.d[m][j]+v.base[j] > math.Max(slices.Max(pb.f), yb) {
						continue
					}
					possible = true
					s := 0.0
					for i, f := range pb.f {
						s += pb.w[i] * o.cdf(v.d[m][j], v.base[j], f)
					}
					p += pi[m] * s
				}
				if !possible {
					continue
				}
				sum += p
				if p > best {
					next, best = j, p
				}
			}
		}
		t.choice, t.sum = append(t.choice, b), append(t.sum, sum)
		if next < 0 || sum < epsMin {
			break
		}
	}
	return t, nil
}

// stopAt is how many probes the (eps, k) rule spends on a traced host: none
// when the prior's statistic is already below eps.
func (t *oracleTrace) stopAt(eps float64, k int) int {
	if t.prior.beat < eps {
		return 0
	}
	return t.stopAfterFirst(eps, k)
}

// stopAfterFirst is stopAt for a rule that probes at least once.
func (t *oracleTrace) stopAfterFirst(eps float64, k int) int {
	for i := range t.sum {
		if t.sum[i] < eps || i+1 >= k {
			return i + 1
		}
	}
	return len(t.sum)
}

// decide is how many probes the setting spends on a traced host and which
// crawler it chooses.
func (t *oracleTrace) decide(st oracleSetting) (int, int32) {
	var k int
	switch st.rule {
	case OracleRuleGate:
		if t.prior.pNearest >= st.tau {
			return 0, t.prior.choice
		}
		k = t.stopAfterFirst(st.eps, st.k)
	default:
		k = t.stopAt(st.eps, st.k)
	}
	if k == 0 {
		return 0, t.prior.choice
	}
	return k, t.choice[k-1]
}

type oracleSetting struct {
	rule string
	eps  float64
	tau  float64
	k    int
}

// oracleSweepEps is the dense ε grid of the frontier (10^0.5 … 10^-5).
func oracleSweepEps() []float64 {
	var out []float64
	for i := -5; i <= 50; i++ {
		out = append(out, math.Pow(10, -float64(i)/10))
	}
	return out
}
