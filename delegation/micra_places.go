package delegation

import (
	"cmp"
	"math"
	"slices"
)

// Finding the best place without scoring every place.
//
// Among 10,000 crawlers there are thousands of stated positions, and each
// placement (two or three a decision) scored every one against up to
// locateAnswers answers, a logarithm each. The places are grouped into
// cells — cubes of placeCellChord on the unit sphere's coordinates — and
// each cell is bounded by a ball around the mean of its places. By the
// triangle inequality a place's chord to an answering crawler lies within
// the ball's centre distance ± its radius, which bounds the place's score
// from below; cells are visited lowest bound first and the search stops at
// the first whose bound exceeds the best score. It finds the place the full
// scan finds: the least score, the lowest index among equal scores.

// placeCellChord is a cell's edge on the unit sphere's coordinates (about
// 380 km), placeGroupChord a group's (about 1,900 km): a few dozen groups
// of a few hundred cells among thousands of places. A group whose bound
// exceeds the best score spares its cells' bounds as well.
const (
	placeCellChord  = 0.06
	placeGroupChord = 0.3
)

// placeIndexFrom is the number of places from which the cells are built:
// below it the full scan costs less than the bounds.
const placeIndexFrom = 128

// placeCell is a ball holding some places: centre (x, y, z), chord
// radius r, and its members, ascending — places (indexes into placeList)
// for a cell, cells for a group; n is a cell's crawlers.
type placeCell struct {
	x, y, z, r float64
	kids       []int32
	n          int32
}

// placeCells is the two-level index of a placeList; byDens lists the cells
// by crawlers, most first (then by index).
type placeCells struct {
	cells, groups []placeCell
	byDens        []int32
}

// cubeKey is the cube of edge h holding unit vector (x, y, z).
func cubeKey(x, y, z, h float64) [3]int32 {
	f := func(v float64) int32 { return int32(math.Floor((v + 1) / h)) }
	return [3]int32{f(x), f(y), f(z)}
}

// buildPlaceCells indexes pl (nothing below placeIndexFrom places).
func buildPlaceCells(pl []placeGroup) placeCells {
	var pc placeCells
	if len(pl) < placeIndexFrom {
		return pc
	}
	group := func(out []placeCell, n int, key func(i int) [3]int32) []placeCell {
		at := make(map[[3]int32]int)
		for i := range n {
			k := key(i)
			c, ok := at[k]
			if !ok {
				c = len(out)
				at[k] = c
				out = append(out, placeCell{})
			}
			out[c].kids = append(out[c].kids, int32(i))
		}
		return out
	}
	// each ball: the mean of its places, and the farthest of them
	ball := func(cl *placeCell, places func(yield func(p *crawlerPos))) {
		n := 0.0
		places(func(p *crawlerPos) { cl.x, cl.y, cl.z, n = cl.x+p.x, cl.y+p.y, cl.z+p.z, n+1 })
		cl.x, cl.y, cl.z = cl.x/n, cl.y/n, cl.z/n
		places(func(p *crawlerPos) {
			dx, dy, dz := p.x-cl.x, p.y-cl.y, p.z-cl.z
			cl.r = max(cl.r, math.Sqrt(dx*dx+dy*dy+dz*dz))
		})
	}
	pc.cells = group(nil, len(pl), func(i int) [3]int32 {
		p := &pl[i].pos
		return cubeKey(p.x, p.y, p.z, placeCellChord)
	})
	for c := range pc.cells {
		cl := &pc.cells[c]
		ball(cl, func(yield func(p *crawlerPos)) {
			for _, i := range cl.kids {
				yield(&pl[i].pos)
			}
		})
		for _, i := range cl.kids {
			cl.n += int32(len(pl[i].cis))
		}
		pc.byDens = append(pc.byDens, int32(c))
	}
	slices.SortFunc(pc.byDens, func(a, b int32) int {
		if c := cmp.Compare(pc.cells[b].n, pc.cells[a].n); c != 0 {
			return c
		}
		return cmp.Compare(a, b)
	})
	pc.groups = group(nil, len(pc.cells), func(c int) [3]int32 {
		cl := &pc.cells[c]
		return cubeKey(cl.x, cl.y, cl.z, placeGroupChord)
	})
	for g := range pc.groups {
		gr := &pc.groups[g]
		ball(gr, func(yield func(p *crawlerPos)) {
			for _, c := range gr.kids {
				for _, i := range pc.cells[c].kids {
					yield(&pl[i].pos)
				}
			}
		})
	}
	return pc
}

// placeSlack widens every bound's distance interval: the bound must stay
// below the score as the scan computes it, rounding included.
const placeSlack = 1e-9

// lowerBound is the least score any place of the cell can have against
// targets ts (chord offset ch0), or some bound above stop once the sum
// exceeds it.
func (cl *placeCell) lowerBound(ts []locatedTarget, ch0, stop float64) float64 {
	lb := 0.0
	for j := range ts {
		t := &ts[j].p
		dx, dy, dz := t.x-cl.x, t.y-cl.y, t.z-cl.z
		d := math.Sqrt(dx*dx + dy*dy + dz*dz)
		lo, hi := max(d-cl.r-placeSlack, 0), d+cl.r+placeSlack
		var near float64
		switch {
		case ts[j].ch < lo:
			near = lo
		case ts[j].ch > hi:
			near = hi
		default:
			continue
		}
		// |ln x| ≥ 2|x−1|/(x+1): a bound without a logarithm
		x := (near + ch0) * ts[j].inv
		e := 2 * (x - 1) / (x + 1)
		lb += e * e
		if lb > stop {
			break
		}
	}
	if lb != lb { // (no NaN arises from stated positions; never prune on one)
		return 0
	}
	return lb
}

// placeScore is place p's score against ts: the sum of squared log ratios
// of its chord to each answering crawler (plus ch0) and the answer's. It
// stops once the sum exceeds stop (the sums only grow).
func placeScore(p *crawlerPos, ts []locatedTarget, ch0, stop float64) float64 {
	score := 0.0
	for j := range ts {
		e := math.Log((math.Sqrt(chord2(p, &ts[j].p)) + ch0) * ts[j].inv)
		score += e * e
		if score > stop {
			break
		}
	}
	return score
}

// placeRel is the relative margin by which a place's bound must pass the
// best score to spare its logarithms: the bound and the score, computed
// from the same chords, differ from their exact values by a few ulps.
const placeRel = 1e-9

// placeScoreBounded is placeScore for a place whose score matters only
// below stop: it first sums the bound |ln x| ≥ 2|x−1|/(x+1) of each term,
// and returns that bound, above stop, when it is clearly so; otherwise the
// score as placeScore computes it.
func placeScoreBounded(p *crawlerPos, ts []locatedTarget, ch0, stop float64) float64 {
	var xs [locateAnswers]float64
	if len(ts) > len(xs) || !(stop < math.Inf(1)) {
		return placeScore(p, ts, ch0, stop)
	}
	lb, far := 0.0, stop*(1+placeRel)
	for j := range ts {
		x := (math.Sqrt(chord2(p, &ts[j].p)) + ch0) * ts[j].inv
		xs[j] = x
		e := 2 * (x - 1) / (x + 1)
		lb += e * e
		if lb > far {
			return lb
		}
	}
	score := 0.0
	for j := range ts {
		e := math.Log(xs[j])
		score += e * e
		if score > stop {
			break
		}
	}
	return score
}

// bestPlace is the index in pl of the place with the least score against
// ts, the lowest index among equal scores (-1 if none has a finite
// score). pc, when built for pl, spares most places the scoring. warm, a
// place of pl (-1: none), is scored first: the last placement of a
// decision is near the next, and its score prunes from the start — the
// search still finds what the full scan finds.
func (m *micraChooser) bestPlace(pl []placeGroup, pc *placeCells, ts []locatedTarget, ch0 float64, warm int) int {
	best, bestScore := -1, math.Inf(1)
	if warm >= 0 && warm < len(pl) {
		if score := placeScore(&pl[warm].pos, ts, ch0, math.Inf(1)); score < math.Inf(1) {
			best, bestScore = warm, score
		}
	}
	if pc == nil || len(pc.groups) == 0 {
		for i := range pl {
			if score := placeScore(&pl[i].pos, ts, ch0, bestScore); score < bestScore || (score == bestScore && i < best) {
				best, bestScore = i, score
			}
		}
		return best
	}
	groups := m.groupOrder[:0]
	for g := range pc.groups {
		if lb := pc.groups[g].lowerBound(ts, ch0, bestScore); lb <= bestScore {
			groups = append(groups, cellBound{int32(g), lb})
		}
	}
	cells := m.cellOrder
	// groups lowest bound first, each picked when needed: a handful of
	// dozens is visited, a selection per visit costs less than a sort
	for left := groups; len(left) > 0; left = left[1:] {
		k := 0
		for i := 1; i < len(left); i++ {
			if boundFirst(left[i], left[k]) {
				k = i
			}
		}
		left[0], left[k] = left[k], left[0]
		gb := left[0]
		if gb.lb > bestScore {
			break
		}
		cells = cells[:0]
		for _, c := range pc.groups[gb.c].kids {
			if lb := pc.cells[c].lowerBound(ts, ch0, bestScore); lb <= bestScore {
				// insertion: a group holds a dozen cells or so
				j := len(cells)
				cells = append(cells, cellBound{c, lb})
				for ; j > 0 && boundFirst(cells[j], cells[j-1]); j-- {
					cells[j], cells[j-1] = cells[j-1], cells[j]
				}
			}
		}
		for _, cb := range cells {
			if cb.lb > bestScore {
				break
			}
			for _, i := range pc.cells[cb.c].kids {
				score := placeScoreBounded(&pl[i].pos, ts, ch0, bestScore)
				if score < bestScore || (score == bestScore && int(i) < best) {
					best, bestScore = int(i), score
				}
			}
		}
	}
	m.groupOrder, m.cellOrder = groups, cells
	return best
}

// cellBound is a cell (or group) and its lower bound, in the order
// bestPlace visits them.
type cellBound struct {
	c  int32
	lb float64
}

// boundFirst orders cell bounds by bound, then index.
func boundFirst(a, b cellBound) bool {
	return a.lb < b.lb || (a.lb == b.lb && a.c < b.c)
}

// placeDensity sets every place's dens: the crawlers of its cell, or, when
// pl has no cells (a few places), of the places within a cell's edge.
func placeDensity(pl []placeGroup, pc *placeCells) {
	if len(pc.cells) == 0 {
		for i := range pl {
			n := 0
			for j := range pl {
				if chord2(&pl[i].pos, &pl[j].pos) <= placeCellChord*placeCellChord {
					n += len(pl[j].cis)
				}
			}
			pl[i].dens = int32(n)
		}
		return
	}
	for _, cl := range pc.cells {
		for _, i := range cl.kids {
			pl[i].dens = cl.n
		}
	}
}

// ringBand is how far (ln of the distance ratio) a place may lie from the
// ring one answer draws and count as on it: about the spread of the
// distance an answer implies (path stretch). 0.15 and 0.4 placed hosts
// worse at 10,000 crawlers (docs/experiments/2026-11-scale-probes.md).
const ringBand = 0.25

// ringPlace places the host from one answer t: among the places within
// ringBand of its ring, the one with the most crawlers around it (dens),
// then the most of its own, then the least misfit, then the lowest index; with none on the ring, the
// place nearest it (bestPlace with one answer). -1 if pl is empty.
func ringPlace(pl []placeGroup, pc *placeCells, t *locatedTarget, ch0 float64) int {
	c := t.ch + ch0
	lo, hi := max(c*math.Exp(-ringBand)-ch0, 0), c*math.Exp(ringBand)-ch0
	lo2, hi2 := lo*lo, hi*hi
	ts := []locatedTarget{*t}
	best, bestD, bestOwn, bestMiss := -1, int32(-1), 0, math.Inf(1)
	consider := func(i int) {
		if c2 := chord2(&pl[i].pos, &t.p); c2 < lo2 || c2 > hi2 {
			return
		}
		d, own := pl[i].dens, len(pl[i].cis)
		if d < bestD || (d == bestD && own < bestOwn) {
			return
		}
		miss := placeScore(&pl[i].pos, ts, ch0, math.Inf(1))
		if d > bestD || own > bestOwn || miss < bestMiss || (miss == bestMiss && i < best) {
			best, bestD, bestOwn, bestMiss = i, d, own, miss
		}
	}
	if len(pc.cells) == 0 {
		for i := range pl {
			consider(i)
		}
	} else {
		// cells with the most crawlers first: the first on the ring
		// decides, but for its equals
		for _, k := range pc.byDens {
			cl := &pc.cells[k]
			if cl.n < bestD {
				break
			}
			dx, dy, dz := t.p.x-cl.x, t.p.y-cl.y, t.p.z-cl.z
			if d := math.Sqrt(dx*dx + dy*dy + dz*dz); d+cl.r+placeSlack < lo || d-cl.r-placeSlack > hi {
				continue // the ring's band misses the ball
			}
			for _, i := range cl.kids {
				consider(int(i))
			}
		}
	}
	if best >= 0 {
		return best
	}
	for i := range pl {
		if miss := placeScore(&pl[i].pos, ts, ch0, bestMiss); miss < bestMiss {
			best, bestMiss = i, miss
		}
	}
	return best
}
