package delegation

import (
	"cmp"
	"fmt"
	"maps"
	"math"
	"math/rand/v2"
	"slices"
	"sort"
	"strconv"
	"testing"
	"time"
)

// TestPairSamplesSearch: samples stay sorted and within their cap through
// inserts and decimation, and the bucketed window search is sort.Search's
// lower bound for every query (duplicates, values on and just below bucket
// edges, sub-millisecond values as on a loopback testnet, far outliers,
// ±Inf).
func TestPairSamplesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, capacity := range []int{2, 7, 128, 300} {
		var s pairSamples
		for n := range 2000 {
			var x float32
			switch rng.IntN(6) {
			case 0: // duplicates
				x = float32(rng.IntN(12)) / 4
			case 4: // on a bucket edge
				x = xBucketEdge[rng.IntN(xBuckets)]
			case 1:
				x = float32(rng.NormFloat64()*20 + 2)
			case 2:
				x = float32(-3 + rng.Float64())
			default:
				x = float32(rng.NormFloat64()*1.5 + 4)
			}
			s.add(x, float32(rng.NormFloat64()), capacity)
			if len(s.s) > capacity {
				t.Fatalf("cap %d: %d samples", capacity, len(s.s))
			}
			for i := 1; i < len(s.s); i++ {
				if s.s[i-1].x > s.s[i].x {
					t.Fatalf("cap %d, step %d: samples not sorted at %d", capacity, n, i)
				}
			}
			for _, v := range []float32{x, x - 0.6, x + 0.6, float32(math.Inf(-1)), float32(math.Inf(1)), -100, 100, 0.25, float32(rng.NormFloat64()*3 + 3),
				xBucketEdge[0], xBucketEdge[xBuckets-1], xBucketEdge[rng.IntN(xBuckets)], math.Nextafter32(xBucketEdge[rng.IntN(xBuckets)], -10)} {
				want := sort.Search(len(s.s), func(i int) bool { return s.s[i].x >= v })
				if got := s.lowerBound(v); got != want {
					t.Fatalf("cap %d, step %d: lowerBound(%v) = %d, sort.Search says %d (%d samples)", capacity, n, v, got, want, len(s.s))
				}
			}
		}
	}
}

// TestBucketOf: a value's bucket has its lower edge at or below the value
// and the next edge above it (bucket 0 for values below every edge) —
// swept, on and next to every edge, past both ends, ±Inf and NaN.
func TestBucketOf(t *testing.T) {
	check := func(v float32) {
		t.Helper()
		b := bucketOf(v)
		if b < 0 || b >= xBuckets {
			t.Fatalf("bucketOf(%v) = %d: no such bucket", v, b)
		}
		if xBucketEdge[b] > v && b != 0 {
			t.Fatalf("bucketOf(%v) = %d: its edge %v is above v", v, b, xBucketEdge[b])
		}
		if b+1 < xBuckets && xBucketEdge[b+1] <= v {
			t.Fatalf("bucketOf(%v) = %d: the next edge %v is not above v", v, b, xBucketEdge[b+1])
		}
	}
	for v := float32(-6); v < 10; v += 0.0173 {
		check(v)
	}
	for _, e := range xBucketEdge {
		check(e)
		check(math.Nextafter32(e, 100))
		check(math.Nextafter32(e, -100))
	}
	for _, v := range []float32{8, 100, 1e30, float32(math.Inf(1)), -1e-30, 1e-30, xBucketLo - 1e-3, -1e30, float32(math.Inf(-1))} {
		check(v)
	}
	if b := bucketOf(float32(math.NaN())); b != 0 {
		t.Fatalf("bucketOf(NaN) = %d", b)
	}
}

// TestAppendFixed3: the decision notes' fast formatting prints what
// strconv's 'f', 3 prints — on ties, next to ties, at the ends, and for
// values it hands to strconv.
func TestAppendFixed3(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 3))
	vals := []float64{0, 1e-300, 0.0005, 0.0015, 0.0125, 0.02, 0.05, 0.1, 0.9994, 0.9995, 0.9996, 1, 1.5, 123.4565, math.Copysign(0, -1), -1e-17, -0.3, math.Inf(1), math.NaN()}
	for k := range 1000 { // every tie k+0.5 thousandths and its neighbours
		v := (float64(k) + 0.5) / 1000
		vals = append(vals, v, math.Nextafter(v, 0), math.Nextafter(v, 1), float64(k)/1000)
	}
	for range 100000 {
		vals = append(vals, rng.Float64(), rng.Float64()*0.05)
	}
	for _, v := range vals {
		want := strconv.FormatFloat(v, 'f', 3, 64)
		if got := string(appendFixed3([]byte("x"), v)); got != "x"+want {
			t.Fatalf("appendFixed3(%v) = %q, strconv says %q", v, got[1:], want)
		}
	}
}

// TestPairSamplesDropNaN: a sample with a NaN x has no place in the order
// and is dropped; the samples and the bucket index stay as they were.
func TestPairSamplesDropNaN(t *testing.T) {
	var s pairSamples
	for _, x := range []float32{1, 2, 3} {
		s.add(x, 0, 96)
	}
	for x := range indexFrom { // enough for the bucket index
		s.add(4+float32(x), 0, 96)
	}
	if s.below == nil {
		t.Fatalf("%d samples and no bucket index", len(s.s))
	}
	before, below := slices.Clone(s.s), *s.below
	s.add(float32(math.NaN()), 0, 96)
	if !slices.Equal(s.s, before) || *s.below != below {
		t.Fatalf("a NaN sample changed the pair: %v (was %v)", s.s, before)
	}
}

// TestBelowCounts: the packed bucket counts read back what was set and
// incremented, lane by lane, up to the largest count a capacity allows,
// with no carry into a neighbouring bucket.
func TestBelowCounts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 5))
	var c belowCounts
	var want [xBuckets]int
	for step := range 20000 {
		switch b := rng.IntN(xBuckets + 1); rng.IntN(3) {
		case 0:
			v := rng.IntN(math.MaxUint16 + 1)
			if b == xBuckets {
				b--
			}
			c.set(b, v)
			want[b] = v
		default:
			if b < xBuckets && want[b] == math.MaxUint16 {
				continue // a capacity ≤ MaxUint16 never counts past it
			}
			ok := true
			for i := b; i < xBuckets; i++ {
				ok = ok && want[i] < math.MaxUint16
			}
			if !ok {
				continue
			}
			c.incFrom(b)
			for i := b; i < xBuckets; i++ {
				want[i]++
			}
		}
		for i := range want {
			if got := c.get(i); got != want[i] {
				t.Fatalf("step %d: bucket %d reads %d, want %d", step, i, got, want[i])
			}
		}
	}
}

// TestCandidateSorts: the hand-written sorts of a decision (candidates by
// candFirst, a round's candidates by marginal) give the order of a general
// sort with the comparisons they replaced, for few and many candidates,
// with ties on every key but the last, signed zeros and NaN (a degenerate
// prediction).
func TestCandidateSorts(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	pick := func(vals ...float64) float64 { return vals[rng.IntN(len(vals))] }
	for n := range 160 {
		// NaN in one field at most (none, win, mu or n), so that each
		// field's NaN check is what sends the slice to the general sort
		nanIn := n % 4
		nan := func(field int, vals ...float64) float64 {
			if field == nanIn {
				vals = append(vals, math.NaN())
			}
			return pick(vals...)
		}
		raw := make([]micraCand, n/2)
		for i := range raw {
			raw[i] = micraCand{id: CrawlerID(strconv.Itoa(rng.IntN(1000000)) + "-" + strconv.Itoa(i)), // unique
				win: nan(1, 0, 0, 0.5, 1), mu: nan(2, 1, 2, 2, math.Copysign(0, -1), 0, math.Inf(1)),
				n: nan(3, 0, 3, 3), tie: uint64(rng.IntN(3))}
		}
		n := n / 2
		order, want := make([]int, n), make([]int, n)
		for i := range order {
			order[i], want[i] = i, i
		}
		rng.Shuffle(n, func(i, j int) { order[i], order[j] = order[j], order[i] })
		copy(want, order)
		// the reference order, spelled out rather than candCompare: with a
		// NaN sortCands sorts by candCompare itself, which it cannot check
		slices.SortFunc(want, func(i, j int) int {
			a, b := &raw[i], &raw[j]
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
		})
		sortCands(order, raw)
		if !slices.Equal(order, want) {
			t.Fatalf("%d candidates: sortCands gives %v, want %v", n, order, want)
		}

		ps := make([]candProb, n)
		for i := range ps {
			ps[i] = candProb{i: i, marg: pick(0, 0.1, 0.1, 0.5, math.NaN())}
		}
		rng.Shuffle(n, func(i, j int) { ps[i], ps[j] = ps[j], ps[i] })
		wantPs := slices.Clone(ps)
		slices.SortFunc(wantPs, func(a, b candProb) int {
			if c := cmp.Compare(b.marg, a.marg); c != 0 {
				return c
			}
			return cmp.Compare(a.i, b.i)
		})
		sortByMarginal(ps)
		for i := range ps {
			if ps[i].i != wantPs[i].i {
				t.Fatalf("%d candidates: sortByMarginal puts %d at %d, want %d", n, ps[i].i, i, wantPs[i].i)
			}
		}
	}
}

// TestNextUp32 agrees with math.Nextafter32 towards +Inf.
func TestNextUp32(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 11))
	vals := []float32{0, float32(math.Copysign(0, -1)), 1, -1, math.SmallestNonzeroFloat32, -math.SmallestNonzeroFloat32,
		math.MaxFloat32, -math.MaxFloat32, float32(math.Inf(-1)), xBucketLo, 7.75}
	for range 10000 {
		vals = append(vals, float32(rng.NormFloat64()*10), math.Float32frombits(rng.Uint32()))
	}
	for _, v := range vals {
		if v != v || math.IsInf(float64(v), 1) {
			continue // beat never asks
		}
		want := math.Nextafter32(v, float32(math.Inf(1)))
		if got := nextUp32(v); math.Float32bits(got) != math.Float32bits(want) {
			t.Fatalf("nextUp32(%v) = %v, Nextafter32 says %v", v, got, want)
		}
	}
}

// TestPairFromLowest: with PairFromLowest k, a record's pairs (a, b) are
// learned only for a among its k lowest answers (failed answers neither
// count nor pair), b being any answer; 0 or negative learns every pair.
func TestPairFromLowest(t *testing.T) {
	const n = 10
	var ps []ProbeResult
	for i := range n {
		// answers out of order, so the cut is not the first k in the record
		rtt := time.Duration((i*7)%n+1) * time.Millisecond
		ps = append(ps, ProbeResult{Crawler: CrawlerID(fmt.Sprintf("c%d", i)), RTT: rtt, OK: true})
	}
	ps = append(ps, ProbeResult{Crawler: "down", OK: false})
	for _, tc := range []struct{ k, wantFirst int }{{8, 8}, {0, n}, {-1, n}, {n, n}, {3, 3}} {
		m := &micraChooser{cfg: MicraConfig{PairFromLowest: tc.k}.withDefaults(), crawler: newCrawlerIndex()}
		m.pairs = newPairModel(m.crawler, 96, 0.3, 0.3)
		cis, xs := make([]uint32, len(ps)), make([]float64, len(ps))
		for i, p := range ps {
			cis[i] = m.crawler.id(p.Crawler)
			if p.OK {
				xs[i] = lnMs(p.RTT)
			}
		}
		m.pairs.learn(ps, cis, xs, m.pairCut(ps, xs))
		firsts := 0
		for i, a := range ps[:n] {
			learned := 0
			for j := range ps {
				if i != j && m.pairs.has(cis[i], cis[j]) {
					learned++
				}
			}
			rank := int(a.RTT / time.Millisecond) // 1 = lowest
			switch {
			case rank <= tc.wantFirst && learned != n-1:
				t.Errorf("k=%d: answer of rank %d is first of %d pairs, want %d (every other valid answer)", tc.k, rank, learned, n-1)
			case rank > tc.wantFirst && learned != 0:
				t.Errorf("k=%d: answer of rank %d is first of %d pairs, want none", tc.k, rank, learned)
			}
			if rank <= tc.wantFirst {
				firsts++
			}
		}
		if firsts != tc.wantFirst {
			t.Errorf("k=%d: %d answers learned as first, want %d", tc.k, firsts, tc.wantFirst)
		}
	}
}

// TestPairSlotsMatchSamples: pairs kept in a row's slots (inline, then
// spilled to a pair of their own) hold the samples, in the same order,
// that a pair of their own would hold after the same inserts — through
// row growth, NaN samples, duplicates and thinning at small and large caps
// — and beat reads them alike (the dense table's pairs are the reference).
func TestPairSlotsMatchSamples(t *testing.T) {
	for _, capacity := range []int{1, 2, 3, 4, 7, 96} {
		rng := rand.New(rand.NewPCG(uint64(capacity), 7))
		pm := newPairModel(newCrawlerIndex(), capacity, 0.3, 0.3)
		ref := map[[2]uint32]*pairSamples{}
		for range 20000 {
			// many b per a (rows grow), a few pairs with many samples
			a := uint32(denseN + rng.IntN(5))
			b := uint32(rng.IntN(3000))
			if rng.IntN(4) == 0 {
				b = uint32(rng.IntN(4))
			}
			x := float32(rng.IntN(40)) / 8 // duplicates
			if rng.IntN(500) == 0 {
				x = float32(math.NaN())
			}
			y := float32(rng.NormFloat64())
			pm.add(a, b, x, y)
			k := [2]uint32{a, b}
			if ref[k] == nil {
				ref[k] = &pairSamples{}
			}
			ref[k].add(x, y, capacity)
		}
		inline, spilled := 0, 0
		keys := slices.SortedFunc(maps.Keys(ref), func(a, b [2]uint32) int {
			return cmp.Or(cmp.Compare(a[0], b[0]), cmp.Compare(a[1], b[1]))
		})
		for _, k := range keys {
			want := ref[k]
			got, _, ok := pm.view(k[0], k[1])
			if !ok || !slices.Equal(got, want.s) {
				t.Fatalf("cap %d, pair %v: samples %v (known %v), want %v", capacity, k, got, ok, want.s)
			}
			// the same samples as a dense pair: the same estimate, bit for bit
			d := pm.samples(k[0]%denseN, k[1]%(denseN/2)+denseN/2, true)
			d.s, d.below = slices.Clone(want.s), nil
			d.recount()
			for range 5 {
				xa, lnT, prior := float64(rng.IntN(40))/8, rng.NormFloat64()+2, rng.Float64()
				p1, w1 := pm.beat(k[0], k[1], xa, lnT, prior)
				p2, w2 := pm.beat(k[0]%denseN, k[1]%(denseN/2)+denseN/2, xa, lnT, prior)
				if p1 != p2 || w1 != w2 {
					t.Fatalf("cap %d, pair %v: beat %v (w %v) from the row, %v (w %v) from the same samples in the dense table", capacity, k, p1, w1, p2, w2)
				}
			}
			if sl := pm.slot(k[0], k[1]); sl.n&pairBig != 0 {
				spilled++
			} else {
				inline++
			}
		}
		if inline == 0 || (capacity > pairInline && spilled == 0) {
			t.Fatalf("cap %d: %d pairs inline, %d spilled: the test exercises one kind", capacity, inline, spilled)
		}
		if p, w := pm.beat(denseN, 4000, 1, 2, 0.25); p != 0.25 || w != 0 {
			t.Fatalf("unknown pair: beat %v with weight %v, want the prior 0.25 and 0", p, w)
		}
	}
}
