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
	// rows[a]: the other pairs (a, ·), a small table per first crawler — a
	// decision reads the pairs of its few lowest answers with every
	// candidate, so the rows it touches stay in cache
	rows []pairRow
	// big: the pairs that outgrew their slot's inline samples
	big   []pairSamples
	cap   int
	bw    float64 // kernel bandwidth on x (ln ms)
	alpha float64 // weight of the prior, in samples
}

// pairRow holds the pairs (a, b) of one a by b in an open-addressing table
// (linear probing, a power of two long). Most pairs among thousands of
// crawlers meet on a host or two: their samples sit in the slot itself, so
// reading a pair costs the one cache line the lookup lands on, and the
// table holds no pointers for the collector to follow.
type pairRow struct {
	slots []pairSlot
	used  int
}

// pairSlot is one pair (a, b) of a row: b + 1 (0: an empty slot), and n
// samples inline, or pairBig | the pair's index in pairModel.big.
type pairSlot struct {
	b  uint32
	n  uint32
	in [pairInline]pairSample
}

// pairInline samples fit a slot of 32 bytes, two to a cache line.
const pairInline = 3

const pairBig = 1 << 31

// slot is b's slot, or the empty one where b would go (the table is
// never full: insert grows it at three quarters).
func (r *pairRow) slot(b uint32) *pairSlot {
	mask := uint32(len(r.slots) - 1)
	for i := slotHash(b) & mask; ; i = (i + 1) & mask {
		if sl := &r.slots[i]; sl.b == b+1 || sl.b == 0 {
			return sl
		}
	}
}

// find is the slot of b, or nil.
func (r *pairRow) find(b uint32) *pairSlot {
	if len(r.slots) == 0 {
		return nil
	}
	if sl := r.slot(b); sl.b != 0 {
		return sl
	}
	return nil
}

// insert returns the slot of b, taking an empty one when b is new.
func (r *pairRow) insert(b uint32) *pairSlot {
	if 4*(r.used+1) > 3*len(r.slots) {
		r.grow()
	}
	sl := r.slot(b)
	if sl.b == 0 {
		sl.b = b + 1
		r.used++
	}
	return sl
}

func (r *pairRow) grow() {
	old := r.slots
	r.slots = make([]pairSlot, max(8, 2*len(old)))
	mask := uint32(len(r.slots) - 1)
	for _, sl := range old {
		if sl.b == 0 {
			continue
		}
		i := slotHash(sl.b-1) & mask
		for r.slots[i].b != 0 {
			i = (i + 1) & mask
		}
		r.slots[i] = sl
	}
}

// slotHash spreads crawler indexes over a row (Fibonacci hashing; the
// mask keeps the low bits, so the product is folded down first).
func slotHash(b uint32) uint32 {
	h := b * 0x9e3779b1
	return h ^ h>>16
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
//
// below exists only from indexFrom samples on: among thousands of crawlers
// most pairs meet on a host or two, and a scan of a few samples costs less
// than the 96-byte index each pair would carry.
type pairSamples struct {
	s     []pairSample
	below *belowCounts
}

// indexFrom is the number of samples from which a pair keeps its bucket
// index (below): fewer are scanned from the start.
const indexFrom = 16

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
func (s *pairSamples) lowerBound(v float32) int { return lowerBound(s.s, s.below, v) }

// lowerBound is the index of the first of samples ss (bucket counts below,
// nil for none) whose x is at least v.
func lowerBound(ss []pairSample, below *belowCounts, v float32) int {
	i := 0
	if below != nil {
		if b := bucketOf(v); xBucketEdge[b] <= v {
			i = below.get(b)
		}
	}
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
	i, b := 0, 0
	if s.below != nil {
		b = bucketOf(x)
		if xBucketEdge[b] <= x {
			i = s.below.get(b)
			b++ // buckets b+1… have edges above x
		} // else x lies below every edge (b is 0): every bucket counts it
	}
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
	switch {
	case s.below != nil:
		s.below.incFrom(b)
	case len(ss) >= indexFrom:
		s.below = new(belowCounts)
		s.recount()
	}
}

// recount rebuilds below from the samples (none below indexFrom of them).
func (s *pairSamples) recount() {
	if len(s.s) < indexFrom {
		s.below = nil
		return
	}
	if s.below == nil {
		s.below = new(belowCounts)
	}
	i := 0
	for b, edge := range xBucketEdge {
		for i < len(s.s) && s.s[i].x < edge {
			i++
		}
		s.below.set(b, i)
	}
}

// denseN: pairs of the first denseN crawler indexes live in a flat table
// (a lookup per candidate and answer, on the hot path), the rest in rows.
const denseN = 64

// samples returns the samples of dense pair (a, b) (a, b < denseN),
// created when create is set (nil otherwise when unknown).
func (p *pairModel) samples(a, b uint32, create bool) *pairSamples {
	if p.dense == nil {
		if !create {
			return nil
		}
		p.dense = make([]*pairSamples, denseN*denseN)
	}
	s := p.dense[a*denseN+b]
	if s == nil && create {
		// pairs of the first crawlers meet often: room for a full set at
		// once (growing by doubling cost more)
		s = &pairSamples{s: make([]pairSample, 0, p.cap)}
		p.dense[a*denseN+b] = s
	}
	return s
}

// slot is the row slot of (a, b) beyond the dense table, or nil.
func (p *pairModel) slot(a, b uint32) *pairSlot {
	if int(a) >= len(p.rows) {
		return nil
	}
	return p.rows[a].find(b)
}

func (p *pairModel) insertSlot(a, b uint32) *pairSlot {
	if int(a) >= len(p.rows) {
		p.rows = append(p.rows, make([]pairRow, int(a)+1-len(p.rows))...)
	}
	return p.rows[a].insert(b)
}

// spill moves a slot's inline samples to a pair of their own in big.
func (p *pairModel) spill(sl *pairSlot) {
	n := int(sl.n)
	ps := pairSamples{s: make([]pairSample, n, 2*pairInline+2)}
	copy(ps.s, sl.in[:n])
	ps.recount()
	sl.n = pairBig | uint32(len(p.big))
	p.big = append(p.big, ps)
}

// view is the samples of (a, b) and their bucket counts; ok is false
// when the pair is unknown (a known pair may have no samples: NaN ones
// are dropped).
func (p *pairModel) view(a, b uint32) (ss []pairSample, below *belowCounts, ok bool) {
	if a < denseN && b < denseN {
		if s := p.samples(a, b, false); s != nil {
			return s.s, s.below, true
		}
		return nil, nil, false
	}
	sl := p.slot(a, b)
	switch {
	case sl == nil:
		return nil, nil, false
	case sl.n&pairBig != 0:
		s := &p.big[sl.n&^pairBig]
		return s.s, s.below, true
	}
	return sl.in[:sl.n], nil, true
}

// add adds the sample (x, y) to pair (a, b): inline while it fits (or
// the cap thins it), else in a pair of its own.
func (p *pairModel) add(a, b uint32, x, y float32) {
	if a < denseN && b < denseN {
		p.samples(a, b, true).add(x, y, p.cap)
		return
	}
	sl := p.insertSlot(a, b)
	if sl.n&pairBig == 0 {
		n := int(sl.n)
		if n < pairInline || n >= p.cap {
			// the same insertion (and thinning at the cap) as a pair's
			// own, within the slot: fewer than indexFrom samples keep no
			// bucket counts
			s := pairSamples{s: sl.in[:n:pairInline]}
			s.add(x, y, p.cap)
			sl.n = uint32(copy(sl.in[:], s.s))
			return
		}
		p.spill(sl)
	}
	p.big[sl.n&^pairBig].add(x, y, p.cap)
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
			p.add(ia, cis[j], float32(xa), float32(xs[j]-xa))
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
	ss, below, ok := p.view(a, b)
	if !ok {
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
	ss = ss[lowerBound(ss, below, lo):]
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
