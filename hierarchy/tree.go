package hierarchy

import (
	"crypto/sha256"
	"encoding/binary"
	"net/netip"
	"slices"
	"strings"
	"sync"
)

// nodeRec is one node as the Builder, the decoder and tests hand it to a
// Tree (Tree.put); the Tree itself keeps its nodes as parallel arrays.
type nodeRec struct {
	s, e   u128
	parent NodeID
	org    OrgID
	asn    uint32
	cc     uint16 // index into Tree.countries; 0 = none
	depth  uint8
	fam    uint8 // fam4, fam6; 0 for Root
	reg    Registry
	st     Status
}

// Tree is an immutable IP-range hierarchy. All methods are safe for
// concurrent use.
//
// Node IDs are the preorder of the tree, which is also address order:
// Root is 0, then IPv4 ranges by start address (a container before its
// contents), then IPv6 ranges. The subtree of a node is therefore the
// contiguous ID interval [id, id+SubtreeSize(id)).
//
// Memory: the nodes are parallel arrays of small integers (24 bytes an
// IPv4 node, 32 an IPv6 one, no pointers), the organisation names one
// string, and the lookup index 8 bytes per IPv4 interval and 12 per IPv6
// one. What only some callers use (subtree ends, children, nodes per
// organisation) is built on first use.
type Tree struct {
	// Nodes, indexed by NodeID (Root's entries are zero, its parent None).
	// IPv4 nodes are [1, first6), IPv6 ones [first6, Len()).
	parent []NodeID
	org    []OrgID
	asn    []uint32
	cc     []uint16 // index into countries
	flags  []uint8  // registry (bits 0–3), status (bits 4–7)
	depth  []uint8
	// Ranges. An IPv4 node's start and end are s32, e32; an IPv6 node's are
	// s32<<96 | s6<<64 | lo, e32<<96 | e6<<64 | lo (s6, e6 indexed by
	// id−first6), where the low 64 bits are 0 for a start and all ones for
	// an end except at the few IPv6 nodes sLo and eLoX (e's low bits,
	// inverted) list: all but about 240 of the default's 152,417 IPv6 nodes
	// are /64s or larger.
	s32, e32  []uint32
	s6, e6    []uint32
	sLo, eLoX sparse64
	first6    NodeID

	orgNames  string   // every organisation's name, in OrgID order
	nameOff   []uint32 // name of o: orgNames[nameOff[o]:nameOff[o+1]]; o = 0 is ""
	countries []string // country index → ISO-2; countries[0] = ""
	height    int

	subOnce   sync.Once
	subEnd    []uint32 // subtree of n is [n, subEnd[n])
	childOnce sync.Once
	childOff  []uint32 // children of n: childList[childOff[n]:childOff[n+1]]
	childList []NodeID
	orgOnce   sync.Once
	orgOff    []uint32 // nodes of org o: orgList[orgOff[o]:orgOff[o+1]]
	orgList   []NodeID

	// Lookup index: the address space of each family cut into elementary
	// intervals; seg*Node is the deepest node covering each, tagged with
	// unaryTag when that node holds a single address (SmallestNonUnary then
	// answers its parent). idx*[p] is the interval holding the first address
	// whose top 16 bits are p (idx*[65536] = last interval).
	seg4Start []uint32
	seg4Node  []uint32
	idx4      []uint32
	// IPv6 interval starts: the high 64 bits; the low 64 bits are 0 but at
	// the few intervals seg6Lo lists (boundaries inside a /64).
	seg6Hi   []uint64
	seg6Lo   sparse64
	seg6Node []uint32
	idx6     []uint32
	// Dense IPv6 buckets (2001::/16, 2a00::/16, …) get a second level on
	// the next 12 bits: sub6[sub6Off[p]-1+k] is the interval holding the
	// first address of sub-bucket k of bucket p (sub6Off[p] = 0: none).
	sub6Off []uint32
	sub6    []uint32

	idOnce sync.Once
	id     SnapshotID
}

// unaryTag marks a lookup-index entry whose node holds one address; node
// IDs stay below it (maxNodes).
const unaryTag = 1 << 31

// maxNodes bounds the nodes of a tree (far beyond any registry data: the
// default has 582,398).
const maxNodes = unaryTag

// sparse64 maps a few of many indexes to non-zero uint64 values (0 for the
// rest): a bit per index and the values in index order.
type sparse64 struct {
	bits []uint64
	keys []uint32
	vals []uint64
}

func (m *sparse64) get(i uint32) uint64 {
	if len(m.keys) == 0 || m.bits[i>>6]&(1<<(i&63)) == 0 {
		return 0
	}
	k, _ := slices.BinarySearch(m.keys, i)
	return m.vals[k]
}

// add sets index i (above every index set before) of an index space of n
// to v ≠ 0.
func (m *sparse64) add(i uint32, v uint64, n int) {
	if m.bits == nil {
		m.bits = make([]uint64, (n+63)/64)
	}
	m.bits[i>>6] |= 1 << (i & 63)
	m.keys = append(m.keys, i)
	m.vals = append(m.vals, v)
}

// directIndexMin is the number of elementary intervals from which a family
// gets its direct top-bits index (a variable so tests can force either path).
var directIndexMin = 256

// dense6 is the number of intervals from which an IPv6 /16 bucket gets its
// second index level.
var dense6 = 64

// alloc makes room for n nodes (Root included) and sets Root.
func (t *Tree) alloc(n int) {
	t.parent = make([]NodeID, n)
	t.org = make([]OrgID, n)
	t.asn = make([]uint32, n)
	t.cc = make([]uint16, n)
	t.flags = make([]uint8, n)
	t.depth = make([]uint8, n)
	t.s32 = make([]uint32, n)
	t.e32 = make([]uint32, n)
	t.parent[0] = None
	t.first6 = NodeID(n)
}

// put stores node id; nodes are put in ID order (the IPv6 arrays are made
// when the first IPv6 node arrives).
func (t *Tree) put(id NodeID, r *nodeRec) {
	t.parent[id], t.org[id], t.asn[id], t.cc[id] = r.parent, r.org, r.asn, r.cc
	t.flags[id], t.depth[id] = uint8(r.reg)|uint8(r.st)<<4, r.depth
	if r.fam != fam6 {
		t.s32[id], t.e32[id] = uint32(r.s.lo), uint32(r.e.lo)
		return
	}
	if id < t.first6 {
		t.first6 = id
		n6 := len(t.parent) - int(id)
		t.s6, t.e6 = make([]uint32, n6), make([]uint32, n6)
	}
	k := uint32(id - t.first6)
	t.s32[id], t.s6[k] = uint32(r.s.hi>>32), uint32(r.s.hi)
	t.e32[id], t.e6[k] = uint32(r.e.hi>>32), uint32(r.e.hi)
	if r.s.lo != 0 {
		t.sLo.add(k, r.s.lo, len(t.s6))
	}
	if r.e.lo != ^uint64(0) {
		t.eLoX.add(k, ^r.e.lo, len(t.s6))
	}
}

// setOrgs stores the organisation names (names[0] = "") as one string.
func (t *Tree) setOrgs(names []string) {
	var b strings.Builder
	t.nameOff = make([]uint32, len(names)+1)
	for _, s := range names {
		t.nameOff[len(names)] += uint32(len(s))
	}
	b.Grow(int(t.nameOff[len(names)]))
	for i, s := range names {
		b.WriteString(s)
		t.nameOff[i+1] = uint32(b.Len())
	}
	t.orgNames = b.String()
}

// setOrgNames is setOrgs for the n−1 names of a snapshot's organisation
// table (checked already; total bytes of names).
func (t *Tree) setOrgNames(table []byte, n, total int) {
	var b strings.Builder
	b.Grow(total)
	t.nameOff = make([]uint32, n+1)
	for o := 1; o < n; o++ {
		l, k := binary.Uvarint(table)
		b.Write(table[k : k+int(l)])
		table = table[k+int(l):]
		t.nameOff[o+1] = uint32(b.Len())
	}
	t.orgNames = b.String()
}

// treeOf builds a tree from nodes in ID order (nodes[0] is Root) and its
// organisation and country tables.
func treeOf(nodes []nodeRec, orgs, countries []string) *Tree {
	t := &Tree{countries: countries}
	t.alloc(len(nodes))
	for id := 1; id < len(nodes); id++ {
		t.put(NodeID(id), &nodes[id])
	}
	t.setOrgs(orgs)
	t.finish()
	return t
}

// fam returns the family of id (0 for Root).
func (t *Tree) fam(id NodeID) uint8 {
	switch {
	case id == Root:
		return 0
	case id < t.first6:
		return fam4
	}
	return fam6
}

// bounds returns the range of id (zeros for Root).
func (t *Tree) bounds(id NodeID) (s, e u128) {
	if id < t.first6 {
		return u128{0, uint64(t.s32[id])}, u128{0, uint64(t.e32[id])}
	}
	k := uint32(id - t.first6)
	s = u128{uint64(t.s32[id])<<32 | uint64(t.s6[k]), t.sLo.get(k)}
	e = u128{uint64(t.e32[id])<<32 | uint64(t.e6[k]), ^t.eLoX.get(k)}
	return s, e
}

func (t *Tree) registry(id NodeID) Registry { return Registry(t.flags[id] & 0xf) }
func (t *Tree) status(id NodeID) Status     { return Status(t.flags[id] >> 4) }

// finish derives the height and the lookup index from the nodes.
func (t *Tree) finish() {
	t.height = 0
	for _, d := range t.depth {
		t.height = max(t.height, int(d))
	}
	t.buildIndex()
}

// subtrees builds the subtree ends on first use: in preorder a node's
// subtree ends where its last child's does.
func (t *Tree) subtrees() {
	t.subOnce.Do(func() {
		n := len(t.parent)
		end := make([]uint32, n)
		for i := n - 1; i > 0; i-- {
			end[i] = max(end[i], uint32(i+1))
			if p := t.parent[i]; end[p] < end[i] {
				end[p] = end[i]
			}
		}
		end[0] = uint32(n)
		t.subEnd = end
	})
}

// children builds the children lists on first use (address order).
func (t *Tree) children() {
	t.childOnce.Do(func() {
		n := len(t.parent)
		off := make([]uint32, n+1)
		for i := 1; i < n; i++ {
			off[t.parent[i]+1]++
		}
		for i := 1; i <= n; i++ {
			off[i] += off[i-1]
		}
		list := make([]NodeID, n-1)
		fill := slices.Clone(off[:n])
		for i := 1; i < n; i++ {
			p := t.parent[i]
			list[fill[p]] = NodeID(i)
			fill[p]++
		}
		t.childOff, t.childList = off, list
	})
}

// orgLists builds the nodes-per-organisation lists on first use.
func (t *Tree) orgLists() {
	t.orgOnce.Do(func() {
		n, no := len(t.parent), t.NumOrgs()
		off := make([]uint32, no+1)
		for i := 1; i < n; i++ {
			off[t.org[i]+1]++
		}
		for i := 1; i <= no; i++ {
			off[i] += off[i-1]
		}
		list := make([]NodeID, off[no])
		fill := slices.Clone(off[:no])
		for i := 1; i < n; i++ {
			o := t.org[i]
			list[fill[o]] = NodeID(i)
			fill[o]++
		}
		t.orgOff, t.orgList = off, list
	})
}

// sweep collects the elementary intervals of one family: starts and the
// deepest node of each, merged as they are emitted in address order.
type sweep struct {
	n   int
	s4  []uint32 // IPv4 starts
	hi  []uint64 // IPv6 starts
	lo  []uint64
	own []NodeID
}

func (w *sweep) start(i int) u128 {
	if w.s4 != nil {
		return u128{0, uint64(w.s4[i])}
	}
	return u128{w.hi[i], w.lo[i]}
}

func (w *sweep) emit(s u128, o NodeID) {
	last := w.n - 1
	if last >= 0 && w.start(last) == s {
		w.own[last] = o
		if last > 0 && w.own[last-1] == o {
			w.n--
		}
		return
	}
	if last >= 0 && w.own[last] == o {
		return
	}
	if w.s4 != nil {
		w.s4[w.n] = uint32(s.lo)
	} else {
		w.hi[w.n], w.lo[w.n] = s.hi, s.lo
	}
	w.own[w.n] = o
	w.n++
}

// buildIndex cuts each family into elementary intervals by a preorder
// sweep.
func (t *Tree) buildIndex() {
	n := len(t.parent)
	tag := func(o NodeID) uint32 {
		if o != Root {
			if s, e := t.bounds(o); s == e {
				return uint32(o) | unaryTag
			}
		}
		return uint32(o)
	}
	for _, f := range []uint8{fam4, fam6} {
		// A family's nodes are one contiguous ID block; every node adds at
		// most two interval starts.
		first, last := 1, int(t.first6)
		if f == fam6 {
			first, last = int(t.first6), n
		}
		size := 2*(last-first) + 1
		w := &sweep{own: make([]NodeID, size)}
		if f == fam4 {
			w.s4 = make([]uint32, size)
		} else {
			w.hi, w.lo = make([]uint64, size), make([]uint64, size)
		}
		w.emit(u128{}, Root)
		stack := []NodeID{Root}
		ends := []u128{{}}
		for id := first; id < last; id++ {
			s, e := t.bounds(NodeID(id))
			for len(stack) > 1 && ends[len(ends)-1].less(s) {
				end := ends[len(ends)-1]
				stack, ends = stack[:len(stack)-1], ends[:len(ends)-1]
				w.emit(end.add1(), stack[len(stack)-1])
			}
			w.emit(s, NodeID(id))
			stack, ends = append(stack, NodeID(id)), append(ends, e)
		}
		for len(stack) > 1 {
			end := ends[len(ends)-1]
			stack, ends = stack[:len(stack)-1], ends[:len(ends)-1]
			if end != famMax(f) { // else every remaining ancestor ends there too
				w.emit(end.add1(), stack[len(stack)-1])
			}
		}
		own := make([]uint32, w.n)
		for i, o := range w.own[:w.n] {
			own[i] = tag(o)
		}
		// Small trees (tests, simulations) skip the direct indexes: a binary
		// search over a few intervals is as fast and costs no 512 KiB of tables.
		if f == fam4 {
			t.seg4Start, t.seg4Node = slices.Clone(w.s4[:w.n]), own
			t.idx4 = nil
			if w.n > directIndexMin {
				t.buildIdx4(t.seg4Start)
			}
			continue
		}
		t.seg6Hi, t.seg6Node, t.seg6Lo = slices.Clone(w.hi[:w.n]), own, sparse64{}
		for i, lo := range w.lo[:w.n] {
			if lo != 0 {
				t.seg6Lo.add(uint32(i), lo, w.n)
			}
		}
		t.idx6, t.sub6Off, t.sub6 = nil, nil, nil
		if w.n > directIndexMin {
			t.buildIdx6(w.hi[:w.n], w.lo[:w.n])
		}
	}
}

func (t *Tree) buildIdx4(starts4 []uint32) {
	t.idx4 = make([]uint32, 65537)
	j := 0
	for p := 0; p < 65536; p++ {
		a := uint32(p) << 16
		for j+1 < len(starts4) && starts4[j+1] <= a {
			j++
		}
		t.idx4[p] = uint32(j)
	}
	t.idx4[65536] = uint32(len(starts4) - 1)
}

func (t *Tree) buildIdx6(hi6, lo6 []uint64) {
	// a (low half 0) is at or after start j
	atOrAfter := func(a uint64, j int) bool { return hi6[j] < a || (hi6[j] == a && lo6[j] == 0) }
	t.idx6 = make([]uint32, 65537)
	j := 0
	for p := 0; p < 65536; p++ {
		a := uint64(p) << 48
		for j+1 < len(hi6) && atOrAfter(a, j+1) {
			j++
		}
		t.idx6[p] = uint32(j)
	}
	t.idx6[65536] = uint32(len(hi6) - 1)
	t.sub6Off = make([]uint32, 65536)
	var sub6 []uint32
	for p := 0; p < 65536; p++ {
		lo, hi := int(t.idx6[p]), int(t.idx6[p+1])
		if hi-lo <= dense6 {
			continue
		}
		t.sub6Off[p] = uint32(len(sub6)) + 1
		j := lo
		for k := 0; k < 4096; k++ {
			a := uint64(p)<<48 | uint64(k)<<36
			for j+1 <= hi && atOrAfter(a, j+1) {
				j++
			}
			sub6 = append(sub6, uint32(j))
		}
		sub6 = append(sub6, uint32(hi))
	}
	t.sub6 = slices.Clip(sub6)
}

// seg4 returns the elementary interval holding x.
func (t *Tree) seg4(x uint32) int {
	lo, hi := 0, len(t.seg4Start)-1
	if t.idx4 != nil {
		p := x >> 16
		lo, hi = int(t.idx4[p]), int(t.idx4[p+1])
	}
	// invariant: starts[lo] <= x; answer in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi+1) >> 1)
		if t.seg4Start[m] <= x {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

func (t *Tree) seg6(x u128) int {
	lo, hi := 0, len(t.seg6Hi)-1
	if t.idx6 != nil {
		p := x.hi >> 48
		lo, hi = int(t.idx6[p]), int(t.idx6[p+1])
		if o := t.sub6Off[p]; o != 0 {
			k := int(o-1) + int(x.hi>>36&0xfff)
			lo, hi = int(t.sub6[k]), int(t.sub6[k+1])
		}
	}
	// invariant: start[lo] <= x; answer in [lo, hi]
	for lo < hi {
		m := int(uint(lo+hi+1) >> 1)
		if t.seg6Hi[m] <= x.hi {
			lo = m
		} else {
			hi = m - 1
		}
	}
	// lo is the last interval whose start's high half is ≤ x's; one inside
	// x's /64 may still start above x (interval 0 starts at ::)
	for t.seg6Hi[lo] == x.hi && t.seg6Lo.get(uint32(lo)) > x.lo {
		lo--
	}
	return lo
}

// Len returns the number of nodes, Root included; IDs are 0..Len()-1.
func (t *Tree) Len() int { return len(t.parent) }

// Height returns the depth of the deepest node.
func (t *Tree) Height() int { return t.height }

// ID returns the snapshot id: the SHA-256 of Encode().
func (t *Tree) ID() SnapshotID {
	t.idOnce.Do(func() { t.id = sha256.Sum256(t.Encode()) })
	return t.id
}

// Node returns node id; it panics if id is out of range.
func (t *Tree) Node(id NodeID) Node {
	if id == Root {
		_ = t.parent[id]
		return Node{Parent: None}
	}
	f := t.fam(id)
	s, e := t.bounds(id)
	return Node{
		Start: toAddr(f, s), End: toAddr(f, e),
		Parent: t.parent[id], Depth: t.depth[id], Org: t.org[id],
		Registry: t.registry(id), Status: t.status(id), Country: t.countries[t.cc[id]], ASN: t.asn[id],
	}
}

// Lookup returns the smallest node containing ip (Root if none does).
func (t *Tree) Lookup(ip netip.Addr) NodeID {
	f, x, ok := fromAddr(ip)
	switch {
	case !ok:
		return Root
	case f == fam4:
		return NodeID(t.seg4Node[t.seg4(uint32(x.lo))] &^ unaryTag)
	}
	return NodeID(t.seg6Node[t.seg6(x)] &^ unaryTag)
}

// SmallestNonUnary returns the smallest node containing ip that holds more
// than one address: Lookup, but a single-address node yields its parent.
func (t *Tree) SmallestNonUnary(ip netip.Addr) NodeID {
	f, x, ok := fromAddr(ip)
	var o uint32
	switch {
	case !ok:
		return Root
	case f == fam4:
		o = t.seg4Node[t.seg4(uint32(x.lo))]
	default:
		o = t.seg6Node[t.seg6(x)]
	}
	if o&unaryTag != 0 {
		return t.parent[o&^unaryTag]
	}
	return NodeID(o)
}

// Parent returns the parent of id, None for Root.
func (t *Tree) Parent(id NodeID) NodeID { return t.parent[id] }

// Depth returns the depth of id (Root is 0).
func (t *Tree) Depth(id NodeID) int { return int(t.depth[id]) }

// Children returns the children of id in address order. The slice is shared:
// do not modify it.
func (t *Tree) Children(id NodeID) []NodeID {
	_ = t.parent[id]
	t.children()
	a, b := t.childOff[id], t.childOff[id+1]
	return t.childList[a:b:b]
}

// SubtreeEnd returns the first ID after id's subtree: the descendants of id
// are exactly the IDs in (id, SubtreeEnd(id)).
func (t *Tree) SubtreeEnd(id NodeID) NodeID {
	_ = t.parent[id]
	t.subtrees()
	return NodeID(t.subEnd[id])
}

// IsAncestor reports whether a is a proper ancestor of d.
func (t *Tree) IsAncestor(a, d NodeID) bool {
	if a >= d {
		return false
	}
	t.subtrees()
	return uint32(d) < t.subEnd[a]
}

// Ancestors returns the ancestors of id, parent first, up to and including
// Root; empty for Root.
func (t *Tree) Ancestors(id NodeID) []NodeID {
	out := make([]NodeID, 0, t.depth[id])
	for p := t.parent[id]; p != None; p = t.parent[p] {
		out = append(out, p)
	}
	return out
}

// SameOrg returns the other nodes registered to id's organisation, in address
// order (id excluded); nil when the organisation is unknown (0).
func (t *Tree) SameOrg(id NodeID) []NodeID {
	o := t.org[id]
	if o == 0 {
		return nil
	}
	all := t.OrgNodes(o)
	out := make([]NodeID, 0, len(all)-1)
	for _, n := range all {
		if n != id {
			out = append(out, n)
		}
	}
	return out
}

// OrgNodes returns every node of organisation o in address order (shared
// slice: do not modify); nil for 0 or an unknown id.
func (t *Tree) OrgNodes(o OrgID) []NodeID {
	if o == 0 || int(o) >= t.NumOrgs() {
		return nil
	}
	t.orgLists()
	a, b := t.orgOff[o], t.orgOff[o+1]
	return t.orgList[a:b:b]
}

// OrgName returns the name of organisation o ("" for 0 or an unknown id).
func (t *Tree) OrgName(o OrgID) string {
	if int(o) >= t.NumOrgs() {
		return ""
	}
	return t.orgNames[t.nameOff[o]:t.nameOff[o+1]]
}

// NumOrgs returns the number of organisation ids, including 0 ("unknown").
func (t *Tree) NumOrgs() int { return len(t.nameOff) - 1 }

// Contains reports whether node id contains ip. Root contains every valid
// address.
func (t *Tree) Contains(id NodeID, ip netip.Addr) bool {
	f, x, ok := fromAddr(ip)
	if !ok {
		return false
	}
	if id == Root {
		return true
	}
	s, e := t.bounds(id)
	return t.fam(id) == f && !x.less(s) && !e.less(x)
}

// PerLevel returns the number of nodes at each depth (index 0: Root).
func (t *Tree) PerLevel() []int {
	out := make([]int, t.height+1)
	for _, d := range t.depth {
		out[d]++
	}
	return out
}

// Segments returns the number of elementary intervals of the lookup index
// (IPv4, IPv6).
func (t *Tree) Segments() (v4, v6 int) { return len(t.seg4Start), len(t.seg6Hi) }

// Ranges returns every node but Root as a Range, in ID order. Building a
// tree from them reproduces t exactly (same snapshot id).
func (t *Tree) Ranges() []Range {
	out := make([]Range, 0, t.Len()-1)
	for id := NodeID(1); int(id) < t.Len(); id++ {
		f := t.fam(id)
		s, e := t.bounds(id)
		out = append(out, Range{Start: toAddr(f, s), End: toAddr(f, e), Org: t.OrgName(t.org[id]),
			Registry: t.registry(id), Status: t.status(id), Country: t.countries[t.cc[id]], ASN: t.asn[id]})
	}
	return out
}
