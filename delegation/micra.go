package delegation

import (
	"cmp"
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"strconv"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// MicraConfig tunes NewMicra. Zero fields take defaults.
type MicraConfig struct {
	// Miss is the risk the policy accepts: it stops probing once the summed
	// probability that an unprobed candidate beats the best answer so far is
	// below Miss. Default 0.06.
	Miss float64
	// Neighbours: when a round's answers give a new best, from a crawler
	// that states its position, and more crawlers are live than the
	// decision's candidates, up to Neighbours of the 8 live crawlers
	// nearest to that crawler (by stated position) that are not candidates
	// yet join the candidates, predicted by the distance fit (the host
	// lies about the answer's distance from the best crawler). The learned
	// candidates cover a region, not the neighbourhood of the crawler that
	// answered best: with 50 crawlers the optimal one was among them for
	// too few hosts (docs/delegation.md, "Neighbour candidates"). With no
	// more live crawlers than MinCandidates every crawler is a candidate
	// already.
	// Default 2, at most 8; negative: none.
	Neighbours int
	// MissFirst is the risk accepted after a decision's first probe, when
	// the estimate rests on a single answer and overstates the risk: in
	// the simulator, first-probe estimates of 0.06–0.08 missed 1.6 % of
	// the time and those of 0.08–0.2 about 5 % (docs/delegation.md, "The
	// stop rule's calibration"). Default 0.1; negative: Miss.
	MissFirst float64
	// MaxProbes caps the probes of one decision. Default 12.
	MaxProbes int
	// PriorSigma is the spread (sd of ln RTT) assumed for a crawler with a
	// single observation in a context, until the pooled spread of that kind
	// of context has been learned (PooledAfter observations). Default 0.45.
	PriorSigma float64
	// PooledAfter: observations of a kind of context (subnets at one depth,
	// organisations, countries, everything) after which the spread learned
	// across all contexts of that kind replaces PriorSigma. Default 20;
	// negative: never.
	PooledAfter float64
	// MinCandidates: contexts are widened until at least this many
	// candidates are known (with fewer live crawlers: all of them).
	// Default 16 (topK): at 8, the nearest crawler was often never a
	// candidate (docs/delegation.md).
	MinCandidates int
	// Parallel probes this many top candidates per round. Default 1.
	Parallel int
	// Blind is the risk accepted for a decision without any probe: when the
	// predicted nearest beats every other candidate with probability above
	// 1−Blind (from the learned statistics alone), it gets the subnet
	// unprobed; its own crawl timings (Calibrator) catch a wrong guess.
	// Default 0.005; negative disables.
	Blind float64
	// BlindMinObs is the number of observations the predicted nearest needs
	// in its context before a blind decision. Default 3.
	BlindMinObs float64
	// NoPairs disables the pairwise model (how one crawler's answer predicts
	// another's, learned from hosts probed by both); the marginal
	// per-context predictions alone then decide when to stop.
	NoPairs bool
	// PairBandwidth is the kernel width of the pairwise model on ln RTT.
	// Default 0.3.
	PairBandwidth float64
	// Walk is the probe budget of the fallback walk used when there are far
	// more crawlers than one decision considers (> 4·MaxProbes) and the
	// best answer is still above Config.Threshold. Default 8; negative: off.
	Walk int
	// PairPrior is the weight, in samples, of the marginal prediction in
	// the pairwise estimate. Default 0.3.
	PairPrior float64
	// PairSamples caps the samples kept per ordered pair, at most 65535.
	// Default 96: 128 gave the same accuracy over 80 seed runs with a
	// third more samples to scan (docs/experiments/2026-11-delegation-log.md).
	PairSamples int
	// FirstByWins probes first the likeliest winner by the learned win
	// counts per context instead of the candidate with the lowest predicted
	// RTT. Off: on the simulator it cost 0.1 probes/URL and 1.6 points.
	FirstByWins bool
	// NoGeo disables the distance prior (registry country centroid of the
	// subnet to the position a crawler states for itself).
	NoGeo bool
	// GeoAfter is the number of (distance, RTT) observations after which the
	// learned distance prior replaces the crawler's overall mean as the base
	// of its prediction. Default 30.
	GeoAfter float64
	// ReviewMiss is the risk of a review (Reviewer): the owner's timing of a
	// further host of its subnet is a free answer, and other crawlers are
	// probed only while the probability that one of them beats it is at
	// least ReviewMiss. Default 0.3 (a review is a free answer for a host
	// whose subnet is already delegated: it only has to catch large
	// errors); negative: no review probes (the tally then only counts the
	// owner).
	ReviewMiss float64
	// ReviewEvery: the first ReviewEvery hosts of a subnet under its
	// current record (the deciding host included) are reviewed; after
	// that only the 2^k-th host is — the majority is settled, and each
	// further vote moves it less. Default 16; negative: every host.
	ReviewEvery int
	// ReviewProbeUpTo: the reviews of a subnet's 2nd, 4th, 8th … host, up
	// to this one, probe at least one other crawler (the likeliest to beat
	// the owner) even when the statistics call none likely. A review sees
	// the subnet through the statistics that decided it, so a crawler the
	// first decision wrongly ruled out stays ruled out host after host
	// (docs/delegation.md: zipf hosts, +0.5 points for 0.06 probes/URL).
	// Default 2 (the second host only); negative: never.
	ReviewProbeUpTo int
	// PairFromLowest: a pair (a, b) is learned from a record only when a's
	// answer is among its PairFromLowest lowest (b may be any answer); 0 or
	// negative: every pair. A decision conditions on its few lowest answers,
	// and a record's pairs grow as its answers squared. Off by default: 8
	// gives 1000 crawlers 1.2–1.5× the decisions per second at the same
	// accuracy (BenchmarkDecisions prints micra-pairfrom8 beside micra),
	// but costs 12 crawlers 0.2–0.5 points on the hub-matrix worlds
	// (docs/delegation.md).
	PairFromLowest int
	// BlockMargin, in (0, 1): a review whose nearest crawler for the host
	// is not the owner, with an answer at most (1 − BlockMargin) × the
	// owner's timing, delegates the host's block (Record.Blocks) to that
	// crawler. Default 0.2 (docs/delegation.md: +1.5 points on zipf hosts,
	// +0.6 on the hub matrix); negative or ≥ 1: no block delegations.
	BlockMargin float64
	// Shift (0..1) moves every candidate's prediction by this fraction of the
	// surprise of the best answer so far (ln observed − ln predicted): host
	// access delay is shared by all crawlers. Default 0 (off): 0.5 buys
	// 0.3–0.4 points for 0.1–0.2 more probes/URL, the trade a tighter Miss
	// gives (docs/experiments/2026-11-delegation-log.md). Outside 0..1: 0.
	Shift float64
	// MaxContexts bounds the learned state of a long-running peer: the
	// subnet, ancestor and organisation contexts it keeps statistics for
	// (about 1.2 per decided subnet on uniform hosts, some 450 bytes each
	// at 12 crawlers), and the review tallies of subnets. When a new
	// context would pass it, the quarter used least recently is forgotten
	// (contexts where live crawlers sit are kept; countries, registries and
	// everything are few and always kept). Default 1<<16 (≈ 30 MB at 12
	// crawlers, a little more with many; BenchmarkLearnedState);
	// negative: unbounded.
	MaxContexts int

	// OnRound, if set, sees every round of the stop rule (experiments:
	// `micra sim --calibration` measures how well the risk predicts a
	// miss). It runs inside the policy call and must not call the policy.
	OnRound func(RoundRisk)

	// refineAll computes every candidate's pairwise estimate each round,
	// as before the bounds pruned them: the tests check that the pruning
	// changes no decision.
	refineAll bool
}

func (m MicraConfig) withDefaults() MicraConfig {
	if !(m.Miss > 0) { // (NaN too)
		m.Miss = 0.06
	}
	if m.Neighbours == 0 {
		m.Neighbours = 2
	}
	m.Neighbours = min(m.Neighbours, nbList) // only nbList are kept per crawler
	switch {
	case m.MissFirst == 0:
		m.MissFirst = 0.1
	case !(m.MissFirst > 0): // negative, NaN
		m.MissFirst = m.Miss
	}
	if m.MaxProbes <= 0 {
		m.MaxProbes = 12
	}
	if !(m.PriorSigma > 0) { // (NaN too)
		m.PriorSigma = 0.45
	}
	if m.PooledAfter == 0 || math.IsNaN(m.PooledAfter) {
		m.PooledAfter = 20
	}
	if m.MinCandidates <= 0 {
		m.MinCandidates = topK
	}
	if m.Parallel <= 0 {
		m.Parallel = 1
	}
	if m.Blind == 0 {
		m.Blind = 0.005
	}
	if !(m.BlindMinObs > 0) { // (NaN too)
		m.BlindMinObs = 3
	}
	if !(m.PairBandwidth > 0 && m.PairBandwidth < math.Inf(1)) {
		m.PairBandwidth = 0.3
	}
	if m.Walk == 0 {
		m.Walk = 8
	}
	if !(m.PairPrior > 0 && m.PairPrior < math.Inf(1)) {
		m.PairPrior = 0.3
	}
	if m.PairSamples <= 0 {
		m.PairSamples = 96
	}
	m.PairSamples = min(m.PairSamples, math.MaxUint16) // pairSamples counts in uint16
	if m.ReviewMiss == 0 {
		m.ReviewMiss = 0.3
	}
	if m.ReviewEvery == 0 {
		m.ReviewEvery = 16
	}
	if m.ReviewProbeUpTo == 0 {
		m.ReviewProbeUpTo = 2
	}
	switch {
	case m.BlockMargin == 0:
		m.BlockMargin = 0.2
	case !(m.BlockMargin > 0 && m.BlockMargin < 1):
		m.BlockMargin = -1 // off
	}
	if !(m.GeoAfter > 0) {
		m.GeoAfter = 30
	}
	if !(m.Shift >= 0 && m.Shift <= 1) { // (NaN too)
		m.Shift = 0
	}
	if m.MaxContexts == 0 {
		m.MaxContexts = 1 << 16
	}
	return m
}

// RoundRisk is one round of micra's stop rule (MicraConfig.OnRound).
type RoundRisk struct {
	IP     netip.Addr
	Probes int       // probes of the decision so far
	Risk   float64   // summed probability that an unprobed candidate beats Best
	Bound  bool      // Risk is the marginals' upper bound, not the refined sum
	Best   CrawlerID // the crawler of the lowest answer so far
	Review bool      // a review's round (it started from given answers)
	Stop   bool      // the rule stopped here
}

// NewMicra returns our policy. It keeps IPMicra's frame (lazy delegation of
// the smallest non-unary subnet, placement, records, Select rule, hash
// fallback) and replaces the threshold walk by learned prediction:
//
//   - every published record's probe answers are folded into statistics of
//     ln RTT per (context, crawler); the contexts of a subnet are, specific
//     to general: the subnet, its organisation, its ancestors below the
//     IANA blocks, its country, its registry, everything;
//   - a distance prior: the registry country's centroid (countryCentroids)
//     to the position a crawler states for itself (Crawler.Lat/Lon), with
//     ln RTT on ln distance fitted from the probe answers, is the base of a
//     crawler's prediction for a subnet of that country;
//   - a pairwise model learns how one crawler's answer predicts another's
//     (pairModel), from hosts probed by both;
//   - crawlers say where they sit (their address, hence their contexts): a
//     crawler never measured in a context it sits in is predicted as good as
//     the best known there, so newcomers get tried;
//   - each candidate's ln RTT is predicted by hierarchical shrinkage over
//     its contexts; the predicted nearest is probed first (or nobody, when
//     the statistics leave no doubt: MicraConfig.Blind); then the policy
//     probes the candidate most likely to beat the best answer until the
//     summed probability that any unprobed one does is below
//     MicraConfig.Miss;
//   - with far more crawlers than it considers and no answer under
//     Config.Threshold, it finishes with IPMicra's walk (MicraConfig.Walk).
//
// It uses nothing a real deployment lacks: the hierarchy (with the
// registries' country codes), probe answers and what crawlers say about
// themselves. docs/delegation.md has the measurements
// behind each choice.
func NewMicra(d Deps, c Config) Policy {
	c = c.withDefaults()
	m := &micraChooser{
		cfg:     c.Micra.withDefaults(),
		crawler: newCrawlerIndex(),
		ctx:     make(map[ctxKey]*ctxInfo),
	}
	m.pairs = newPairModel(m.crawler, m.cfg.PairSamples, m.cfg.PairBandwidth, m.cfg.PairPrior)
	return learningEngine{newEngine("micra", d, c, m)}
}

type ctxKey uint64

const (
	ctxNode ctxKey = iota + 1
	ctxOrg
	ctxCountry
	ctxRegistry
	ctxGlobal
)

func mkCtx(kind ctxKey, id uint32) ctxKey { return kind<<32 | ctxKey(id) }

// kinds of context for pooling spreads: node depths 0..15, then the others.
const (
	kindOrg = 16 + iota
	kindCountry
	kindRegistry
	kindAll
	ctxKinds
)

// minSigma is the smallest spread of ln RTT sigma0 gives: 0.1 % of an RTT,
// far below any measured jitter.
const minSigma = 1e-3

// sigma0 is the spread expected for one observation in a context of k's
// kind: learned across all such contexts once there is enough data.
func (m *micraChooser) sigma0(kind int) float64 {
	// at least minSigma: with every repeated observation identical
	// (constant latencies), or a tiny configured PriorSigma, a zero spread
	// made the shrinkage 0/0 and every prediction NaN
	p := m.pooled[kind]
	if m.cfg.PooledAfter > 0 && p.dof >= m.cfg.PooledAfter {
		return max(math.Sqrt(p.m2/p.dof), minSigma)
	}
	return max(m.cfg.PriorSigma, minSigma)
}

// lnStat is Welford's running mean and M2 of ln(RTT in ms).
type lnStat struct {
	n, mean, m2 float64
}

func (s *lnStat) add(x float64) {
	s.n++
	d := x - s.mean
	s.mean += d / s.n
	s.m2 += d * (x - s.mean)
}

// crawlerPos is the position a crawler states for itself.
type crawlerPos struct {
	lat, lon float64
	ok       bool
}

// geoKm0 keeps ln(distance) finite for co-located pairs: below a few
// hundred km, access delays dominate the RTT.
const geoKm0 = 100

// validPos reports whether lat, lon is a place on the globe.
func validPos(lat, lon float64) bool {
	return lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180 // false for NaN
}

// geoX is the distance feature between a subnet's country and crawler ci,
// ok false when either position is unknown.
func (m *micraChooser) geoX(cc string, ci uint32) (float64, bool) {
	if m.cfg.NoGeo || int(ci) >= len(m.pos) || !m.pos[ci].ok {
		return 0, false
	}
	if len(cc) != 2 {
		return 0, false
	}
	// crawlers state their position once: cache the features per country
	// and crawler (a row per country, kept until a crawler may have moved);
	// NaN marks "not computed yet"
	if cc != m.geoCC || len(m.geoRow) < len(m.pos) {
		if m.geoTab == nil {
			m.geoTab = make(map[string][]float64)
		}
		row := m.geoTab[cc]
		if len(row) < len(m.pos) {
			for len(row) < len(m.pos) {
				row = append(row, math.NaN())
			}
			m.geoTab[cc] = row
		}
		m.geoCC, m.geoRow = cc, row
	}
	if x := m.geoRow[ci]; !math.IsNaN(x) {
		return x, !math.IsInf(x, -1)
	}
	x := math.Inf(-1) // no centroid for cc
	if c, ok := countryCentroids[cc]; ok {
		x = math.Log(greatCircleKm(c[0], c[1], m.pos[ci].lat, m.pos[ci].lon) + geoKm0)
	}
	m.geoRow[ci] = x
	return x, !math.IsInf(x, -1)
}

// geoPrior is the learned prediction of ln RTT at distance feature x and its
// variance (residual + parameter uncertainty); ok false until GeoAfter
// observations.
func (m *micraChooser) geoPrior(x float64) (mu, vr float64, ok bool) {
	g := &m.geo
	if g.n < m.cfg.GeoAfter {
		return 0, 0, false
	}
	// the fit changes only with new observations (n counts them): once
	// per decision, not per candidate
	f := &m.geoFit
	if !f.valid || f.n != g.n {
		mx, my := g.sx/g.n, g.sy/g.n
		vx := g.sxx/g.n - mx*mx
		*f = geoFit{valid: true, n: g.n, ok: vx > 1e-9, mx: mx, vx: vx}
		if f.ok {
			b := (g.sxy/g.n - mx*my) / vx
			f.a, f.b = my-b*mx, b
			f.resid = math.Max(g.syy/g.n-my*my-b*b*vx, 0.01) * g.n / (g.n - 2)
		}
	}
	if !f.ok {
		return 0, 0, false
	}
	dx := x - f.mx
	return f.a + f.b*x, f.resid * (1 + 1/g.n + dx*dx/(g.n*f.vx)), true
}

// geoSums are the running sums of the distance prior's least squares (x:
// distance feature, y: ln RTT).
type geoSums struct{ n, sx, sy, sxx, sxy, syy float64 }

func (g *geoSums) add(x, y float64) {
	g.n++
	g.sx += x
	g.sy += y
	g.sxx += x * x
	g.sxy += x * y
	g.syy += y * y
}

// geoFit is the distance prior's least-squares fit at n observations.
type geoFit struct {
	valid, ok              bool
	n, mx, vx, a, b, resid float64
}

func greatCircleKm(lat1, lon1, lat2, lon2 float64) float64 {
	const r = 6371.0
	p1, p2 := lat1*math.Pi/180, lat2*math.Pi/180
	dp, dl := p2-p1, (lon2-lon1)*math.Pi/180
	h := math.Sin(dp/2)*math.Sin(dp/2) + math.Cos(p1)*math.Cos(p2)*math.Sin(dl/2)*math.Sin(dl/2)
	return 2 * r * math.Asin(math.Min(1, math.Sqrt(h)))
}

// ctxStat is one crawler's statistics in one context.
type ctxStat struct {
	ci uint32
	lnStat
	wins float64 // subnets of the context where it answered lowest
}

// ctxInfo is everything known about one context. One map lookup per context
// and decision, then small sorted slices: the decision path probes ~10
// crawlers × ~10 contexts, and hashing each (context, crawler) pair was most
// of its cost.
type ctxInfo struct {
	kind int       // kind of context (pooling of spreads)
	st   []ctxStat // by crawler index
	// has: bit ci mod 64 is set for every crawler ci in st — most lookups
	// (a candidate never measured in a small context) end here
	has uint64
	// top lists the topK crawlers with the lowest mean here: candidates
	// come from these, so a decision's cost does not grow with the number
	// of crawlers
	top      []topEntry
	topVer   uint64 // counts changes of st's means (the key of liveTops' cache)
	winTotal float64
	located  []uint32 // live crawlers sitting here, in membership order
	sits     []uint32 // the same, sorted
	used     uint64   // micraChooser.tick when a decision or record last read it
	key      ctxKey   // its key in micraChooser.ctx (to forget it)
}

func (c *ctxInfo) stat(ci uint32) *ctxStat {
	if c == nil || c.has&(1<<(ci&63)) == 0 {
		return nil
	}
	st := c.st
	// contexts holding every crawler (the registry, everything) hold
	// crawler ci at index ci
	if int(ci) < len(st) && st[ci].ci == ci {
		return &st[ci]
	}
	if len(st) <= 8 {
		for i := range st {
			if st[i].ci == ci {
				return &st[i]
			}
		}
		return nil
	}
	lo, hi := 0, len(st)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if st[h].ci < ci {
			lo = h + 1
		} else {
			hi = h
		}
	}
	if lo < len(st) && st[lo].ci == ci {
		return &st[lo]
	}
	return nil
}

// addStat returns ci's statistics, created when missing (and whether they were).
func (c *ctxInfo) addStat(ci uint32) (*ctxStat, bool) {
	st := c.st
	if int(ci) < len(st) && st[ci].ci == ci {
		return &st[ci], false
	}
	i := 0
	if len(st) <= 8 {
		for i < len(st) && st[i].ci < ci {
			i++
		}
	} else {
		i, _ = slices.BinarySearchFunc(st, ci, func(s ctxStat, ci uint32) int { return cmp.Compare(s.ci, ci) })
	}
	found := i < len(st) && st[i].ci == ci
	if !found {
		c.st = slices.Insert(c.st, i, ctxStat{ci: ci})
		c.has |= 1 << (ci & 63)
	}
	return &c.st[i], !found
}

func (c *ctxInfo) sitsHere(ci uint32) bool {
	if c == nil || len(c.sits) == 0 {
		return false
	}
	_, ok := slices.BinarySearch(c.sits, ci)
	return ok
}

// info returns k's context, created when missing with kind (contexts gives
// every context's kind).
func (m *micraChooser) info(k ctxKey, kind int) *ctxInfo {
	c := m.ctx[k]
	if c == nil {
		if forgettable(k) {
			// not while locate rebuilds the located lists: the homes of
			// crawlers it has not reached yet look unlocated then (the
			// next new context forgets instead)
			if m.cfg.MaxContexts > 0 && m.forgettable >= m.cfg.MaxContexts && !m.locating {
				m.forget()
			}
			m.forgettable++
		}
		if n := len(m.freeCtx); n > 0 {
			// a forgotten record, with the storage it had grown
			c, m.freeCtx = m.freeCtx[n-1], m.freeCtx[:n-1]
			*c = ctxInfo{kind: kind, st: c.st[:0], top: c.top[:0], located: c.located[:0], sits: c.sits[:0]}
		} else {
			// most contexts (a new subnet, organisation) hold a few
			// crawlers for ever: allocate them in slabs, with room for
			// four
			if len(m.slab) == 0 {
				m.slab = make([]ctxSlab, 256)
			}
			sl := &m.slab[0]
			m.slab = m.slab[1:]
			sl.info = ctxInfo{kind: kind, st: sl.st[:0], top: sl.top[:0]}
			c = &sl.info
		}
		c.key, c.used = k, m.tick
		m.ctx[k] = c
	}
	return c
}

// learnBound implements learnBounder: the engine's dedup memory of learned
// records is bounded like the contexts (one set per subnet learned).
func (m *micraChooser) learnBound() int { return m.cfg.MaxContexts }

// takeForgotten implements learnBounder: the subnets (and ancestors) whose
// own context was forgotten since the last call. A record of such a subnet
// learned again lands in statistics that no longer hold it, except in the
// wider contexts, where one observation among many is noise.
func (m *micraChooser) takeForgotten() []hierarchy.NodeID {
	f := m.forgotNodes
	m.forgotNodes = m.forgotNodes[:0]
	return f
}

// forgettable reports whether context k may be forgotten under
// MicraConfig.MaxContexts: subnets (and their ancestors) and organisations
// are many; countries, registries and everything are few.
func forgettable(k ctxKey) bool {
	kind := k >> 32
	return kind == ctxNode || kind == ctxOrg
}

// forget drops the least recently used quarter of the forgettable contexts
// (and of the review tallies), keeping those where live crawlers sit and
// those of the decision under way (read at the current tick). Only the
// order of use decides, so every peer (and every run of the simulator)
// forgets the same contexts given the same history.
func (m *micraChooser) forget() {
	stamps := make([]uint64, 0, m.forgettable)
	for k, c := range m.ctx {
		if forgettable(k) && len(c.located) == 0 && c.used < m.tick {
			stamps = append(stamps, c.used)
		}
	}
	if len(stamps) == 0 {
		return
	}
	slices.Sort(stamps)
	// everything used before the cut goes: at least the oldest stamp
	cut := max(stamps[len(stamps)/4], stamps[0]+1)
	for k, c := range m.ctx {
		if !forgettable(k) || len(c.located) > 0 || c.used >= cut {
			continue
		}
		delete(m.ctx, k)
		delete(m.liveTops, c)
		m.forgettable--
		m.freeCtx = append(m.freeCtx, c)
		m.forgotten++
		if k>>32 == ctxNode {
			// the engine drops the subnet's learned-record memory with it
			m.forgotNodes = append(m.forgotNodes, hierarchy.NodeID(uint32(k)))
		}
	}
	// The last subnet's cached records are stamped with the tick they were
	// read at, so they stay; should one ever be forgotten, the cache is
	// rebuilt rather than trusted.
	for i, c := range m.ctxInfo {
		if c != nil && m.ctx[m.ctxKs[i]] != c {
			m.ctxOK = false
			break
		}
	}
	for s, t := range m.tally {
		if t.used < cut {
			delete(m.tally, s)
		}
	}
}

// ctxSlab is a context record with inline room for its first crawlers.
type ctxSlab struct {
	info ctxInfo
	st   [4]ctxStat
	top  [4]topEntry
}

type micraChooser struct {
	slab    []ctxSlab  // unused context records, allocated 256 at a time
	freeCtx []*ctxInfo // forgotten context records, to reuse
	// tick counts subnets looked at (decisions, records learned): the
	// clock of least-recent use for MicraConfig.MaxContexts
	tick        uint64
	forgettable int    // contexts in ctx that forget may drop
	forgotten   uint64 // contexts forgotten so far
	locating    bool   // locate is rebuilding the located lists: no forget
	// forgotNodes: node contexts forgotten since the engine last asked
	// (takeForgotten), whose learned-record memory goes with them
	forgotNodes []hierarchy.NodeID
	cfg         MicraConfig
	crawler     *crawlerIndex
	ctx         map[ctxKey]*ctxInfo
	// running sum of every crawler's global mean (prediction for unknowns)
	globalSum float64
	globalN   int
	// pooled within-(context, crawler) spread per kind of context
	pooled [ctxKinds]struct{ m2, dof float64 }
	pairs  *pairModel

	// where live crawlers sit (ctxInfo.located), rebuilt when membership
	// changes
	locVer   uint64
	locValid bool
	locCtx   []*ctxInfo   // contexts with located crawlers
	pos      []crawlerPos // by crawler index: the position it states
	liveCi   []bool       // by crawler index: live now
	// liveGen counts changes of the live set (the other key of liveTops)
	liveGen uint64
	// liveTops: for contexts whose top list holds departed crawlers, the
	// topK live crawlers with the lowest mean there (liveTop)
	liveTops  map[*ctxInfo]*liveTop
	liveOrd   []uint32 // crawler indexes of liveIDs, in its (sorted) order
	liveSpare []uint32 // the previous liveOrd's storage
	// neighbours: by crawler index, the live crawlers nearest to it by
	// stated position (nbList of them), computed on demand while
	// nbFor[ci] == locGen (locate bumps it when positions may change)
	nbrs   [][]uint32
	nbFor  []uint64
	locGen uint64

	geoCC  string               // country of geoRow
	geoRow []float64            // by crawler index: distance feature to geoCC
	geoTab map[string][]float64 // geoRow of every country seen

	// distance prior: least squares of ln RTT on ln(distance + geoKm0)
	// between a subnet's country centroid and a crawler's stated position
	geo    geoSums
	geoFit geoFit

	// per reviewed subnet: who was nearest for its hosts (Reviewer)
	tally map[hierarchy.NodeID]subnetTally

	// scratch space of one decision (an engine is not used concurrently)
	candBuf []micraCand
	psBuf   []candProb
	remBuf  []float64
	askBuf  []CrawlerID
	nextBuf []int
	ctxOK   bool // ctxS, ctxKs, ctxCC, ctxKinds, ctxInfos: the last subnet's contexts
	ctxS    hierarchy.NodeID
	ctxKs   []ctxKey
	ctxCC   string
	ctxKind []int      // kind of each of ctxKs
	ctxInfo []*ctxInfo // record of each of ctxKs; nil: none when last looked up
	ciBuf   []uint32   // crawler index per answer of the record being learned
	xBuf    []float64  // ln RTT per answer of the record being learned
	lowBuf  []float64  // the valid ln RTTs of that record, to find PairFromLowest's cut
	noteBuf []byte
	stopBuf []byte
	allBuf  []ProbeResult
	candIdx []int
	rawBuf  []micraCand

	// candidate dedup: candMark[ci] == candEpoch when ci is already a
	// candidate of this decision (no scan of the list per addition)
	candMark  []uint32
	candEpoch uint32
}

// lowAnswer is one of a round's lowest answers: its crawler index and ln RTT.
type lowAnswer struct {
	ci uint32
	x  float64
}

// refine is candidate c's probability to beat the best answer lb (ln ms),
// from its marginal p and the pairwise estimates given each low answer:
// the smallest of them, as each answer bounds c. Estimates are kept in c
// while the best answer, hence the threshold and the prior, is unchanged.
func (m *micraChooser) refine(c *micraCand, p float64, low []lowAnswer, lb float64) float64 {
	if m.cfg.NoPairs || p <= 1e-3 {
		return p
	}
	// (the lowest answers tell the most; three suffice)
	prior := p
	if !c.qOK || c.qLb != lb || c.qPrio != prior {
		c.qOK, c.qLb, c.qPrio, c.qN = true, lb, prior, 0
	}
answers:
	for _, a := range low {
		for j := range c.qN {
			if c.qA[j] == a.ci {
				p = min(p, c.qV[j])
				continue answers
			}
		}
		q, _ := m.pairs.beat(a.ci, c.ci, a.x, lb, prior)
		if c.qN < len(c.qA) {
			c.qA[c.qN], c.qV[c.qN] = a.ci, q
			c.qN++
		}
		p = min(p, q)
	}
	return p
}

// nbList is how many neighbours are kept per crawler (Neighbours takes the
// nearest of them that are not candidates yet).
const nbList = 8

// addNeighbours adds to cands up to Neighbours of the live crawlers nearest
// (by stated position) to crawler a, whose answer was xa (ln ms), that are
// not candidates yet (mark[ci] == epoch marks candidates), each predicted by
// the distance fit (neighbourMu) with the fit's residual spread.
func (m *micraChooser) addNeighbours(cands []micraCand, a uint32, xa float64, mark []uint32, epoch uint32, s uint64) []micraCand {
	if _, _, ok := m.geoPrior(0); !ok { // (refreshes the fit)
		return cands
	}
	f := &m.geoFit
	if !f.ok || !(f.b > 0) {
		return cands
	}
	nbrs := m.neighboursOf(a)
	if len(nbrs) == 0 {
		return cands
	}
	pa := m.pos[a]
	sd := math.Sqrt(f.resid)
	added := 0
	for _, ci := range nbrs {
		if added == m.cfg.Neighbours {
			break
		}
		if int(ci) >= len(m.liveCi) || !m.liveCi[ci] || mark[ci] == epoch {
			continue
		}
		d := greatCircleKm(pa.lat, pa.lon, m.pos[ci].lat, m.pos[ci].lon)
		mark[ci] = epoch
		added++
		cands = append(cands, micraCand{id: m.crawler.ids[ci], ci: ci, mu: f.neighbourMu(xa, d), sd: sd, from: "neighbour", anchored: true,
			tie: m.crawler.tieKey(ci, s)})
	}
	return cands
}

// maxSurfaceKm is the longest great-circle distance on Earth (half its
// circumference): no host lies farther than that from any crawler.
const maxSurfaceKm = math.Pi * 6371

// neighbourMu predicts, in ln ms, the answer of a crawler d km from the
// crawler that answered xa: the host lies about dh, the fit inverted at xa,
// from the answering crawler, so about sqrt(dh² + d²) from the other one
// whichever way it lies; the prediction is xa moved by the fit's
// difference between the two distances. The inverted distance is held to
// the globe: a fit nearly flat in distance (measured latencies that hardly
// depend on it) would otherwise overflow it to +Inf and the prediction to
// NaN.
func (f *geoFit) neighbourMu(xa, d float64) float64 {
	dh := math.Exp((xa - f.a) / f.b) // +Inf when the fit is flat: clamped below
	dh = min(max(dh-geoKm0, 0), maxSurfaceKm)
	ga := f.a + f.b*math.Log(dh+geoKm0)
	gb := f.a + f.b*math.Log(math.Sqrt(dh*dh+d*d)+geoKm0)
	return xa + gb - ga
}

// neighboursOf returns the nbList live crawlers nearest to crawler a by
// stated position (ties by the crawler's hash and name: the same on every
// peer), none when a states no position; cached until locate runs again.
func (m *micraChooser) neighboursOf(a uint32) []uint32 {
	if int(a) >= len(m.pos) || !m.pos[a].ok {
		return nil
	}
	for int(a) >= len(m.nbrs) {
		m.nbrs = append(m.nbrs, nil)
		m.nbFor = append(m.nbFor, 0)
	}
	if m.nbFor[a] == m.locGen {
		return m.nbrs[a]
	}
	type near struct {
		ci uint32
		d  float64
	}
	closer := func(x, y near) bool {
		if x.d != y.d {
			return x.d < y.d
		}
		hx, hy := m.crawler.hash[x.ci], m.crawler.hash[y.ci]
		if hx != hy {
			return hx < hy
		}
		return m.crawler.ids[x.ci] < m.crawler.ids[y.ci]
	}
	var buf [nbList]near
	best := buf[:0]
	pa := m.pos[a]
	for _, ci := range m.liveOrd {
		if ci == a || int(ci) >= len(m.pos) || !m.pos[ci].ok {
			continue
		}
		n := near{ci, greatCircleKm(pa.lat, pa.lon, m.pos[ci].lat, m.pos[ci].lon)}
		if len(best) == nbList && !closer(n, best[len(best)-1]) {
			continue
		}
		if len(best) < nbList {
			best = append(best, n)
		} else {
			best[len(best)-1] = n
		}
		for i := len(best) - 1; i > 0 && closer(best[i], best[i-1]); i-- { // insertion
			best[i], best[i-1] = best[i-1], best[i]
		}
	}
	out := m.nbrs[a][:0]
	for _, n := range best {
		out = append(out, n.ci)
	}
	m.nbrs[a], m.nbFor[a] = out, m.locGen
	return out
}

// candProb is a candidate (index) and its probability to beat the best answer.
type candProb struct {
	i    int
	p    float64
	marg float64 // the marginal probability, an upper bound of p
}

// contexts lists s's contexts, specific first, with the kind of each (for
// pooling spreads) and s's registry country (that of s or of its nearest ancestor with one). The tree is
// walked by Parent and Depth: Node builds addresses, and only s's and the
// ancestors read for their country need it.
func contexts(t Tree, s hierarchy.NodeID, buf []ctxKey, kinds []int) ([]ctxKey, []int, string) {
	n := t.Node(s)
	buf = append(buf[:0], mkCtx(ctxNode, uint32(s)))
	kinds = append(kinds[:0], min(int(n.Depth), 15))
	if n.Org != 0 {
		buf, kinds = append(buf, mkCtx(ctxOrg, uint32(n.Org))), append(kinds, kindOrg)
	}
	country := n.Country
	dt, _ := t.(interface{ Depth(hierarchy.NodeID) int })
	for a := t.Parent(s); a != hierarchy.None && a != hierarchy.Root; a = t.Parent(a) {
		var depth int
		if country == "" || dt == nil {
			an := t.Node(a)
			if country == "" {
				country = an.Country
			}
			depth = int(an.Depth)
		} else {
			depth = dt.Depth(a)
		}
		// The top-level blocks (depth 1: IANA's /8s in the default
		// snapshot; in a tree built without the IANA files, the first
		// registry allocations) are no context: a /8 spans continents,
		// and with the registry and the country beside it, it (like /16
		// and /12 address neighbourhoods) adds nothing measurable but
		// cost (docs/experiments/2026-11-delegation-log.md).
		if depth > 1 {
			buf, kinds = append(buf, mkCtx(ctxNode, uint32(a))), append(kinds, min(depth, 15))
		}
	}
	if len(country) == 2 {
		buf, kinds = append(buf, mkCtx(ctxCountry, uint32(country[0])<<8|uint32(country[1]))), append(kinds, kindCountry)
	}
	if n.Registry != hierarchy.RegistryUnknown {
		buf, kinds = append(buf, mkCtx(ctxRegistry, uint32(n.Registry))), append(kinds, kindRegistry)
	}
	return append(buf, mkCtx(ctxGlobal, 0)), append(kinds, kindAll), country
}

func (m *micraChooser) locate(e *engine) {
	ver, versioned := membershipVersion(e.d.Members)
	if versioned && m.locValid && ver == m.locVer {
		return
	}
	m.locating = true
	defer func() { m.locating = false }()
	for _, c := range m.locCtx {
		c.located, c.sits = c.located[:0], c.sits[:0]
	}
	m.locCtx = m.locCtx[:0]
	m.locGen++ // positions and the live set may have changed: neighbours anew
	var buf []ctxKey
	var kbuf []int
	m.geoCC = "" // a crawler may have moved
	clear(m.geoTab)
	for _, c := range e.liveIDs() {
		// the position a crawler states now (none: unknown), whether or
		// not its address is in the hierarchy
		cr := e.members()[c]
		ci := m.crawler.id(c)
		for int(ci) >= len(m.pos) {
			m.pos = append(m.pos, crawlerPos{})
		}
		m.pos[ci] = crawlerPos{}
		if cr.HasPos && validPos(cr.Lat, cr.Lon) {
			// an impossible position (NaN, off the globe) is no position:
			// a NaN distance would poison the shared distance fit for good
			m.pos[ci] = crawlerPos{cr.Lat, cr.Lon, true}
		}
		s := e.d.Tree.SmallestNonUnary(cr.Addr)
		if s == hierarchy.None || s == hierarchy.Root {
			continue
		}
		buf, kbuf, _ = contexts(e.d.Tree, s, buf, kbuf)
		for i, k := range buf[:len(buf)-1] { // not global: everyone is there
			c := m.info(k, kbuf[i])
			if len(c.located) == 0 {
				m.locCtx = append(m.locCtx, c)
			}
			c.located = append(c.located, ci)
			c.sits = append(c.sits, ci)
		}
	}
	for _, c := range m.locCtx {
		slices.Sort(c.sits)
	}
	// (two buffers, swapped: locate runs for every decision when the
	// membership has no version)
	before := m.liveOrd
	m.liveOrd = m.liveSpare[:0]
	clear(m.liveCi)
	for _, c := range e.liveIDs() {
		ci := m.crawler.id(c)
		for int(ci) >= len(m.liveCi) {
			m.liveCi = append(m.liveCi, false)
		}
		m.liveCi[ci] = true
		m.liveOrd = append(m.liveOrd, ci)
	}
	if !slices.Equal(before, m.liveOrd) {
		m.liveGen++
	}
	m.liveSpare = before
	if versioned {
		m.locVer, m.locValid = ver, true
	}
}

// subnetContexts returns s's contexts and registry country, computed once for
// a decision and the learning that follows it (the tree is immutable). The
// slice is shared until the next call.
func (m *micraChooser) subnetContexts(t Tree, s hierarchy.NodeID) ([]ctxKey, string) {
	m.tick++
	if !m.ctxOK || m.ctxS != s {
		m.ctxKs, m.ctxKind, m.ctxCC = contexts(t, s, m.ctxKs[:0], m.ctxKind[:0])
		m.ctxS, m.ctxOK = s, true
		m.ctxInfo = m.ctxInfo[:0]
		for _, k := range m.ctxKs {
			m.ctxInfo = append(m.ctxInfo, m.ctx[k])
		}
	}
	// read at this tick: forget (MaxContexts) keeps them while the
	// decision or the learning that follows holds them
	for _, c := range m.ctxInfo {
		if c != nil {
			c.used = m.tick
		}
	}
	return m.ctxKs, m.ctxCC
}

// subnetInfos returns the context records of the subnet of the last
// subnetContexts call (records forgotten under MaxContexts make the next
// subnetContexts call look them all up again, so only the missing ones are
// looked up here), creating the missing ones when create
// is set. The slice is shared until the next call.
func (m *micraChooser) subnetInfos(create bool) []*ctxInfo {
	for i, c := range m.ctxInfo {
		if c != nil {
			continue
		}
		if create {
			m.ctxInfo[i] = m.info(m.ctxKs[i], m.ctxKind[i])
		} else {
			m.ctxInfo[i] = m.ctx[m.ctxKs[i]]
		}
		if c := m.ctxInfo[i]; c != nil {
			// in the cache now: read at this tick (forget keeps it)
			c.used = m.tick
		}
	}
	return m.ctxInfo
}

// pairCut is the highest ln RTT learned as the first answer of a pair:
// the PairFromLowest-th lowest of the record's answers, +Inf when it has no
// more than that (or the cap is off).
func (m *micraChooser) pairCut(ps []ProbeResult, xs []float64) float64 {
	k := m.cfg.PairFromLowest
	if k <= 0 || len(ps) <= k {
		return math.Inf(1)
	}
	low := m.lowBuf[:0]
	for i, p := range ps {
		if p.OK && p.RTT > 0 {
			low = append(low, xs[i])
		}
	}
	m.lowBuf = low
	if len(low) <= k {
		return math.Inf(1)
	}
	slices.Sort(low)
	return low[k-1]
}

// prepare brings the crawler positions up to date before learning a record
// decided elsewhere (a decision of its own has done it in rank).
func (m *micraChooser) prepare(e *engine) { m.locate(e) }

// knows reports whether crawler c was ever live here: locate indexes every
// live crawler, and only crawlers indexed so are learned from records
// decided elsewhere (learningEngine.Learn).
func (m *micraChooser) knows(c CrawlerID) bool {
	_, ok := m.crawler.idx[c]
	return ok
}

func (m *micraChooser) learn(e *engine, s hierarchy.NodeID, rec Record) {
	// one answer per crawler: a record listing a crawler many times (the
	// engine never makes one; a forged record may) must not count as many
	// observations
	rec.Probes = firstPerCrawler(rec.Probes)
	_, cc := m.subnetContexts(e.d.Tree, s)
	infos := m.subnetInfos(true)
	// crawler indexes (created in the order of the answers) and ln RTTs,
	// once per answer
	cis, xs := m.ciBuf[:0], m.xBuf[:0]
	for _, p := range rec.Probes {
		if p.OK && p.RTT > 0 {
			cis, xs = append(cis, m.crawler.id(p.Crawler)), append(xs, lnMs(p.RTT))
		} else {
			cis, xs = append(cis, 0), append(xs, 0)
		}
	}
	m.ciBuf, m.xBuf = cis, xs
	if !m.cfg.NoPairs {
		m.pairs.learn(rec.Probes, cis, xs, m.pairCut(rec.Probes, xs))
	}
	var win ProbeResult
	wi := uint32(0)
	for i, p := range rec.Probes {
		if p.OK && p.RTT > 0 && (!win.OK || p.RTT < win.RTT) {
			win, wi = p, cis[i]
		}
	}
	if win.OK {
		for _, c := range infos {
			st, _ := c.addStat(wi)
			st.wins++
			c.winTotal++
		}
	}
	if m.cfg.NoGeo {
		cc = ""
	}
	for pi, p := range rec.Probes {
		if !p.OK || p.RTT <= 0 {
			continue
		}
		x, ci := xs[pi], cis[pi]
		if gx, ok := m.geoX(cc, ci); ok {
			m.geo.add(gx, x)
		}
		for j, c := range infos {
			st, _ := c.addStat(ci)
			if st.n == 0 && j == len(infos)-1 { // first data of ci at all (a win entry may precede it)
				m.globalN++
			}
			before, beforeMean := st.m2, st.mean
			st.add(x)
			if j == len(infos)-1 {
				m.globalSum += st.mean - beforeMean
			}
			mean, n, m2 := st.mean, st.n, st.m2
			c.rankTop(ci, mean)
			if n > 1 {
				kp := &m.pooled[c.kind]
				kp.m2 += m2 - before
				kp.dof++
			}
		}
	}
}

const topK = 16

// topEntry is one crawler of a context's top list, with its mean there.
type topEntry struct {
	ci   uint32
	mean float64
}

// liveTop is the topK live crawlers with the lowest mean in a context, as
// of the live set liveGen and the context's statistics topVer.
type liveTop struct {
	gen, ver uint64
	ci       []uint32
}

// liveTopOf lists the topK live crawlers with the lowest mean in c, for a
// context whose top list holds departed crawlers. The top lists themselves
// keep them (they are learned state, the same on every peer whatever its
// view of the membership); without this, once the fastest crawlers had
// left, no live crawler past the 16th of a context was ever a candidate.
func (m *micraChooser) liveTopOf(c *ctxInfo) []uint32 {
	lt := m.liveTops[c]
	if lt == nil {
		if m.liveTops == nil {
			m.liveTops = make(map[*ctxInfo]*liveTop)
		}
		lt = &liveTop{}
		m.liveTops[c] = lt
	} else if lt.gen == m.liveGen && lt.ver == c.topVer {
		return lt.ci
	}
	lt.gen, lt.ver = m.liveGen, c.topVer
	var best [topK]topEntry
	n := 0
	for i := range c.st {
		st := &c.st[i]
		if st.n == 0 || int(st.ci) >= len(m.liveCi) || !m.liveCi[st.ci] {
			continue
		}
		// ties by name: the order this peer met the crawlers in must not
		// decide which make the cut
		j, _ := slices.BinarySearchFunc(best[:n], st, func(e topEntry, st *ctxStat) int {
			if c := cmp.Compare(e.mean, st.mean); c != 0 {
				return c
			}
			return cmp.Compare(m.crawler.ids[e.ci], m.crawler.ids[st.ci])
		})
		if j < topK {
			if n < topK {
				n++
			}
			copy(best[j+1:n], best[j:n-1])
			best[j] = topEntry{st.ci, st.mean}
		}
	}
	lt.ci = lt.ci[:0]
	for _, e := range best[:n] {
		lt.ci = append(lt.ci, e.ci)
	}
	return lt.ci
}

// rankTop re-ranks crawler ci in c's top list after its mean there changed.
func (c *ctxInfo) rankTop(ci uint32, mean float64) {
	c.topVer++
	t := c.top
	if i := slices.IndexFunc(t, func(e topEntry) bool { return e.ci == ci }); i >= 0 {
		// already listed: move it to the first place whose mean is ≥ its
		// own (where deleting and re-inserting would put it)
		t[i].mean = mean
		for i > 0 && t[i-1].mean >= mean {
			t[i-1], t[i] = t[i], t[i-1]
			i--
		}
		for i+1 < len(t) && t[i+1].mean < mean {
			t[i+1], t[i] = t[i], t[i+1]
			i++
		}
		// (A listed crawler whose mean rose stays listed: an unlisted one
		// with a lower mean gets in only when learned here again. Keeping
		// the list exact — refilling its last place — cost a point on zipf
		// hosts with 50 crawlers; docs/experiments/2026-11-delegation-log.md.)
		return
	}
	i, _ := slices.BinarySearchFunc(t, mean, func(e topEntry, v float64) int { return cmp.Compare(e.mean, v) })
	if i < topK {
		t = slices.Insert(t, i, topEntry{ci, mean})
		if len(t) > topK {
			t = t[:topK]
		}
	}
	c.top = t
}

type micraCand struct {
	id     CrawlerID
	ci     uint32
	mu, sd float64 // predicted ln RTT (ms) and its spread
	n      float64 // observations behind the prediction
	from   string  // which context the prediction comes from
	win    float64 // learned probability of being the nearest
	tie    uint64  // crawlerIndex.tieKey: the last tie-break
	probed bool
	// anchored: predicted from another crawler's answer in this decision
	// (a neighbour), not from learned statistics: Shift does not apply
	anchored bool

	// marginal probability to beat the best answer, valid while the best
	// answer (lnT, shift) is unchanged
	pOK         bool
	pLb, pShift float64
	pMarg       float64
	// pairwise answers of earlier rounds: valid while the best answer
	// (hence the threshold and the marginal prior) is unchanged
	qOK        bool
	qLb, qPrio float64
	qN         int
	qA         [3]uint32
	qV         [3]float64
}

// winProb is the probability that crawler ci answers lowest for a subnet
// with contexts ks, from the win counts shrunk general → specific.
func (m *micraChooser) winProb(infos []*ctxInfo, ci uint32, uniform float64) float64 {
	const beta = 2
	p := uniform
	for i := len(infos) - 1; i >= 0; i-- {
		c := infos[i]
		if c == nil || c.winTotal == 0 {
			continue
		}
		w := 0.0
		if st := c.stat(ci); st != nil {
			w = st.wins
		}
		p = (w + beta*p) / (c.winTotal + beta)
	}
	return p
}

var kindNames = func() [ctxKinds]string {
	var k [ctxKinds]string
	for d := range 16 {
		k[d] = "depth-" + strconv.Itoa(d)
	}
	k[kindOrg], k[kindCountry], k[kindRegistry], k[kindAll] = "org", "country", "registry", "all"
	return k
}()

var sitsNames = func() (k [ctxKinds]string) {
	for i, n := range kindNames {
		k[i] = "sits-in-" + n
	}
	return k
}()

// predict fills cands with the predictions of crawlers ids: it combines
// every context's data for each crawler, general to specific (hierarchical
// shrinkage): each level's mean is pulled towards the
// estimate of the level above in proportion to how few observations it has
// and how much contexts of its kind differ. globalMean is the prediction
// for a crawler never measured at all.
//
// The candidates go through the contexts together, level by level: each
// candidate's arithmetic is the same sequence as alone, but the divisions
// of different candidates overlap instead of waiting on each other.
func (m *micraChooser) predict(cands []micraCand, ids []uint32, infos []*ctxInfo, kinds []int, sig []float64, globalMean float64, cc string) {
	for k, ci := range ids {
		cand := &cands[k]
		*cand = micraCand{id: m.crawler.ids[ci], ci: ci, from: "unknown"}
		mu, vr := globalMean, 4.0 // nothing known: the average crawler, very wide
		geo := false
		if x, ok := m.geoX(cc, ci); ok {
			// the distance prior replaces the crawler's overall mean, which
			// averages hosts on every continent
			if gm, gv, ok := m.geoPrior(x); ok {
				mu, vr, geo = gm, gv, true
				cand.from = "distance"
			}
		}
		if st := infos[len(infos)-1].stat(ci); !geo && st != nil && st.n > 0 {
			w := sig[len(sig)-1]
			mu, vr = st.mean, w*w*(1+1/st.n)
			cand.n, cand.from = st.n, "all"
		}
		cand.mu, cand.sd = mu, vr // sd holds the variance until the end
	}
	for i := len(infos) - 2; i >= 0; i-- {
		info, kind := infos[i], kinds[i]
		if info == nil {
			continue // nothing known here, nobody sits here
		}
		w := sig[i]
		w2 := w * w
		for k := range cands {
			cand := &cands[k]
			mu, vr := cand.mu, cand.sd
			if st := info.stat(cand.ci); st != nil && st.n > 0 {
				tau2 := max(vr-w2, 0.01)     // spread of context means around mu (builtin max: inline, math.Max is a call)
				pv := 1 / (1/tau2 + st.n/w2) // variance of this context's mean
				cand.mu = pv * (mu/tau2 + st.n*st.mean/w2)
				cand.sd = pv + w2
				cand.n, cand.from = st.n, kindNames[kind]
				if i == 0 {
					cand.from = "subnet"
				}
				continue
			}
			if info.sitsHere(cand.ci) {
				// sits here but never measured here: as good as the best
				// known here, so newcomers get tried
				best := math.Log(10)
				if t := info.top; len(t) > 0 {
					best = t[0].mean
				}
				if best < mu {
					cand.mu, cand.sd, cand.from = best, max(vr, 4*w2), sitsNames[kind]
				}
			}
		}
	}
	for k := range cands {
		cands[k].sd = math.Sqrt(cands[k].sd)
	}
}

// roomOrder implements roomOrderer: room sorted by predicted RTT to
// subnet s, nearest first (ties by the subnet's tie key, as candidates).
func (m *micraChooser) roomOrder(e *engine, s hierarchy.NodeID, room []CrawlerID) {
	_, cc := m.subnetContexts(e.d.Tree, s)
	m.locate(e)
	infos, kinds := m.subnetInfos(false), m.ctxKind
	if m.cfg.NoGeo {
		cc = ""
	}
	ids := make([]uint32, len(room))
	for i, c := range room {
		ids[i] = m.crawler.id(c)
	}
	cands := make([]micraCand, len(room))
	m.predict(cands, ids, infos, kinds, m.spreads(kinds, nil), m.globalMean(), cc)
	for i := range cands {
		cands[i].tie = m.crawler.tieKey(cands[i].ci, uint64(s))
	}
	slices.SortFunc(cands, func(a, b micraCand) int { return candCompare(&a, &b) })
	for i := range cands {
		room[i] = cands[i].id
	}
}

// globalMean is the mean ln RTT over every crawler's overall mean.
func (m *micraChooser) globalMean() float64 {
	if m.globalN > 0 {
		return m.globalSum / float64(m.globalN)
	}
	return math.Log(100)
}

// spreads returns the pooled spread of each context kind (the global one
// is kindAll's), in buf's room when it has enough.
func (m *micraChooser) spreads(kinds []int, buf []float64) []float64 {
	sig := buf[:0]
	if cap(sig) < len(kinds) { // a tree deeper than the default snapshot's
		sig = make([]float64, 0, len(kinds))
	}
	sig = sig[:len(kinds)]
	for i, k := range kinds {
		sig[i] = m.sigma0(k)
	}
	sig[len(sig)-1] = m.sigma0(kindAll)
	return sig
}

func (m *micraChooser) rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	return m.rankWith(ctx, e, ip, s, d, nil, m.cfg.Miss, 0)
}

// rankWith is rank with answers already known for ip (given: they cost no
// probe, like an owner's own crawl timing), the risk miss of its stop rule
// and the probes it sends at least (while a candidate is left to ask).
// With given answers it never decides blind and never walks.
func (m *micraChooser) rankWith(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision, given []ProbeResult, miss float64, minProbes int) ([]ProbeResult, error) {
	_, cc := m.subnetContexts(e.d.Tree, s)
	m.locate(e)
	infos := m.subnetInfos(false) // nil: nothing known there
	kinds := m.ctxKind

	// candidates: widen contexts until enough are known
	var idBuf [4 * topK]uint32
	ids := idBuf[:0]
	if len(m.candMark) < len(m.liveCi) {
		m.candMark = make([]uint32, len(m.liveCi))
		m.candEpoch = 0
	}
	m.candEpoch++
	if m.candEpoch == 0 { // wrapped: forget every old mark
		clear(m.candMark)
		m.candEpoch = 1
	}
	mark, epoch := m.candMark, m.candEpoch
	// add makes ci a candidate; false if it is not live
	add := func(ci uint32) bool {
		if int(ci) >= len(m.liveCi) || !m.liveCi[ci] {
			return false
		}
		if mark[ci] != epoch {
			mark[ci] = epoch
			ids = append(ids, ci)
		}
		return true
	}
	for ki, info := range infos {
		if len(ids) >= m.cfg.MinCandidates {
			break
		}
		if info != nil {
			// crawlers sitting here: at most topK, from an offset that
			// depends on the subnet, so that many co-located crawlers
			// share the work
			if loc := info.located; len(loc) > 0 {
				off := int(mix64(uint64(s)) % uint64(len(loc)))
				for j := range min(len(loc), topK) {
					add(loc[(off+j)%len(loc)])
				}
			}
			departed := false
			for _, te := range info.top {
				if !add(te.ci) {
					departed = true
				}
			}
			if departed {
				for _, ci := range m.liveTopOf(info) {
					add(ci)
				}
			}
		}
		if ki == len(infos)-1 && len(ids) < m.cfg.MinCandidates {
			// cold start: any live crawler, up to topK, from an offset
			// that depends on the subnet (not the first names)
			// (indexes in liveIDs' order, kept by locate: no lookup by
			// name per crawler and decision)
			live := m.liveOrd
			if len(live) == 0 {
				return nil, nil // nobody to ask: the engine falls back to hashing
			}
			off := int(mix64(uint64(s)^0x636f6c64) % uint64(len(live)))
			for j := range live {
				if len(ids) >= max(topK, m.cfg.MinCandidates) {
					break
				}
				add(live[(off+j)%len(live)])
			}
		}
	}
	if len(ids) == 0 {
		return nil, nil
	}
	if m.cfg.NoGeo {
		cc = ""
	}
	globalMean := m.globalMean()
	// spreads per context, once per decision, on the stack
	var sigBuf [16]float64
	sig := m.spreads(kinds, sigBuf[:])
	raw := slices.Grow(m.rawBuf[:0], len(ids))[:len(ids)]
	m.rawBuf = raw
	m.predict(raw, ids, infos, kinds, sig, globalMean, cc)
	for i, ci := range ids {
		raw[i].tie = m.crawler.tieKey(ci, uint64(s))
	}
	if m.cfg.FirstByWins {
		for i := range raw {
			raw[i].win = m.winProb(infos, raw[i].ci, 1/float64(len(raw)))
		}
	}
	// sort indexes, not the candidates (large structs); the order is total
	// (ids are unique), so it is the same whatever the algorithm
	order := m.candIdx[:0]
	for i := range raw {
		order = append(order, i)
	}
	m.candIdx = order
	sortCands(order, raw)
	cands := slices.Grow(m.candBuf[:0], len(raw))[:len(raw)]
	m.candBuf = cands
	for i, j := range order {
		cands[i] = raw[j]
	}

	step := Step{Kind: StepPredict, Node: s}
	if m.cfg.Blind > 0 && len(given) == 0 && !e.redelegating && cands[0].n >= m.cfg.BlindMinObs {
		x := cands[0]
		risk := 0.0
		for _, c := range cands[1:] {
			risk += normCDF((x.mu - c.mu) / math.Hypot(x.sd, c.sd))
			if risk >= m.cfg.Blind {
				break // a sum of non-negative terms only grows
			}
		}
		if risk < m.cfg.Blind {
			rtt := time.Duration(math.Exp(x.mu) * float64(time.Millisecond))
			step.Note = fmt.Sprintf("%d candidates; %s predicted %v, P(another is nearer)=%.4f < %.4f: no probe", len(cands), x.id, rtt.Round(time.Microsecond), risk, m.cfg.Blind)
			d.Steps = append(d.Steps, step)
			d.Reason = ReasonPredicted
			return []ProbeResult{{Crawler: x.id, RTT: rtt}}, nil
		}
	}
	// all is returned to the engine, which only reads it before the next
	// decision: reuse its room
	all := m.allBuf[:0]
	defer func() { m.allBuf = all[:0] }()
	step.Probes = make([]ProbeResult, 0, 4) // most decisions probe ≤ 4 times
	var best ProbeResult
	// surprise: the best answer minus its prediction (ln ms), which Shift
	// passes on to the candidates predicted from learned statistics — kept
	// from the last such best: a neighbour's prediction is anchored on an
	// answer already and has no surprise of its own to share
	surprise := 0.0
	for _, g := range given {
		all = append(all, g)
		pred, known := lnMs(g.RTT), false
		for i := range cands {
			if cands[i].id == g.Crawler {
				cands[i].probed, pred, known = true, cands[i].mu, true
			}
		}
		if !known {
			pred = lnMs(g.RTT) // not a candidate: no surprise to share
		}
		if g.OK && g.RTT > 0 && (!best.OK || g.RTT < best.RTT) {
			best, surprise = g, lnMs(g.RTT)-pred
		}
	}
	sortRanked(all)
	stop := m.stopBuf[:0]
	nbAdded := 0      // neighbour candidates added (Neighbours)
	firstMiss := miss // after the first probe of a decision without given answers (not a review)
	if len(given) == 0 {
		firstMiss = m.cfg.MissFirst
	}
	baseMiss := miss
	for d.Probes < m.cfg.MaxProbes {
		miss := baseMiss
		if d.Probes == 1 {
			miss = firstMiss
		}
		next := m.nextBuf[:0]
		if !best.OK {
			for i := range cands {
				if !cands[i].probed && len(next) < m.cfg.Parallel {
					next = append(next, i)
				}
			}
		} else {
			// probability each unprobed candidate beats the best answer,
			// with learned predictions shifted by part of the surprise
			lb := lnMs(best.RTT)
			shift := m.cfg.Shift * surprise
			total, bound := 0.0, false // bound: total is an upper bound
			ps := m.psBuf[:0]
			// the three lowest answers, looked up once per round
			var low [3]lowAnswer
			nlow := 0
			for _, a := range all[:min(len(all), 3)] {
				if a.OK && a.RTT > 0 {
					low[nlow].ci, low[nlow].x = m.candCi(cands, a.Crawler), lnMs(a.RTT)
					nlow++
				}
			}
			// Marginals first: a pairwise estimate only ever lowers a
			// candidate's probability, so their sum bounds the total from
			// above, and a candidate's marginal bounds what it can still
			// become. The pairwise estimates (most of a decision's cost)
			// are then computed only where the bounds leave the outcome
			// open — the stop and the next probe are those of refining
			// every candidate.
			margSum := 0.0
			for i := range cands {
				if cands[i].probed {
					continue
				}
				c := &cands[i]
				sh := shift
				if c.anchored {
					sh = 0
				}
				if !c.pOK || c.pLb != lb || c.pShift != sh {
					c.pOK, c.pLb, c.pShift, c.pMarg = true, lb, sh, normCDF((lb-c.mu-sh)/c.sd)
				}
				ps = append(ps, candProb{i: i, p: c.pMarg, marg: c.pMarg})
				margSum += c.pMarg
			}
			refine := func(k int) { ps[k].p = m.refine(&cands[ps[k].i], ps[k].marg, low[:nlow], lb) }
			bestK := -1 // the likeliest to beat the best answer (the first of the highest)
			better := func(k int) bool {
				return bestK < 0 || ps[k].p > ps[bestK].p || (ps[k].p == ps[bestK].p && ps[k].i < ps[bestK].i)
			}
			// a probe that must go out needs the likeliest candidate, so
			// every candidate's estimate
			mustProbe := d.Probes < minProbes
			if m.cfg.Parallel > 1 || m.cfg.refineAll || mustProbe || margSum < miss {
				// several probes a round rank every candidate; a marginal
				// sum under Miss stops at once
				if margSum >= miss || m.cfg.refineAll || mustProbe {
					for k := range ps {
						refine(k)
						total += ps[k].p
						if better(k) {
							bestK = k
						}
					}
				} else {
					total, bound = margSum, true
				}
			} else {
				// largest marginals first: they decide both the stop and
				// the next probe
				sortByMarginal(ps)
				rem := m.remBuf[:0]
				acc := 0.0
				for k := len(ps) - 1; k >= 0; k-- {
					acc += ps[k].marg
					rem = append(rem, acc)
				}
				slices.Reverse(rem) // rem[k]: the marginals of ps[k:]
				m.remBuf = rem
				k := 0
				for ; k < len(ps); k++ {
					if total+rem[k] < miss {
						total, bound = total+rem[k], true
						break // the rest cannot lift the total to Miss
					}
					if total >= miss && bestK >= 0 && ps[k].marg < ps[bestK].p {
						break // no stop, and nobody left can beat bestK
					}
					refine(k)
					total += ps[k].p
					if better(k) {
						bestK = k
					}
				}
			}
			m.psBuf = ps
			stopHere := total < miss && (!mustProbe || bestK < 0)
			if m.cfg.OnRound != nil {
				m.cfg.OnRound(RoundRisk{IP: ip, Probes: d.Probes, Risk: total, Bound: bound, Best: best.Crawler, Review: len(given) > 0, Stop: stopHere})
			}
			if stopHere {
				// (strconv, not Sprintf: this note is written for most decisions)
				b := append(stop, "P(unprobed beats "...)
				b = append(b, best.Crawler...)
				if bound {
					b = append(b, ") ≤ "...)
				} else {
					b = append(b, ")="...)
				}
				b = appendFixed3(b, total)
				b = append(b, " < "...)
				b = appendFixed3(b, miss)
				stop, m.stopBuf = b, b
				d.Reason = ReasonConfident
				break
			}
			// next: the likeliest nearest among those that may beat the best
			if m.cfg.Parallel == 1 {
				if bestK >= 0 {
					next = append(next, ps[bestK].i)
				}
			} else {
				slices.SortStableFunc(ps, func(a, b candProb) int { return cmp.Compare(b.p, a.p) })
				for _, x := range ps {
					if len(next) < m.cfg.Parallel {
						next = append(next, x.i)
					}
				}
			}
		}
		if room := m.cfg.MaxProbes - d.Probes; len(next) > room {
			next = next[:room] // a round of Parallel probes must not pass the cap
		}
		m.nextBuf = next
		if len(next) == 0 {
			stop = append(stop, "every candidate probed"...)
			d.Reason = ReasonAllProbed
			break
		}
		ask := m.askBuf[:0]
		for _, i := range next {
			cands[i].probed = true
			ask = append(ask, cands[i].id)
		}
		m.askBuf = ask
		res := e.probe(ctx, ip, ask, &step, d)
		newBest := -1
		for j, r := range res {
			all = append(all, r)
			sortRanked(all)
			if r.OK && (!best.OK || r.RTT < best.RTT) {
				best, newBest = r, next[j]
				if !cands[newBest].anchored {
					surprise = lnMs(r.RTT) - cands[newBest].mu
				}
			}
		}
		// (after the last probe no round could weigh a neighbour)
		if newBest >= 0 && m.cfg.Neighbours > 0 && len(given) == 0 && d.Probes < m.cfg.MaxProbes && len(m.liveOrd) > len(cands) {
			n0 := len(cands)
			cands = m.addNeighbours(cands, cands[newBest].ci, lnMs(best.RTT), mark, epoch, uint64(s))
			m.candBuf = cands
			nbAdded += len(cands) - n0
		}
	}
	if len(stop) == 0 {
		stop = fmt.Appendf(stop, "probe cap %d reached", m.cfg.MaxProbes)
		m.stopBuf = stop
		d.Reason = ReasonLowestProbe
	}
	top := cands[0]
	b := strconv.AppendInt(m.noteBuf[:0], int64(len(cands)), 10)
	b = append(b, " candidates, first "...)
	b = append(b, top.id...)
	b = append(b, " predicted from "...)
	b = append(b, top.from...)
	b = append(b, " (n="...)
	if n := top.n; n >= 0 && n < 1<<53 && n == math.Trunc(n) && !math.Signbit(n) {
		b = strconv.AppendInt(b, int64(n), 10) // counts: what 'f', 0 prints, cheaper
	} else {
		b = strconv.AppendFloat(b, n, 'f', 0, 64)
	}
	b = append(b, "); "...)
	if nbAdded > 0 {
		b = append(b, '+')
		b = strconv.AppendInt(b, int64(nbAdded), 10)
		b = append(b, " neighbours of best answers' crawlers; "...)
	}
	b = append(b, stop...)
	m.noteBuf = b
	step.Note = string(b)
	d.Steps = append(d.Steps, step)

	// Many more crawlers than one decision can consider, and the best
	// answer is still poor: the learned candidates missed the host's
	// region. Fall back to IPMicra's walk (crawlers holding subnets under
	// each ancestor, in random order) until one answers under the
	// threshold or the walk budget is spent.
	if m.cfg.Walk > 0 && len(given) == 0 && (!best.OK || best.RTT > e.c.Threshold) && len(e.liveIDs()) > 4*m.cfg.MaxProbes {
		asked := make(map[CrawlerID]struct{}, len(all))
		for _, a := range all {
			asked[a.Crawler] = struct{}{}
		}
		budget := m.cfg.Walk
	walk:
		for _, a := range e.d.Tree.Ancestors(s) {
			holders, err := e.d.Dir.HoldersUnder(ctx, a)
			if err != nil {
				return nil, fmt.Errorf("delegation: holders under %d: %w", a, err)
			}
			var fresh []CrawlerID
			for _, c := range holders {
				if _, done := asked[c]; !done && e.live(c) {
					fresh = append(fresh, c)
				}
			}
			if len(fresh) == 0 {
				continue
			}
			e.d.Rand.Shuffle(len(fresh), func(i, j int) { fresh[i], fresh[j] = fresh[j], fresh[i] })
			ws := Step{Kind: StepLevel, Node: a, Note: "walk: learned candidates all far"}
			for _, c := range fresh {
				if budget == 0 {
					d.Steps = append(d.Steps, ws)
					break walk
				}
				budget--
				asked[c] = struct{}{}
				r := e.probe(ctx, ip, []CrawlerID{c}, &ws, d)
				all = append(all, r...)
				if len(r) == 1 && r[0].OK && (!best.OK || r[0].RTT < best.RTT) {
					best = r[0]
				}
				if best.OK && best.RTT <= e.c.Threshold {
					ws.Note = fmt.Sprintf("walk: %s under %v", best.Crawler, e.c.Threshold)
					d.Reason = ReasonUnderThreshold
					d.Steps = append(d.Steps, ws)
					break walk
				}
			}
			d.Steps = append(d.Steps, ws)
		}
	}
	if !best.OK {
		return nil, nil
	}
	sortRanked(all)
	return all, nil
}

// candCi is crawler c's index: that of its candidate entry (answers come
// from the first candidates, so the scan is short and skips hashing c), or
// the index's when c is no candidate.
func (m *micraChooser) candCi(cands []micraCand, c CrawlerID) uint32 {
	for i := range cands {
		if cands[i].id == c {
			return cands[i].ci
		}
	}
	return m.crawler.id(c)
}

// candCompare orders candidates: the likeliest nearest first (learned
// wins, then the lowest predicted RTT, the most observations, the tie key,
// the name). Floats compare as cmp.Compare does (NaN below every number,
// so a degenerate prediction sorts the same way every time); the order is
// total, as names are unique.
func candCompare(a, b *micraCand) int {
	if c := cmp.Compare(b.win, a.win); c != 0 {
		return c
	}
	if c := cmp.Compare(a.mu, b.mu); c != 0 {
		return c
	}
	if c := cmp.Compare(b.n, a.n); c != 0 {
		return c
	}
	if c := cmp.Compare(a.tie, b.tie); c != 0 {
		return c
	}
	return cmp.Compare(a.id, b.id)
}

// candFirst is candCompare(a, b) < 0 for candidates without NaN, in plain
// comparisons that inline.
func candFirst(a, b *micraCand) bool {
	switch {
	case a.win != b.win:
		return a.win > b.win
	case a.mu != b.mu:
		return a.mu < b.mu
	case a.n != b.n:
		return a.n > b.n
	case a.tie != b.tie:
		return a.tie < b.tie
	}
	return a.id < b.id
}

// sortCands sorts the candidate indexes order by candCompare: an insertion
// sort on candFirst, as a decision ranks a few (MinCandidates, 16 by
// default); a general sort on candCompare beyond 32 candidates or when a
// prediction is NaN. The order is total, so both give the same result.
func sortCands(order []int, raw []micraCand) {
	plain := len(order) <= 32
	for i := range raw {
		if c := &raw[i]; c.win != c.win || c.mu != c.mu || c.n != c.n {
			plain = false
			break
		}
	}
	if !plain {
		slices.SortFunc(order, func(i, j int) int { return candCompare(&raw[i], &raw[j]) })
		return
	}
	for i := 1; i < len(order); i++ {
		x := order[i]
		j := i
		for ; j > 0 && candFirst(&raw[x], &raw[order[j-1]]); j-- {
			order[j] = order[j-1]
		}
		order[j] = x
	}
}

// sortByMarginal sorts ps by marginal, largest first (cmp.Compare's order,
// NaN last), then by candidate index: an insertion sort with the
// comparison inlined, as a round holds a few candidates (beyond 32, a
// general sort: the same total order).
func sortByMarginal(ps []candProb) {
	before := func(a, b *candProb) bool {
		if c := cmp.Compare(b.marg, a.marg); c != 0 {
			return c < 0
		}
		return a.i < b.i
	}
	if len(ps) > 32 {
		slices.SortFunc(ps, func(a, b candProb) int {
			if before(&a, &b) {
				return -1
			}
			return 1 // (indexes are unique: never equal)
		})
		return
	}
	for i := 1; i < len(ps); i++ {
		x := ps[i]
		j := i
		for ; j > 0 && before(&x, &ps[j-1]); j-- {
			ps[j] = ps[j-1]
		}
		ps[j] = x
	}
}

// appendFixed3 appends v as strconv's 'f' format with 3 decimals would,
// which most decisions' notes print twice: for 0 ≤ v < 1 away from a
// rounding tie it rounds v·1000 itself (the product's error is far below
// the 1e-9 margin); anything else goes to strconv.
func appendFixed3(b []byte, v float64) []byte {
	if !(v >= 0 && v < 0.9995) || math.Signbit(v) { // (-0 prints "-0.000")
		return strconv.AppendFloat(b, v, 'f', 3, 64)
	}
	k := math.Floor(v * 1000)
	frac := v*1000 - k
	if math.Abs(frac-0.5) < 1e-9 {
		return strconv.AppendFloat(b, v, 'f', 3, 64)
	}
	if frac > 0.5 {
		k++
	}
	d := int(k) // 0…999
	return append(b, '0', '.', byte('0'+d/100), byte('0'+d/10%10), byte('0'+d%10))
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }

// firstPerCrawler returns ps with only each crawler's first answer (ps
// itself when no crawler repeats).
func firstPerCrawler(ps []ProbeResult) []ProbeResult {
	for i := range ps {
		for j := range i {
			if ps[j].Crawler != ps[i].Crawler {
				continue
			}
			out := slices.Clone(ps[:i])
			for _, p := range ps[i+1:] {
				if !slices.ContainsFunc(out, func(q ProbeResult) bool { return q.Crawler == p.Crawler }) {
					out = append(out, p)
				}
			}
			return out
		}
	}
	return ps
}
