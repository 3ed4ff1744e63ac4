package extract

import (
	"math/bits"

	"github.com/cespare/xxhash/v2"
)

// simHash is Charikar's 64-bit SimHash over the page's stemmed terms weighted
// by the logarithm of their ranking weight: pages that share most of their weighted vocabulary
// get fingerprints a few bits apart.
func simHash(terms map[string]uint32) uint64 {
	if len(terms) == 0 {
		return 0
	}
	// v[i] = Σ w·(+1 if bit i set, else −1) = 2·Σ_{bit set} w − Σ w,
	// so only the set bits of each hash need visiting.
	var v [64]int64
	var total int64
	for t, w := range terms {
		h := xxhash.Sum64String(t)
		// Log-damped weights keep a few very frequent terms (navigation,
		// boilerplate) from deciding every bit.
		lw := int64(bits.Len32(w))
		total += lw
		for h != 0 {
			v[bits.TrailingZeros64(h)] += 2 * lw
			h &= h - 1
		}
	}
	for i := range v {
		v[i] -= total
	}
	var out uint64
	for i := range 64 {
		if v[i] > 0 {
			out |= 1 << i
		}
	}
	return out
}

// HammingDistance is the number of differing bits of two SimHash fingerprints;
// pages within 3 bits are near-duplicates by the usual rule (Manku et al. 2007).
func HammingDistance(a, b uint64) int { return bits.OnesCount64(a ^ b) }
