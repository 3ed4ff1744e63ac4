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
// string, and a bucket index of 256 KiB per family that lookups start
// from. What only some callers use (subtree ends, children, nodes per
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

	// Lookup: nodes are in address order, so the smallest node holding an
	// address is the last node of its family starting at or before it, or
	// an ancestor of that node (walk up while it ends before the address).
	// The searches start from a bucket index: bkt4[p] is the number of
	// IPv4 nodes starting before the address p<<16, bkt6[p] that of IPv6
	// nodes starting before p<<112 (65,537 entries each; nil on small
	// trees, which search all their nodes).
	bkt4, bkt6 []uint32

	idOnce sync.Once
	id     SnapshotID
}

// maxNodes bounds the nodes of a tree (far beyond any registry data: the
// default has 582,398).
const maxNodes = 1 << 31

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

// directIndexMin is the number of nodes from which a family gets its
// bucket index (a variable so tests can force either path).
var directIndexMin = 256

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
	t.buildBuckets()
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

// buildBuckets builds each family's bucket index (buckets of the top 16
// bits of the start address).
func (t *Tree) buildBuckets() {
	t.bkt4, t.bkt6 = nil, nil
	if n4 := int(t.first6) - 1; n4 > directIndexMin {
		t.bkt4 = buckets(n4, func(i int) uint32 { return t.s32[1+i] >> 16 })
	}
	if n6 := len(t.parent) - int(t.first6); n6 > directIndexMin {
		t.bkt6 = buckets(n6, func(i int) uint32 { return t.s32[int(t.first6)+i] >> 16 })
	}
}

// buckets counts, for every p of 0..65536, the n keys (ascending) below p.
func buckets(n int, key func(int) uint32) []uint32 {
	b := make([]uint32, 65537)
	i := 0
	for p := range uint32(65537) {
		for i < n && key(i) < p {
			i++
		}
		b[p] = uint32(i)
	}
	return b
}

// search returns how many of the n keys (ascending) are ≤ x, given that
// those below lo are and those from hi on are not.
func search(lo, hi int, le func(int) bool) int {
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if le(m) {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// lookup4 returns the smallest IPv4 node holding x, Root if none does.
func (t *Tree) lookup4(x uint32) NodeID {
	lo, hi := 0, int(t.first6)-1
	if t.bkt4 != nil {
		lo, hi = int(t.bkt4[x>>16]), int(t.bkt4[x>>16+1])
	}
	s := t.s32[1:t.first6]
	id := NodeID(search(lo, hi, func(i int) bool { return s[i] <= x }))
	for id != Root && t.e32[id] < x {
		id = t.parent[id]
	}
	return id
}

// lookup6 returns the smallest IPv6 node holding x, Root if none does.
func (t *Tree) lookup6(x u128) NodeID {
	f := int(t.first6)
	lo, hi := 0, len(t.parent)-f
	if t.bkt6 != nil {
		p := x.hi >> 48
		lo, hi = int(t.bkt6[p]), int(t.bkt6[p+1])
	}
	k := search(lo, hi, func(i int) bool {
		h := uint64(t.s32[f+i])<<32 | uint64(t.s6[i])
		return h < x.hi || (h == x.hi && t.sLo.get(uint32(i)) <= x.lo)
	})
	if k == 0 {
		return Root
	}
	id := NodeID(f + k - 1)
	for id != Root {
		if _, e := t.bounds(id); !e.less(x) {
			break
		}
		id = t.parent[id]
	}
	return id
}

// lookup returns the smallest node holding ip (Root if none does).
func (t *Tree) lookup(ip netip.Addr) NodeID {
	f, x, ok := fromAddr(ip)
	switch {
	case !ok:
		return Root
	case f == fam4:
		return t.lookup4(uint32(x.lo))
	}
	return t.lookup6(x)
}

// sweep counts the elementary intervals of one family, merged as they are
// emitted in address order: it keeps the last interval's start and the
// owners (deepest nodes) of the last two.
type sweep struct {
	n    int
	last u128 // start of the last interval
	own  [2]NodeID
	// below: the last interval starts below every start still to come (it
	// was merged back into), so none can replace its owner
	below bool
}

func (w *sweep) emit(s u128, o NodeID) {
	if w.n > 0 && !w.below && w.last == s {
		w.own[1] = o
		if w.n > 1 && w.own[0] == o {
			w.n-- // the interval before it runs on
			w.below = true
		}
		return
	}
	if w.n > 0 && w.own[1] == o {
		return
	}
	w.own[0], w.own[1] = w.own[1], o
	w.last, w.below = s, false
	w.n++
}

// segments counts a family's elementary intervals: the pieces of the
// address space whose smallest enclosing node is one node.
func (t *Tree) segments(f uint8) int {
	first, last := 1, int(t.first6)
	if f == fam6 {
		first, last = int(t.first6), len(t.parent)
	}
	w := &sweep{}
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
	return w.n
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
func (t *Tree) Lookup(ip netip.Addr) NodeID { return t.lookup(ip) }

// SmallestNonUnary returns the smallest node containing ip that holds more
// than one address: Lookup, but a single-address node yields its parent.
func (t *Tree) SmallestNonUnary(ip netip.Addr) NodeID {
	id := t.lookup(ip)
	if id != Root {
		if s, e := t.bounds(id); s == e {
			return t.parent[id]
		}
	}
	return id
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

// Segments returns the number of elementary intervals (IPv4, IPv6): the
// pieces of the address space whose smallest enclosing node is one node.
// It sweeps the tree on every call.
func (t *Tree) Segments() (v4, v6 int) { return t.segments(fam4), t.segments(fam6) }

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
