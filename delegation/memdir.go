package delegation

import (
	"context"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// MemDirectory is an in-memory Directory: a record per subnet plus the two
// provider-like holder sets (crawlers holding subnets under each ancestor,
// crawlers holding subnets of each organisation). The simulator and the tests
// use it; the overlay's DHT directory must behave the same way.
//
// Publish applies the Select rule (Better), so competing writers converge.
// When Members is set, Lookup hides records whose owner is not live. It is
// not safe for concurrent use (even holder queries update it): engines that
// share one serialise their calls, as the simulator's loops do.
type MemDirectory struct {
	tree    Tree
	members Membership
	// recs[i] is s's record, i+1 in recDense[s] for the tree's subnets (a
	// lookup without hashing: the directory is read for every subnet a
	// full crawler holds when it releases some; 4 bytes a node beside the
	// tree's own 24), i in recAt for others
	// (none, or another tree's); free lists the slots of deleted records
	recDense []int32
	recAt    map[hierarchy.NodeID]int32
	nRecs    int
	recs     chunked[Record]
	free     []int32
	under    map[hierarchy.NodeID]*holderSet
	org      map[hierarchy.OrgID]*holderSet
	// pending holder-set changes, applied in order by the next holder
	// query: a policy that never asks (micra below 4·MaxProbes crawlers)
	// does not pay for an index walk of every ancestor per publish
	pending []holderChange
}

type holderChange struct {
	subnet hierarchy.NodeID
	owner  CrawlerID
	d      int
}

// maxPending bounds the pending changes (memory) before they are applied.
const maxPending = 1 << 16

// holderSet is a reference-counted set of crawlers, kept sorted: most sets
// (the ancestors near the leaves) hold one or two crawlers, and a string map
// per set cost more than the directory's other work.
type holderSet struct {
	ids    []CrawlerID // sorted: the list view
	counts []int       // references per crawler of ids
	// shared: ids was handed out by list, so it is copied before it
	// changes (a caller's slice never changes under it)
	shared bool
	// room for the first holder (most sets never have another)
	id0 [1]CrawlerID
	n0  [1]int
}

func newHolderSet() *holderSet {
	h := &holderSet{}
	h.ids, h.counts = h.id0[:0], h.n0[:0]
	return h
}

func (h *holderSet) add(c CrawlerID, d int) {
	i, found := slices.BinarySearch(h.ids, c)
	if found {
		n := h.counts[i] + d
		if n > 0 {
			h.counts[i] = n
			return
		}
		h.unshare(0)
		h.ids, h.counts = slices.Delete(h.ids, i, i+1), slices.Delete(h.counts, i, i+1)
		return
	}
	if d <= 0 {
		return
	}
	h.unshare(1)
	h.ids, h.counts = slices.Insert(h.ids, i, c), slices.Insert(h.counts, i, d)
}

// unshare gives the set its own ids (with room for grow more) when the
// current one was handed out.
func (h *holderSet) unshare(grow int) {
	if h.shared {
		h.ids = append(make([]CrawlerID, 0, len(h.ids)+grow), h.ids...)
		h.shared = false
	}
}

func (h *holderSet) list() []CrawlerID {
	if len(h.ids) == 0 {
		return nil
	}
	h.shared = true
	return h.ids
}

// NewMemDirectory returns an empty directory over tree. members may be nil
// (then every record's owner is taken as live).
func NewMemDirectory(tree Tree, members Membership) *MemDirectory {
	return &MemDirectory{
		tree:    tree,
		members: members,
		recAt:   make(map[hierarchy.NodeID]int32),
		under:   make(map[hierarchy.NodeID]*holderSet),
		org:     make(map[hierarchy.OrgID]*holderSet),
	}
}

// Lookup implements Directory.
func (m *MemDirectory) Lookup(_ context.Context, s hierarchy.NodeID) (Record, bool, error) {
	r, ok := m.Get(s)
	if !ok {
		return Record{}, false, nil
	}
	if m.members != nil && !isLive(m.members, r.Owner) {
		return r, false, nil
	}
	return r, true, nil
}

// Get returns the stored record for s whether or not its owner is live.
func (m *MemDirectory) Get(s hierarchy.NodeID) (Record, bool) {
	i, ok := m.slotOf(s)
	if !ok {
		return Record{}, false
	}
	return *m.recs.at(i), true
}

// slotOf is the index in recs of s's record.
func (m *MemDirectory) slotOf(s hierarchy.NodeID) (int32, bool) {
	if int(s) < len(m.recDense) {
		i := m.recDense[s]
		return i - 1, i != 0
	}
	i, ok := m.recAt[s]
	return i, ok
}

// setSlot records i as the index in recs of s's new record.
func (m *MemDirectory) setSlot(s hierarchy.NodeID, i int32) {
	m.nRecs++
	if m.recDense == nil && m.tree != nil {
		m.recDense = make([]int32, m.tree.Len())
	}
	if int(s) < len(m.recDense) {
		m.recDense[s] = i + 1
		return
	}
	m.recAt[s] = i
}

// dropSlot forgets the index of s's record.
func (m *MemDirectory) dropSlot(s hierarchy.NodeID) {
	m.nRecs--
	if int(s) < len(m.recDense) {
		m.recDense[s] = 0
		return
	}
	delete(m.recAt, s)
}

// Publish implements Directory with the Select rule.
func (m *MemDirectory) Publish(_ context.Context, rec Record) (Record, error) {
	i, had := m.slotOf(rec.Subnet)
	if !had {
		if n := len(m.free); n > 0 {
			i, m.free = m.free[n-1], m.free[:n-1]
		} else {
			i = m.recs.add()
		}
		m.setSlot(rec.Subnet, i)
		*m.recs.at(i) = rec
		m.index(rec, +1)
		return rec, nil
	}
	old := m.recs.at(i)
	if !Better(rec, *old) {
		return *old, nil
	}
	if old.Owner != rec.Owner {
		m.index(*old, -1)
		m.index(rec, +1)
	}
	*old = rec
	return rec, nil
}

// Delete removes the record of s (used by migration of a whole directory).
func (m *MemDirectory) Delete(s hierarchy.NodeID) {
	if i, ok := m.slotOf(s); ok {
		r := m.recs.at(i)
		m.index(*r, -1)
		m.dropSlot(s)
		*r = Record{} // drop its strings and probes
		m.free = append(m.free, i)
	}
}

func (m *MemDirectory) index(r Record, d int) {
	if m.tree == nil || r.Subnet == hierarchy.None || int(r.Subnet) >= m.tree.Len() {
		return
	}
	m.pending = append(m.pending, holderChange{r.Subnet, r.Owner, d})
	if len(m.pending) >= maxPending {
		m.flush()
	}
}

// flush applies the pending holder-set changes.
func (m *MemDirectory) flush() {
	for _, c := range m.pending {
		m.apply(c.subnet, c.owner, c.d)
	}
	clear(m.pending) // drop the owner strings
	m.pending = m.pending[:0]
}

func (m *MemDirectory) apply(subnet hierarchy.NodeID, owner CrawlerID, d int) {
	for a := subnet; a != hierarchy.None; a = m.tree.Parent(a) {
		m.set(m.under, a).add(owner, d)
	}
	if o := m.tree.Node(subnet).Org; o != 0 {
		hs, ok := m.org[o]
		if !ok {
			hs = newHolderSet()
			m.org[o] = hs
		}
		hs.add(owner, d)
	}
}

func (m *MemDirectory) set(mp map[hierarchy.NodeID]*holderSet, k hierarchy.NodeID) *holderSet {
	hs, ok := mp[k]
	if !ok {
		hs = newHolderSet()
		mp[k] = hs
	}
	return hs
}

// HoldersUnder implements Directory. The returned slice is sorted and must
// not be modified.
func (m *MemDirectory) HoldersUnder(_ context.Context, a hierarchy.NodeID) ([]CrawlerID, error) {
	if len(m.pending) > 0 {
		m.flush()
	}
	if hs, ok := m.under[a]; ok {
		return hs.list(), nil
	}
	return nil, nil
}

// HoldersOfOrg implements Directory. The returned slice is sorted and must
// not be modified.
func (m *MemDirectory) HoldersOfOrg(_ context.Context, o hierarchy.OrgID) ([]CrawlerID, error) {
	if o == 0 {
		return nil, nil
	}
	if len(m.pending) > 0 {
		m.flush()
	}
	if hs, ok := m.org[o]; ok {
		return hs.list(), nil
	}
	return nil, nil
}

// Len is the number of records held.
func (m *MemDirectory) Len() int { return m.nRecs }

// Records returns every record, ordered by subnet.
func (m *MemDirectory) Records() []Record {
	out := make([]Record, 0, m.nRecs)
	for _, i := range m.recDense {
		if i != 0 {
			out = append(out, *m.recs.at(i - 1))
		}
	}
	for _, i := range m.recAt {
		out = append(out, *m.recs.at(i))
	}
	slices.SortFunc(out, func(a, b Record) int { return int64cmp(int64(a.Subnet), int64(b.Subnet)) })
	return out
}

// Tree returns the tree the directory indexes against.
func (m *MemDirectory) Tree() Tree { return m.tree }

func int64cmp(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}

// Liveness is an optional fast path of Membership.
type Liveness interface {
	IsLive(c CrawlerID) bool
}

// Versioned is an optional Membership extension: Version changes whenever
// the live set changes, so derived structures (the hash ring) are rebuilt only
// then.
type Versioned interface {
	Version() uint64
}

func isLive(m Membership, c CrawlerID) bool {
	if l, ok := m.(Liveness); ok {
		return l.IsLive(c)
	}
	for _, x := range m.Live() {
		if x.ID == c {
			return true
		}
	}
	return false
}

// MemMembership is an in-memory Membership (simulator, tests).
type MemMembership struct {
	byID    map[CrawlerID]int
	live    []Crawler
	version uint64
}

// NewMemMembership returns a membership holding cs.
func NewMemMembership(cs ...Crawler) *MemMembership {
	m := &MemMembership{byID: make(map[CrawlerID]int)}
	for _, c := range cs {
		m.Add(c)
	}
	return m
}

// Add makes c live (replacing a crawler with the same ID).
func (m *MemMembership) Add(c Crawler) {
	if i, ok := m.byID[c.ID]; ok {
		m.live[i] = c
	} else {
		m.byID[c.ID] = len(m.live)
		m.live = append(m.live, c)
	}
	m.version++
}

// Remove marks c dead.
func (m *MemMembership) Remove(id CrawlerID) {
	i, ok := m.byID[id]
	if !ok {
		return
	}
	last := len(m.live) - 1
	m.live[i] = m.live[last]
	m.byID[m.live[i].ID] = i
	m.live = m.live[:last]
	delete(m.byID, id)
	m.version++
}

// Live implements Membership; the slice must not be modified.
func (m *MemMembership) Live() []Crawler { return m.live }

// IsLive implements Liveness.
func (m *MemMembership) IsLive(id CrawlerID) bool { _, ok := m.byID[id]; return ok }

// Get returns the live crawler with this ID.
func (m *MemMembership) Get(id CrawlerID) (Crawler, bool) {
	i, ok := m.byID[id]
	if !ok {
		return Crawler{}, false
	}
	return m.live[i], true
}

// Version implements Versioned.
func (m *MemMembership) Version() uint64 { return m.version }

// FixedClock is a Clock standing still at T (tests; the simulator advances
// its own clock).
type FixedClock struct{ T time.Time }

// Now implements Clock.
func (c *FixedClock) Now() time.Time { return c.T }
