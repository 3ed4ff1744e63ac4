package delegation

import (
	"math"
	"time"
)

// pairModel learns, from probe answers alone, how one crawler's RTT to a
// host predicts another's: for every ordered pair (a, b) probed on the same
// host it keeps samples of x = ln RTT(a) and y = ln RTT(b) − ln RTT(a). Given
// a new answer from a, the share of past hosts with a similar x where b came
// in under a threshold estimates the chance that b beats it. This is what
// geography would tell (a host 4 ms from a is far from everybody a is far
// from), learned without knowing where anything is.
type pairModel struct {
	crawler *crawlerIndex
	dense   []*pairSamples // [a*denseN+b] for the first denseN crawlers
	// rows[a][b]: the other pairs, a small map per first crawler — a
	// decision reads the pairs of its few lowest answers with every
	// candidate, so the rows it touches stay in cache (one map of every
	// pair missed it on nearly every lookup at 1000 crawlers)
	rows  []map[uint32]*pairSamples
	cap   int
	bw    float64 // kernel bandwidth on x (ln ms)
	alpha float64 // weight of the prior, in samples
}

// crawlerIndex gives crawlers small dense numbers for compact keys.
type crawlerIndex struct {
	idx  map[CrawlerID]uint32
	ids  []CrawlerID
	hash []uint64 // FNV-1a of the id: name-neutral tie-breaks (tieKey)
}

func newCrawlerIndex() *crawlerIndex { return &crawlerIndex{idx: make(map[CrawlerID]uint32)} }

func (x *crawlerIndex) id(c CrawlerID) uint32 {
	i, ok := x.idx[c]
	if !ok {
		i = uint32(len(x.ids))
		x.idx[c] = i
		x.ids = append(x.ids, c)
		x.hash = append(x.hash, fnv64a(c))
	}
	return i
}

// tieKey orders crawlers that are otherwise equal for subnet s: a hash of
// name and subnet, so no crawler is favoured everywhere by its name (names
// sort in placement order in some testnets), yet every peer breaks the tie
// the same way.
func (x *crawlerIndex) tieKey(ci uint32, s uint64) uint64 { return mix64(x.hash[ci] ^ mix64(s)) }

// pairSamples are kept sorted by x, so a query reads only its window. When
// full, every other sample is dropped: the distribution stays, the count
// halves. x and y sit side by side: a window is one stream of memory.
//
// below finds a window's start without a binary search: below[b] counts the
// samples with x < xBucketEdge[b] (fixed edges every xBucketWidth ln ms), so
// the samples before below[b] all lie left of any v ≥ that edge, and a
// query scans forward from there — the binary search's answer, read from
// the cache line the window starts in instead of a dozen.
type pairSamples struct {
	s     []pairSample
	below belowCounts
}

// belowCounts are the 48 bucket counts, four uint16 lanes to a word: an
// insert adds one to every bucket above its own, a word (four buckets) at
// a time. A lane never carries into the next: counts stay ≤ capacity ≤
// math.MaxUint16.
type belowCounts [xBuckets / 4]uint64

const laneOnes = 0x0001_0001_0001_0001

func (c *belowCounts) get(b int) int { return int(uint16(c[b>>2] >> (16 * (b & 3)))) }

func (c *belowCounts) set(b, v int) {
	sh := 16 * (b & 3)
	c[b>>2] = c[b>>2]&^(0xffff<<sh) | uint64(uint16(v))<<sh
}

// incFrom adds one to the counts of buckets b and above.
func (c *belowCounts) incFrom(b int) {
	if b >= xBuckets {
		return
	}
	w := b >> 2
	c[w] += laneOnes << (16 * (b & 3)) // lanes below b shift out
	for w++; w < len(c); w++ {
		c[w] += laneOnes
	}
}

// pairSample is one host probed by both crawlers of a pair (a, b): x = ln
// RTT(a), y = ln RTT(b) − ln RTT(a).
type pairSample struct{ x, y float32 }

const (
	xBuckets     = 48
	xBucketLo    = -4.0 // ln ms: 0.018 ms
	xBucketWidth = 0.25 // the last edge, 7.75, is 2.3 s
)

// xBucketEdge[b] is the lower edge of bucket b.
var xBucketEdge = func() (e [xBuckets]float32) {
	for b := range e {
		e[b] = float32(xBucketLo + float64(b)*xBucketWidth)
	}
	return e
}()

// bucketOf is the last bucket whose lower edge is ≤ v (0 when v is below
// every edge or NaN).
func bucketOf(v float32) int {
	f := (float64(v) - xBucketLo) / xBucketWidth
	switch {
	case !(f > 0):
		return 0
	case f >= xBuckets-1: // also +Inf
		return xBuckets - 1
	}
	b := int(f)
	// rounding of f may land one bucket off: the edges decide
	for b > 0 && xBucketEdge[b] > v {
		b--
	}
	for b+1 < xBuckets && xBucketEdge[b+1] <= v {
		b++
	}
	return b
}

// lowerBound is the index of the first sample whose x is at least v.
func (s *pairSamples) lowerBound(v float32) int {
	b := bucketOf(v)
	i := 0
	if xBucketEdge[b] <= v {
		i = s.below.get(b)
	}
	ss := s.s
	for i < len(ss) && ss[i].x < v {
		i++
	}
	return i
}

// add inserts a sample (capacity ≤ math.MaxUint16: below counts in uint16).
// A NaN x has no place in the order and is dropped.
func (s *pairSamples) add(x, y float32, capacity int) {
	if x != x {
		return
	}
	if len(s.s) >= capacity {
		j := 0
		for i := 0; i < len(s.s); i += 2 {
			s.s[j] = s.s[i]
			j++
		}
		s.s = s.s[:j]
		s.recount()
	}
	b := bucketOf(x)
	i := 0
	if xBucketEdge[b] <= x {
		i = s.below.get(b)
		b++ // buckets b+1… have edges above x
	} // else x lies below every edge (b is 0): every bucket counts it
	ss := s.s
	for i < len(ss) && ss[i].x < x {
		i++
	}
	// insert at i by hand: slices.Insert's generality (several values,
	// overlap checks) cost more than the move itself
	ss = append(ss, pairSample{})
	copy(ss[i+1:], ss[i:])
	ss[i] = pairSample{x, y}
	s.s = ss
	s.below.incFrom(b)
}

// recount rebuilds below from the samples.
func (s *pairSamples) recount() {
	i := 0
	for b, edge := range xBucketEdge {
		for i < len(s.s) && s.s[i].x < edge {
			i++
		}
		s.below.set(b, i)
	}
}

// denseN: pairs of the first denseN crawler indexes live in a flat table
// (a lookup per candidate and answer, on the hot path), the rest in a map.
const denseN = 64

// samples returns the samples of (a, b), created when create is set (nil
// otherwise when unknown).
func (p *pairModel) samples(a, b uint32, create bool) *pairSamples {
	if a < denseN && b < denseN {
		if p.dense == nil {
			if !create {
				return nil
			}
			p.dense = make([]*pairSamples, denseN*denseN)
		}
		s := p.dense[a*denseN+b]
		if s == nil && create {
			// pairs of the first crawlers meet often: room for a full
			// set at once (growing by doubling cost more)
			s = &pairSamples{s: make([]pairSample, 0, p.cap)}
			p.dense[a*denseN+b] = s
		}
		return s
	}
	if int(a) >= len(p.rows) {
		if !create {
			return nil
		}
		p.rows = append(p.rows, make([]map[uint32]*pairSamples, int(a)+1-len(p.rows))...)
	}
	row := p.rows[a]
	s := row[b]
	if s == nil && create {
		if row == nil {
			row = make(map[uint32]*pairSamples)
			p.rows[a] = row
		}
		s = &pairSamples{}
		row[b] = s
	}
	return s
}

func newPairModel(ci *crawlerIndex, capacity int, bandwidth, alpha float64) *pairModel {
	return &pairModel{crawler: ci, cap: capacity, bw: bandwidth, alpha: alpha}
}

// learn adds the ordered pairs of the answers of one host whose first
// answer is at most cut (ln ms; +Inf: every pair); cis and xs are each
// answer's crawler index and ln RTT (valid where OK and RTT > 0).
func (p *pairModel) learn(ps []ProbeResult, cis []uint32, xs []float64, cut float64) {
	for i, a := range ps {
		if !a.OK || a.RTT <= 0 || xs[i] > cut {
			continue
		}
		xa, ia := xs[i], cis[i]
		for j, b := range ps {
			if i == j || !b.OK || b.RTT <= 0 || ia == cis[j] {
				continue
			}
			s := p.samples(ia, cis[j], true)
			s.add(float32(xa), float32(xs[j]-xa), p.cap)
		}
	}
}

// beat estimates P(ln RTT(b) < lnT) given that a answered ln RTT = xa,
// shrunk towards prior with the weight of one observation, and returns the
// effective number of samples behind it.
//
// The kernel is Epanechnikov's, of half-width hw = 2·bw around xa: a sample
// at x weighs 1 − d², d = (x − xa)/hw. The sums are taken apart — Σ kw =
// n − Σ d² over the window, and the hits' Σ kw = n_beat − Σ_beat d² — so a
// sample costs a square and three additions, with no weight of its own to
// compute and test. The result equals the plain kernel's up to rounding
// (at the top edge a weight may round to −1e-16 where the plain kernel
// skips it).
func (p *pairModel) beat(a, b uint32, xa, lnT, prior float64) (pb, w float64) {
	s := p.samples(a, b, false)
	if s == nil {
		return prior, 0
	}
	t := float32(lnT - xa)
	hw := 2 * p.bw
	bottom, top := xa-hw, xa+hw
	// the window starts at the first sample x ≥ xa − hw: for a float32 x,
	// x ≥ the smallest float32 ≥ xa − hw (rounded down, the edge would let
	// in samples that weigh 1 − d² < 0, which the plain kernel skips)
	lo := float32(bottom)
	if float64(lo) < bottom {
		lo = nextUp32(lo)
	}
	ss := s.s[s.lowerBound(lo):]
	inv := 1 / hw // a multiplication per sample instead of a division
	var sd2, nBeat, sBeat float64
	n := 0
	for ; n < len(ss); n++ {
		x := float64(ss[n].x)
		if x > top {
			break
		}
		d := (x - xa) * inv
		d2 := d * d
		sd2 += d2
		// branch-free: whether a sample beats t is a coin flip for the
		// branch predictor
		var beats uint64
		if ss[n].y < t {
			beats = 1
		}
		f := float64(beats)
		nBeat += f
		sBeat += f * d2
	}
	w = float64(n) - sd2
	hit := nBeat - sBeat
	return (hit + p.alpha*prior) / (w + p.alpha), w
}

// nextUp32 is the next float32 above f (math.Nextafter32(f, +Inf) for the
// finite f and -Inf beat passes it, inlined: half of all windows need it).
func nextUp32(f float32) float32 {
	b := math.Float32bits(f)
	switch {
	case f > 0:
		b++
	case f < 0:
		b--
	default: // ±0
		return math.SmallestNonzeroFloat32
	}
	return math.Float32frombits(b)
}

func lnMs(d time.Duration) float64 { return math.Log(float64(d)/float64(time.Millisecond) + 1e-3) }
