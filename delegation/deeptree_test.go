package delegation

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// FuzzDelegateDeepTrees drives every policy over random hierarchies much
// deeper than the default snapshot's four levels (registry RPSL data nests
// inetnum/inet6num objects tens of levels deep; hierarchy.MaxDepth is 255),
// mixing IPv4 and IPv6, with 1–40 crawlers placed inside, outside and on top
// of each other, a latency function that sometimes does not answer, crawler
// churn, re-delegations, reviews and learning from another peer's records.
//
// Invariants, for every call: no panic; no error but "no live crawler" (and
// then nobody is live); an owner that is live when the call returns, empty
// only with an error; Decision.Probes equal to the probes the prober
// counted for the call; a non-empty Decision.String; the subnet of the
// decision is the IP's smallest non-unary subnet (None outside the
// hierarchy); a decision naming a subnet's owner agrees with the directory;
// subnets moved by load balancing go to live crawlers; Learn accepts a
// record once, refuses records of another snapshot or of no subnet of the
// tree, and probes nobody. For one input in four (and deepFlagTwice) the
// whole run is repeated and must decide exactly the same.
//
// The input's first eight bytes choose the shape (see deepHeader); the
// rest seeds the random details. The seeds below run under plain go test
// (about 0.2 s). Inputs the fuzzer finds failing land in
// testdata/fuzz/FuzzDelegateDeepTrees and run as regression seeds too (none
// so far).
func FuzzDelegateDeepTrees(f *testing.F) {
	tail := []byte("micra deep trees")
	seed := func(h deepHeader) []byte { return append(h.bytes(), tail...) }
	// a chain of depth 40 in IPv4 (non-CIDR ranges below /24), geographic RTTs
	f.Add(seed(deepHeader{v4Depth: 40, v6Depth: 2, crawlers: 12, latency: deepLatDistance, branches: 2, churn: 2, flags: deepFlagMapped | deepFlagUnary}))
	// a chain of depth 60 in IPv6, hashed RTTs, partial overlaps
	f.Add(seed(deepHeader{v4Depth: 3, v6Depth: 60, crawlers: 20, latency: deepLatHashed, branches: 3, churn: 1, flags: deepFlagUnary | deepFlagOverlap}))
	// one crawler only, deep in both families; churn may kill it
	f.Add(seed(deepHeader{v4Depth: 30, v6Depth: 30, crawlers: 1, latency: deepLatDistance, branches: 1, churn: 4, flags: deepFlagTinyCap}))
	// crawlers all outside the tree
	f.Add(seed(deepHeader{v4Depth: 35, v6Depth: 45, crawlers: 15, latency: deepLatDistance, placement: deepPlaceOutside, branches: 4}))
	// every probe fails
	f.Add(seed(deepHeader{v4Depth: 40, v6Depth: 60, crawlers: 10, latency: deepLatFail, branches: 2, churn: 1}))
	// many crawlers sharing one deep subnet, equal RTTs, tiny capacities
	f.Add(seed(deepHeader{v4Depth: 50, v6Depth: 10, crawlers: 25, latency: deepLatTies, placement: deepPlaceOneSubnet, branches: 1, flags: deepFlagTinyCap}))
	// 40 crawlers (micra-walk: more than 4·MaxProbes) in the deep halves,
	// mostly failing probes, every flag
	f.Add(seed(deepHeader{v4Depth: 60, v6Depth: 60, crawlers: 40, latency: deepLatMostlyFail, placement: deepPlaceDeep, branches: 6, churn: 3, flags: 0xff}))
	// 40 crawlers, extreme RTTs (0, 1 ns, the threshold ± 1 ns, an hour)
	f.Add(seed(deepHeader{v4Depth: 20, v6Depth: 25, crawlers: 40, latency: deepLatExtreme, branches: 5, churn: 2, flags: deepFlagMapped | deepFlagOverlap | deepFlagTwice}))
	// an empty tree: everything is outside the hierarchy
	f.Add(seed(deepHeader{crawlers: 5, latency: deepLatHashed, churn: 2}))

	f.Fuzz(func(t *testing.T, data []byte) {
		w := newDeepWorld(t, data)
		log := runDeepWorld(t, w)
		if w.h.flags&deepFlagTwice != 0 || w.seed%4 == 0 {
			// same world, same seeds: the same decisions (peers converge)
			again := runDeepWorld(t, newDeepWorld(t, data))
			for i := range min(len(log), len(again)) {
				if log[i] != again[i] {
					t.Fatalf("call %d differs between two identical runs:\n%s\n%s", i, log[i], again[i])
				}
			}
			if len(log) != len(again) {
				t.Fatalf("%d calls, then %d", len(log), len(again))
			}
		}
	})
}

// deepHeader is the part of a fuzz input that chooses the world's shape.
type deepHeader struct {
	v4Depth, v6Depth int  // levels of the main chains (mod 61; 0: none)
	crawlers         int  // 1 + crawlers%40
	latency          byte // deepLat*
	placement        byte // deepPlace*
	branches         int  // further top-level trees (mod 8)
	churn            int  // crawler removals: churn%8 in 32 per host
	flags            byte // deepFlag*
}

const (
	deepLatDistance   = iota // grows with the address distance, some fail
	deepLatHashed            // pseudo-random per (crawler, address), some fail
	deepLatFail              // nobody ever answers
	deepLatMostlyFail        // four in five fail
	deepLatTies              // everybody answers the same (0 or 50 ms)
	deepLatExtreme           // 0, 1 ns, the threshold ± 1 ns, an hour
	deepLatModes
)

const (
	deepPlaceMixed     = iota // inside, outside, sharing subnets
	deepPlaceOutside          // no crawler in the tree
	deepPlaceOneSubnet        // all in the deepest IPv4 or IPv6 node
	deepPlaceDeep             // all in the deeper half of the chains
	deepPlaceModes
)

const (
	deepFlagMapped  = 1 << iota // IPv4-mapped IPv6 hosts
	deepFlagUnary               // single-address ranges
	deepFlagOverlap             // partially overlapping ranges (split by the builder)
	deepFlagTinyCap             // capacities of 1–2 pages
	deepFlagTwice               // run twice and compare (also one input in four)
)

const deepHeaderLen = 8

func (h deepHeader) bytes() []byte {
	return []byte{byte(h.v4Depth), byte(h.v6Depth), byte(h.crawlers - 1), h.latency, h.placement, byte(h.branches), byte(h.churn), h.flags}
}

func parseDeepHeader(data []byte) deepHeader {
	var b [deepHeaderLen]byte
	copy(b[:], data)
	return deepHeader{
		v4Depth: int(b[0]) % 61, v6Depth: int(b[1]) % 61, crawlers: 1 + int(b[2])%40,
		latency: b[3] % deepLatModes, placement: b[4] % deepPlaceModes,
		branches: int(b[5]) % 8, churn: int(b[6]) % 8, flags: b[7],
	}
}

// deepWorld is one generated world.
type deepWorld struct {
	h        deepHeader
	seed     uint64
	tree     *hierarchy.Tree
	ranges   []hierarchy.Range
	deep4    []hierarchy.Range // the main IPv4 chain, top first
	deep6    []hierarchy.Range // the main IPv6 chain, top first
	crawlers []Crawler
	addrOf   map[CrawlerID]netip.Addr
	hosts    []netip.Addr
	rtt      func(c CrawlerID, a netip.Addr) (time.Duration, bool)
}

// deepGen generates ranges. IPv4 trees live in 1–126.0.0.0/8 and IPv6
// trees in 2000::/4, so 200–223.x.x.x and 3fff::/16 are always outside.
type deepGen struct {
	rng    *rand.Rand
	h      deepHeader
	orgs   []string
	out    []hierarchy.Range
	used8  map[byte]bool
	used16 map[uint16]bool
}

var deepCountries = []string{"", "", "DE", "US", "JP", "BR", "ZA", "AU", "IN", "FR", "NZ", "QQ"} // QQ: no centroid

func (g *deepGen) add(s, e netip.Addr, parent *hierarchy.Range) hierarchy.Range {
	r := hierarchy.Range{Start: s, End: e,
		Registry: hierarchy.Registry(g.rng.IntN(int(hierarchy.RegistryRIPENCC) + 1)),
		Status:   hierarchy.Status(g.rng.IntN(int(hierarchy.StatusAnnounced) + 1)),
		Country:  deepCountries[g.rng.IntN(len(deepCountries))],
		ASN:      g.rng.Uint32N(70000),
	}
	switch k := g.rng.IntN(10); {
	case k < 3 && parent != nil: // RPSL children often repeat the parent's maintainer
		r.Org = parent.Org
	case k < 8:
		r.Org = g.orgs[g.rng.IntN(len(g.orgs))] // a small pool: organisations span branches
	}
	if parent != nil && g.rng.IntN(3) == 0 {
		r.Country = parent.Country
	}
	g.out = append(g.out, r)
	return r
}

func deepU32(a netip.Addr) uint32 { return binary.BigEndian.Uint32(a.AsSlice()) }

func deepAddr4(x uint32) netip.Addr {
	var b [4]byte
	binary.BigEndian.PutUint32(b[:], x)
	return netip.AddrFrom4(b)
}

func (g *deepGen) coin(n int) bool { return g.rng.IntN(n) == 0 }

// nest4 adds a chain of up to depth ranges strictly nested below parent
// (IPv4), each level CIDR-halving or trimming a few percent off both ends,
// with side branches in the gaps when side is set. It returns the chain.
func (g *deepGen) nest4(parent hierarchy.Range, depth int, side bool) []hierarchy.Range {
	var chain []hierarchy.Range
	s, e := deepU32(parent.Start), deepU32(parent.End)
	for range depth {
		size := uint64(e) - uint64(s) + 1
		if size < 3 {
			break
		}
		var cs, ce uint32
		aligned := size&(size-1) == 0 && uint64(s)%size == 0
		if aligned && (g.coin(8) || len(chain) < 4) {
			half := uint32(size / 2)
			cs, ce = s, s+half-1
			if g.coin(2) {
				cs, ce = s+half, e
			}
		} else {
			lo, hi := g.rng.Uint64N(size/32+1), g.rng.Uint64N(size/32+1)
			if lo == 0 && hi == 0 {
				if g.coin(2) {
					lo = 1
				} else {
					hi = 1
				}
			}
			cs, ce = s+uint32(lo), e-uint32(hi)
		}
		r := g.add(deepAddr4(cs), deepAddr4(ce), &parent)
		chain = append(chain, r)
		if side && g.coin(3) {
			// a sibling in a gap beside the chain, with a short chain of its own
			gs, ge := s, cs-1
			if cs == s || (ce < e && g.coin(2)) {
				gs, ge = ce+1, e
			}
			if ce < e || cs > s {
				if n := uint64(ge) - uint64(gs) + 1; n > 4 && g.coin(2) {
					a := gs + uint32(g.rng.Uint64N(n/2))
					gs, ge = a, a+uint32(g.rng.Uint64N(uint64(ge-a)+1))
				}
				sib := g.add(deepAddr4(gs), deepAddr4(ge), &parent)
				g.nest4(sib, g.rng.IntN(4), false)
			}
		}
		parent, s, e = r, cs, ce
	}
	if g.h.flags&deepFlagUnary != 0 && e > s {
		x := s + g.rng.Uint32N(e-s+1)
		g.add(deepAddr4(x), deepAddr4(x), &parent)
	}
	return chain
}

// top4 adds a fresh /8 and a chain of depth-1 levels below it.
func (g *deepGen) top4(depth int, side bool) []hierarchy.Range {
	var a byte
	for a == 0 || g.used8[a] {
		a = byte(1 + g.rng.IntN(126))
	}
	g.used8[a] = true
	top := g.add(netip.AddrFrom4([4]byte{a}), netip.AddrFrom4([4]byte{a, 255, 255, 255}), nil)
	return append([]hierarchy.Range{top}, g.nest4(top, depth-1, side)...)
}

// nest6 is nest4 for IPv6, with CIDR prefixes 1–2 bits longer per level (up
// to /127) and siblings in the other half.
func (g *deepGen) nest6(parent netip.Prefix, pr hierarchy.Range, depth int, side bool) []hierarchy.Range {
	var chain []hierarchy.Range
	for range depth {
		bits := parent.Bits()
		nb := min(bits+1+g.rng.IntN(2), 127)
		if nb <= bits {
			break
		}
		b := parent.Addr().As16()
		for i := bits; i < nb; i++ {
			if g.coin(2) {
				b[i/8] |= 1 << (7 - i%8)
			}
		}
		child := netip.PrefixFrom(netip.AddrFrom16(b), nb)
		r := g.add(child.Addr(), lastAddr(child), &pr)
		chain = append(chain, r)
		if side && g.coin(3) {
			b[bits/8] ^= 1 << (7 - bits%8) // the other half of parent
			sp := netip.PrefixFrom(netip.AddrFrom16(b), nb)
			sib := g.add(sp.Addr(), lastAddr(sp), &pr)
			g.nest6(sp, sib, g.rng.IntN(4), false)
		}
		parent, pr = child, r
	}
	if g.h.flags&deepFlagUnary != 0 && parent.Bits() < 128 {
		x := g.randIn6(parent)
		g.add(x, x, &pr)
	}
	return chain
}

func (g *deepGen) randIn6(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	for i := p.Bits(); i < 128; i++ {
		if g.coin(2) {
			b[i/8] |= 1 << (7 - i%8)
		}
	}
	return netip.AddrFrom16(b)
}

// top6 adds a fresh /16–/24 in 2000::/4 and a chain of depth-1 levels below it.
func (g *deepGen) top6(depth int, side bool) []hierarchy.Range {
	var b [16]byte
	for {
		b[0], b[1], b[2] = 0x20|byte(g.rng.IntN(16)), byte(g.rng.IntN(256)), byte(g.rng.IntN(256))
		if k := binary.BigEndian.Uint16(b[:2]); !g.used16[k] {
			g.used16[k] = true
			break
		}
	}
	p := netip.PrefixFrom(netip.AddrFrom16(b), 16+g.rng.IntN(9)).Masked()
	top := g.add(p.Addr(), lastAddr(p), nil)
	return append([]hierarchy.Range{top}, g.nest6(p, top, depth-1, side)...)
}

// deepRandIn is an address of r (IPv4 ranges may be any range; IPv6 ones are
// prefixes, whose start and end share the bits above the host part).
func deepRandIn(rng *rand.Rand, r hierarchy.Range) netip.Addr {
	if r.Start.Is4() {
		s, e := deepU32(r.Start), deepU32(r.End)
		return deepAddr4(s + uint32(rng.Uint64N(uint64(e)-uint64(s)+1)))
	}
	s, e := r.Start.As16(), r.End.As16()
	var b [16]byte
	for i := range b {
		diff := s[i] ^ e[i] // set bits: host bits of the prefix
		b[i] = s[i] | byte(rng.IntN(256))&diff
	}
	return netip.AddrFrom16(b)
}

func deepOutside(rng *rand.Rand) netip.Addr {
	if rng.IntN(2) == 0 {
		return netip.AddrFrom4([4]byte{byte(200 + rng.IntN(24)), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(1 + rng.IntN(254))})
	}
	var b [16]byte
	b[0], b[1] = 0x3f, 0xff
	for i := 2; i < 16; i++ {
		b[i] = byte(rng.IntN(256))
	}
	return netip.AddrFrom16(b)
}

func newDeepWorld(t testing.TB, data []byte) *deepWorld {
	h := parseDeepHeader(data)
	hs := fnv.New64a()
	hs.Write(data)
	seed := hs.Sum64()
	rng := rand.New(rand.NewPCG(seed, 0xdee9))
	w := &deepWorld{h: h, seed: seed, addrOf: map[CrawlerID]netip.Addr{}}
	g := &deepGen{rng: rng, h: h, used8: map[byte]bool{}, used16: map[uint16]bool{}}
	for i := range 1 + rng.IntN(6) {
		g.orgs = append(g.orgs, fmt.Sprintf("ORG%d-MNT", i))
	}
	if h.v4Depth > 0 {
		w.deep4 = g.top4(h.v4Depth, true)
	}
	if h.v6Depth > 0 {
		w.deep6 = g.top6(h.v6Depth, true)
	}
	for range h.branches {
		if rng.IntN(2) == 0 {
			g.top4(rng.IntN(12), true)
		} else {
			g.top6(rng.IntN(12), true)
		}
	}
	if h.flags&deepFlagOverlap != 0 && len(g.out) > 0 {
		// RPSL objects that overlap without nesting: the builder splits them
		for range 1 + rng.IntN(4) {
			r := g.out[rng.IntN(len(g.out))]
			if !r.Start.Is4() || r.Start == r.End {
				continue
			}
			s, e := deepU32(r.Start), deepU32(r.End)
			a := s + 1 + uint32(rng.Uint64N(uint64(e-s)))
			z := uint64(e) + 1 + rng.Uint64N(1<<12)
			if z > uint64(deepU32(netip.MustParseAddr("126.255.255.255"))) {
				continue
			}
			g.add(deepAddr4(a), deepAddr4(uint32(z)), nil)
		}
	}
	w.ranges = g.out
	b := hierarchy.NewBuilder()
	for _, r := range w.ranges {
		if err := b.Add(r); err != nil {
			t.Fatalf("generated range %v-%v: %v", r.Start, r.End, err)
		}
	}
	tree, _, err := b.Build()
	if err != nil {
		t.Fatalf("build: %v", err)
	}
	w.tree = tree

	// crawlers
	deepest := func() []hierarchy.Range {
		var c []hierarchy.Range
		if len(w.deep4) > 0 {
			c = append(c, w.deep4[len(w.deep4)-1])
		}
		if len(w.deep6) > 0 {
			c = append(c, w.deep6[len(w.deep6)-1])
		}
		return c
	}()
	var deepHalf []hierarchy.Range
	for _, ch := range [][]hierarchy.Range{w.deep4, w.deep6} {
		deepHalf = append(deepHalf, ch[len(ch)/2:]...)
	}
	home := func() netip.Addr { // an address in a random generated range
		if len(w.ranges) == 0 {
			return deepOutside(rng)
		}
		return deepRandIn(rng, w.ranges[rng.IntN(len(w.ranges))])
	}
	for i := range h.crawlers {
		c := Crawler{ID: CrawlerID(fmt.Sprintf("c%02d", i))}
		switch h.placement {
		case deepPlaceOutside:
			c.Addr = deepOutside(rng)
		case deepPlaceOneSubnet:
			if len(deepest) == 0 {
				c.Addr = home()
			} else {
				c.Addr = deepRandIn(rng, deepest[0])
			}
		case deepPlaceDeep:
			if len(deepHalf) == 0 {
				c.Addr = home()
			} else {
				c.Addr = deepRandIn(rng, deepHalf[rng.IntN(len(deepHalf))])
			}
		default:
			switch k := rng.IntN(10); {
			case k < 2:
				c.Addr = deepOutside(rng)
			case k < 4 && i > 0: // next to (or on) an earlier crawler
				c.Addr = w.crawlers[rng.IntN(i)].Addr
				if rng.IntN(2) == 0 {
					c.Addr = c.Addr.Next()
				}
			case k < 6 && len(deepHalf) > 0:
				c.Addr = deepRandIn(rng, deepHalf[rng.IntN(len(deepHalf))])
			default:
				c.Addr = home()
			}
		}
		if rng.IntN(2) == 0 {
			c.HasPos = true
			c.Lat, c.Lon = rng.Float64()*180-90, rng.Float64()*360-180
			if rng.IntN(8) == 0 { // the edges of the map
				c.Lat, c.Lon = 90*float64(1-2*rng.IntN(2)), 180*float64(1-2*rng.IntN(2))
			}
		}
		if rng.IntN(4) != 0 {
			c.Capacity = 1 + rng.IntN(8)
			if h.flags&deepFlagTinyCap != 0 {
				c.Capacity = 1 + rng.IntN(2)
			}
		}
		w.crawlers = append(w.crawlers, c)
		w.addrOf[c.ID] = c.Addr
	}

	// hosts: inside random ranges (deep ones often), crawler addresses and
	// their neighbours, outside the tree, mapped IPv4, repeats
	for len(w.hosts) < 30 {
		var a netip.Addr
		switch k := rng.IntN(12); {
		case k < 3 && len(deepHalf) > 0:
			a = deepRandIn(rng, deepHalf[rng.IntN(len(deepHalf))])
		case k < 5:
			c := w.crawlers[rng.IntN(len(w.crawlers))]
			a = c.Addr
			if rng.IntN(2) == 0 {
				a = a.Next()
			}
		case k < 6:
			a = deepOutside(rng)
		case k < 8 && len(w.hosts) > 0:
			a = w.hosts[rng.IntN(len(w.hosts))]
		default:
			a = home()
		}
		if !a.IsValid() { // Next of the last address
			continue
		}
		if h.flags&deepFlagMapped != 0 && a.Is4() && rng.IntN(3) == 0 {
			a = netip.AddrFrom16(a.As16())
		}
		w.hosts = append(w.hosts, a)
	}

	// latency: a deterministic function of crawler and address
	salt := seed
	w.rtt = func(c CrawlerID, a netip.Addr) (time.Duration, bool) {
		hh := fnv.New64a()
		hh.Write([]byte(c))
		ab := a.As16()
		hh.Write(ab[:])
		x := mix64(hh.Sum64() ^ salt)
		switch h.latency {
		case deepLatFail:
			return 0, false
		case deepLatMostlyFail:
			return time.Duration(1+x%400) * time.Millisecond, x%5 == 0
		case deepLatTies:
			if salt%2 == 0 {
				return 0, true
			}
			return 50 * time.Millisecond, true
		case deepLatExtreme:
			v := []time.Duration{0, 1, 50*time.Millisecond - 1, 50 * time.Millisecond, 50*time.Millisecond + 1, time.Hour}
			return v[x%uint64(len(v))], x%7 != 0
		case deepLatDistance:
			ca, ok := w.addrOf[c]
			if !ok {
				break
			}
			cb := ca.Unmap().As16()
			tb := a.Unmap().As16()
			cpl := 0
			for cpl < 128 && cb[cpl/8]&(0x80>>(cpl%8)) == tb[cpl/8]&(0x80>>(cpl%8)) {
				cpl++
			}
			return time.Duration(1+(128-cpl)*3)*time.Millisecond + time.Duration(x%3000)*time.Microsecond, x%23 != 0
		}
		return time.Duration(x%300_000)*time.Microsecond + time.Microsecond, x%5 != 0
	}
	return w
}

type deepPolicy struct {
	name string
	mk   func(Deps, Config) Policy
	cfg  Config
}

var deepPolicies = []deepPolicy{
	{"ipmicra", NewIPMicra, Config{}},
	{"ipmicra-parallel", NewIPMicra, Config{ParallelLevels: true, Balance: BalanceSecondBest}},
	{"micra", NewMicra, Config{}},
	{"optimal", NewOptimal, Config{}},
	{"random", NewRandom, Config{}},
	{"hash", NewConsistentHash, Config{HashReplicas: 50, HashCapacityUnit: 4}},
	{"micra-release", NewMicra, Config{Balance: BalanceRelease}},
	{"micra-second-best", NewMicra, Config{Balance: BalanceSecondBest}},
	// more than 4·MaxProbes crawlers: micra's fallback walk up the ancestors
	{"micra-walk", NewMicra, Config{Micra: MicraConfig{MaxProbes: 3, Parallel: 2, Walk: 6}}},
}

// deepPeerRecords are the records another peer's micra decided over the same
// world (its own directory, a ghost crawler the local membership never
// sees): the Learner's input.
func deepPeerRecords(t *testing.T, w *deepWorld) []Record {
	ctx := context.Background()
	ghost := Crawler{ID: "ghost", Addr: w.crawlers[0].Addr.Next()}
	if !ghost.Addr.IsValid() {
		ghost.Addr = w.crawlers[0].Addr
	}
	cs := append(slices.Clone(w.crawlers), ghost)
	members := NewMemMembership(cs...)
	dir := NewMemDirectory(w.tree, members)
	p := NewMicra(Deps{Tree: w.tree, Dir: dir, Prober: &tableProber{rtt: w.rtt}, Members: members,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(w.seed, 2))}, Config{Self: "peer"})
	for _, c := range cs {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatalf("peer join %s: %v", c.ID, err)
		}
	}
	for i := len(w.hosts) - 1; i >= 0; i-- {
		if _, err := p.Delegate(ctx, w.hosts[i]); err != nil {
			t.Fatalf("peer delegate %v: %v", w.hosts[i], err)
		}
	}
	return dir.Records()
}

// runDeepWorld runs every policy over w and returns a transcript of the
// decisions.
func runDeepWorld(t *testing.T, w *deepWorld) []string {
	ctx := context.Background()
	var log []string
	peerRecs := deepPeerRecords(t, w)
	snu := func(a netip.Addr) hierarchy.NodeID { return w.tree.SmallestNonUnary(a) }
	for pi, pol := range deepPolicies {
		rng := rand.New(rand.NewPCG(w.seed, uint64(pi)))
		members := NewMemMembership()
		dir := NewMemDirectory(w.tree, members)
		prober := &tableProber{rtt: w.rtt}
		cfg := pol.cfg
		cfg.Self = "self"
		p := pol.mk(Deps{Tree: w.tree, Dir: dir, Prober: prober, Members: members,
			Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(w.seed, 100+uint64(pi)))}, cfg)
		fail := func(format string, a ...any) {
			t.Helper()
			t.Fatalf("%s (tree of %d nodes, height %d; %d crawlers, %d live): %s", pol.name, w.tree.Len(), w.tree.Height(),
				len(w.crawlers), len(members.Live()), fmt.Sprintf(format, a...))
		}
		// check asserts the invariants of one call that started when the
		// prober had counted before probes.
		check := func(what string, a netip.Addr, d Decision, err error, before int, ownerMustLive bool) {
			t.Helper()
			log = append(log, pol.name+" "+what+": "+d.String())
			if n := prober.count - before; d.Probes != n {
				fail("%s %v: Probes=%d, the prober counted %d: %v", what, a, d.Probes, n, d)
			}
			if d.String() == "" {
				fail("%s %v: empty Decision.String", what, a)
			}
			if err != nil {
				if !strings.Contains(err.Error(), "no live crawler") || len(members.Live()) != 0 {
					fail("%s %v: unexpected error %v: %v", what, a, err, d)
				}
				return
			}
			if d.Owner == "" {
				fail("%s %v: no owner and no error: %v", what, a, d)
			}
			if ownerMustLive && !members.IsLive(d.Owner) {
				fail("%s %v: owner %s is not live: %v", what, a, d.Owner, d)
			}
			// None: outside the hierarchy (or a hash-policy join, which owns no subnet)
			outside := what == "join" && pol.name == "hash"
			if s := snu(a); d.Subnet != s && (d.Subnet != hierarchy.None || (s != hierarchy.Root && s != hierarchy.None && !outside)) {
				fail("%s %v: subnet %d, the IP's smallest non-unary subnet is %d: %v", what, a, d.Subnet, s, d)
			}
			// a decision that names a subnet's owner is what the directory holds
			kind := strings.Fields(what)[0]
			decided := d.Subnet != hierarchy.None && d.Subnet != hierarchy.Root && pol.name != "hash" &&
				d.Reason != ReasonNoAnswer && d.Reason != ReasonOutsideHierarchy && (kind != "review" || d.Cached || d.Reason != ReasonCached)
			if decided {
				// (or of the IP's block, when the record delegates it to a
				// live crawler)
				ownerOf := func(r Record) CrawlerID {
					if b, ok := r.BlockOwner(a); ok && members.IsLive(b.Owner) {
						return b.Owner
					}
					return r.Owner
				}
				if rec, ok := dir.Get(d.Subnet); !ok || ownerOf(rec) != d.Owner || ownerOf(d.Record) != d.Owner {
					fail("%s %v: owner %s, record in the decision %s, in the directory %s (%v): %v", what, a, d.Owner, ownerOf(d.Record), ownerOf(rec), ok, d)
				}
			}
			if rec, ok := dir.Get(d.Subnet); ok && d.Subnet != hierarchy.None {
				// block delegations: bounded, distinct, in the subnet, none
				// to the subnet's own owner
				if len(rec.Blocks) > MaxBlocks {
					fail("%s %v: %d blocks in subnet %d: %+v", what, a, len(rec.Blocks), d.Subnet, rec.Blocks)
				}
				seen := map[netip.Prefix]bool{}
				for _, b := range rec.Blocks {
					if b.Owner == rec.Owner || seen[b.Block()] || snu(b.Host) != d.Subnet {
						fail("%s %v: bad block %+v in subnet %d (owner %s): %+v", what, a, b, d.Subnet, rec.Owner, rec.Blocks)
					}
					seen[b.Block()] = true
				}
			}
			for _, m := range d.Moved {
				if !members.IsLive(m.Owner) {
					fail("%s %v: load balancing moved subnet %d to dead %s: %v", what, a, m.Subnet, m.Owner, d)
				}
			}
		}
		join := func(c Crawler) {
			t.Helper()
			members.Add(c)
			before := prober.count
			d, err := p.Join(ctx, c)
			check("join", c.Addr, d, err, before, true)
			if err != nil {
				fail("join %s: %v", c.ID, err)
			}
		}
		for _, c := range w.crawlers {
			join(c)
		}
		var dead []Crawler
		rv, reviews := p.(Reviewer)
		ln, learns := p.(Learner)
		for _, a := range w.hosts {
			// churn: a crawler dies, now and then one comes back
			if rng.IntN(32) < w.h.churn {
				if live := members.Live(); len(live) > 0 {
					c, _ := members.Get(live[rng.IntN(len(live))].ID)
					members.Remove(c.ID)
					dead = append(dead, c)
				}
			}
			if len(dead) > 0 && rng.IntN(16) == 0 {
				k := rng.IntN(len(dead))
				c := dead[k]
				dead = slices.Delete(dead, k, k+1)
				join(c)
			}
			before := prober.count
			var d Decision
			var err error
			what := "delegate"
			if rng.IntN(6) == 0 {
				what = "redelegate"
				d, err = p.Redelegate(ctx, a)
			} else {
				d, err = p.Delegate(ctx, a)
			}
			check(what, a, d, err, before, true)

			if reviews && rng.IntN(2) == 0 {
				// the owner (or another crawler) timed this host or
				// another of the subnet
				host := a
				if s := snu(a); s != hierarchy.None && s != hierarchy.Root && rng.IntN(2) == 0 {
					n := w.tree.Node(s)
					host = deepRandIn(rng, hierarchy.Range{Start: n.Start, End: n.End})
				}
				owner := d.Owner
				if rng.IntN(4) == 0 || owner == "" {
					owner = w.crawlers[rng.IntN(len(w.crawlers))].ID
				}
				took := time.Duration(rng.IntN(200_000)) * time.Microsecond
				if rng.IntN(8) == 0 {
					took = -took
				}
				before := prober.count
				rd, err := rv.Review(ctx, host, owner, took)
				// a review for a dead owner may echo it back (nothing to review)
				check("review by "+string(owner), host, rd, err, before, members.IsLive(owner))
			}
			if learns && len(peerRecs) > 0 && rng.IntN(2) == 0 {
				before := prober.count
				rec := peerRecs[rng.IntN(len(peerRecs))]
				if ln.Learn(rec) && ln.Learn(rec) {
					fail("Learn accepted the same record twice: %+v", rec)
				}
				foreign := rec
				foreign.Snapshot[0] ^= 1
				if ln.Learn(foreign) {
					fail("Learn accepted a record of another snapshot")
				}
				for _, s := range []hierarchy.NodeID{hierarchy.None, hierarchy.Root, hierarchy.NodeID(w.tree.Len())} {
					bad := rec
					bad.Subnet, bad.Epoch = s, rec.Epoch+1000
					if ln.Learn(bad) {
						fail("Learn accepted a record for subnet %d (tree of %d nodes)", s, w.tree.Len())
					}
				}
				if prober.count != before {
					fail("Learn probed")
				}
			}
		}
	}
	return log
}
