package sim

import (
	"context"
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// placer draws real addresses from the hierarchy: a leaf range uniformly
// (registry allocations and announced prefixes, so dense regions of the
// Internet get more hosts), then an address uniformly inside it, keeping only
// public IPv4 addresses the geolocation table places on the map.
type placer struct {
	tree    *hierarchy.Tree
	model   *world.Model
	leaves  []hierarchy.NodeID // IPv4
	leaves6 []hierarchy.NodeID
}

func newPlacer(tree *hierarchy.Tree, model *world.Model) (*placer, error) {
	p := &placer{tree: tree, model: model}
	for id := 1; id < tree.Len(); id++ {
		nid := hierarchy.NodeID(id)
		n := tree.Node(nid)
		if n.Unary() || len(tree.Children(nid)) > 0 {
			continue
		}
		if n.Start.Is4() {
			p.leaves = append(p.leaves, nid)
		} else {
			p.leaves6 = append(p.leaves6, nid)
		}
	}
	if len(p.leaves) == 0 {
		return nil, fmt.Errorf("sim: the hierarchy has no IPv4 leaf ranges to place hosts in")
	}
	return p, nil
}

// maxFutileDraws bounds the draws in a row that add nothing new (an address
// or subnet already taken): a hierarchy too small for the placement asked
// for gets an error instead of a loop without end.
const maxFutileDraws = 10000

func u32(a netip.Addr) uint32 {
	b := a.As4()
	return uint32(b[0])<<24 | uint32(b[1])<<16 | uint32(b[2])<<8 | uint32(b[3])
}

func addr4(x uint32) netip.Addr {
	return netip.AddrFrom4([4]byte{byte(x >> 24), byte(x >> 16), byte(x >> 8), byte(x)})
}

func publicV4(a netip.Addr) bool {
	b := a.As4()
	cgn := b[0] == 100 && b[1]&0xc0 == 64 // 100.64.0.0/10, shared address space (RFC 6598)
	return a.IsGlobalUnicast() && !a.IsPrivate() && b[0] != 0 && b[0] < 224 && !cgn && b[0] != 127
}

// draw returns one located address and its subnet (smallest non-unary),
// in a leaf drawn uniformly, or by pick when it is not nil. With within set,
// the address falls in the /24 of the leaf that within chooses (ranked
// popularity: hosting sits in a few data-centre blocks of a provider's
// range), else anywhere in the leaf.
func (p *placer) draw(rng *rand.Rand, pick func() int, within func(leaf hierarchy.NodeID, blocks uint32) uint32) (world.Endpoint, hierarchy.NodeID, error) {
	for range 10000 {
		var leaf hierarchy.NodeID
		if pick != nil {
			leaf = p.leaves[pick()]
		} else {
			leaf = p.leaves[rng.IntN(len(p.leaves))]
		}
		n := p.tree.Node(leaf)
		lo, hi := u32(n.Start), u32(n.End)
		if within != nil && hi-lo >= 256 {
			blocks := (hi-lo)/256 + 1
			b := within(leaf, blocks)
			lo = lo + 256*b
			hi = min(hi, lo+255)
		}
		a := addr4(lo + uint32(rng.Int64N(int64(hi)-int64(lo)+1)))
		if !publicV4(a) {
			continue
		}
		ep, ok := p.model.Endpoint(a, "")
		if !ok {
			continue
		}
		s := p.tree.SmallestNonUnary(a)
		if s == hierarchy.None || s == hierarchy.Root {
			continue
		}
		return ep, s, nil
	}
	return world.Endpoint{}, 0, fmt.Errorf("sim: could not place an address in 10000 draws (geolocation table and hierarchy disagree?)")
}

// draw6 returns one located global-unicast IPv6 address in a leaf range
// drawn uniformly, and its subnet.
func (p *placer) draw6(rng *rand.Rand) (world.Endpoint, hierarchy.NodeID, error) {
	if len(p.leaves6) == 0 {
		return world.Endpoint{}, 0, fmt.Errorf("sim: the hierarchy has no IPv6 leaf ranges")
	}
	for range 10000 {
		n := p.tree.Node(p.leaves6[rng.IntN(len(p.leaves6))])
		s, e := n.Start.As16(), n.End.As16()
		sHi, sLo := binary.BigEndian.Uint64(s[:8]), binary.BigEndian.Uint64(s[8:])
		eHi, eLo := binary.BigEndian.Uint64(e[:8]), binary.BigEndian.Uint64(e[8:])
		hi := sHi
		if eHi > sHi {
			hi = sHi + rng.Uint64N(eHi-sHi+1)
		}
		var lo uint64
		if sHi == eHi && eLo-sLo != math.MaxUint64 {
			// inside one /64: uniform over the range itself (clamping a
			// full 64-bit draw would put nearly every host on an edge)
			lo = sLo + rng.Uint64N(eLo-sLo+1)
		} else if lo = rng.Uint64(); (hi == sHi && lo < sLo) || (hi == eHi && lo > eLo) {
			continue // outside the range: draw again
		}
		var b [16]byte
		binary.BigEndian.PutUint64(b[:8], hi)
		binary.BigEndian.PutUint64(b[8:], lo)
		a := netip.AddrFrom16(b)
		if b[0]&0xe0 != 0x20 { // global unicast 2000::/3 only
			continue
		}
		ep, ok := p.model.Endpoint(a, n.Country)
		if !ok {
			continue
		}
		sn := p.tree.SmallestNonUnary(a)
		if sn == hierarchy.None || sn == hierarchy.Root {
			continue
		}
		return ep, sn, nil
	}
	return world.Endpoint{}, 0, fmt.Errorf("sim: could not place an IPv6 address in 10000 draws")
}

// Host distributions (Config.HostDist).
const (
	// HostsUniform draws every host's leaf range uniformly: hosts spread
	// like registry allocations, nearly every host in its own subnet.
	HostsUniform = "uniform"
	// HostsZipf draws leaf ranges by Zipf popularity (s = 1.1 over a seeded
	// ranking) and, inside a leaf, /24 blocks by Zipf popularity too, as web
	// hosting is concentrated in a few providers' data-centre blocks: many
	// hosts share subnets.
	HostsZipf = "zipf"
)

// ctxEvery is how many cheap iterations (an address drawn, a host searched)
// a long loop runs between two looks at its context: a million hosts are
// seconds of work, and an interrupted run must stop within milliseconds.
const ctxEvery = 4096

// placeHosts draws n distinct host addresses, a share v6 of them IPv6
// (uniform over the IPv6 leaf ranges whatever dist says). It returns
// ctx.Err() when ctx ends first.
func (p *placer) placeHosts(ctx context.Context, rng *rand.Rand, n int, dist string, v6 float64) ([]world.Endpoint, error) {
	var pick func() int
	var within func(hierarchy.NodeID, uint32) uint32
	switch dist {
	case HostsUniform, "":
	case HostsZipf:
		perm := rng.Perm(len(p.leaves))
		z := rand.NewZipf(rng, 1.1, 1, uint64(len(p.leaves)-1))
		pick = func() int { return perm[z.Uint64()] }
		salt := rng.Uint64()
		within = func(leaf hierarchy.NodeID, blocks uint32) uint32 {
			// the k-th most popular /24 of this leaf, k Zipf-distributed
			k := rand.NewZipf(rng, 1.1, 1, uint64(blocks-1)).Uint64()
			return uint32(mix64(salt^uint64(leaf)<<20^k) % uint64(blocks))
		}
	default:
		return nil, fmt.Errorf("sim: unknown host distribution %q (want %s or %s)", dist, HostsUniform, HostsZipf)
	}
	out := make([]world.Endpoint, 0, n)
	seen := make(map[netip.Addr]struct{}, n)
	dups := 0 // draws in a row that found an address already placed
	for iter := 0; len(out) < n; iter++ {
		if iter%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		var ep world.Endpoint
		var err error
		if v6 > 0 && rng.Float64() < v6 {
			ep, _, err = p.draw6(rng)
		} else {
			ep, _, err = p.draw(rng, pick, within)
		}
		if err != nil {
			return nil, err
		}
		if _, dup := seen[ep.Addr]; dup {
			if dups++; dups > maxFutileDraws {
				return nil, fmt.Errorf("sim: %d hosts wanted, but %d draws in a row found only the %d addresses already placed (too few addresses in the hierarchy?)", n, dups, len(out))
			}
			continue
		}
		dups = 0
		seen[ep.Addr] = struct{}{}
		out = append(out, ep)
	}
	return out, nil
}

// placeCrawlers spreads k crawlers world-wide: k-means++ seeding (D²
// sampling) over a pool of candidate addresses drawn like hosts, so crawlers
// land far from each other yet where the Internet is dense. Every crawler
// gets its own subnet (it owns it on joining). It returns ctx.Err() when ctx
// ends first.
func (p *placer) placeCrawlers(ctx context.Context, rng *rand.Rand, k int) ([]world.Endpoint, error) {
	poolSize := max(4*k, 2000)
	pool := make([]world.Endpoint, 0, poolSize)
	subnets := make([]hierarchy.NodeID, 0, poolSize)
	for len(pool) < poolSize {
		if len(pool)%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		ep, s, err := p.draw(rng, nil, nil)
		if err != nil {
			return nil, err
		}
		pool = append(pool, ep)
		subnets = append(subnets, s)
	}
	vs := make([][3]float64, 0, len(pool))
	d2 := make([]float64, 0, len(pool))
	bySubnet := make(map[hierarchy.NodeID][]int, len(pool))
	taken := make(map[hierarchy.NodeID]struct{}, k)
	addCand := func(i int) {
		x, y, z := pool[i].Loc.Unit()
		vs = append(vs, [3]float64{x, y, z})
		d2 = append(d2, math.Inf(1))
		bySubnet[subnets[i]] = append(bySubnet[subnets[i]], i)
		if _, t := taken[subnets[i]]; t {
			d2[i] = 0
		}
	}
	for i := range pool {
		addCand(i)
	}
	out := make([]world.Endpoint, 0, k)
	pick := rng.IntN(len(pool))
	futile := 0 // candidates drawn in a row that sat in a taken subnet
	// every iteration scans the whole pool (4k candidates: 10,000 crawlers
	// are seconds of work), so the context is looked at more often
	for iter := 0; len(out) < k; iter++ {
		if iter%64 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		if _, dup := taken[subnets[pick]]; !dup {
			taken[subnets[pick]] = struct{}{}
			out = append(out, pool[pick])
			futile = 0
			c := vs[pick]
			for i, v := range vs {
				dx, dy, dz := v[0]-c[0], v[1]-c[1], v[2]-c[2]
				if d := dx*dx + dy*dy + dz*dz; d < d2[i] {
					d2[i] = d
				}
			}
			for _, i := range bySubnet[subnets[pick]] {
				d2[i] = 0
			}
			if len(out) == k {
				break
			}
		}
		var sum float64
		for _, d := range d2 {
			sum += d
		}
		if sum == 0 || math.IsInf(sum, 1) {
			// every candidate sits in a taken subnet: draw another one
			if futile++; futile > maxFutileDraws {
				return nil, fmt.Errorf("sim: %d crawlers wanted, but the hierarchy yielded only %d distinct subnets in %d draws", k, len(taken), futile)
			}
			ep, sn, err := p.draw(rng, nil, nil)
			if err != nil {
				return nil, err
			}
			pool, subnets = append(pool, ep), append(subnets, sn)
			addCand(len(pool) - 1)
			pick = len(pool) - 1
			continue
		}
		r := rng.Float64() * sum
		pick = len(d2) - 1
		for i, d := range d2 {
			if r < d {
				pick = i
				break
			}
			r -= d
		}
	}
	return out, nil
}

// mix64 is SplitMix64's finaliser.
func mix64(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}
