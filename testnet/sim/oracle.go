package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"text/tabwriter"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// The oracle bound: how accurate can a well-informed delegation rule be for
// a given number of probes per URL, when it knows everything about the world
// model except the one thing probes reveal — each (crawler, host) pair's path
// stretch? It knows every host's and crawler's exact position and access
// delay, the stretch distribution (world.Model.StretchCDF and friends) and
// the jitter model, and it learns a pair's RTT only through the simulator's
// own prober (one jittered sample per probe, as policies get them). It is a
// strong reference, not a proof: a policy knows less (registry countries, the
// positions crawlers state, probe answers), but the rule is one-step greedy,
// so a cleverer rule could do somewhat better; and a policy can remember
// answers across hosts that share a routing block (the oracle is memoryless
// per host, which matters only when hosts repeat blocks, as with
// --host-dist zipf).
//
// Decision rule (one-step Bayes-greedy), from zero probes on: before any
// probe the choice b is the crawler most likely to be nearest under the prior
// and the stop statistic is the prior's expected number of crawlers whose
// floor RTT is below b's; after each answer the oracle computes the posterior
// of every probed crawler's floor RTT (prior from the stretch distribution ×
// the exponential jitter likelihood), takes the one with the lowest posterior
// mean as b, and sums P(floor_j < floor_b | answers) over the unprobed
// crawlers j. It stops when the sum is below ε (possibly before the first
// probe: the host is delegated blind) or after K probes; otherwise it probes
// the j with the largest term (the first probe goes to the prior's choice).
// The gated variant delegates blind iff the prior's P(b nearest) ≥ τ and
// otherwise probes at least once.
//
// Every host gets its own seeded prober, and the probe order does not depend
// on ε or K, so one trace per host serves every (ε, K) row: a smaller ε
// probes a superset of the same probes with the same answers.

// OracleEps are the stop thresholds printed by default.
var OracleEps = []float64{0.5, 0.3, 0.2, 0.1, 0.05, 0.02, 0.01, 0.005}

// OracleGates are the printed (τ, ε) pairs of the gated rule (K = all).
var OracleGates = [][2]float64{{0.9, 0.1}, {0.8, 0.2}, {0.8, 0.05}, {0.7, 0.1}}

// oracleSweepTau are the gates τ of the frontier's sweep.
var oracleSweepTau = []float64{0.5, 0.6, 0.7, 0.75, 0.8, 0.85, 0.9, 0.95, 0.98}

// oracleMaxTrace caps a host's trace (the "K = all" rows) with very many
// crawlers; the paper presets have 4 and 12.
const oracleMaxTrace = 64

// Oracle rules (OracleRow.Rule).
const (
	OracleRuleBayes      = "bayes"        // stop when Σ P(unprobed beats choice) < ε (from 0 probes on), or after K
	OracleRuleGate       = "bayes-gate"   // 0 probes iff prior P(choice nearest) ≥ τ, else bayes with ≥ 1 probe
	OracleRuleNearest    = "nearest-km"   // the nearest crawler by (expected) great-circle distance, no probe
	OracleRulePrior      = "prior-choice" // max prior P(nearest), no probe (where bayes probes first)
	OracleRuleTwoNearest = "two-nearest"  // the two lowest expected RTTs, the better answer
)

// OracleConfig tunes Oracle.
type OracleConfig struct {
	// Eps are the printed stop thresholds (nil: OracleEps).
	Eps []float64
	// Ks are the probe caps of the printed rows besides "every crawler"
	// (nil: 2).
	Ks []int
	// HostInfo is what the oracle knows of where a host is:
	// OracleHostPosition (default) or OracleHostCountry.
	HostInfo string
	// CountrySamples caps the positions that stand for one country's hosts
	// (OracleHostCountry; default 256).
	CountrySamples int
	// PoolDraws is the number of addresses drawn to learn where each
	// country's hosts are (OracleHostCountry; default 50,000).
	PoolDraws int
	// Answer, when set, answers every probe instead of the simulator's
	// prober: tests script the answers to check that the oracle's decisions
	// depend only on what it may know.
	Answer func(host int, crawler int32) (ms float64, ok bool)
}

// What the oracle knows of a host's position (OracleConfig.HostInfo).
const (
	// OracleHostPosition: the exact position.
	OracleHostPosition = "position"
	// OracleHostCountry: only the registry country of the host's subnet (as
	// a policy knows it) and the distribution of host positions in that
	// country — OracleConfig.PoolDraws addresses drawn the way uniform
	// hosts are, up to CountrySamples of them per country.
	OracleHostCountry = "country"
)

// oraclePoolDraws is the default of OracleConfig.PoolDraws.
const oraclePoolDraws = 50000

// OracleRow is one rule's point of the frontier.
type OracleRow struct {
	Rule string   `json:"oracle_rule"`
	Eps  *float64 `json:"oracle_eps"`           // nil for the fixed rules
	Tau  *float64 `json:"oracle_tau,omitempty"` // the gate (OracleRuleGate)
	K    int      `json:"oracle_k"`             // probe cap
	// OptimalPct and ProbesPerURL are over the evaluation hosts (the last
	// Hosts − Train, the same hosts as a policy's optimal %); the *All
	// fields over every host.
	OptimalPct      float64 `json:"optimal_pct"`
	ProbesPerURL    float64 `json:"probes_per_url"`
	OptimalPctAll   float64 `json:"optimal_pct_all"`
	ProbesPerURLAll float64 `json:"probes_per_url_all"`
}

// OracleSetup says which worlds an oracle report is about (printed with
// every JSON row).
type OracleSetup struct {
	Seed     uint64 `json:"seed"`
	Seeds    int    `json:"seeds"`
	Crawlers int    `json:"crawlers"`
	Hosts    int    `json:"hosts"`
	Train    int    `json:"train"`
	HostDist string `json:"host_dist"`
	HostInfo string `json:"oracle_host_info"`
}

// OracleReport is the oracle's frontier on one world (or the mean over
// seeds).
type OracleReport struct {
	OracleSetup
	// CountryFallbacks counts hosts whose country no pool address had (or
	// that have none): their prior is the country's centroid or, without a
	// country, the world's hosts (OracleHostCountry).
	CountryFallbacks int `json:"country_fallbacks,omitempty"`
	PoolDraws        int `json:"pool_draws,omitempty"`
	// Skipped says why there is no frontier (measured matrix).
	Skipped string `json:"skipped,omitempty"`
	// Rows are the printed rules; Sweep is a dense ε × K sweep that the
	// summary's frontier is built from.
	Rows  []OracleRow `json:"rows"`
	Sweep []OracleRow `json:"-"`
	// At15 is the best % optimal (evaluation hosts) at exactly 1.5
	// probes/URL and ProbesFor95 the probes/URL needed for 95 %, both on the
	// upper concave hull of Rows and Sweep (mixing two rules host by host
	// reaches every point between them); NaN when out of the hull's range.
	// (WriteJSON prints them in its summary object, NaN as null.)
	At15        float64 `json:"-"`
	ProbesFor95 float64 `json:"-"`
	// the same over every host (the oracle needs no training, so all hosts
	// are fair game and the interval is narrower)
	At15All        float64 `json:"-"`
	ProbesFor95All float64 `json:"-"`
	// MaxPct is the best % optimal of any row (the K = all, smallest ε end).
	MaxPct float64 `json:"-"`
}

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

// Oracle computes the oracle's frontier on w for cfg's seed and Train (see
// the comment at the top of this file). In matrix mode it returns a report
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

// summarise fills At15, ProbesFor95 (evaluation hosts), their *All twins
// (every host) and MaxPct from the upper concave hull of every (probes/URL,
// % optimal) point.
func (r *OracleReport) summarise() {
	all := append(slices.Clone(r.Rows), r.Sweep...)
	r.MaxPct = math.NaN()
	for _, row := range all {
		if math.IsNaN(r.MaxPct) || row.OptimalPct > r.MaxPct {
			r.MaxPct = row.OptimalPct
		}
	}
	r.At15, r.ProbesFor95 = frontier(all, func(x OracleRow) (float64, float64) { return x.ProbesPerURL, x.OptimalPct })
	r.At15All, r.ProbesFor95All = frontier(all, func(x OracleRow) (float64, float64) { return x.ProbesPerURLAll, x.OptimalPctAll })
}

// frontier reads the best % optimal at 1.5 probes/URL and the probes/URL
// for 95 % off the upper concave hull of the rows' (probes, %) points; NaN
// when out of the hull's range.
func frontier(rows []OracleRow, xy func(OracleRow) (float64, float64)) (at15, for95 float64) {
	type pt struct{ x, y float64 }
	var pts []pt
	for _, row := range rows {
		x, y := xy(row)
		pts = append(pts, pt{x, y})
	}
	at15, for95 = math.NaN(), math.NaN()
	if len(pts) == 0 {
		return
	}
	slices.SortFunc(pts, func(a, b pt) int {
		if c := cmp.Compare(a.x, b.x); c != 0 {
			return c
		}
		return cmp.Compare(b.y, a.y)
	})
	// Andrew's monotone chain, upper part, then keep the rising section
	var hull []pt
	for _, p := range pts {
		if len(hull) > 0 && hull[len(hull)-1].x == p.x {
			continue // same x, lower y
		}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			if (b.x-a.x)*(p.y-a.y)-(b.y-a.y)*(p.x-a.x) >= 0 {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, p)
	}
	for i := 1; i < len(hull); i++ {
		if hull[i].y <= hull[i-1].y {
			hull = hull[:i]
			break
		}
	}
	at := func(x float64) float64 {
		for i := 1; i < len(hull); i++ {
			a, b := hull[i-1], hull[i]
			if x >= a.x && x <= b.x {
				return a.y + (b.y-a.y)*(x-a.x)/(b.x-a.x)
			}
		}
		if len(hull) == 1 && x == hull[0].x {
			return hull[0].y
		}
		if x > hull[len(hull)-1].x {
			return hull[len(hull)-1].y // more probes than the last point: no better
		}
		return math.NaN()
	}
	at15 = at(1.5)
	for i, p := range hull {
		if p.y >= 95 {
			if i == 0 {
				for95 = p.x
			} else {
				a := hull[i-1]
				for95 = a.x + (p.x-a.x)*(95-a.y)/(p.y-a.y)
			}
			break
		}
	}
	return
}

// AverageOracle is the mean of oracle reports of the same configuration
// under different seeds; the summary is recomputed from the mean points.
func AverageOracle(reps []*OracleReport) (*OracleReport, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("sim: no oracle reports to average")
	}
	out := *reps[0]
	out.Seeds = len(reps)
	if out.Skipped != "" {
		return &out, nil
	}
	for _, r := range reps[1:] {
		if r.HostInfo != out.HostInfo || r.HostDist != out.HostDist || r.Crawlers != out.Crawlers || r.Hosts != out.Hosts || r.Train != out.Train || r.Skipped != "" {
			return nil, fmt.Errorf("sim: oracle reports to average differ in configuration (%s/%s, %d crawlers vs %s/%s, %d)",
				out.HostInfo, out.HostDist, out.Crawlers, r.HostInfo, r.HostDist, r.Crawlers)
		}
		out.CountryFallbacks += r.CountryFallbacks
	}
	same := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	avg := func(get func(*OracleReport) []OracleRow) ([]OracleRow, error) {
		first := get(reps[0])
		acc := make([]OracleRow, len(first))
		copy(acc, first)
		for i := range acc {
			acc[i].OptimalPct, acc[i].ProbesPerURL, acc[i].OptimalPctAll, acc[i].ProbesPerURLAll = 0, 0, 0, 0
		}
		nf := float64(len(reps))
		for _, r := range reps {
			rows := get(r)
			if len(rows) != len(acc) {
				return nil, fmt.Errorf("sim: oracle reports to average differ in rows")
			}
			for i, x := range rows {
				if x.Rule != acc[i].Rule || x.K != acc[i].K || !same(x.Eps, acc[i].Eps) || !same(x.Tau, acc[i].Tau) {
					return nil, fmt.Errorf("sim: oracle reports to average differ in row %d (%s K=%d)", i, x.Rule, x.K)
				}
				acc[i].OptimalPct += x.OptimalPct / nf
				acc[i].ProbesPerURL += x.ProbesPerURL / nf
				acc[i].OptimalPctAll += x.OptimalPctAll / nf
				acc[i].ProbesPerURLAll += x.ProbesPerURLAll / nf
			}
		}
		return acc, nil
	}
	var err error
	if out.Rows, err = avg(func(r *OracleReport) []OracleRow { return r.Rows }); err != nil {
		return nil, err
	}
	if out.Sweep, err = avg(func(r *OracleReport) []OracleRow { return r.Sweep }); err != nil {
		return nil, err
	}
	out.summarise()
	return &out, nil
}

// oracleLabel names a row for the text table.
func oracleLabel(r OracleRow) string {
	switch r.Rule {
	case OracleRuleNearest:
		return "nearest crawler by (expected) distance"
	case OracleRulePrior:
		return "prior's choice, no probe (max P(nearest))"
	case OracleRuleTwoNearest:
		return "two lowest expected RTTs"
	case OracleRuleGate:
		return "blind iff P(nearest) ≥ " + strconv.FormatFloat(*r.Tau, 'g', -1, 64) + ", else Bayes ε = " + strconv.FormatFloat(*r.Eps, 'g', -1, 64)
	}
	return "Bayes stop, ε = " + strconv.FormatFloat(*r.Eps, 'g', -1, 64)
}

func fmtMaybe(x float64, f string) string {
	if math.IsNaN(x) {
		return "not reached"
	}
	return fmt.Sprintf(f, x)
}

// WriteText prints the oracle's frontier as a table, clearly labelled as a
// bound that reads the world model.
func (r *OracleReport) WriteText(out io.Writer) error {
	if r.HostInfo == OracleHostCountry {
		fmt.Fprintln(out, "ORACLE BOUND, HOST COUNTRY ONLY — knows each host's registry country (as policies do) and where that")
		fmt.Fprintf(out, "country's hosts are (%d addresses drawn like uniform hosts), exact crawler positions and access delays,\n", r.PoolDraws)
		fmt.Fprintln(out, "the stretch distribution and the jitter model; learns each pair's stretch only by probing (the")
		fmt.Fprintln(out, "simulator's prober). Not a policy: it reads the world model.")
	} else {
		fmt.Fprintln(out, "ORACLE BOUND — knows exact host and crawler positions and access delays, the stretch distribution and")
		fmt.Fprintln(out, "the jitter model; learns each pair's stretch only by probing (the simulator's prober). Not a policy:")
		fmt.Fprintln(out, "it reads the world model.")
	}
	if r.Skipped != "" {
		fmt.Fprintf(out, "oracle skipped: %s\n", r.Skipped)
		return nil
	}
	fmt.Fprintf(out, "%d crawlers, %d hosts (%s); no training: scored on the %d evaluation hosts (the last %d, as the policies' optimal %%)",
		r.Crawlers, r.Hosts, r.HostDist, r.Hosts-r.Train, r.Hosts-r.Train)
	if r.Seeds > 1 {
		fmt.Fprintf(out, ", mean over %d seeds (%d … %d)", r.Seeds, r.Seed, r.Seed+uint64(r.Seeds)-1)
	}
	fmt.Fprintln(out)
	if r.CountryFallbacks > 0 {
		fmt.Fprintf(out, "%d hosts (over all seeds) had a country without pool addresses: prior = its centroid, or the world's hosts\n", r.CountryFallbacks)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "oracle rule\tK\toptimal %\tprobes/URL\tall hosts: optimal %\tprobes/URL\t")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.1f\t%.2f\t\n", oracleLabel(x), x.K, x.OptimalPct, x.ProbesPerURL, x.OptimalPctAll, x.ProbesPerURLAll)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nfrontier (upper concave hull of these rules and a dense sweep of ε × τ × K ∈ {1, 2, 3, 4, 6, all},\n")
	fmt.Fprintf(out, "0-probe decisions included; mixing two rules host by host reaches any point between them):\n")
	fmt.Fprintf(out, "                                    evaluation hosts   all hosts\n")
	fmt.Fprintf(out, "  best optimal %% at 1.5 probes/URL: %-17s  %s\n", fmtMaybe(r.At15, "%.1f %%"), fmtMaybe(r.At15All, "%.1f %%"))
	fmt.Fprintf(out, "  probes/URL for 95 %% optimal:      %-17s  %s\n", fmtMaybe(r.ProbesFor95, "%.2f"), fmtMaybe(r.ProbesFor95All, "%.2f"))
	fmt.Fprintf(out, "  best optimal %% of any rule:       %s\n", fmtMaybe(r.MaxPct, "%.1f %%"))
	return nil
}

// WriteJSON prints one JSON object per printed row, then one summary object.
func (r *OracleReport) WriteJSON(out io.Writer) error {
	enc := json.NewEncoder(out)
	if r.Skipped != "" {
		return enc.Encode(map[string]any{"oracle_skipped": r.Skipped, "seed": r.Seed, "seeds": r.Seeds})
	}
	for _, x := range r.Rows {
		x.OptimalPct, x.ProbesPerURL, x.OptimalPctAll, x.ProbesPerURLAll = round3(x.OptimalPct), round3(x.ProbesPerURL), round3(x.OptimalPctAll), round3(x.ProbesPerURLAll)
		obj := struct {
			OracleRow
			OracleSetup
		}{x, r.OracleSetup}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	num := func(x float64) any {
		if math.IsNaN(x) {
			return nil
		}
		return round3(x)
	}
	return enc.Encode(map[string]any{"oracle_summary": true, "seed": r.Seed, "seeds": r.Seeds, "host_dist": r.HostDist, "oracle_host_info": r.HostInfo,
		"optimal_pct_at_1_5": num(r.At15), "probes_per_url_for_95": num(r.ProbesFor95), "max_optimal_pct": num(r.MaxPct),
		"optimal_pct_at_1_5_all": num(r.At15All), "probes_per_url_for_95_all": num(r.ProbesFor95All)})
}

// countryPrior is where the hosts of one country are: positions with
// weights, their fibre distances to every crawler, and the first probe.
type countryPrior struct {
	pi    []float64
	d     [][]float64
	prior *oraclePrior
}

// oracleCountry is the registry country of s or of its nearest ancestor
// that has one (what micra reads from the hierarchy).
func oracleCountry(w *World, s hierarchy.NodeID) string {
	for id := s; id != hierarchy.None && id != hierarchy.Root; id = w.Tree.Parent(id) {
		if c := w.Tree.Node(id).Country; c != "" {
			return c
		}
	}
	return ""
}

// countryPriors gives every host the prior of its registry country: up to
// per positions of addresses drawn like uniform hosts in that country (IPv4
// addresses only: with --ipv6 the IPv6 hosts get their country's IPv4
// positions). It returns ctx.Err() when ctx ends first.
func (w *World) countryPriors(ctx context.Context, cfg Config, o *oracleModel, per, draws int) ([]*countryPrior, int, error) {
	pl, err := newPlacer(w.Tree, w.Model)
	if err != nil {
		return nil, 0, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, seedOf("oracle/positions")))
	pool := map[string][]world.Endpoint{}
	var global []world.Endpoint
	for i := range draws {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		ep, s, err := pl.draw(rng, nil, nil)
		if err != nil {
			return nil, 0, err
		}
		if cc := oracleCountry(w, s); cc != "" && len(pool[cc]) < per {
			pool[cc] = append(pool[cc], ep)
		}
		if len(global) < per {
			global = append(global, ep)
		}
	}
	made := map[string]*countryPrior{}
	var keys []string
	// a prior's distances are positions × crawlers: with 10,000 crawlers,
	// ctx is looked at every few positions
	prior := func(key string, pos []world.Endpoint) (*countryPrior, error) {
		if cp, ok := made[key]; ok {
			return cp, nil
		}
		cp := &countryPrior{pi: make([]float64, len(pos)), d: make([][]float64, len(pos))}
		for m := range pos {
			if m%oracleCtxEvery == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			cp.pi[m] = 1 / float64(len(pos))
			cp.d[m] = o.distances(&pos[m])
		}
		made[key] = cp
		keys = append(keys, key)
		return cp, nil
	}
	out := make([]*countryPrior, len(w.Hosts))
	fallbacks := 0
	for i := range w.Hosts {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		h := &w.Hosts[i]
		cc := oracleCountry(w, w.Tree.SmallestNonUnary(h.Addr))
		if pos, ok := pool[cc]; ok {
			if out[i], err = prior(cc, pos); err != nil {
				return nil, 0, err
			}
			continue
		}
		fallbacks++
		if p, ok := w.Model.Geo().CountryCentroid(cc); ok && cc != "" {
			out[i], err = prior("centroid "+cc, []world.Endpoint{w.Model.EndpointAt(h.Addr, p)})
		} else {
			out[i], err = prior("", global)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	// the prior's choice depends on the country only (the host's own access
	// delay shifts every floor alike)
	// seconds per country with a large prior: ctx is looked at before each
	// country and, in priorChoiceCtx, every few positions
	if err := parallelCtx(ctx, cfg.Workers, len(keys), 1, func(k int) {
		cp := made[keys[k]]
		v := o.mixView(0, cp.pi, cp.d, nil)
		cp.prior, _ = o.priorChoiceCtx(ctx, &v) // nil when cut short: not returned
	}); err != nil {
		return nil, 0, err
	}
	return out, fallbacks, nil
}
