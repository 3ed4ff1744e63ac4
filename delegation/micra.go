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
	// below Miss. Default 0.03.
	Miss float64
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
	// candidates are known. Default 8.
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
	// ClassPrior predicts a crawler never measured in a context it sits in
	// from the RTTs learned for crawlers sharing that kind of context with
	// their target (same allocation, same organisation, same country, …)
	// instead of "as good as the best known there". Off by default: on the
	// synthetic world it made no difference with 12 to 10,000 crawlers.
	ClassPrior bool
	// MostSpecific predicts from the most specific context with data alone
	// instead of combining all contexts by hierarchical shrinkage (the
	// default; measured better: +1.5–2 points of optimal at equal probes).
	MostSpecific bool
	// Shift (0..1) moves every candidate's prediction by this fraction of the
	// surprise of the best answer so far (ln observed − ln predicted): host
	// access delay is shared by all crawlers. Default 0.5.
	Shift float64
}

func (m MicraConfig) withDefaults() MicraConfig {
	if m.Miss <= 0 {
		m.Miss = 0.03
	}
	if m.MaxProbes <= 0 {
		m.MaxProbes = 12
	}
	if m.PriorSigma <= 0 {
		m.PriorSigma = 0.45
	}
	if m.PooledAfter == 0 {
		m.PooledAfter = 20
	}
	if m.MinCandidates <= 0 {
		m.MinCandidates = 8
	}
	if m.Parallel <= 0 {
		m.Parallel = 1
	}
	if m.Blind == 0 {
		m.Blind = 0.005
	}
	if m.BlindMinObs <= 0 {
		m.BlindMinObs = 3
	}
	if m.Shift < 0 || m.Shift > 1 {
		m.Shift = 0.5
	}
	return m
}

// NewMicra returns our policy. It keeps IPMicra's structure (lazy delegation
// of the smallest non-unary subnet, placement, records, hash fallback) but
// replaces the threshold walk by learned prediction:
//
//   - every published record's probe answers are folded into statistics of
//     ln RTT per (context, crawler), where the contexts of a subnet are, from
//     specific to general: the subnet, its organisation, its ancestors below
//     the registry blocks, its country (the registries' country code), the
//     top-level registry block, its registry (RIR), everything;
//   - crawlers also report where they sit (their address, hence their own
//     subnet, organisation, ancestors and country in the hierarchy): a
//     crawler with no history in a context it sits in is predicted as good
//     as the best known there, so newcomers get tried;
//   - for a new subnet, each candidate gets a predicted ln RTT (mean) and
//     spread from its most specific context with data; the predicted nearest
//     is probed first; then the policy stops as soon as the summed
//     probability that any unprobed candidate beats the best answer is below
//     MicraConfig.Miss, else it probes the candidate most likely to.
//
// It uses nothing a real deployment lacks: the hierarchy, probe answers and
// what crawlers say about themselves.
func NewMicra(d Deps, c Config) Policy {
	c = c.withDefaults()
	m := &micraChooser{cfg: c.Micra.withDefaults(), stats: make(map[ctxKey]map[CrawlerID]*lnStat)}
	return newEngine("micra", d, c, m)
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
const ctxKinds = 20

func (m *micraChooser) kindOf(t Tree, k ctxKey) int {
	switch k >> 32 {
	case ctxNode:
		return min(int(t.Node(hierarchy.NodeID(uint32(k))).Depth), 15)
	case ctxOrg:
		return 16
	case ctxCountry:
		return 17
	case ctxRegistry:
		return 18
	}
	return 19
}

// sigma0 is the spread expected for one observation in a context of k's
// kind: learned across all such contexts once there is enough data.
func (m *micraChooser) sigma0(kind int) float64 {
	p := m.pooled[kind]
	if m.cfg.PooledAfter > 0 && p.dof >= m.cfg.PooledAfter {
		return math.Sqrt(p.m2 / p.dof)
	}
	return m.cfg.PriorSigma
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

type micraChooser struct {
	cfg   MicraConfig
	stats map[ctxKey]map[CrawlerID]*lnStat
	// pooled within-(context, crawler) spread per kind of context
	pooled [ctxKinds]struct{ m2, dof float64 }
	// RTT by the most specific kind of context a crawler shares with the
	// target (its own subnet's ancestors, organisation, country; the last
	// kind: nothing shared): the prior for crawlers never measured there
	class [ctxKinds]lnStat

	// where live crawlers sit, rebuilt when membership changes
	locVer   uint64
	locValid bool
	located  map[ctxKey][]CrawlerID
	locSet   map[ctxKey]map[CrawlerID]struct{}
}

// contexts lists s's contexts, specific first.
func contexts(t Tree, s hierarchy.NodeID, buf []ctxKey) []ctxKey {
	buf = append(buf[:0], mkCtx(ctxNode, uint32(s)))
	n := t.Node(s)
	if n.Org != 0 {
		buf = append(buf, mkCtx(ctxOrg, uint32(n.Org)))
	}
	country := n.Country
	anc := t.Ancestors(s)
	var top []ctxKey
	for _, a := range anc {
		if a == hierarchy.Root {
			continue
		}
		an := t.Node(a)
		if country == "" {
			country = an.Country
		}
		if an.Depth <= 1 {
			top = append(top, mkCtx(ctxNode, uint32(a)))
			continue
		}
		buf = append(buf, mkCtx(ctxNode, uint32(a)))
	}
	if len(country) == 2 {
		buf = append(buf, mkCtx(ctxCountry, uint32(country[0])<<8|uint32(country[1])))
	}
	buf = append(buf, top...)
	if n.Registry != hierarchy.RegistryUnknown {
		buf = append(buf, mkCtx(ctxRegistry, uint32(n.Registry)))
	}
	return append(buf, mkCtx(ctxGlobal, 0))
}

func (m *micraChooser) locate(e *engine) map[ctxKey][]CrawlerID {
	v, versioned := e.d.Members.(Versioned)
	if versioned && m.locValid && v.Version() == m.locVer {
		return m.located
	}
	m.located = make(map[ctxKey][]CrawlerID)
	m.locSet = make(map[ctxKey]map[CrawlerID]struct{})
	var buf []ctxKey
	for _, c := range e.liveIDs() {
		s := e.d.Tree.SmallestNonUnary(e.members()[c].Addr)
		if s == hierarchy.None || s == hierarchy.Root {
			continue
		}
		buf = contexts(e.d.Tree, s, buf)
		for _, k := range buf[:len(buf)-1] { // not global: everyone is there
			m.located[k] = append(m.located[k], c)
			if m.locSet[k] == nil {
				m.locSet[k] = make(map[CrawlerID]struct{})
			}
			m.locSet[k][c] = struct{}{}
		}
	}
	if versioned {
		m.locVer, m.locValid = v.Version(), true
	}
	return m.located
}

func (m *micraChooser) learn(e *engine, s hierarchy.NodeID, rec Record) {
	var buf [16]ctxKey
	ks := contexts(e.d.Tree, s, buf[:0])
	m.locate(e)
	for _, p := range rec.Probes {
		if !p.OK || p.RTT <= 0 {
			continue
		}
		x := math.Log(float64(p.RTT) / float64(time.Millisecond))
		shared := ctxKinds - 1
		for _, k := range ks[:len(ks)-1] {
			if _, here := m.locSet[k][p.Crawler]; here {
				shared = m.kindOf(e.d.Tree, k)
				break
			}
		}
		m.class[shared].add(x)
		for _, k := range ks {
			cs, ok := m.stats[k]
			if !ok {
				cs = make(map[CrawlerID]*lnStat)
				m.stats[k] = cs
			}
			st, ok := cs[p.Crawler]
			if !ok {
				st = &lnStat{}
				cs[p.Crawler] = st
			}
			before := st.m2
			st.add(x)
			if st.n > 1 {
				kp := &m.pooled[m.kindOf(e.d.Tree, k)]
				kp.m2 += st.m2 - before
				kp.dof++
			}
		}
	}
}

type micraCand struct {
	id     CrawlerID
	mu, sd float64 // predicted ln RTT (ms) and its spread
	n      float64 // observations behind the prediction
	from   string  // which context the prediction comes from
	probed bool
}

var kindNames = func() [ctxKinds]string {
	var k [ctxKinds]string
	for d := range 16 {
		k[d] = "depth-" + strconv.Itoa(d)
	}
	k[16], k[17], k[18], k[19] = "org", "country", "registry", "all"
	return k
}()

// predictShrink combines every context's data for c, general to specific
// (hierarchical shrinkage): each level's mean is pulled towards the
// estimate of the level above in proportion to how few observations it has
// and how much contexts of its kind differ.
func (m *micraChooser) predictShrink(t Tree, ks []ctxKey, c CrawlerID) micraCand {
	cand := micraCand{id: c, from: "unknown"}
	g := ks[len(ks)-1]
	mu, vr := math.Log(100), 4.0 // nothing known: ~100 ms, very wide
	if st, ok := m.stats[g][c]; ok && st.n >= 1 {
		w := m.sigma0(ctxKinds - 1)
		mu, vr = st.mean, w*w*(1+1/st.n)
		cand.n, cand.from = st.n, "all"
	} else {
		var sum, n float64
		for _, st := range m.stats[g] {
			sum += st.mean
			n++
		}
		if n > 0 {
			mu = sum / n
		}
	}
	for i := len(ks) - 2; i >= 0; i-- {
		k := ks[i]
		kind := m.kindOf(t, k)
		w := m.sigma0(kind)
		w2 := w * w
		if st, ok := m.stats[k][c]; ok && st.n >= 1 {
			tau2 := math.Max(vr-w2, 0.01) // spread of context means around mu
			pv := 1 / (1/tau2 + st.n/w2)  // variance of this context's mean
			mu = pv * (mu/tau2 + st.n*st.mean/w2)
			vr = pv + w2
			cand.n, cand.from = st.n, kindNames[kind]
			if i == 0 {
				cand.from = "subnet"
			}
			continue
		}
		if _, here := m.locSet[k][c]; here {
			best, ok := math.Inf(1), false
			for _, st := range m.stats[k] {
				if st.mean < best {
					best, ok = st.mean, true
				}
			}
			if !ok {
				best = math.Log(10)
			}
			if best < mu {
				mu, vr, cand.from = best, math.Max(vr, 4*w2), "sits-in-"+kindNames[kind]
			}
		}
	}
	cand.mu, cand.sd = mu, math.Sqrt(vr)
	return cand
}

func (m *micraChooser) predict(t Tree, ks []ctxKey, c CrawlerID) micraCand {
	if !m.cfg.MostSpecific {
		return m.predictShrink(t, ks, c)
	}
	s0 := m.cfg.PriorSigma
	for _, k := range ks {
		if st, ok := m.stats[k][c]; ok && st.n >= 1 {
			s0 := m.sigma0(m.kindOf(t, k))
			// shrink the sd towards the prior; widen for few samples
			sd := math.Sqrt((st.m2 + 2*s0*s0) / (st.n - 1 + 2))
			sd *= math.Sqrt(1 + 1/st.n)
			from := kindNames[m.kindOf(t, k)]
			if k == ks[0] {
				from = "subnet"
			}
			return micraCand{id: c, mu: st.mean, sd: sd, n: st.n, from: from}
		}
		if _, here := m.locSet[k][c]; here {
			// sits here but never measured here: like crawlers sitting in
			// this kind of context have been, once that is known
			if cl := &m.class[m.kindOf(t, k)]; cl.n >= 3 && m.cfg.ClassPrior {
				return micraCand{id: c, mu: cl.mean, sd: math.Sqrt(cl.m2 / (cl.n - 1)), from: "sits-in-" + kindNames[m.kindOf(t, k)]}
			}
			// else as good as the best known here
			best, ok := math.Inf(1), false
			for _, st := range m.stats[k] {
				if st.mean < best {
					best, ok = st.mean, true
				}
			}
			if !ok {
				best = math.Log(10)
			}
			return micraCand{id: c, mu: best, sd: 2 * s0, from: "sits-in-" + kindNames[m.kindOf(t, k)]}
		}
	}
	// nothing known: like crawlers sharing nothing with the target
	if cl := &m.class[ctxKinds-1]; cl.n >= 3 && m.cfg.ClassPrior {
		return micraCand{id: c, mu: cl.mean, sd: math.Sqrt(cl.m2 / (cl.n - 1)), from: "shares-nothing"}
	}
	var sum, n float64
	for _, st := range m.stats[mkCtx(ctxGlobal, 0)] {
		sum += st.mean
		n++
	}
	mu := math.Log(100)
	if n > 0 {
		mu = sum / n
	}
	return micraCand{id: c, mu: mu, sd: 3 * s0, from: "unknown"}
}

func (m *micraChooser) rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	var kbuf [16]ctxKey
	ks := contexts(e.d.Tree, s, kbuf[:0])
	located := m.locate(e)

	// candidates: widen contexts until enough are known
	seen := make(map[CrawlerID]struct{})
	var ids []CrawlerID
	for _, k := range ks {
		if len(ids) >= m.cfg.MinCandidates {
			break
		}
		add := func(c CrawlerID) {
			if _, ok := seen[c]; ok || !e.live(c) {
				return
			}
			seen[c] = struct{}{}
			ids = append(ids, c)
		}
		for _, c := range located[k] {
			add(c)
		}
		if k == mkCtx(ctxGlobal, 0) && len(ids) < m.cfg.MinCandidates {
			// the whole world: every live crawler (small deployments, cold
			// start); large ones never get here once contexts fill up
			for _, c := range e.liveIDs() {
				add(c)
			}
			continue
		}
		start := len(ids)
		for c := range m.stats[k] {
			add(c)
		}
		slices.Sort(ids[start:])
	}
	if len(ids) == 0 {
		return nil, nil
	}
	cands := make([]micraCand, len(ids))
	for i, c := range ids {
		cands[i] = m.predict(e.d.Tree, ks, c)
	}
	slices.SortFunc(cands, func(a, b micraCand) int {
		if c := cmp.Compare(a.mu, b.mu); c != 0 {
			return c
		}
		if c := cmp.Compare(b.n, a.n); c != 0 {
			return c
		}
		return cmp.Compare(a.id, b.id)
	})

	step := Step{Kind: StepPredict, Node: s}
	if m.cfg.Blind > 0 && cands[0].n >= m.cfg.BlindMinObs {
		x := cands[0]
		risk := 0.0
		for _, c := range cands[1:] {
			risk += normCDF((x.mu - c.mu) / math.Hypot(x.sd, c.sd))
		}
		if risk < m.cfg.Blind {
			rtt := time.Duration(math.Exp(x.mu) * float64(time.Millisecond))
			step.Note = fmt.Sprintf("%d candidates; %s predicted %v, P(another is nearer)=%.4f < %.4f: no probe", len(cands), x.id, rtt.Round(time.Microsecond), risk, m.cfg.Blind)
			d.Steps = append(d.Steps, step)
			d.Reason = ReasonPredicted
			return []ProbeResult{{Crawler: x.id, RTT: rtt}}, nil
		}
	}
	var all []ProbeResult
	var best ProbeResult
	bestPred := 0.0
	stop := ""
	for d.Probes < m.cfg.MaxProbes {
		var next []int
		if !best.OK {
			for i := range cands {
				if !cands[i].probed && len(next) < m.cfg.Parallel {
					next = append(next, i)
				}
			}
		} else {
			// probability each unprobed candidate beats the best answer,
			// with predictions shifted by part of the best's surprise
			lb := math.Log(float64(best.RTT)/float64(time.Millisecond) + 1e-3)
			shift := m.cfg.Shift * (lb - bestPred)
			total := 0.0
			type pc struct {
				i int
				p float64
			}
			var ps []pc
			for i := range cands {
				if cands[i].probed {
					continue
				}
				p := normCDF((lb - cands[i].mu - shift) / cands[i].sd)
				total += p
				ps = append(ps, pc{i, p})
			}
			if total < m.cfg.Miss {
				stop = fmt.Sprintf("P(unprobed beats %s)=%.3f < %.3f", best.Crawler, total, m.cfg.Miss)
				d.Reason = ReasonConfident
				break
			}
			slices.SortStableFunc(ps, func(a, b pc) int { return cmp.Compare(b.p, a.p) })
			for _, x := range ps {
				if len(next) < m.cfg.Parallel {
					next = append(next, x.i)
				}
			}
		}
		if len(next) == 0 {
			stop = "every candidate probed"
			d.Reason = ReasonAllProbed
			break
		}
		ask := make([]CrawlerID, len(next))
		for j, i := range next {
			cands[i].probed = true
			ask[j] = cands[i].id
		}
		res := e.probe(ctx, ip, ask, &step, d)
		for j, r := range res {
			all = append(all, r)
			if r.OK && (!best.OK || r.RTT < best.RTT) {
				best, bestPred = r, cands[next[j]].mu
			}
		}
	}
	if stop == "" {
		stop = fmt.Sprintf("probe cap %d reached", m.cfg.MaxProbes)
		d.Reason = ReasonLowestProbe
	}
	top := cands[0]
	step.Note = fmt.Sprintf("%d candidates, first %s predicted from %s (n=%.0f); %s", len(cands), top.id, top.from, top.n, stop)
	d.Steps = append(d.Steps, step)
	if !best.OK {
		return nil, nil
	}
	sortRanked(all)
	return all, nil
}

func normCDF(z float64) float64 { return 0.5 * math.Erfc(-z/math.Sqrt2) }
