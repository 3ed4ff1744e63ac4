package delegation

import (
	"cmp"
	"math"
	"slices"
	"time"
)

// Locating a host from its answers (MicraConfig.Locate).
//
// Among thousands of crawlers the learned candidates cover a region, and
// when the host sits elsewhere every one of them answers far: the stop rule
// then probes until its cap without coming near (the neighbours of the best
// answer's crawler are no nearer the host than it is). The answers
// themselves say where the host is. Records whose lowest answer is under
// locateAnchor put their host at that answer's crawler, and their other
// answers against those crawlers' distances from it give a line, RTT =
// α + β·km (micraChooser.lin). Inverted, each answer of a decision is a
// distance from a crawler at a stated position, and the stated position
// whose distances to the answering crawlers best match them (least squares
// of the log ratios) is the host's likeliest place. A single answer puts
// the host on a ring around its crawler: the place on it with the most
// crawlers around is the likeliest (hosts are where people, hence
// crawlers, are), and a probe there is what turns the ring into a point
// (micra_places.go, ringPlace). The live crawlers nearest the place join
// the candidates, and every candidate is predicted anew from its distance
// to it; how far those predictions miss is learned (locErr, and locErr1
// for places from one answer) and becomes their bias and spread.

// placeGroup is one stated position and the live crawlers stating it.
type placeGroup struct {
	pos crawlerPos
	cis []uint32
	// dens: the live crawlers around it (placeDensity), ringPlace's prior
	dens int32
}

// nearCi is a crawler near a place: its index, squared chord to the place
// and tie key.
type nearCi struct {
	ci  uint32
	c2  float64
	tie uint64
}

// locateKm0 is the distance (km) added to every distance the answers give
// and find: the scoring is relative, and a near answer (a few km) must not
// ask for a precision the fit does not have.
const locateKm0 = 150

// locateAnchor: a record whose lowest answer is at most this places its
// host at the answering crawler, closely enough to learn from its other
// answers how RTT grows with distance (micraChooser.lin).
const locateAnchor = 10 * time.Millisecond

// locSpread is the bias and spread (ln ms) of location-based predictions
// (from one answer if one): learned from the answers of the candidates
// they predicted (locErr, locErr1), the distance fit's residual until 30
// such answers.
func (m *micraChooser) locSpread(f *geoFit, one bool) (bias, sd float64) {
	e := &m.locErr
	if one {
		e = &m.locErr1
	}
	if e.n >= 30 {
		return e.mean, math.Max(math.Sqrt(e.m2/(e.n-1)), 0.05)
	}
	return 0, math.Sqrt(f.resid)
}

// locAnswer learns from candidate c's answer (ln ms) how far off its
// location-based prediction was.
func (m *micraChooser) locAnswer(c *micraCand, x float64) {
	switch {
	case c.hasLoc && c.locOne:
		m.locErr1.add(x - c.located)
	case c.hasLoc:
		m.locErr.add(x - c.located)
	}
}

// chordKm is the great-circle distance (km) of a squared chord on the
// unit sphere.
func chordKm(c2 float64) float64 { return 2 * 6371 * math.Asin(min(1, math.Sqrt(c2)/2)) }

// locateAnswers is how many of the lowest answers place the host: the far
// ones add little and cost a pass over the places each.
const locateAnswers = 6

// places returns the live crawlers grouped by stated position (rebuilt,
// with their cells, when locate ran since).
func (m *micraChooser) places() []placeGroup {
	if m.placesFor == m.locGen && m.placesOK {
		return m.placeList
	}
	idx := make(map[[2]float64]int)
	pl := m.placeList[:0]
	for _, ci := range m.liveOrd {
		if int(ci) >= len(m.pos) || !m.pos[ci].ok {
			continue
		}
		k := [2]float64{m.pos[ci].lat, m.pos[ci].lon}
		i, ok := idx[k]
		if !ok {
			i = len(pl)
			idx[k] = i
			pl = append(pl, placeGroup{pos: m.pos[ci]})
		}
		pl[i].cis = append(pl[i].cis, ci)
	}
	m.placeList, m.placesFor, m.placesOK = pl, m.locGen, true
	m.placeCells = buildPlaceCells(pl)
	placeDensity(pl, &m.placeCells)
	return pl
}

// locatedTarget is one answer turned into a target: the answering
// crawler's position and the chord (unit sphere) the answer puts the host
// at, and 1/(that chord + locateKm0's).
type locatedTarget struct {
	p       crawlerPos
	ch, inv float64
}

// addLocated places the host from the answers all (sorted, lowest first),
// predicts every unprobed candidate with a stated position anew from its
// distance to that place, and adds to cands up to Locate unprobed live
// crawlers with room nearest it. It needs an answer from a crawler with a
// stated position and both distance fits; from one answer the place is
// ringPlace's.
func (m *micraChooser) addLocated(cands []micraCand, all []ProbeResult, mark []uint32, epoch uint32, s uint64) []micraCand {
	if _, _, ok := m.geoPrior(0); !ok { // (refreshes the fit)
		return cands
	}
	f := &m.geoFit
	if !f.ok || !(f.b > 0) {
		return cands
	}
	alpha, beta, ok := m.lin.line()
	if !ok || !(beta > 0) {
		return cands
	}
	const r = 6371.0
	chordOf := func(km float64) float64 { return 2 * math.Sin(min(km, maxSurfaceKm)/(2*r)) }
	ch0 := chordOf(locateKm0)
	var tbuf [locateAnswers]locatedTarget
	ts := tbuf[:0]
	for _, a := range all {
		if len(ts) == locateAnswers {
			break
		}
		if !a.OK || a.RTT <= 0 {
			continue
		}
		ci := m.candCi(cands, a.Crawler)
		if int(ci) >= len(m.pos) || !m.pos[ci].ok {
			continue
		}
		dh := (float64(a.RTT)/float64(time.Millisecond) - alpha) / beta
		dh = min(max(dh, 0), maxSurfaceKm)
		ch := chordOf(dh)
		ts = append(ts, locatedTarget{p: m.pos[ci], ch: ch, inv: 1 / (ch + ch0)})
	}
	if len(ts) == 0 {
		return cands
	}
	// the best place: from two answers on, the least sum of squared log
	// ratios of its distance to each answering crawler and the answer's
	pl := m.places()
	one := len(ts) == 1
	var best int
	if one {
		best = ringPlace(pl, &m.placeCells, &ts[0], ch0)
	} else if m.warmPlace >= 0 && slices.Equal(ts, m.warmTs) {
		// an answer that is not among the lowest moves nothing
		best = m.warmPlace
	} else {
		best = m.bestPlace(pl, &m.placeCells, ts, ch0, m.warmPlace)
		if best >= 0 {
			m.warmPlace, m.warmTs = best, append(m.warmTs[:0], ts...)
		}
	}
	if best < 0 {
		return cands
	}
	// the crawlers nearest that place: its own, then by chord (kept for
	// the decision's next placement at the same place)
	at := &pl[best].pos
	ns := m.nearList
	if !m.nearOK || m.nearPlace != best || m.nearS != s || m.nearGen != m.locGen {
		ns = ns[:0]
		for _, ci := range pl[best].cis {
			ns = append(ns, nearCi{ci, 0, m.crawler.tieKey(ci, s)})
		}
		if len(ns) < m.cfg.Locate*2 {
			for _, ci := range m.neighboursOf(pl[best].cis[0]) {
				ns = append(ns, nearCi{ci, chord2(at, &m.pos[ci]), m.crawler.tieKey(ci, s)})
			}
		}
		slices.SortStableFunc(ns, func(a, b nearCi) int {
			return cmp.Or(cmp.Compare(a.c2, b.c2), cmp.Compare(a.tie, b.tie))
		})
		m.nearList, m.nearOK, m.nearPlace, m.nearS, m.nearGen = ns, true, best, s, m.locGen
	}
	// every candidate with a stated position is predicted anew from its
	// distance to that place, combined with what it was predicted before
	// (precision-weighted): a learned candidate in another region than the
	// host no longer keeps the stop rule probing
	bias, lsd := m.locSpread(f, one)
	predict := func(c *micraCand, c2 float64) {
		raw := math.Log(max(alpha+beta*chordKm(c2), 0.05))
		c.located, c.hasLoc, c.locOne = raw, true, one
		if !c.hasL {
			c.lmu, c.lsd, c.hasL = c.mu, c.sd, true
		}
		w1, w2 := 1/(c.lsd*c.lsd), 1/(lsd*lsd)
		c.mu = (c.lmu*w1 + (raw+bias)*w2) / (w1 + w2)
		c.sd = math.Sqrt(1 / (w1 + w2))
		c.pOK, c.qOK = false, false
	}
	for i := range cands {
		c := &cands[i]
		if c.probed || int(c.ci) >= len(m.pos) || !m.pos[c.ci].ok {
			continue
		}
		predict(c, chord2(at, &m.pos[c.ci]))
	}
	added := 0
	for _, n := range ns {
		if added == m.cfg.Locate {
			break
		}
		ci := n.ci
		if int(ci) >= len(m.liveCi) || !m.liveCi[ci] || mark[ci] == epoch || (m.noRoom != nil && m.noRoom(ci)) {
			continue
		}
		mark[ci] = epoch
		added++
		km := chordKm(n.c2)
		raw := math.Log(max(alpha+beta*km, 0.05))
		cands = append(cands, micraCand{id: m.crawler.ids[ci], ci: ci, mu: raw + bias, sd: lsd, from: "located", anchored: true,
			tie: m.crawler.tieKey(ci, s), located: raw, hasLoc: true, locOne: one})
	}
	return cands
}
