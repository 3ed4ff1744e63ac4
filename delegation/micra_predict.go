package delegation

import (
	"math"
	"slices"
	"strconv"

	"github.com/micra-crawler/micra/hierarchy"
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
	// located: the prediction from where the answers place the host
	// (addLocated), ln ms before its learned bias; lmu, lsd: the
	// prediction it was combined with (kept so that a later placement
	// combines with it afresh)
	located, lmu, lsd float64
	hasLoc, hasL      bool
	// locOne: located from a single answer (a ring, not a point; its
	// errors are learned apart: locErr1)
	locOne bool

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
func (m *micraChooser) winProb(infos []*scopeStats, ci uint32, uniform float64) float64 {
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

var kindNames = func() [scopeKinds]string {
	var k [scopeKinds]string
	for d := range 16 {
		k[d] = "depth-" + strconv.Itoa(d)
	}
	k[kindOrg], k[kindCountry], k[kindRegistry], k[kindAll] = "org", "country", "registry", "all"
	return k
}()

var sitsNames = func() (k [scopeKinds]string) {
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
func (m *micraChooser) predict(cands []micraCand, ids []uint32, infos []*scopeStats, kinds []int, sig []float64, globalMean float64, cc string) {
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
	// many candidates (the probe-for-room pick predicts every crawler with
	// room): each context's crawlers are spread into a table by crawler
	// index once, instead of a binary search per candidate
	dense := len(cands) >= predictDenseFrom
	for i := len(infos) - 2; i >= 0; i-- {
		info, kind := infos[i], kinds[i]
		if info == nil {
			continue // nothing known here, nobody sits here
		}
		if dense {
			m.spreadScope(info)
		}
		w := sig[i]
		w2 := w * w
		for k := range cands {
			cand := &cands[k]
			mu, vr := cand.mu, cand.sd
			var st *crawlerStat
			if dense {
				if ci := cand.ci; int(ci) < len(m.stMark) && m.stMark[ci] == m.stGen {
					st = &info.st[m.stAt[ci]]
				}
			} else {
				st = info.stat(cand.ci)
			}
			if st != nil && st.n > 0 {
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
			sits := false
			if dense {
				sits = int(cand.ci) < len(m.sitMark) && m.sitMark[cand.ci] == m.stGen
			} else {
				sits = info.sitsHere(cand.ci)
			}
			if sits {
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
	_, cc := m.subnetScopes(e.d.Tree, s)
	m.locate(e)
	infos, kinds := m.subnetScopeStats(false), m.scopeKind
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

// predictDenseFrom is the number of candidates from which predict spreads
// each context into tables by crawler index (spreadScope).
const predictDenseFrom = 256

// spreadScope marks, for the stamp stGen it advances, every crawler with
// statistics in info (stAt: its index in info.st) and every crawler sitting
// there: predict's lookups for many candidates, the answers of info.stat
// and info.sitsHere.
func (m *micraChooser) spreadScope(info *scopeStats) {
	m.stGen++
	if m.stGen == 0 { // wrapped: forget every old stamp
		clear(m.stMark)
		clear(m.sitMark)
		m.stGen = 1
	}
	n := len(m.crawler.ids)
	for len(m.stMark) < n {
		m.stMark, m.sitMark, m.stAt = append(m.stMark, 0), append(m.sitMark, 0), append(m.stAt, 0)
	}
	for j := range info.st {
		ci := info.st[j].ci
		if int(ci) < n {
			m.stMark[ci], m.stAt[ci] = m.stGen, int32(j)
		}
	}
	for _, ci := range info.sits {
		if int(ci) < n {
			m.sitMark[ci] = m.stGen
		}
	}
}

// roomPick implements roomPicker: probeRoom's filter and roomOrder by
// crawler index, when locate's view is the membership's now and the load
// book is in memory. Only the n first are ordered: a selection among
// thousands instead of a sort (candCompare is a total order, so they are
// the sort's n first).
func (m *micraChooser) roomPick(e *engine, s hierarchy.NodeID, pages int, skipped func(CrawlerID) bool, n int) ([]CrawlerID, bool) {
	ver, versioned := membershipVersion(e.d.Members)
	book, inMem := e.loads.(*MemLoadBook)
	if !versioned || !m.locValid || ver != m.locVer || !inMem || n < 1 {
		return nil, false
	}
	if book != m.loadBook {
		m.loadBook, m.loadCtr = book, m.loadCtr[:0]
	}
	ids := m.roomIDs[:0]
	for _, ci := range m.liveOrd {
		if m.roomByIndex(ci, pages) && !skipped(m.crawler.ids[ci]) {
			ids = append(ids, ci)
		}
	}
	m.roomIDs = ids
	if len(ids) <= n {
		room := make([]CrawlerID, len(ids))
		for i, ci := range ids {
			room[i] = m.crawler.ids[ci]
		}
		return room, true
	}
	// roomOrder's steps, in its order (subnetScopes counts a tick)
	_, cc := m.subnetScopes(e.d.Tree, s)
	m.locate(e)
	infos, kinds := m.subnetScopeStats(false), m.scopeKind
	if m.cfg.NoGeo {
		cc = ""
	}
	cands := slices.Grow(m.roomCands[:0], len(ids))[:len(ids)]
	m.predict(cands, ids, infos, kinds, m.spreads(kinds, nil), m.globalMean(), cc)
	top := m.roomTop[:0]
	for i := range cands {
		c := &cands[i]
		c.tie = m.crawler.tieKey(c.ci, uint64(s))
		if len(top) == n && candCompare(c, &cands[top[n-1]]) >= 0 {
			continue
		}
		// insert i among the first, in order
		j := len(top)
		if j < n {
			top = append(top, 0)
		} else {
			j--
		}
		for ; j > 0 && candCompare(c, &cands[top[j-1]]) < 0; j-- {
			top[j] = top[j-1]
		}
		top[j] = int32(i)
	}
	room := make([]CrawlerID, len(top))
	for i, k := range top {
		room[i] = cands[k].id
	}
	m.roomCands, m.roomTop = cands, top
	return room, true
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
