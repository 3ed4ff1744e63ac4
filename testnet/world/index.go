package world

import (
	"math"
	"slices"

	"github.com/micra-crawler/micra/data/geo"
)

// vec is a position as a unit vector: chord distance between vectors is
// monotonic in great-circle distance, so a plain 3-d k-d tree answers
// nearest and radius queries on the sphere exactly.
type vec [3]float64

func toVec(p geo.Point) vec {
	x, y, z := p.Unit()
	return vec{x, y, z}
}

func (a vec) chord2(b vec) float64 {
	dx, dy, dz := a[0]-b[0], a[1]-b[1], a[2]-b[2]
	return dx*dx + dy*dy + dz*dz
}

// kmFromChord2 converts a squared chord length to great-circle kilometres.
func kmFromChord2(c2 float64) float64 {
	c := math.Sqrt(c2)
	return 2 * geo.EarthRadiusKm * math.Asin(math.Min(1, c/2))
}

// chord2FromKm is the inverse of kmFromChord2 (km beyond half the
// circumference map to the diameter).
func chord2FromKm(km float64) float64 {
	if km < 0 {
		return -1 // no distance is within a negative radius
	}
	ang := km / geo.EarthRadiusKm
	if ang >= math.Pi {
		return 4
	}
	c := 2 * math.Sin(ang/2)
	return c * c
}

// Index is a static spatial index over points on the sphere (a k-d tree on
// unit vectors). It answers nearest-point and within-radius queries; the
// simulator uses it to find the optimal crawler without scanning them all.
type Index struct {
	pts  []vec
	ids  []int32 // tree order → caller's index
	axis []uint8
}

// NewIndex indexes pts; query results are indices into pts.
func NewIndex(pts []geo.Point) *Index {
	ix := &Index{pts: make([]vec, len(pts)), ids: make([]int32, len(pts)), axis: make([]uint8, len(pts))}
	for i, p := range pts {
		ix.pts[i] = toVec(p)
		ix.ids[i] = int32(i)
	}
	ix.build(0, len(pts))
	return ix
}

// build arranges [lo,hi) so its median (by the widest axis) sits at the
// middle, with the smaller half before it and the larger after.
func (ix *Index) build(lo, hi int) {
	if hi-lo <= 1 {
		return
	}
	var mn, mx vec
	for d := range 3 {
		mn[d], mx[d] = math.Inf(1), math.Inf(-1)
	}
	for i := lo; i < hi; i++ {
		for d := range 3 {
			mn[d] = math.Min(mn[d], ix.pts[i][d])
			mx[d] = math.Max(mx[d], ix.pts[i][d])
		}
	}
	ax := 0
	for d := 1; d < 3; d++ {
		if mx[d]-mn[d] > mx[ax]-mn[ax] {
			ax = d
		}
	}
	mid := (lo + hi) / 2
	// sort the span by the axis (ties by id, so the layout is deterministic)
	type pair struct {
		v  vec
		id int32
	}
	tmp := make([]pair, hi-lo)
	for i := range tmp {
		tmp[i] = pair{ix.pts[lo+i], ix.ids[lo+i]}
	}
	slices.SortFunc(tmp, func(a, b pair) int {
		if a.v[ax] != b.v[ax] {
			if a.v[ax] < b.v[ax] {
				return -1
			}
			return 1
		}
		return int(a.id - b.id)
	})
	for i, t := range tmp {
		ix.pts[lo+i], ix.ids[lo+i] = t.v, t.id
	}
	ix.axis[mid] = uint8(ax)
	ix.build(lo, mid)
	ix.build(mid+1, hi)
}

// Len is the number of indexed points.
func (ix *Index) Len() int { return len(ix.pts) }

// Nearest returns the index of the point closest to p and its distance in
// km; -1 when the index is empty. Ties go to the lower index.
func (ix *Index) Nearest(p geo.Point) (int, float64) {
	if len(ix.pts) == 0 {
		return -1, 0
	}
	q := toVec(p)
	best, bestD := int32(-1), math.Inf(1)
	var rec func(lo, hi int)
	rec = func(lo, hi int) {
		if lo >= hi {
			return
		}
		mid := (lo + hi) / 2
		d := q.chord2(ix.pts[mid])
		if d < bestD || (d == bestD && ix.ids[mid] < best) {
			best, bestD = ix.ids[mid], d
		}
		ax := ix.axis[mid]
		diff := q[ax] - ix.pts[mid][ax]
		near, far := [2]int{lo, mid}, [2]int{mid + 1, hi}
		if diff > 0 {
			near, far = far, near
		}
		rec(near[0], near[1])
		if diff*diff <= bestD {
			rec(far[0], far[1])
		}
	}
	rec(0, len(ix.pts))
	return int(best), kmFromChord2(bestD)
}

// Within calls fn for every point at most km kilometres from p, with its
// distance, in no particular order.
func (ix *Index) Within(p geo.Point, km float64, fn func(i int, distKm float64)) {
	q := toVec(p)
	r2 := chord2FromKm(km)
	var rec func(lo, hi int)
	rec = func(lo, hi int) {
		if lo >= hi {
			return
		}
		mid := (lo + hi) / 2
		if d := q.chord2(ix.pts[mid]); d <= r2 {
			fn(int(ix.ids[mid]), kmFromChord2(d))
		}
		ax := ix.axis[mid]
		diff := q[ax] - ix.pts[mid][ax]
		if diff <= 0 || diff*diff <= r2 {
			rec(lo, mid)
		}
		if diff >= 0 || diff*diff <= r2 {
			rec(mid+1, hi)
		}
	}
	rec(0, len(ix.pts))
}

// Search visits points within km of p, nearer subtrees first, calling fn
// with each point's distance; fn returns the radius to keep searching
// (return km to keep it, less to shrink it as better answers are found).
func (ix *Index) Search(p geo.Point, km float64, fn func(i int, distKm float64) float64) {
	q := toVec(p)
	r2 := chord2FromKm(km)
	lastKm := km
	var rec func(lo, hi int)
	rec = func(lo, hi int) {
		if lo >= hi {
			return
		}
		mid := (lo + hi) / 2
		if d := q.chord2(ix.pts[mid]); d <= r2 {
			if k := fn(int(ix.ids[mid]), kmFromChord2(d)); k != lastKm {
				lastKm = k
				if c := chord2FromKm(k); c < r2 {
					r2 = c
				}
			}
		}
		ax := ix.axis[mid]
		diff := q[ax] - ix.pts[mid][ax]
		near, far := [2]int{lo, mid}, [2]int{mid + 1, hi}
		if diff > 0 {
			near, far = far, near
		}
		rec(near[0], near[1])
		if diff*diff <= r2 {
			rec(far[0], far[1])
		}
	}
	rec(0, len(ix.pts))
}
