package delegation

import (
	"math"
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

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
//   - with more crawlers than it considers, the answers place the host
//     (a least-squares fit of the distances they imply to the stated
//     positions of the crawlers that gave them): the crawlers nearest that
//     place join the candidates (MicraConfig.Locate);
//   - with far more crawlers than it considers and no answer under
//     Config.Threshold, it walks towards that place, then IPMicra's walk
//     (MicraConfig.Walk).
//
// It uses nothing a real deployment lacks: the hierarchy (with the
// registries' country codes), probe answers and what crawlers say about
// themselves. docs/delegation.md describes it; the measurements behind
// each choice are in docs/experiments/2026-11-delegation-log.md.
func NewMicra(d Deps, c Config) Policy {
	c = c.withDefaults()
	m := &micraChooser{
		cfg:     c.Micra.withDefaults(),
		crawler: newCrawlerIndex(),
		scopes:  make(map[scopeKey]*scopeStats),
	}
	m.pairs = newPairModel(m.crawler, m.cfg.PairSamples, m.cfg.PairBandwidth, m.cfg.PairPrior)
	return learningEngine{newEngine("micra", d, c, m)}
}

type micraChooser struct {
	slab       []scopeSlab   // unused context records, allocated 256 at a time
	freeScopes []*scopeStats // forgotten context records, to reuse
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
	scopes      map[scopeKey]*scopeStats
	// running sum of every crawler's global mean (prediction for unknowns)
	globalSum float64
	globalN   int
	// pooled within-(context, crawler) spread per kind of context
	pooled [scopeKinds]struct{ m2, dof float64 }
	pairs  *pairModel

	// where live crawlers sit (scopeStats.located), rebuilt when membership
	// changes
	locVer    uint64
	locValid  bool
	locScopes []*scopeStats // contexts with located crawlers
	pos       []crawlerPos  // by crawler index: the position it states
	liveCi    []bool        // by crawler index: live now
	// liveGen counts changes of the live set (the other key of liveTops)
	liveGen uint64
	// liveTops: for contexts whose top list holds departed crawlers, the
	// topK live crawlers with the lowest mean there (liveTop)
	liveTops  map[*scopeStats]*liveTop
	liveOrd   []uint32 // crawler indexes of liveIDs, in its (sorted) order
	liveSpare []uint32 // the previous liveOrd's storage
	// neighbours: by crawler index, the live crawlers nearest to it by
	// stated position (nbList of them), computed on demand while
	// nbFor[ci] == locGen (locate bumps it when positions may change)
	nbrs   [][]uint32
	nbFor  []uint64
	locGen uint64
	// placeList: live crawlers grouped by stated position (places), valid
	// while placesOK and placesFor == locGen
	placeList []placeGroup
	placesFor uint64
	placesOK  bool
	// placeCells index placeList for bestPlace (built with it);
	// groupOrder and cellOrder are bestPlace's reused buffers
	placeCells placeCells
	groupOrder []cellBound
	cellOrder  []cellBound
	// noRoom, during a decision with BalanceSecondBest or
	// BalanceLeastCost, reports crawlers without room for the subnet: they
	// are not candidates (nil: all are)
	noRoom func(ci uint32) bool
	// capOf[ci] is a live crawler's capacity as of locate; loadCtr[ci] its
	// counter in loadBook (roomFilter's lookups by index)
	capOf    []int
	loadBook *MemLoadBook
	loadCtr  []*int
	// spreadScope's tables by crawler index, valid where the mark is stGen
	stMark, sitMark []uint32
	stAt            []int32
	stGen           uint32
	// roomPick's reused buffers
	roomIDs   []uint32
	roomCands []micraCand
	roomTop   []int32
	// roomFull[ci] is noRoom's answer for ci while roomMark[ci] == roomEpoch
	roomMark  []uint32
	roomFull  []bool
	roomEpoch uint32

	geoCC  string               // country of geoRow
	geoRow []float64            // by crawler index: distance feature to geoCC
	geoTab map[string][]float64 // geoRow of every country seen

	// distance prior: least squares of ln RTT on ln(distance + geoKm0)
	// between a subnet's country centroid and a crawler's stated position
	geo    geoSums
	geoFit geoFit
	// the same pairs in km and ms: RTT grows linearly with distance, so
	// this fit, inverted, turns an answer into a distance (addLocated)
	lin geoSums
	// locErr: answers less their location-based prediction (ln ms), the
	// bias and spread of those predictions (addLocated)
	locErr lnStat
	// locErr1: the same for placements from a single answer
	locErr1 lnStat
	// warmPlace: this decision's last best place (an index into
	// placeList) from two answers or more, whose score bounds the next
	// placement's search (-1: none); warmTs the answers it was found for
	warmPlace int
	warmTs    []locatedTarget
	// nearList: the crawlers nearest place nearPlace, sorted (addLocated),
	// for decision key nearS and places of nearGen; valid while nearOK
	nearList  []nearCi
	nearOK    bool
	nearPlace int
	nearS     uint64
	nearGen   uint64

	// per reviewed subnet: who was nearest for its hosts (Reviewer)
	tally map[hierarchy.NodeID]subnetTally

	// scratch space of one decision (an engine is not used concurrently)
	candBuf   []micraCand
	psBuf     []candProb
	remBuf    []float64
	askBuf    []CrawlerID
	nextBuf   []int
	scopeOK   bool // scopeS, scopeKs, scopeCC, scopeKind, scopeRecs: the last subnet's contexts
	scopeS    hierarchy.NodeID
	scopeKs   []scopeKey
	scopeCC   string
	scopeKind []int         // kind of each of scopeKs
	scopeRecs []*scopeStats // record of each of scopeKs; nil: none when last looked up
	ciBuf     []uint32      // crawler index per answer of the record being learned
	xBuf      []float64     // ln RTT per answer of the record being learned
	lowBuf    []float64     // the valid ln RTTs of that record, to find PairFromLowest's cut
	noteBuf   []byte
	stopBuf   []byte
	allBuf    []ProbeResult
	candIdx   []int
	rawBuf    []micraCand

	// candidate dedup: candMark[ci] == candEpoch when ci is already a
	// candidate of this decision (no scan of the list per addition)
	candMark  []uint32
	candEpoch uint32
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
	_, cc := m.subnetScopes(e.d.Tree, s)
	infos := m.subnetScopeStats(true)
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
	if win.OK && win.RTT <= locateAnchor && m.cfg.Locate > 0 && int(wi) < len(m.pos) && m.pos[wi].ok {
		// the host lies about where the crawler that answered lowest
		// sits: the other answers against their distance from it
		for pi, p := range rec.Probes {
			if ci := cis[pi]; p.OK && p.RTT > 0 && ci != wi && int(ci) < len(m.pos) && m.pos[ci].ok {
				m.lin.add(chordKm(chord2(&m.pos[wi], &m.pos[ci])), float64(p.RTT)/float64(time.Millisecond))
			}
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
