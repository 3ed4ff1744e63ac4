package hierarchy

import (
	"bytes"
	"errors"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
)

func a4(x uint32) netip.Addr { return toAddr(fam4, u128{0, uint64(x)}) }

// randomRanges makes nested, overlapping, duplicated and unary ranges in a
// small IPv4 window plus some IPv6, so collisions are frequent.
func randomRanges(rng *rand.Rand, n int) []Range {
	var out []Range
	orgs := []string{"", "alpha", "beta", "gamma", "delta"}
	ccs := []string{"", "DE", "FR", "CY"}
	for i := 0; i < n; i++ {
		var r Range
		if rng.IntN(4) == 0 {
			base := u128{0x20010db8 << 32, 0}
			s := base.add1()
			s.lo = uint64(rng.IntN(4096))
			e := s
			e.lo += uint64(rng.IntN(600))
			r.Start, r.End = toAddr(fam6, s), toAddr(fam6, e)
		} else {
			s := uint32(rng.IntN(4096))
			var span uint32
			switch rng.IntN(3) {
			case 0:
				span = 0
			case 1:
				span = uint32(rng.IntN(64))
			default:
				span = uint32(rng.IntN(2048))
			}
			r.Start, r.End = a4(0x0a000000+s), a4(0x0a000000+s+span)
		}
		r.Org = orgs[rng.IntN(len(orgs))]
		r.Country = ccs[rng.IntN(len(ccs))]
		r.Registry = Registry(rng.IntN(int(numRegistries)))
		r.Status = Status(rng.IntN(int(numStatuses)))
		r.ASN = uint32(rng.IntN(3))
		out = append(out, r)
		if rng.IntN(10) == 0 { // exact duplicate
			out = append(out, r)
		}
	}
	return out
}

func build(t testing.TB, rs []Range) (*Tree, BuildStats) {
	t.Helper()
	b := NewBuilder()
	for _, r := range rs {
		if err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	tr, st, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr, st
}

// checkTree verifies the structural invariants of any tree.
func checkTree(t testing.TB, tr *Tree) {
	t.Helper()
	for id := 1; id < tr.Len(); id++ {
		n := tr.Node(NodeID(id))
		if n.End.Less(n.Start) {
			t.Fatalf("node %d: end before start", id)
		}
		if n.Parent >= NodeID(id) {
			t.Fatalf("node %d: parent %d not before it", id, n.Parent)
		}
		if n.Parent != Root {
			p := tr.Node(n.Parent)
			if n.Start.Less(p.Start) || p.End.Less(n.End) || (p.Start == n.Start && p.End == n.End) {
				t.Fatalf("node %d %v not strictly inside parent %d %v", id, n, n.Parent, p)
			}
			if n.Depth != p.Depth+1 {
				t.Fatalf("node %d depth %d, parent depth %d", id, n.Depth, p.Depth)
			}
		} else if n.Depth != 1 {
			t.Fatalf("top-level node %d has depth %d", id, n.Depth)
		}
	}
	count := 0
	for id := 0; id < tr.Len(); id++ {
		ch := tr.Children(NodeID(id))
		count += len(ch)
		for i, c := range ch {
			if tr.Parent(c) != NodeID(id) {
				t.Fatalf("child %d of %d has parent %d", c, id, tr.Parent(c))
			}
			if i > 0 {
				prev, cur := tr.Node(ch[i-1]), tr.Node(c)
				if prev.Start.Is4() == cur.Start.Is4() && !prev.End.Less(cur.Start) {
					t.Fatalf("siblings %d %v and %d %v overlap", ch[i-1], prev, c, cur)
				}
			}
		}
	}
	if count != tr.Len()-1 {
		t.Fatalf("children lists hold %d nodes, want %d", count, tr.Len()-1)
	}
}

// bruteSmallest finds the smallest input range containing ip (nil if none).
func bruteSmallest(rs []Range, ip netip.Addr) *Range {
	var best *Range
	var bestSize u128
	for i := range rs {
		r := &rs[i]
		if r.Start.Is4() != ip.Is4() || ip.Less(r.Start) || r.End.Less(ip) {
			continue
		}
		_, s, _ := fromAddr(r.Start)
		_, e, _ := fromAddr(r.End)
		size := e.sub(s)
		if best == nil || size.less(bestSize) {
			best, bestSize = r, size
		}
	}
	return best
}

func TestPropertiesRandom(t *testing.T) {
	defer func(a int) { directIndexMin = a }(directIndexMin)
	for seed := uint64(0); seed < 40; seed++ {
		// Odd seeds force the bucket indexes onto these small trees; even
		// seeds search all nodes.
		if seed%2 == 1 {
			directIndexMin = 0
		} else {
			directIndexMin = 1 << 30
		}
		rng := rand.New(rand.NewPCG(seed, 7))
		rs := randomRanges(rng, 5+rng.IntN(150))
		tr, st := build(t, rs)
		checkTree(t, tr)
		if st.Nodes != tr.Len() || st.PerLevel[0] != 1 {
			t.Fatalf("stats %+v", st)
		}
		// Every address maps to the smallest enclosing range: the node found
		// has exactly the size of the smallest input range containing ip
		// (splitting never enlarges a range, and every address of an input
		// range stays covered by a node at least that small).
		for k := 0; k < 3000; k++ {
			var ip netip.Addr
			if k%4 == 0 {
				ip = toAddr(fam6, u128{0x20010db8 << 32, uint64(rng.IntN(5000))})
			} else {
				ip = a4(0x0a000000 - 10 + uint32(rng.IntN(6200)))
			}
			id := tr.Lookup(ip)
			want := bruteSmallest(rs, ip)
			if want == nil {
				if id != Root {
					t.Fatalf("seed %d: %v: got %d, want Root", seed, ip, id)
				}
				continue
			}
			if id == Root || !tr.Contains(id, ip) {
				t.Fatalf("seed %d: %v: got %d which does not contain it", seed, ip, id)
			}
			n := tr.Node(id)
			_, ns, _ := fromAddr(n.Start)
			_, ne, _ := fromAddr(n.End)
			_, ws, _ := fromAddr(want.Start)
			_, we, _ := fromAddr(want.End)
			if we.sub(ws).less(ne.sub(ns)) {
				t.Fatalf("seed %d: %v: node %v larger than input range %v-%v", seed, ip, n, want.Start, want.End)
			}
			for _, c := range tr.Children(id) {
				if tr.Contains(c, ip) {
					t.Fatalf("seed %d: %v: child %d of %d also contains it", seed, ip, c, id)
				}
			}
			snu := tr.SmallestNonUnary(ip)
			if n.Unary() {
				if snu != n.Parent {
					t.Fatalf("unary %v: SmallestNonUnary %d, want parent %d", n, snu, n.Parent)
				}
			} else if snu != id {
				t.Fatalf("%v: SmallestNonUnary %d, Lookup %d", ip, snu, id)
			}
			anc := tr.Ancestors(id)
			if anc[len(anc)-1] != Root || anc[0] != n.Parent || len(anc) != int(n.Depth) {
				t.Fatalf("ancestors %v of %d", anc, id)
			}
		}
		// Canonical encoding.
		enc := tr.Encode()
		tr2, err := Decode(enc)
		if err != nil {
			t.Fatalf("seed %d: decode: %v", seed, err)
		}
		if !bytes.Equal(tr2.Encode(), enc) || tr2.ID() != tr.ID() {
			t.Fatalf("seed %d: encode→decode→encode differs", seed)
		}
		checkTree(t, tr2)
		// Same input, fresh builder: same id.
		tr3, _ := build(t, rs)
		if tr3.ID() != tr.ID() {
			t.Fatalf("seed %d: id not stable across builds", seed)
		}
		// SameOrg is symmetric and excludes the node itself.
		for id := 1; id < tr.Len(); id++ {
			for _, o := range tr.SameOrg(NodeID(id)) {
				if o == NodeID(id) || tr.Node(o).Org != tr.Node(NodeID(id)).Org {
					t.Fatalf("SameOrg(%d) holds %d", id, o)
				}
			}
		}
		// Migrating a tree onto itself is the identity.
		for id, m := range Migrate(tr, tr2) {
			if m != NodeID(id) {
				t.Fatalf("Migrate(t,t)[%d] = %d", id, m)
			}
		}
	}
}

func TestNestingAndOverlapRule(t *testing.T) {
	rs := []Range{
		{Start: a4(100), End: a4(199), Org: "A"},
		{Start: a4(150), End: a4(249), Org: "B"}, // partial overlap: split at 199
		{Start: a4(120), End: a4(129), Org: "C"},
		{Start: a4(120), End: a4(129), Org: "D", Country: "DE"}, // duplicate: later fields win
		{Start: a4(125), End: a4(125), Org: "E"},                // unary
	}
	tr, st := build(t, rs)
	checkTree(t, tr)
	if st.Duplicates != 1 || st.PartialOverlaps != 1 || st.SplitPieces != 1 {
		t.Fatalf("stats %+v", st)
	}
	want := []string{"root", "0.0.0.100-0.0.0.199", "0.0.0.120-0.0.0.129", "0.0.0.125/32", "0.0.0.150-0.0.0.199", "0.0.0.200-0.0.0.249"}
	if tr.Len() != len(want) {
		t.Fatalf("%d nodes, want %d", tr.Len(), len(want))
	}
	for i, w := range want {
		if got := tr.Node(NodeID(i)).String(); got != w {
			t.Errorf("node %d = %s, want %s", i, got, w)
		}
	}
	if n := tr.Node(2); tr.OrgName(n.Org) != "D" || n.Country != "DE" {
		t.Errorf("duplicate merge: %+v %s", n, tr.OrgName(n.Org))
	}
	if got := tr.SmallestNonUnary(a4(125)); got != 2 {
		t.Errorf("SmallestNonUnary(unary) = %d, want 2", got)
	}
	if got := tr.SameOrg(4); len(got) != 1 || got[0] != 5 {
		t.Errorf("split pieces of B: SameOrg = %v", got)
	}
	if got := tr.Lookup(a4(99)); got != Root {
		t.Errorf("uncovered address → %d", got)
	}
}

func TestSubtreeAndAncestry(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	tr, _ := build(t, randomRanges(rng, 300))
	for id := 0; id < tr.Len(); id++ {
		end := tr.SubtreeEnd(NodeID(id))
		for d := 0; d < tr.Len(); d++ {
			// d is a proper descendant of id iff id is on d's ancestor chain.
			onChain := false
			for p := tr.Parent(NodeID(d)); p != None; p = tr.Parent(p) {
				if p == NodeID(id) {
					onChain = true
					break
				}
			}
			inRange := d > id && NodeID(d) < end
			if onChain != inRange || tr.IsAncestor(NodeID(id), NodeID(d)) != onChain {
				t.Fatalf("node %d, subtree end %d: %d on chain %v, in range %v", id, end, d, onChain, inRange)
			}
		}
	}
}

func TestSortRangesRuns(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	for _, runs := range []int{1, 2, 3, 7, 64, 65, 200} {
		var rs []brange
		for r := 0; r < runs; r++ {
			n := rng.IntN(50)
			base := uint64(rng.IntN(1000))
			for i := 0; i < n; i++ {
				base += uint64(rng.IntN(3))
				rs = append(rs, brange{fam: fam4, s: u128{0, base}, e: u128{0, base + uint64(rng.IntN(5))}, seq: uint32(len(rs))})
			}
		}
		// make each run sorted
		want := slices.Clone(rs)
		slices.SortFunc(want, func(x, y brange) int { return rangeCmp(&x, &y) })
		got := slices.Clone(rs)
		sortRanges(got)
		if !slices.Equal(got, want) {
			t.Fatalf("%d runs: natural merge sort differs from pdqsort", runs)
		}
	}
}

func TestRangesRebuildIdentity(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 9))
	tr, _ := build(t, randomRanges(rng, 200))
	tr2, st := build(t, tr.Ranges())
	if tr2.ID() != tr.ID() || st.Duplicates != 0 || st.PartialOverlaps != 0 {
		t.Fatalf("rebuild from Ranges: id equal %v, stats %+v", tr2.ID() == tr.ID(), st)
	}
}

func TestMigrateAcrossRebuild(t *testing.T) {
	old := []Range{
		{Start: a4(0), End: a4(999), Org: "rir"},
		{Start: a4(100), End: a4(199), Org: "a"},
		{Start: a4(120), End: a4(129), Org: "a-sub"},
		{Start: a4(300), End: a4(399), Org: "b"},
		{Start: a4(2000), End: a4(2999), Org: "gone"},
	}
	nw := []Range{
		{Start: a4(0), End: a4(999), Org: "rir"},
		{Start: a4(100), End: a4(199), Org: "a renamed"}, // same range: kept
		{Start: a4(300), End: a4(349), Org: "b1"},        // b split: b maps to rir
		{Start: a4(350), End: a4(399), Org: "b2"},
	}
	to, _ := build(t, old)
	tn, _ := build(t, nw)
	m := Migrate(to, tn)
	name := func(tr *Tree, id NodeID) string {
		if id == Root {
			return "root"
		}
		return tr.OrgName(tr.Node(id).Org)
	}
	want := map[string]string{"root": "root", "rir": "rir", "a": "a renamed", "a-sub": "a renamed", "b": "rir", "gone": "root"}
	for id := 0; id < to.Len(); id++ {
		if got := name(tn, m[id]); got != want[name(to, NodeID(id))] {
			t.Errorf("%s → %s, want %s", name(to, NodeID(id)), got, want[name(to, NodeID(id))])
		}
	}
}

func TestDecodeRejects(t *testing.T) {
	tr, _ := build(t, []Range{{Start: a4(1), End: a4(10), Org: "x", Country: "DE"}, {Start: a4(2), End: a4(3)}})
	enc := tr.Encode()
	if _, err := Decode(enc); err != nil {
		t.Fatal(err)
	}
	cases := map[string][]byte{
		"empty":     nil,
		"magic":     append([]byte("XICRAHIE"), enc[8:]...),
		"truncated": enc[:len(enc)-5],
		"checksum":  append(slices.Clone(enc[:len(enc)-1]), enc[len(enc)-1]^1),
		"trailing":  withCRC(append(slices.Clone(enc[:len(enc)-4]), 0, 0, 0, 0, 0)),
	}
	v := slices.Clone(enc)
	v[8] = 2 // version
	cases["version"] = withCRC(v)
	for name, b := range cases {
		if _, err := Decode(b); err == nil || !errors.Is(err, ErrSnapshot) {
			t.Errorf("%s: %v", name, err)
		}
	}
	// Mapped IPv4 addresses find IPv4 ranges; zones are not addresses of ranges.
	if tr.Lookup(netip.MustParseAddr("::ffff:0.0.0.2")) != 2 || !tr.Contains(1, netip.MustParseAddr("::ffff:0.0.0.5")) {
		t.Error("IPv4-mapped lookup")
	}
	if tr.Lookup(netip.Addr{}) != Root || tr.Contains(Root, netip.Addr{}) {
		t.Error("invalid address")
	}
}
