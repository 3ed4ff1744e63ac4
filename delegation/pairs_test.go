package delegation

import (
	"math"
	"math/rand/v2"
	"sort"
	"testing"
)

// TestPairSamplesSearch: samples stay sorted and within their cap through
// inserts and decimation, and the window search is sort.Search's lower
// bound for every query (duplicates, sub-millisecond values as on a
// loopback testnet, far outliers, ±Inf).
func TestPairSamplesSearch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for _, capacity := range []int{2, 7, 128, 300} {
		var s pairSamples
		for n := range 2000 {
			var x float32
			switch rng.IntN(5) {
			case 0: // duplicates
				x = float32(rng.IntN(12)) / 4
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
			for _, v := range []float32{x, x - 0.6, x + 0.6, float32(math.Inf(-1)), float32(math.Inf(1)), -100, 100, 0.25, float32(rng.NormFloat64()*3 + 3)} {
				want := sort.Search(len(s.s), func(i int) bool { return s.s[i].x >= v })
				if got := s.lowerBound(v); got != want {
					t.Fatalf("cap %d, step %d: lowerBound(%v) = %d, sort.Search says %d (%d samples)", capacity, n, v, got, want, len(s.s))
				}
			}
		}
	}
}
