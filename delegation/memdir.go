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
	// recs[recAt[s]] is s's record: the map holds an index, as a Record
	// (over 128 bytes) in a map slot is a heap object of its own, one
	// allocation per new subnet; free lists the slots of deleted records
	recAt map[hierarchy.NodeID]int32
	recs  chunked[Record]
	free  []int32
	under map[hierarchy.NodeID]*holderSet
	org   map[hierarchy.OrgID]*holderSet
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
	i, ok := m.recAt[s]
	if !ok {
		return Record{}, false
	}
	return *m.recs.at(i), true
}

// Publish implements Directory with the Select rule.
func (m *MemDirectory) Publish(_ context.Context, rec Record) (Record, error) {
	i, had := m.recAt[rec.Subnet]
	if !had {
		if n := len(m.free); n > 0 {
			i, m.free = m.free[n-1], m.free[:n-1]
		} else {
			i = m.recs.add()
		}
		m.recAt[rec.Subnet] = i
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
	if i, ok := m.recAt[s]; ok {
		r := m.recs.at(i)
		m.index(*r, -1)
		delete(m.recAt, s)
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
func (m *MemDirectory) Len() int { return len(m.recAt) }

// Records returns every record, ordered by subnet.
func (m *MemDirectory) Records() []Record {
	out := make([]Record, 0, len(m.recAt))
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
