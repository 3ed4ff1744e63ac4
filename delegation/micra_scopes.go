package delegation

import (
	"cmp"
	"slices"

	"github.com/micra-crawler/micra/hierarchy"
)

// scopeKey names a statistics scope: a set of subnets whose probe answers
// are pooled — a subnet or ancestor node, an organisation, a country, a
// registry, or everything. The docs and MicraConfig call them contexts
// (MaxContexts); they have nothing to do with context.Context. The kind is
// in the high 32 bits (scopeNode …), the node, organisation, country or
// registry in the low ones (mkScope).
type scopeKey uint64

const (
	scopeNode scopeKey = iota + 1
	scopeOrg
	scopeCountry
	scopeRegistry
	scopeGlobal
)

func mkScope(kind scopeKey, id uint32) scopeKey { return kind<<32 | scopeKey(id) }

// kinds of scope for pooling spreads: node depths 0..15, then the others.
const (
	kindOrg = 16 + iota
	kindCountry
	kindRegistry
	kindAll
	scopeKinds
)

// lnStat is Welford's running mean and M2 of ln(RTT in ms).
type lnStat struct {
	n, mean, m2 float64
}

func (s *lnStat) add(x float64) {
	s.n++
	d := x - s.mean
	s.mean += d / s.n
	s.m2 += d * (x - s.mean)
}

// crawlerStat is one crawler's statistics in one scope.
type crawlerStat struct {
	ci uint32
	lnStat
	wins float64 // subnets of the context where it answered lowest
}

// scopeStats is everything known about one scope. One map lookup per scope
// and decision, then small sorted slices: the decision path probes ~10
// crawlers × ~10 scopes, and hashing each (scope, crawler) pair would be most
// of its cost.
type scopeStats struct {
	kind int           // kind of context (pooling of spreads)
	st   []crawlerStat // by crawler index
	// has: bit ci mod 64 is set for every crawler ci in st — most lookups
	// (a candidate never measured in a small context) end here
	has uint64
	// top lists the topK crawlers with the lowest mean here: candidates
	// come from these, so a decision's cost does not grow with the number
	// of crawlers
	top      []topEntry
	topVer   uint64 // counts changes of st's means (the key of liveTops' cache)
	winTotal float64
	located  []uint32 // live crawlers sitting here, in membership order
	sits     []uint32 // the same, sorted
	used     uint64   // micraChooser.tick when a decision or record last read it
	key      scopeKey // its key in micraChooser.scopes (to forget it)
}

func (c *scopeStats) stat(ci uint32) *crawlerStat {
	if c == nil || c.has&(1<<(ci&63)) == 0 {
		return nil
	}
	st := c.st
	// contexts holding every crawler (the registry, everything) hold
	// crawler ci at index ci
	if int(ci) < len(st) && st[ci].ci == ci {
		return &st[ci]
	}
	if len(st) <= 8 {
		for i := range st {
			if st[i].ci == ci {
				return &st[i]
			}
		}
		return nil
	}
	lo, hi := 0, len(st)
	for lo < hi {
		h := int(uint(lo+hi) >> 1)
		if st[h].ci < ci {
			lo = h + 1
		} else {
			hi = h
		}
	}
	if lo < len(st) && st[lo].ci == ci {
		return &st[lo]
	}
	return nil
}

// addStat returns ci's statistics, created when missing (and whether they were).
func (c *scopeStats) addStat(ci uint32) (*crawlerStat, bool) {
	st := c.st
	if int(ci) < len(st) && st[ci].ci == ci {
		return &st[ci], false
	}
	i := 0
	if len(st) <= 8 {
		for i < len(st) && st[i].ci < ci {
			i++
		}
	} else {
		i, _ = slices.BinarySearchFunc(st, ci, func(s crawlerStat, ci uint32) int { return cmp.Compare(s.ci, ci) })
	}
	found := i < len(st) && st[i].ci == ci
	if !found {
		c.st = slices.Insert(c.st, i, crawlerStat{ci: ci})
		c.has |= 1 << (ci & 63)
	}
	return &c.st[i], !found
}

func (c *scopeStats) sitsHere(ci uint32) bool {
	if c == nil || len(c.sits) == 0 {
		return false
	}
	_, ok := slices.BinarySearch(c.sits, ci)
	return ok
}

// scopeOf returns k's statistics, created when missing with kind (scopesOf
// gives every scope's kind).
func (m *micraChooser) scopeOf(k scopeKey, kind int) *scopeStats {
	c := m.scopes[k]
	if c == nil {
		if forgettable(k) {
			// not while locate rebuilds the located lists: the homes of
			// crawlers it has not reached yet look unlocated then (the
			// next new context forgets instead)
			if m.cfg.MaxContexts > 0 && m.forgettable >= m.cfg.MaxContexts && !m.locating {
				m.forget()
			}
			m.forgettable++
		}
		if n := len(m.freeScopes); n > 0 {
			// a forgotten record, with the storage it had grown
			c, m.freeScopes = m.freeScopes[n-1], m.freeScopes[:n-1]
			*c = scopeStats{kind: kind, st: c.st[:0], top: c.top[:0], located: c.located[:0], sits: c.sits[:0]}
		} else {
			// most contexts (a new subnet, organisation) hold a few
			// crawlers for ever: allocate them in slabs, with room for
			// four
			if len(m.slab) == 0 {
				m.slab = make([]scopeSlab, 256)
			}
			sl := &m.slab[0]
			m.slab = m.slab[1:]
			sl.info = scopeStats{kind: kind, st: sl.st[:0], top: sl.top[:0]}
			c = &sl.info
		}
		c.key, c.used = k, m.tick
		m.scopes[k] = c
	}
	return c
}

// learnBound implements learnBounder: the engine's dedup memory of learned
// records is bounded like the contexts (one set per subnet learned).
func (m *micraChooser) learnBound() int { return m.cfg.MaxContexts }

// takeForgotten implements learnBounder: the subnets (and ancestors) whose
// own context was forgotten since the last call. A record of such a subnet
// learned again lands in statistics that no longer hold it, except in the
// wider contexts, where one observation among many is noise.
func (m *micraChooser) takeForgotten() []hierarchy.NodeID {
	f := m.forgotNodes
	m.forgotNodes = m.forgotNodes[:0]
	return f
}

// forgettable reports whether context k may be forgotten under
// MicraConfig.MaxContexts: subnets (and their ancestors) and organisations
// are many; countries, registries and everything are few.
func forgettable(k scopeKey) bool {
	kind := k >> 32
	return kind == scopeNode || kind == scopeOrg
}

// forget drops the least recently used quarter of the forgettable contexts
// (and of the review tallies), keeping those where live crawlers sit and
// those of the decision under way (read at the current tick). Only the
// order of use decides, so every peer (and every run of the simulator)
// forgets the same contexts given the same history.
func (m *micraChooser) forget() {
	stamps := make([]uint64, 0, m.forgettable)
	for k, c := range m.scopes {
		if forgettable(k) && len(c.located) == 0 && c.used < m.tick {
			stamps = append(stamps, c.used)
		}
	}
	if len(stamps) == 0 {
		return
	}
	slices.Sort(stamps)
	// everything used before the cut goes: at least the oldest stamp
	cut := max(stamps[len(stamps)/4], stamps[0]+1)
	for k, c := range m.scopes {
		if !forgettable(k) || len(c.located) > 0 || c.used >= cut {
			continue
		}
		delete(m.scopes, k)
		delete(m.liveTops, c)
		m.forgettable--
		m.freeScopes = append(m.freeScopes, c)
		m.forgotten++
		if k>>32 == scopeNode {
			// the engine drops the subnet's learned-record memory with it
			m.forgotNodes = append(m.forgotNodes, hierarchy.NodeID(uint32(k)))
		}
	}
	// The last subnet's cached records are stamped with the tick they were
	// read at, so they stay; should one ever be forgotten, the cache is
	// rebuilt rather than trusted.
	for i, c := range m.scopeRecs {
		if c != nil && m.scopes[m.scopeKs[i]] != c {
			m.scopeOK = false
			break
		}
	}
	for s, t := range m.tally {
		if t.used < cut {
			delete(m.tally, s)
		}
	}
}

// scopeSlab is a scope's record with inline room for its first crawlers.
type scopeSlab struct {
	info scopeStats
	st   [4]crawlerStat
	top  [4]topEntry
}

// scopesOf lists s's scopes (contexts), specific first, with the kind of each (for
// pooling spreads) and s's registry country (that of s or of its nearest ancestor with one). The tree is
// walked by Parent and Depth: Node builds addresses, and only s's and the
// ancestors read for their country need it.
func scopesOf(t Tree, s hierarchy.NodeID, buf []scopeKey, kinds []int) ([]scopeKey, []int, string) {
	n := t.Node(s)
	buf = append(buf[:0], mkScope(scopeNode, uint32(s)))
	kinds = append(kinds[:0], min(int(n.Depth), 15))
	if n.Org != 0 {
		buf, kinds = append(buf, mkScope(scopeOrg, uint32(n.Org))), append(kinds, kindOrg)
	}
	country := n.Country
	dt, _ := t.(interface{ Depth(hierarchy.NodeID) int })
	for a := t.Parent(s); a != hierarchy.None && a != hierarchy.Root; a = t.Parent(a) {
		var depth int
		if country == "" || dt == nil {
			an := t.Node(a)
			if country == "" {
				country = an.Country
			}
			depth = int(an.Depth)
		} else {
			depth = dt.Depth(a)
		}
		// The top-level blocks (depth 1: IANA's /8s in the default
		// snapshot; in a tree built without the IANA files, the first
		// registry allocations) are no context: a /8 spans continents,
		// and with the registry and the country beside it, it (like /16
		// and /12 address neighbourhoods) adds nothing measurable but
		// cost (docs/experiments/2026-11-delegation-log.md).
		if depth > 1 {
			buf, kinds = append(buf, mkScope(scopeNode, uint32(a))), append(kinds, min(depth, 15))
		}
	}
	if len(country) == 2 {
		buf, kinds = append(buf, mkScope(scopeCountry, uint32(country[0])<<8|uint32(country[1]))), append(kinds, kindCountry)
	}
	if n.Registry != hierarchy.RegistryUnknown {
		buf, kinds = append(buf, mkScope(scopeRegistry, uint32(n.Registry))), append(kinds, kindRegistry)
	}
	return append(buf, mkScope(scopeGlobal, 0)), append(kinds, kindAll), country
}

func (m *micraChooser) locate(e *engine) {
	ver, versioned := membershipVersion(e.d.Members)
	if versioned && m.locValid && ver == m.locVer {
		return
	}
	m.locating = true
	defer func() { m.locating = false }()
	for _, c := range m.locScopes {
		c.located, c.sits = c.located[:0], c.sits[:0]
	}
	m.locScopes = m.locScopes[:0]
	m.locGen++ // positions and the live set may have changed: neighbours anew
	var buf []scopeKey
	var kbuf []int
	m.geoCC = "" // a crawler may have moved
	clear(m.geoTab)
	for _, c := range e.liveIDs() {
		// the position a crawler states now (none: unknown), whether or
		// not its address is in the hierarchy
		cr := e.members()[c]
		ci := m.crawler.id(c)
		for int(ci) >= len(m.pos) {
			m.pos = append(m.pos, crawlerPos{})
		}
		m.pos[ci] = crawlerPos{}
		for int(ci) >= len(m.capOf) {
			m.capOf = append(m.capOf, 0)
		}
		m.capOf[ci] = cr.Capacity
		if cr.HasPos && validPos(cr.Lat, cr.Lon) {
			// an impossible position (NaN, off the globe) is no position:
			// a NaN distance would poison the shared distance fit for good
			m.pos[ci] = newCrawlerPos(cr.Lat, cr.Lon)
		}
		s := e.d.Tree.SmallestNonUnary(cr.Addr)
		if s == hierarchy.None || s == hierarchy.Root {
			continue
		}
		buf, kbuf, _ = scopesOf(e.d.Tree, s, buf, kbuf)
		for i, k := range buf[:len(buf)-1] { // not global: everyone is there
			c := m.scopeOf(k, kbuf[i])
			if len(c.located) == 0 {
				m.locScopes = append(m.locScopes, c)
			}
			c.located = append(c.located, ci)
			c.sits = append(c.sits, ci)
		}
	}
	for _, c := range m.locScopes {
		slices.Sort(c.sits)
	}
	// (two buffers, swapped: locate runs for every decision when the
	// membership has no version)
	before := m.liveOrd
	m.liveOrd = m.liveSpare[:0]
	clear(m.liveCi)
	for _, c := range e.liveIDs() {
		ci := m.crawler.id(c)
		for int(ci) >= len(m.liveCi) {
			m.liveCi = append(m.liveCi, false)
		}
		m.liveCi[ci] = true
		m.liveOrd = append(m.liveOrd, ci)
	}
	if !slices.Equal(before, m.liveOrd) {
		m.liveGen++
	}
	m.liveSpare = before
	if versioned {
		m.locVer, m.locValid = ver, true
	}
}

// subnetScopes returns s's scopes and registry country, computed once for
// a decision and the learning that follows it (the tree is immutable). The
// slice is shared until the next call.
func (m *micraChooser) subnetScopes(t Tree, s hierarchy.NodeID) ([]scopeKey, string) {
	m.tick++
	if !m.scopeOK || m.scopeS != s {
		m.scopeKs, m.scopeKind, m.scopeCC = scopesOf(t, s, m.scopeKs[:0], m.scopeKind[:0])
		m.scopeS, m.scopeOK = s, true
		m.scopeRecs = m.scopeRecs[:0]
		for _, k := range m.scopeKs {
			m.scopeRecs = append(m.scopeRecs, m.scopes[k])
		}
	}
	// read at this tick: forget (MaxContexts) keeps them while the
	// decision or the learning that follows holds them
	for _, c := range m.scopeRecs {
		if c != nil {
			c.used = m.tick
		}
	}
	return m.scopeKs, m.scopeCC
}

// subnetScopeStats returns the scope records of the subnet of the last
// subnetScopes call (records forgotten under MaxContexts make the next
// subnetScopes call look them all up again, so only the missing ones are
// looked up here), creating the missing ones when create
// is set. The slice is shared until the next call.
func (m *micraChooser) subnetScopeStats(create bool) []*scopeStats {
	for i, c := range m.scopeRecs {
		if c != nil {
			continue
		}
		if create {
			m.scopeRecs[i] = m.scopeOf(m.scopeKs[i], m.scopeKind[i])
		} else {
			m.scopeRecs[i] = m.scopes[m.scopeKs[i]]
		}
		if c := m.scopeRecs[i]; c != nil {
			// in the cache now: read at this tick (forget keeps it)
			c.used = m.tick
		}
	}
	return m.scopeRecs
}

const topK = 16

// topEntry is one crawler of a context's top list, with its mean there.
type topEntry struct {
	ci   uint32
	mean float64
}

// liveTop is the topK live crawlers with the lowest mean in a context, as
// of the live set liveGen and the context's statistics topVer.
type liveTop struct {
	gen, ver uint64
	ci       []uint32
}

// liveTopOf lists the topK live crawlers with the lowest mean in c, for a
// context whose top list holds departed crawlers. The top lists themselves
// keep them (they are learned state, the same on every peer whatever its
// view of the membership); without this, once the fastest crawlers had
// left, no live crawler past the 16th of a context was ever a candidate.
func (m *micraChooser) liveTopOf(c *scopeStats) []uint32 {
	lt := m.liveTops[c]
	if lt == nil {
		if m.liveTops == nil {
			m.liveTops = make(map[*scopeStats]*liveTop)
		}
		lt = &liveTop{}
		m.liveTops[c] = lt
	} else if lt.gen == m.liveGen && lt.ver == c.topVer {
		return lt.ci
	}
	lt.gen, lt.ver = m.liveGen, c.topVer
	var best [topK]topEntry
	n := 0
	for i := range c.st {
		st := &c.st[i]
		if st.n == 0 || int(st.ci) >= len(m.liveCi) || !m.liveCi[st.ci] {
			continue
		}
		// ties by name: the order this peer met the crawlers in must not
		// decide which make the cut
		j, _ := slices.BinarySearchFunc(best[:n], st, func(e topEntry, st *crawlerStat) int {
			if c := cmp.Compare(e.mean, st.mean); c != 0 {
				return c
			}
			return cmp.Compare(m.crawler.ids[e.ci], m.crawler.ids[st.ci])
		})
		if j < topK {
			if n < topK {
				n++
			}
			copy(best[j+1:n], best[j:n-1])
			best[j] = topEntry{st.ci, st.mean}
		}
	}
	lt.ci = lt.ci[:0]
	for _, e := range best[:n] {
		lt.ci = append(lt.ci, e.ci)
	}
	return lt.ci
}

// rankTop re-ranks crawler ci in c's top list after its mean there changed.
func (c *scopeStats) rankTop(ci uint32, mean float64) {
	c.topVer++
	t := c.top
	if i := slices.IndexFunc(t, func(e topEntry) bool { return e.ci == ci }); i >= 0 {
		// already listed: move it to the first place whose mean is ≥ its
		// own (where deleting and re-inserting would put it)
		t[i].mean = mean
		for i > 0 && t[i-1].mean >= mean {
			t[i-1], t[i] = t[i], t[i-1]
			i--
		}
		for i+1 < len(t) && t[i+1].mean < mean {
			t[i+1], t[i] = t[i], t[i+1]
			i++
		}
		// (A listed crawler whose mean rose stays listed: an unlisted one
		// with a lower mean gets in only when learned here again. Keeping
		// the list exact — refilling its last place — cost a point on zipf
		// hosts with 50 crawlers; docs/experiments/2026-11-delegation-log.md.)
		return
	}
	i, _ := slices.BinarySearchFunc(t, mean, func(e topEntry, v float64) int { return cmp.Compare(e.mean, v) })
	if i < topK {
		t = slices.Insert(t, i, topEntry{ci, mean})
		if len(t) > topK {
			t = t[:topK]
		}
	}
	c.top = t
}
