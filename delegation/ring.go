package delegation

import (
	"math"
	"net/netip"
	"slices"
)

// Ring is UbiCrawler's identifier-seeded consistent hashing: every crawler
// places replicas on a 64-bit ring at positions drawn from a generator seeded
// with its own identifier, so every peer computes the same ring from the
// member list alone, with no coordination. The number of replicas is
// proportional to the crawler's capacity.
//
// A key is hashed Probes times (multi-probe consistent hashing, Appleton &
// O'Reilly 2015) and goes to the replica nearest ahead of any of its probe
// points. With Probes = 1 this is the classic ring. More probes shrink the
// deviation from perfect balance (each replica then wins a share close to
// 1/(number of replicas) instead of the length of one random arc) while
// keeping both properties UbiCrawler needs:
//   - contravariance: a key's owner is the argmin of a distance over all
//     replicas, so adding crawlers only adds candidates; a key moves only to
//     a new crawler, never between two old ones;
//   - determinism: the owner depends only on the member set.
type Ring struct {
	pos    []uint64 // sorted replica positions
	owner  []int32  // owner[i] indexes ids for pos[i]
	ids    []CrawlerID
	probes int
}

// RingConfig tunes a Ring.
type RingConfig struct {
	// Replicas per crawler of capacity CapacityUnit (UbiCrawler: 100–200).
	Replicas int
	// CapacityUnit is the capacity (pages/day) that earns Replicas replicas.
	// A crawler of capacity c gets round(Replicas·c/CapacityUnit) replicas,
	// at least one. It is a fixed unit, not the mean capacity, so a joining
	// crawler never changes the replica count of the others
	// (contravariance). Zero: every crawler gets Replicas replicas.
	CapacityUnit int
	// Probes is the number of probe points per key; 1 = classic ring.
	Probes int
}

// ReplicasFor returns the replica count of a crawler with capacity cap.
func (c RingConfig) ReplicasFor(capacity int) int {
	if c.Replicas <= 0 {
		c.Replicas = 200
	}
	if c.CapacityUnit <= 0 || capacity <= 0 {
		return min(c.Replicas, maxReplicas)
	}
	// capped: a capacity is what a peer states about itself, and past the
	// cap the ring would not fit in memory (or the count would overflow)
	f := float64(c.Replicas) * float64(capacity) / float64(c.CapacityUnit)
	return max(int(math.Round(min(f, maxReplicas))), 1)
}

// maxReplicas caps one crawler's replica count (ReplicasFor).
const maxReplicas = 1 << 16

// NewRing builds the ring of crawlers cs.
func NewRing(cs []Crawler, cfg RingConfig) *Ring {
	if cfg.Probes <= 0 {
		cfg.Probes = 1
	}
	r := &Ring{probes: cfg.Probes, ids: make([]CrawlerID, len(cs))}
	// Sort ids so ties (equal positions, astronomically rare) break the same
	// way whatever order the membership lists crawlers in.
	sorted := slices.Clone(cs)
	slices.SortFunc(sorted, func(a, b Crawler) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	total := 0
	for _, c := range sorted {
		total += cfg.ReplicasFor(c.Capacity)
	}
	type pt struct {
		p uint64
		o int32
	}
	pts := make([]pt, 0, total)
	for i, c := range sorted {
		r.ids[i] = c.ID
		seed := hashString(string(c.ID))
		for range cfg.ReplicasFor(c.Capacity) {
			seed += 0x9e3779b97f4a7c15
			pts = append(pts, pt{mix64(seed), int32(i)})
		}
	}
	slices.SortFunc(pts, func(a, b pt) int {
		switch {
		case a.p < b.p:
			return -1
		case a.p > b.p:
			return 1
		}
		return int(a.o - b.o)
	})
	r.pos = make([]uint64, len(pts))
	r.owner = make([]int32, len(pts))
	for i, p := range pts {
		r.pos[i], r.owner[i] = p.p, p.o
	}
	return r
}

// Len is the number of crawlers on the ring.
func (r *Ring) Len() int { return len(r.ids) }

// Owner returns the crawler owning key; false on an empty ring.
func (r *Ring) Owner(key uint64) (CrawlerID, bool) {
	if len(r.pos) == 0 {
		return "", false
	}
	best, bestDist := -1, uint64(math.MaxUint64)
	h := key
	for range r.probes {
		h = mix64(h + 0x9e3779b97f4a7c15)
		i, _ := slices.BinarySearch(r.pos, h)
		if i == len(r.pos) {
			i = 0
		}
		d := r.pos[i] - h // wraps modulo 2^64: forward distance
		if best < 0 || d < bestDist || (d == bestDist && r.owner[i] < r.owner[best]) {
			best, bestDist = i, d
		}
	}
	return r.ids[r.owner[best]], true
}

// OwnerOf returns the crawler owning host address ip.
func (r *Ring) OwnerOf(ip netip.Addr) (CrawlerID, bool) { return r.Owner(HashAddr(ip)) }

// Shares returns each crawler's exact fraction of the key space for the
// classic ring (Probes = 1), or an estimate from n sample keys otherwise.
func (r *Ring) Shares(n int) map[CrawlerID]float64 {
	out := make(map[CrawlerID]float64, len(r.ids))
	if len(r.pos) == 0 {
		return out
	}
	if r.probes == 1 {
		for i := range r.pos {
			prev := r.pos[(i+len(r.pos)-1)%len(r.pos)]
			arc := r.pos[i] - prev
			if len(r.pos) == 1 {
				arc = math.MaxUint64
			}
			out[r.ids[r.owner[i]]] += float64(arc) / math.Exp2(64)
		}
		return out
	}
	for i := range n {
		c, _ := r.Owner(mix64(uint64(i) ^ 0x5bd1e995))
		out[c] += 1 / float64(n)
	}
	return out
}

// HashAddr hashes an address for the ring.
func HashAddr(ip netip.Addr) uint64 {
	b := ip.As16()
	return mix64(hashBytes(b[:]))
}

func hashString(s string) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return mix64(h)
}

func hashBytes(b []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range b {
		h ^= uint64(c)
		h *= 1099511628211
	}
	return h
}

// mix64 is SplitMix64's finaliser: a bijection with good avalanche.
func mix64(z uint64) uint64 {
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
