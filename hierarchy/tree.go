package hierarchy

import (
	"crypto/sha256"
	"net/netip"
	"slices"
	"sync"
)

// nodeRec is the in-memory form of a node; Node is built from it on demand.
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
type Tree struct {
	nodes     []nodeRec
	orgs      []string // OrgID → name; orgs[0] = ""
	countries []string // country index → ISO-2; countries[0] = ""
	height    int

	childOff  []uint32 // children of n: childList[childOff[n]:childOff[n+1]]
	childList []NodeID
	orgOff    []uint32 // nodes of org o: orgList[orgOff[o]:orgOff[o+1]]
	orgList   []NodeID
	subEnd    []uint32 // subtree of n is [n, subEnd[n])

	// Lookup index: the address space of each family cut into elementary
	// intervals; seg*Node is the deepest node covering each, seg*SNU the
	// smallest non-unary one. idx*[p] is the interval holding the first
	// address whose top 16 bits are p (idx*[65536] = last interval).
	seg4Start []uint32
	seg4Node  []NodeID
	seg4SNU   []NodeID
	idx4      []uint32
	seg6Hi    []uint64 // interval starts, high and low halves (separate arrays keep the search cache-friendly)
	seg6Lo    []uint64
	seg6Node  []NodeID
	seg6SNU   []NodeID
	idx6      []uint32
	// Dense IPv6 buckets (2001::/16, 2a00::/16, …) get a second level on
	// the next 12 bits: sub6[sub6Off[p]-1+k] is the interval holding the
	// first address of sub-bucket k of bucket p (sub6Off[p] = 0: none).
	sub6Off []uint32
	sub6    []uint32

	idOnce sync.Once
	id     SnapshotID
}

// directIndexMin is the number of elementary intervals from which a family
// gets its direct top-bits index (a variable so tests can force either path).
var directIndexMin = 256

// dense6 is the number of intervals from which an IPv6 /16 bucket gets its
// second index level.
var dense6 = 64

// finish derives the secondary structures from nodes, orgs and countries.
func (t *Tree) finish() {
	n := len(t.nodes)
	t.height = 0
	for i := 1; i < n; i++ {
		if int(t.nodes[i].depth) > t.height {
			t.height = int(t.nodes[i].depth)
		}
	}
	// The lookup index and the CSR lists touch disjoint fields: build them
	// on two cores.
	t.subEnd = make([]uint32, n)
	t.subEnd[0] = uint32(n)
	var wg sync.WaitGroup
	wg.Go(t.buildIndex)
	defer wg.Wait()
	// Children in CSR form; filling in ID order yields address order.
	t.childOff = make([]uint32, n+1)
	for i := 1; i < n; i++ {
		t.childOff[t.nodes[i].parent+1]++
	}
	for i := 1; i <= n; i++ {
		t.childOff[i] += t.childOff[i-1]
	}
	t.childList = make([]NodeID, n-1)
	fill := slices.Clone(t.childOff[:n])
	for i := 1; i < n; i++ {
		p := t.nodes[i].parent
		t.childList[fill[p]] = NodeID(i)
		fill[p]++
	}
	// Same-organisation lists.
	no := len(t.orgs)
	t.orgOff = make([]uint32, no+1)
	for i := 1; i < n; i++ {
		t.orgOff[t.nodes[i].org+1]++
	}
	for i := 1; i <= no; i++ {
		t.orgOff[i] += t.orgOff[i-1]
	}
	t.orgList = make([]NodeID, t.orgOff[no])
	ofill := slices.Clone(t.orgOff[:no])
	for i := 1; i < n; i++ {
		o := t.nodes[i].org
		t.orgList[ofill[o]] = NodeID(i)
		ofill[o]++
	}
}

// buildIndex cuts each family into elementary intervals by a preorder sweep.
func (t *Tree) buildIndex() {
	var starts6 []u128
	var owners4, owners6 []NodeID
	var starts4 []uint32
	n4 := 0
	for id := 1; id < len(t.nodes) && t.nodes[id].fam == fam4; id++ {
		n4++
	}
	for _, f := range []uint8{fam4, fam6} {
		// A family's nodes are one contiguous ID block; every node adds at
		// most two interval starts.
		first, last := 1, 1+n4
		if f == fam6 {
			first, last = 1+n4, len(t.nodes)
		}
		starts := make([]u128, 0, 2*(last-first)+1)
		owners := make([]NodeID, 0, 2*(last-first)+1)
		emit := func(s u128, o NodeID) {
			last := len(starts) - 1
			if last >= 0 && starts[last] == s {
				owners[last] = o
				if last > 0 && owners[last-1] == o {
					starts, owners = starts[:last], owners[:last]
				}
				return
			}
			if last >= 0 && owners[last] == o {
				return
			}
			starts = append(starts, s)
			owners = append(owners, o)
		}
		emit(u128{}, Root)
		stack := []NodeID{Root}
		for id := first; id < last; id++ {
			nd := &t.nodes[id]
			for len(stack) > 1 && t.nodes[stack[len(stack)-1]].e.less(nd.s) {
				top := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				t.subEnd[top] = uint32(id)
				emit(t.nodes[top].e.add1(), stack[len(stack)-1])
			}
			emit(nd.s, NodeID(id))
			stack = append(stack, NodeID(id))
		}
		for len(stack) > 1 {
			top := stack[len(stack)-1]
			stack = stack[:len(stack)-1]
			t.subEnd[top] = uint32(last)
			if t.nodes[top].e != famMax(f) { // else every remaining ancestor ends there too
				emit(t.nodes[top].e.add1(), stack[len(stack)-1])
			}
		}
		if f == fam4 {
			starts4 = make([]uint32, len(starts))
			for i, s := range starts {
				starts4[i] = uint32(s.lo)
			}
			owners4 = owners
		} else {
			starts6, owners6 = starts, owners
		}
	}
	snu := func(owners []NodeID) []NodeID {
		out := make([]NodeID, len(owners))
		for i, o := range owners {
			if o != Root && t.nodes[o].s == t.nodes[o].e {
				o = t.nodes[o].parent
			}
			out[i] = o
		}
		return out
	}
	t.seg4Start, t.seg4Node, t.seg4SNU = starts4, owners4, snu(owners4)
	t.seg6Node, t.seg6SNU = owners6, snu(owners6)
	t.seg6Hi = make([]uint64, len(starts6))
	t.seg6Lo = make([]uint64, len(starts6))
	for i, st := range starts6 {
		t.seg6Hi[i], t.seg6Lo[i] = st.hi, st.lo
	}

	// Small trees (tests, simulations) skip the direct indexes: a binary
	// search over a few intervals is as fast and costs no 512 KiB of tables.
	t.idx4, t.idx6, t.sub6Off, t.sub6 = nil, nil, nil, nil
	if len(starts4) > directIndexMin {
		t.buildIdx4(starts4)
	}
	if len(starts6) > directIndexMin {
		t.buildIdx6(starts6)
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

func (t *Tree) buildIdx6(starts6 []u128) {
	t.idx6 = make([]uint32, 65537)
	j := 0
	for p := 0; p < 65536; p++ {
		a := u128{uint64(p) << 48, 0}
		for j+1 < len(starts6) && !a.less(starts6[j+1]) {
			j++
		}
		t.idx6[p] = uint32(j)
	}
	t.idx6[65536] = uint32(len(starts6) - 1)
	t.sub6Off = make([]uint32, 65536)
	t.sub6 = t.sub6[:0]
	for p := 0; p < 65536; p++ {
		lo, hi := int(t.idx6[p]), int(t.idx6[p+1])
		if hi-lo <= dense6 {
			continue
		}
		t.sub6Off[p] = uint32(len(t.sub6)) + 1
		j := lo
		for k := 0; k < 4096; k++ {
			a := u128{uint64(p)<<48 | uint64(k)<<36, 0}
			for j+1 <= hi && !a.less(starts6[j+1]) {
				j++
			}
			t.sub6 = append(t.sub6, uint32(j))
		}
		t.sub6 = append(t.sub6, uint32(hi))
	}
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
	for lo < hi {
		m := int(uint(lo+hi+1) >> 1)
		if sh := t.seg6Hi[m]; sh < x.hi || (sh == x.hi && t.seg6Lo[m] <= x.lo) {
			lo = m
		} else {
			hi = m - 1
		}
	}
	return lo
}

// Len returns the number of nodes, Root included; IDs are 0..Len()-1.
func (t *Tree) Len() int { return len(t.nodes) }

// Height returns the depth of the deepest node.
func (t *Tree) Height() int { return t.height }

// ID returns the snapshot id: the SHA-256 of Encode().
func (t *Tree) ID() SnapshotID {
	t.idOnce.Do(func() { t.id = sha256.Sum256(t.Encode()) })
	return t.id
}

// Node returns node id; it panics if id is out of range.
func (t *Tree) Node(id NodeID) Node {
	r := &t.nodes[id]
	if id == Root {
		return Node{Parent: None}
	}
	return Node{
		Start: toAddr(r.fam, r.s), End: toAddr(r.fam, r.e),
		Parent: r.parent, Depth: r.depth, Org: r.org,
		Registry: r.reg, Status: r.st, Country: t.countries[r.cc], ASN: r.asn,
	}
}

// Lookup returns the smallest node containing ip (Root if none does).
func (t *Tree) Lookup(ip netip.Addr) NodeID {
	f, x, ok := fromAddr(ip)
	switch {
	case !ok:
		return Root
	case f == fam4:
		return t.seg4Node[t.seg4(uint32(x.lo))]
	}
	return t.seg6Node[t.seg6(x)]
}

// SmallestNonUnary returns the smallest node containing ip that holds more
// than one address: Lookup, but a single-address node yields its parent.
func (t *Tree) SmallestNonUnary(ip netip.Addr) NodeID {
	f, x, ok := fromAddr(ip)
	switch {
	case !ok:
		return Root
	case f == fam4:
		return t.seg4SNU[t.seg4(uint32(x.lo))]
	}
	return t.seg6SNU[t.seg6(x)]
}

// Parent returns the parent of id, None for Root.
func (t *Tree) Parent(id NodeID) NodeID { return t.nodes[id].parent }

// Depth returns the depth of id (Root is 0).
func (t *Tree) Depth(id NodeID) int { return int(t.nodes[id].depth) }

// Children returns the children of id in address order. The slice is shared:
// do not modify it.
func (t *Tree) Children(id NodeID) []NodeID {
	a, b := t.childOff[id], t.childOff[id+1]
	return t.childList[a:b:b]
}

// SubtreeEnd returns the first ID after id's subtree: the descendants of id
// are exactly the IDs in (id, SubtreeEnd(id)).
func (t *Tree) SubtreeEnd(id NodeID) NodeID { return NodeID(t.subEnd[id]) }

// IsAncestor reports whether a is a proper ancestor of d.
func (t *Tree) IsAncestor(a, d NodeID) bool { return a < d && uint32(d) < t.subEnd[a] }

// Ancestors returns the ancestors of id, parent first, up to and including
// Root; empty for Root.
func (t *Tree) Ancestors(id NodeID) []NodeID {
	out := make([]NodeID, 0, t.nodes[id].depth)
	for p := t.nodes[id].parent; p != None; p = t.nodes[p].parent {
		out = append(out, p)
	}
	return out
}

// SameOrg returns the other nodes registered to id's organisation, in address
// order (id excluded); nil when the organisation is unknown (0).
func (t *Tree) SameOrg(id NodeID) []NodeID {
	o := t.nodes[id].org
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
	if o == 0 || int(o) >= len(t.orgs) {
		return nil
	}
	a, b := t.orgOff[o], t.orgOff[o+1]
	return t.orgList[a:b:b]
}

// OrgName returns the name of organisation o ("" for 0 or an unknown id).
func (t *Tree) OrgName(o OrgID) string {
	if int(o) >= len(t.orgs) {
		return ""
	}
	return t.orgs[o]
}

// NumOrgs returns the number of organisation ids, including 0 ("unknown").
func (t *Tree) NumOrgs() int { return len(t.orgs) }

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
	r := &t.nodes[id]
	return r.fam == f && !x.less(r.s) && !r.e.less(x)
}

// PerLevel returns the number of nodes at each depth (index 0: Root).
func (t *Tree) PerLevel() []int {
	out := make([]int, t.height+1)
	for i := range t.nodes {
		out[t.nodes[i].depth]++
	}
	return out
}

// Segments returns the number of elementary intervals of the lookup index
// (IPv4, IPv6).
func (t *Tree) Segments() (v4, v6 int) { return len(t.seg4Start), len(t.seg6Hi) }

// Ranges returns every node but Root as a Range, in ID order. Building a
// tree from them reproduces t exactly (same snapshot id).
func (t *Tree) Ranges() []Range {
	out := make([]Range, 0, len(t.nodes)-1)
	for id := 1; id < len(t.nodes); id++ {
		r := &t.nodes[id]
		out = append(out, Range{Start: toAddr(r.fam, r.s), End: toAddr(r.fam, r.e), Org: t.orgs[r.org],
			Registry: r.reg, Status: r.st, Country: t.countries[r.cc], ASN: r.asn})
	}
	return out
}
