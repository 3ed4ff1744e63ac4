package world

import (
	"fmt"
	"io"
	"slices"
)

// Stats summarises RTTs the way the model is calibrated: the stretch implied
// by RTTs of pairs at least 500 km apart (RTT / great-circle fibre time) and
// the median RTT of pairs under 500 km, plus triangle-inequality violations
// among measured triples.
type Stats struct {
	Pairs                              int
	FarPairs, NearPairs                int
	StretchP10, StretchP50, StretchP90 float64 // implied by pairs ≥ 500 km
	NearMedianMs                       float64 // pairs < 500 km
	Triples, TriangleViolations        int
}

// WriteText prints s beside the model defaults it is compared with.
func (s Stats) WriteText(w io.Writer, what string) {
	fmt.Fprintf(w, "%s: %d pairs (%d ≥ 500 km, %d < 500 km)\n", what, s.Pairs, s.FarPairs, s.NearPairs)
	fmt.Fprintf(w, "  implied stretch p10/p50/p90: %.2f / %.2f / %.2f   (model default 1.5 / 2.0 / 3.4)\n", s.StretchP10, s.StretchP50, s.StretchP90)
	fmt.Fprintf(w, "  median RTT under 500 km:     %.1f ms              (model default ≈12 ms)\n", s.NearMedianMs)
	if s.Triples > 0 {
		fmt.Fprintf(w, "  triangle inequality violated in %d of %d triples (%.1f %%)\n", s.TriangleViolations, s.Triples, 100*float64(s.TriangleViolations)/float64(s.Triples))
	}
}

// pairStats computes Stats from (distance km, RTT ms) pairs.
func pairStats(fibreKmPerMs float64, dist, rtt []float64) Stats {
	var st Stats
	var stretch, near []float64
	for i := range dist {
		st.Pairs++
		if dist[i] >= 500 {
			stretch = append(stretch, rtt[i]/(dist[i]*2/fibreKmPerMs))
		} else {
			near = append(near, rtt[i])
		}
	}
	st.FarPairs, st.NearPairs = len(stretch), len(near)
	q := func(xs []float64, p float64) float64 {
		if len(xs) == 0 {
			return 0
		}
		return xs[int(p*float64(len(xs)-1))]
	}
	slices.Sort(stretch)
	slices.Sort(near)
	st.StretchP10, st.StretchP50, st.StretchP90 = q(stretch, 0.1), q(stretch, 0.5), q(stretch, 0.9)
	st.NearMedianMs = q(near, 0.5)
	return st
}

// Stats measures the matrix's own pairs (sites distinct; both directions
// when both were measured) and its triangle violations.
func (mx *Matrix) Stats(fibreKmPerMs float64) Stats {
	if fibreKmPerMs <= 0 {
		fibreKmPerMs = 200
	}
	keys := make([]uint64, 0, len(mx.rtt))
	for k := range mx.rtt {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	var dist, rtt []float64
	for _, k := range keys {
		a, b := int(k>>32), int(k&0xffffffff)
		if a == b {
			continue
		}
		dist = append(dist, kmFromChord2(mx.Sites[a].v.chord2(mx.Sites[b].v)))
		rtt = append(rtt, mx.rtt[k])
	}
	st := pairStats(fibreKmPerMs, dist, rtt)
	// triangle violations over measured triples (bounded work)
	n := len(mx.Sites)
	for a := 0; a < n && st.Triples < 2_000_000; a++ {
		for b := 0; b < n; b++ {
			ab, ok1 := mx.RTT(a, b)
			if b == a || !ok1 {
				continue
			}
			for c := 0; c < n; c++ {
				if c == a || c == b {
					continue
				}
				bc, ok2 := mx.RTT(b, c)
				ac, ok3 := mx.RTT(a, c)
				if !ok2 || !ok3 {
					continue
				}
				st.Triples++
				if ac > ab+bc {
					st.TriangleViolations++
				}
			}
		}
	}
	return st
}

// SampleStats measures the model (floor RTTs) over all pairs of eps (or the
// first 2000 of them), for comparison with a measured matrix.
func (m *Model) SampleStats(eps []Endpoint) Stats {
	if len(eps) > 2000 {
		eps = eps[:2000]
	}
	var dist, rtt []float64
	for i := range eps {
		for j := i + 1; j < len(eps); j++ {
			if eps[i].path == eps[j].path {
				continue
			}
			dist = append(dist, kmFromChord2(eps[i].v.chord2(eps[j].v)))
			rtt = append(rtt, m.FloorRTT(&eps[i], &eps[j]))
		}
	}
	st := pairStats(m.cfg.FibreKmPerMs, dist, rtt)
	k := min(len(eps), 150)
	for a := 0; a < k; a++ {
		for b := 0; b < k; b++ {
			for c := 0; c < k; c++ {
				if a == b || b == c || a == c || eps[a].path == eps[b].path || eps[b].path == eps[c].path || eps[a].path == eps[c].path {
					continue
				}
				st.Triples++
				if m.FloorRTT(&eps[a], &eps[c]) > m.FloorRTT(&eps[a], &eps[b])+m.FloorRTT(&eps[b], &eps[c]) {
					st.TriangleViolations++
				}
			}
		}
	}
	return st
}
