package hierarchy

import (
	"container/heap"
	"errors"
	"fmt"
	"slices"
	"time"
	"unicode/utf8"
)

// MaxOrgLen bounds organisation names (bytes); longer names are truncated by
// the loaders and rejected by the Builder and the decoder.
const MaxOrgLen = 512

// MaxDepth is the deepest nesting a tree may have (Depth is a uint8).
const MaxDepth = 255

// BuildStats reports what Build did with its input.
type BuildStats struct {
	Ranges          int           // ranges added
	Nodes           int           // nodes in the tree, Root included
	Duplicates      int           // ranges identical to an earlier one, merged into it
	PartialOverlaps int           // ranges that partially overlapped another and were split
	SplitPieces     int           // extra nodes created by those splits
	Orgs            int           // distinct organisations (excluding "unknown")
	Height          int           // depth of the deepest node (Root alone: 0)
	PerLevel        []int         // PerLevel[d] = nodes at depth d (PerLevel[0] = 1, Root)
	IPv4Nodes       int           // nodes holding IPv4 ranges
	IPv6Nodes       int           // nodes holding IPv6 ranges
	CountryRanges   int           // country annotations added (AddCountry)
	CountrySegments int           // disjoint segments they flatten into
	CountryFilled   int           // nodes without a country of their own that took the majority country
	WithCountry     int           // nodes with a country (own or filled), Root excluded
	Duration        time.Duration // wall time of Build
}

// Builder collects ranges and builds a Tree. Identical input gives an
// identical tree (and snapshot id) regardless of the machine.
//
// Nesting rule: a range strictly inside another becomes its descendant.
// Identical ranges are merged into one node: fields a later range sets
// (non-empty org, country, non-zero registry/status/ASN) override earlier
// ones, so add coarse sources first (IANA, RIR stats) and fine ones last —
// except that the weak statuses StatusAnnounced and StatusAggregate never
// replace a registry status.
// A range that partially overlaps an earlier-starting range R (starts inside
// R, ends beyond it) is split at R's end: the first piece nests inside R, the
// remainder is placed again on its own (and may split again). No address of
// any input range is lost, and the result is always a proper tree.
type Builder struct {
	ranges []brange
	orgIdx map[string]uint32
	orgs   []string // builder-local org table; 0 = ""

	countries []crange // country annotations (AddCountry)
}

type brange struct {
	fam     uint8
	s, e    u128
	org     uint32
	asn     uint32
	reg     Registry
	st      Status
	cc      [2]byte
	seq     uint32
	isPiece bool
}

// NewBuilder returns an empty Builder.
func NewBuilder() *Builder {
	return &Builder{orgIdx: map[string]uint32{"": 0}, orgs: []string{""}}
}

// Grow makes room for n more ranges.
func (b *Builder) Grow(n int) { b.ranges = slices.Grow(b.ranges, n) }

// Len returns the number of ranges added so far.
func (b *Builder) Len() int { return len(b.ranges) }

// Add validates r and adds it.
func (b *Builder) Add(r Range) error {
	if r.Start.Zone() != "" || r.End.Zone() != "" {
		return errors.New("hierarchy: range with IPv6 zone")
	}
	fs, s, ok1 := fromAddr(r.Start)
	fe, e, ok2 := fromAddr(r.End)
	if !ok1 || !ok2 {
		return errors.New("hierarchy: range with invalid address")
	}
	if fs != fe {
		return fmt.Errorf("hierarchy: range %v-%v mixes IPv4 and IPv6", r.Start, r.End)
	}
	if e.less(s) {
		return fmt.Errorf("hierarchy: range %v-%v ends before it starts", r.Start, r.End)
	}
	if len(r.Org) > MaxOrgLen || !utf8.ValidString(r.Org) {
		return fmt.Errorf("hierarchy: organisation name too long or not UTF-8 (%d bytes)", len(r.Org))
	}
	if r.Registry >= numRegistries {
		return fmt.Errorf("hierarchy: unknown registry %d", r.Registry)
	}
	if r.Status >= numStatuses {
		return fmt.Errorf("hierarchy: unknown status %d", r.Status)
	}
	var cc [2]byte
	if r.Country != "" {
		if !validCountry(r.Country) {
			return fmt.Errorf("hierarchy: country %q is not an upper-case ISO-2 code", r.Country)
		}
		cc = [2]byte{r.Country[0], r.Country[1]}
	}
	if len(b.ranges) >= 1<<31 {
		return errors.New("hierarchy: too many ranges")
	}
	org, ok := b.orgIdx[r.Org]
	if !ok {
		org = uint32(len(b.orgs))
		b.orgs = append(b.orgs, r.Org)
		b.orgIdx[r.Org] = org
	}
	b.ranges = append(b.ranges, brange{fam: fs, s: s, e: e, org: org, asn: r.ASN, reg: r.Registry, st: r.Status, cc: cc, seq: uint32(len(b.ranges))})
	return nil
}

// order is the preorder of the final tree: family, start ascending, end
// descending (containers before contents), then insertion order.
func rangeCmp(a, b *brange) int {
	if a.fam != b.fam {
		if a.fam < b.fam {
			return -1
		}
		return 1
	}
	if c := a.s.cmp(b.s); c != 0 {
		return c
	}
	if c := a.e.cmp(b.e); c != 0 {
		return -c
	}
	switch {
	case a.seq < b.seq:
		return -1
	case a.seq > b.seq:
		return 1
	}
	return 0
}

type pieceHeap []brange

func (h pieceHeap) Len() int           { return len(h) }
func (h pieceHeap) Less(i, j int) bool { return rangeCmp(&h[i], &h[j]) < 0 }
func (h pieceHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *pieceHeap) Push(x any)        { *h = append(*h, x.(brange)) }
func (h *pieceHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// Build sorts and nests the ranges into a Tree. The Builder can be reused
// (more Adds, another Build) afterwards.
func (b *Builder) Build() (*Tree, BuildStats, error) {
	t0 := time.Now()
	st := BuildStats{Ranges: len(b.ranges)}
	sortRanges(b.ranges)

	// Sweep in preorder. stack holds indexes into out of the open ancestors
	// of the current position; out[0] is Root.
	out := make([]brange, 1, len(b.ranges)+1)
	out[0] = brange{fam: 0}
	parents := make([]uint32, 1, len(b.ranges)+1)
	parents[0] = uint32(None)
	depths := make([]uint8, 1, len(b.ranges)+1)
	stack := []uint32{0}
	var pieces pieceHeap
	splitSeen := map[uint32]bool{}
	i := 0
	for i < len(b.ranges) || len(pieces) > 0 {
		var r brange
		if len(pieces) > 0 && (i >= len(b.ranges) || rangeCmp(&pieces[0], &b.ranges[i]) < 0) {
			r = heap.Pop(&pieces).(brange)
		} else {
			r = b.ranges[i]
			i++
		}
		// Close ancestors that end before r starts (or belong to the other family).
		for len(stack) > 1 {
			top := &out[stack[len(stack)-1]]
			if top.fam == r.fam && !top.e.less(r.s) {
				break
			}
			stack = stack[:len(stack)-1]
		}
		top := &out[stack[len(stack)-1]]
		if len(stack) > 1 && top.s == r.s && top.e == r.e {
			mergeInto(top, &r)
			if !r.isPiece {
				st.Duplicates++
			}
			continue
		}
		if len(stack) > 1 && top.e.less(r.e) {
			// Partial overlap with top (r starts inside it, ends beyond):
			// nest [r.s, top.e] here and place the rest again.
			rest := r
			rest.s = top.e.add1()
			if rest.fam == fam6 && rest.s == (u128{0, 0xffff_0000_0000}) {
				// skip ::ffff:0:0/96, whose addresses are IPv4 ones (no
				// input range ends there, so the rest goes past it)
				rest.s = u128{0, 1 << 48}
			}
			rest.isPiece = true
			heap.Push(&pieces, rest)
			r.e = top.e
			if !splitSeen[r.seq] {
				splitSeen[r.seq] = true
				st.PartialOverlaps++
			}
			st.SplitPieces++
			if top.s == r.s { // the nested piece equals top: merge, don't nest
				mergeInto(top, &r)
				continue
			}
		}
		d := int(depths[stack[len(stack)-1]]) + 1
		if d > MaxDepth {
			return nil, st, fmt.Errorf("hierarchy: nesting deeper than %d at %v", MaxDepth, toAddr(r.fam, r.s))
		}
		id := uint32(len(out))
		if id >= maxNodes {
			return nil, st, errors.New("hierarchy: too many nodes")
		}
		out = append(out, r)
		parents = append(parents, stack[len(stack)-1])
		depths = append(depths, uint8(d))
		stack = append(stack, id)
	}
	if len(b.countries) > 0 {
		segs := flattenCountries(b.countries)
		st.CountryRanges, st.CountrySegments = len(b.countries), len(segs)
		st.CountryFilled = fillCountries(out, segs)
	}
	for k := 1; k < len(out); k++ {
		if out[k].cc != ([2]byte{}) {
			st.WithCountry++
		}
	}
	t := b.assemble(out, parents, depths)
	st.Nodes = t.Len()
	st.Orgs = t.NumOrgs() - 1
	st.Height = t.height
	st.PerLevel = t.PerLevel()
	st.IPv4Nodes, st.IPv6Nodes = int(t.first6)-1, t.Len()-int(t.first6)
	st.Duration = time.Since(t0)
	return t, st, nil
}

// mergeInto folds a duplicate range into the node already holding it: fields
// the later range sets win.
func mergeInto(dst, src *brange) {
	if src.org != 0 {
		dst.org = src.org
	}
	if src.asn != 0 {
		dst.asn = src.asn
	}
	if src.reg != RegistryUnknown {
		dst.reg = src.reg
	}
	if src.st != StatusUnknown && (dst.st == StatusUnknown || (src.st != StatusAnnounced && src.st != StatusAggregate)) {
		dst.st = src.st
	}
	if src.cc != [2]byte{} {
		dst.cc = src.cc
	}
}

// assemble turns the preorder node list into a Tree with canonical org and
// country numbering (sorted names), so the encoding does not depend on the
// order in which organisations were first seen.
func (b *Builder) assemble(out []brange, parents []uint32, depths []uint8) *Tree {
	usedOrg := make([]bool, len(b.orgs))
	var ccSet [26 * 26]bool
	for k := 1; k < len(out); k++ {
		usedOrg[out[k].org] = true
		if out[k].cc != [2]byte{} {
			ccSet[int(out[k].cc[0]-'A')*26+int(out[k].cc[1]-'A')] = true
		}
	}
	names := make([]string, 0, len(b.orgs))
	for o, u := range usedOrg {
		if u && o != 0 {
			names = append(names, b.orgs[o])
		}
	}
	slices.Sort(names)
	newID := make(map[string]OrgID, len(names))
	orgs := make([]string, 1, len(names)+1)
	for _, n := range names {
		newID[n] = OrgID(len(orgs))
		orgs = append(orgs, n)
	}
	remap := make([]OrgID, len(b.orgs))
	for o, u := range usedOrg {
		if u && o != 0 {
			remap[o] = newID[b.orgs[o]]
		}
	}
	countries := []string{""}
	var ccIdx [26 * 26]uint16
	for k, ok := range ccSet {
		if ok {
			ccIdx[k] = uint16(len(countries))
			countries = append(countries, string([]byte{byte('A' + k/26), byte('A' + k%26)}))
		}
	}
	t := &Tree{countries: countries}
	t.alloc(len(out))
	for k := 1; k < len(out); k++ {
		r := &out[k]
		var cc uint16
		if r.cc != [2]byte{} {
			cc = ccIdx[int(r.cc[0]-'A')*26+int(r.cc[1]-'A')]
		}
		t.put(NodeID(k), &nodeRec{s: r.s, e: r.e, parent: NodeID(parents[k]), org: remap[r.org], asn: r.asn,
			depth: depths[k], fam: r.fam, reg: r.reg, st: r.st, cc: cc})
	}
	t.setOrgs(orgs)
	t.finish()
	return t
}

// sortRanges sorts into preorder. Registry files arrive sorted, so the input
// is usually a concatenation of a few sorted runs: merge those (natural merge
// sort, O(n log runs)); fall back to pdqsort when there are many runs.
func sortRanges(rs []brange) {
	var bounds []int
	bounds = append(bounds, 0)
	for i := 1; i < len(rs); i++ {
		if rangeCmp(&rs[i-1], &rs[i]) > 0 {
			bounds = append(bounds, i)
			if len(bounds) > 64 {
				slices.SortFunc(rs, func(x, y brange) int { return rangeCmp(&x, &y) })
				return
			}
		}
	}
	if len(bounds) == 1 {
		return
	}
	bounds = append(bounds, len(rs))
	buf := make([]brange, len(rs))
	src, dst := rs, buf
	for len(bounds) > 2 {
		var next []int
		for i := 0; i+1 < len(bounds); i += 2 {
			lo, mid := bounds[i], bounds[i+1]
			hi := mid
			if i+2 < len(bounds) {
				hi = bounds[i+2]
			}
			a, b, k := lo, mid, lo
			for a < mid && b < hi {
				if rangeCmp(&src[b], &src[a]) < 0 {
					dst[k] = src[b]
					b++
				} else {
					dst[k] = src[a]
					a++
				}
				k++
			}
			k += copy(dst[k:], src[a:mid])
			copy(dst[k:], src[b:hi])
			next = append(next, lo)
		}
		next = append(next, len(rs))
		bounds = next
		src, dst = dst, src
	}
	if &src[0] != &rs[0] {
		copy(rs, src)
	}
}
