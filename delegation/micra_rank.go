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

// minMarginRTT is the floor of the best answer less the margin (ln of zero
// is −Inf): a probability of beating it is nil in practice.
const minMarginRTT = time.Microsecond

// roomStandIns is how many of a full crawler's neighbours (by stated
// position) with room stand in for it as candidates.
const roomStandIns = 2

// roomFilter returns, with second-best or least-cost balancing, whether a crawler lacks
// room for subnet s (its pages and the one being delegated; the owner needs
// room for one page); nil otherwise: with the release option a full best
// crawler still wins and moves other subnets away.
func (m *micraChooser) roomFilter(e *engine, s hierarchy.NodeID) func(ci uint32) bool {
	if (e.c.Balance != BalanceSecondBest && e.c.Balance != BalanceLeastCost) || e.loads == nil {
		return nil
	}
	extra := 1
	if e.redelegating {
		extra = 0
	}
	pages := e.loads.Pages(s) + extra
	owner, owned := e.loads.Owner(s)
	// answers are kept for the decision (loads move only after it): a
	// crawler met again, as a neighbour or in the walk, costs no lookup
	m.roomEpoch++
	if m.roomEpoch == 0 {
		clear(m.roomMark)
		m.roomEpoch = 1
	}
	epoch := m.roomEpoch
	// by index when locate's capacities are those of the membership now
	// (a versioned one, unchanged since) and the book is in memory: the
	// same answers as hasRoom without hashing ids
	ver, versioned := membershipVersion(e.d.Members)
	book, inMem := e.loads.(*MemLoadBook)
	byIndex := versioned && m.locValid && ver == m.locVer && inMem
	if byIndex && book != m.loadBook {
		m.loadBook, m.loadCtr = book, m.loadCtr[:0]
	}
	return func(ci uint32) bool {
		for int(ci) >= len(m.roomMark) {
			m.roomMark = append(m.roomMark, 0)
			m.roomFull = append(m.roomFull, false)
		}
		if m.roomMark[ci] == epoch {
			return m.roomFull[ci]
		}
		c := m.crawler.ids[ci]
		need := pages
		if owned && c == owner {
			need = extra
		}
		var full bool
		if byIndex {
			full = !m.roomByIndex(ci, need)
		} else {
			full = !e.hasRoom(c, need)
		}
		m.roomMark[ci], m.roomFull[ci] = epoch, full
		return full
	}
}

// roomByIndex is engine.hasRoom for live-or-not crawler ci, read from
// locate's capacities and the load book's counters.
func (m *micraChooser) roomByIndex(ci uint32, pages int) bool {
	if int(ci) >= len(m.liveCi) || !m.liveCi[ci] {
		return false
	}
	capacity := m.capOf[ci]
	if capacity <= 0 {
		return true
	}
	for int(ci) >= len(m.loadCtr) {
		m.loadCtr = append(m.loadCtr, nil)
	}
	n := m.loadCtr[ci]
	if n == nil {
		n = m.loadBook.counter(m.crawler.ids[ci])
		m.loadCtr[ci] = n
	}
	return *n+pages <= capacity
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

// candProb is a candidate (index) and its probability to beat the best answer.
type candProb struct {
	i    int
	p    float64
	marg float64 // the marginal probability, an upper bound of p
}

func (m *micraChooser) rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	return m.rankWith(ctx, e, ip, s, d, nil, m.cfg.Miss, 0)
}

// rankWith is rank with answers already known for ip (given: they cost no
// probe, like an owner's own crawl timing), the risk miss of its stop rule
// and the probes it sends at least (while a candidate is left to ask).
// With given answers it never decides blind and never walks.
func (m *micraChooser) rankWith(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision, given []ProbeResult, miss float64, minProbes int) ([]ProbeResult, error) {
	_, cc := m.subnetScopes(e.d.Tree, s)
	m.locate(e)
	infos := m.subnetScopeStats(false) // nil: nothing known there
	kinds := m.scopeKind

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
	m.noRoom = m.roomFilter(e, s)
	defer func() { m.noRoom = nil }()
	// add makes ci a candidate; false if it is not live. A crawler without
	// room (second-best balancing) is replaced by its nearest neighbours
	// with room: the next best is most likely beside it, and probing it
	// would be wasted.
	add := func(ci uint32) bool {
		if int(ci) >= len(m.liveCi) || !m.liveCi[ci] {
			return false
		}
		if mark[ci] == epoch {
			return true
		}
		mark[ci] = epoch
		if m.noRoom == nil || !m.noRoom(ci) {
			ids = append(ids, ci)
			return true
		}
		added := 0
		for _, nb := range m.neighboursOf(ci) {
			if added == roomStandIns {
				break
			}
			if int(nb) < len(m.liveCi) && m.liveCi[nb] && mark[nb] != epoch && !m.noRoom(nb) {
				mark[nb] = epoch
				ids = append(ids, nb)
				added++
			}
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
	m.warmPlace, m.nearOK = -1, false
	nbAdded := 0      // neighbour candidates added (Neighbours)
	locAdded := 0     // located candidates added (Locate)
	firstMiss := miss // after the first probe of a decision without given answers (not a review)
	if len(given) == 0 {
		firstMiss = m.cfg.MissFirst
	}
	if len(given) > 0 && m.cfg.Locate > 0 && len(m.liveOrd) > max(len(cands), 4*m.cfg.MaxProbes) {
		// a review's given answer (the owner's crawl timing) places the
		// host before its first probe, as a decision's first answer does
		// — among far more crawlers than a decision considers (as the
		// walk): with a few dozen, the learned candidates cover them, and
		// with 12 a ring's place cost 0.25 ms of room excess over 4 seeds
		n0 := len(cands)
		cands = m.addLocated(cands, all, mark, epoch, uint64(s))
		m.candBuf = cands
		locAdded += len(cands) - n0
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
			if mg := m.cfg.Margin; mg > 0 {
				// beating the best by more than the margin: below a
				// floor no answer can come, so nobody can
				lb = lnMs(max(best.RTT-mg, minMarginRTT))
			}
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
		answered := false // an answer to place the host from
		for j, r := range res {
			all = append(all, r)
			sortRanked(all)
			if r.OK && r.RTT > 0 {
				m.locAnswer(&cands[next[j]], lnMs(r.RTT))
				answered = true
			}
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
		// every answer moves the place, a new best or not: answers from
		// the learned candidates' region, all far, are what place a host
		// that sits elsewhere
		if answered && m.cfg.Locate > 0 && d.Probes < m.cfg.MaxProbes && len(m.liveOrd) > len(cands) {
			n0 := len(cands)
			cands = m.addLocated(cands, all, mark, epoch, uint64(s))
			m.candBuf = cands
			locAdded += len(cands) - n0
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
	if locAdded > 0 {
		b = append(b, '+')
		b = strconv.AppendInt(b, int64(locAdded), 10)
		b = append(b, " near the located host; "...)
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
		// first towards where the answers place the host (Locate), then,
		// with what budget is left, IPMicra's walk
		for budget > 0 && m.cfg.Locate > 0 && (!best.OK || best.RTT > e.c.Threshold) {
			n0 := len(cands)
			cands = m.addLocated(cands, all, mark, epoch, uint64(s))
			m.candBuf = cands
			if len(cands) == n0 {
				break
			}
			ws := Step{Kind: StepLevel, Node: s, Note: "walk towards the located host"}
			for i := n0; i < len(cands) && budget > 0; i++ {
				budget--
				cands[i].probed = true
				asked[cands[i].id] = struct{}{}
				r := e.probe(ctx, ip, []CrawlerID{cands[i].id}, &ws, d)
				all = append(all, r...)
				sortRanked(all)
				if len(r) == 1 && r[0].OK && r[0].RTT > 0 {
					m.locAnswer(&cands[i], lnMs(r[0].RTT))
				}
				if len(r) == 1 && r[0].OK && (!best.OK || r[0].RTT < best.RTT) {
					best = r[0]
				}
			}
			if best.OK && best.RTT <= e.c.Threshold {
				ws.Note = fmt.Sprintf("walk towards the located host: %s under %v", best.Crawler, e.c.Threshold)
				d.Reason = ReasonUnderThreshold
			}
			d.Steps = append(d.Steps, ws)
		}
	walk:
		for _, a := range e.d.Tree.Ancestors(s) {
			if budget == 0 || (best.OK && best.RTT <= e.c.Threshold) {
				break
			}
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
				if m.noRoom != nil && m.noRoom(m.crawler.id(c)) {
					continue // (checked here: a level can hold thousands)
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
