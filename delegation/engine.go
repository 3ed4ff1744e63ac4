package delegation

import (
	"cmp"
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// chooser is what differs between policies: how the owner of an undelegated
// subnet is found. It appends its steps to d and returns the candidates it
// learned about, best first (probed ones with OK set). An empty result means
// "no answer" and the engine falls back to consistent hashing.
type chooser interface {
	rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error)
}

// roomOrderer is implemented by choosers that can rank any crawlers for a
// subnet without probing (micra's predictions): load balancing's last
// resort then probes the likeliest nearest of those with room first.
type roomOrderer interface {
	roomOrder(e *engine, s hierarchy.NodeID, room []CrawlerID)
}

// roomPicker is implemented by choosers that can pick probeRoom's
// crawlers themselves, without a pass over every member's id: the live
// crawlers with room for pages that skipped does not name, in liveIDs'
// order, or when more than n, the n first in roomOrder's order. ok is
// false when the chooser cannot answer now (probeRoom picks them itself).
type roomPicker interface {
	roomPick(e *engine, s hierarchy.NodeID, pages int, skipped func(CrawlerID) bool, n int) (room []CrawlerID, ok bool)
}

// engine is the state machine shared by every policy: directory lookups,
// liveness, publishing with epochs, load balancing, hash fallback.
type engine struct {
	name  string
	d     Deps
	c     Config
	ch    chooser
	loads LoadBook

	// member index, rebuilt when the membership version changes
	memVer   uint64
	memValid bool
	byID     map[CrawlerID]Crawler

	ring      *Ring
	ringVer   uint64
	ringValid bool

	// redelegating is set while a re-delegation ranks (and only then: a
	// Directory may let other calls run while one publishes): a
	// calibration event says the owner is slow, which the statistics that
	// made the decision do not know, so the decision must probe (no blind
	// guess)
	redelegating bool

	ids      []CrawlerID
	idsVer   uint64
	idsValid bool

	// learnedSets[learnedAt[s]]: per subnet, the records already folded
	// into the chooser (Learner's idempotence). The map holds an index, not
	// the 80-byte set: nearly every decision inserts a new subnet, and
	// small map slots keep the insert and the map's growth cheap.
	learnedAt   map[hierarchy.NodeID]int32
	learnedSets chunked[learnedSet]
	learnedFree []int32 // indexes of forgotten sets, to reuse
	learnTick   uint64  // counts records offered to learnOnce

	ranking Decision // the decision being ranked (see decide)
	// victims is release's scratch list (empty between calls), subsBuf the
	// full crawler's subnets it reads from an in-memory book
	victims []releaseVictim
	subsBuf []hierarchy.NodeID
}

func newEngine(name string, d Deps, c Config, ch chooser) *engine {
	if d.Rand == nil {
		d.Rand = rand.New(rand.NewPCG(1, 2))
	}
	if d.Loads == nil {
		d.Loads = NewMemLoadBook()
	}
	return &engine{name: name, d: d, c: c.withDefaults(), ch: ch, loads: d.Loads}
}

func (e *engine) Name() string { return e.name }

// Balancing reports whether the policy balances load: then a cached
// owner without room is moved by Delegate, and a caller that answers
// cached owners itself (the overlay's fast path) must ask the policy.
func (e *engine) Balancing() bool { return e.c.Balance != BalanceOff }

func (e *engine) now() time.Time {
	if e.d.Clock == nil {
		return time.Time{}
	}
	return e.d.Clock.Now()
}

// membershipVersion is m's version when it is Versioned. Callers read it
// before Live(): a change in between then makes the next call rebuild,
// instead of caching the old live set under the new version.
func membershipVersion(m Membership) (uint64, bool) {
	if v, ok := m.(Versioned); ok {
		return v.Version(), true
	}
	return 0, false
}

// members returns the live crawlers indexed by ID.
func (e *engine) members() map[CrawlerID]Crawler {
	ver, versioned := membershipVersion(e.d.Members)
	if versioned && e.memValid && ver == e.memVer {
		return e.byID
	}
	live := e.d.Members.Live()
	if e.byID == nil {
		e.byID = make(map[CrawlerID]Crawler, len(live))
	} else {
		clear(e.byID)
	}
	for _, c := range live {
		e.byID[c.ID] = c
	}
	if versioned {
		e.memVer, e.memValid = ver, true
	}
	return e.byID
}

func (e *engine) live(c CrawlerID) bool {
	_, ok := e.members()[c]
	return ok
}

// owns reports whether c still counts as the owner of what it was
// delegated: the membership's Liveness when it has one (the overlay's
// holds a silent owner for a grace, and while it sees no quorum), else
// whether c is live. Candidates for a new delegation are the live ones.
func (e *engine) owns(c CrawlerID) bool {
	if l, ok := e.d.Members.(Liveness); ok {
		return l.IsLive(c)
	}
	return e.live(c)
}

// liveIDs returns the live crawler IDs, sorted (deterministic order). The
// slice is shared: do not modify it.
func (e *engine) liveIDs() []CrawlerID {
	ver, versioned := membershipVersion(e.d.Members)
	if versioned && e.idsValid && ver == e.idsVer {
		return e.ids
	}
	live := e.d.Members.Live()
	out := make([]CrawlerID, len(live))
	for i, c := range live {
		out[i] = c.ID
	}
	slices.Sort(out)
	e.ids = out
	if versioned {
		e.idsVer, e.idsValid = ver, true
	}
	return out
}

func (e *engine) hashRing() *Ring {
	ver, versioned := membershipVersion(e.d.Members)
	if versioned && e.ringValid && ver == e.ringVer {
		return e.ring
	}
	e.ring = NewRing(e.d.Members.Live(), RingConfig{Replicas: e.c.HashReplicas, CapacityUnit: e.c.HashCapacityUnit, Probes: e.c.HashProbes})
	if versioned {
		e.ringVer, e.ringValid = ver, true
	}
	return e.ring
}

// probe issues one probe per crawler and records them in step and d.
func (e *engine) probe(ctx context.Context, ip netip.Addr, cs []CrawlerID, step *Step, d *Decision) []ProbeResult {
	if len(cs) == 0 {
		return nil
	}
	res := e.d.Prober.Probe(ctx, ip, cs)
	for i := range res {
		// A negative time is no measurement (a clock step, a broken
		// prober): counted as an answer it won the subnet and made every
		// statistic of the decision NaN.
		if res[i].RTT < 0 {
			res[i].OK = false
		}
	}
	d.Probes += len(cs)
	step.Probes = append(step.Probes, res...)
	return res
}

// Delegate implements Policy.
func (e *engine) Delegate(ctx context.Context, ip netip.Addr) (Decision, error) {
	d := Decision{IP: ip, Subnet: hierarchy.None}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	s := e.d.Tree.SmallestNonUnary(ip)
	if s == hierarchy.None || s == hierarchy.Root {
		return e.hashed(ip, ReasonOutsideHierarchy, d)
	}
	d.Subnet = s
	rec, ok, err := e.d.Dir.Lookup(ctx, s)
	if err != nil {
		return d, fmt.Errorf("delegation: lookup subnet %d for %v: %w", s, ip, err)
	}
	if b, in := e.liveBlock(rec, ip); in {
		// a lower delegation: it stands even while the subnet's owner is
		// dead (the subnet is re-decided on its next host outside)
		d.Owner, d.OwnerRTT, d.Record, d.Cached, d.Reason = b.Owner, b.OwnerRTT, rec, true, ReasonCached
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "block " + b.Block().String() + " already delegated"})
		if ok && e.owns(rec.Owner) {
			// the load book counts pages per subnet (blocks are
			// delegated only with balancing off)
			e.loads.AddPages(s, rec.Owner, 1)
		}
		return d, nil
	}
	if ok && e.owns(rec.Owner) {
		d.Owner, d.OwnerRTT, d.Record, d.Cached, d.Reason = rec.Owner, rec.OwnerRTT, rec, true, ReasonCached
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "already delegated"})
		// (a held owner, silent, has no load to judge: it keeps the subnet)
		if e.c.Balance != BalanceOff && e.live(rec.Owner) && !e.hasRoom(rec.Owner, 1) {
			if err := e.rebalanceCached(ctx, s, rec, &d); err != nil {
				return d, err
			}
			if err := ctx.Err(); err != nil {
				return d, err // probes for room cut short: no page counted
			}
		}
		e.loads.AddPages(s, d.Owner, 1)
		return d, nil
	}
	note := "not delegated"
	if rec.Owner != "" {
		note = "owner " + string(rec.Owner) + " is dead"
	}
	// room for the chooser's steps: one allocation instead of growing
	d.Steps = append(make([]Step, 0, 3), Step{Kind: StepLookup, Node: s, Note: note})
	return e.decide(ctx, ip, s, rec, d)
}

// Redelegate implements Policy.
func (e *engine) Redelegate(ctx context.Context, ip netip.Addr) (Decision, error) {
	d := Decision{IP: ip, Subnet: hierarchy.None}
	s := e.d.Tree.SmallestNonUnary(ip)
	if s == hierarchy.None || s == hierarchy.Root {
		return e.hashed(ip, ReasonOutsideHierarchy, d)
	}
	d.Subnet = s
	rec, _, err := e.d.Dir.Lookup(ctx, s)
	if err != nil {
		return d, fmt.Errorf("delegation: lookup subnet %d for %v: %w", s, ip, err)
	}
	if b, in := e.liveBlock(rec, ip); in {
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "re-delegation of block " + b.Block().String() + " requested"})
		return e.redecideBlock(ctx, ip, s, rec, b, d)
	}
	d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "re-delegation requested"})
	return e.decideAs(ctx, ip, s, rec, d, true)
}

// redecideBlock decides ip's block b of subnet s afresh (a calibration
// event came from its owner): the winner takes the block, or, when the
// winner is the subnet's owner, the block returns to the subnet.
func (e *engine) redecideBlock(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, rec Record, b BlockDelegation, d Decision) (Decision, error) {
	ranked, err := e.rankAs(ctx, ip, s, &d, true)
	if err != nil {
		return d, err
	}
	if err := ctx.Err(); err != nil {
		return d, err // as decide: nothing published from cut-short probes
	}
	if len(ranked) == 0 || !ranked[0].OK {
		// nobody answered: as decide, publish nothing
		return e.hashed(ip, ReasonNoAnswer, d)
	}
	blocks := e.carryBlocks(rec.Blocks, rec.Owner)
	blocks = slices.DeleteFunc(blocks, func(x BlockDelegation) bool { return x.Block() == b.Block() })
	if ranked[0].Crawler != rec.Owner {
		blocks = append(blocks, BlockDelegation{Host: ip, Owner: ranked[0].Crawler, OwnerRTT: ranked[0].RTT})
	}
	nr := rec
	nr.Probes, nr.Blocks, nr.DecidedBy, nr.At = okOnly(ranked), blocks, e.c.Self, e.now()
	nr.Epoch = NextEpoch(rec.Epoch, nr.At)
	if r, ok := answerOf(nr.Probes, rec.Owner); ok {
		// the owner's answer now: what it endorses on the overlay (it
		// checks the record's RTT against what it answered)
		nr.OwnerRTT = r.RTT
	}
	pub, err := e.publish(ctx, nr)
	if err != nil {
		return d, fmt.Errorf("delegation: publish subnet %d: %w", s, err)
	}
	if tc, ok := e.ch.(tallyCarrier); ok && pub.Epoch == nr.Epoch && pub.Owner == rec.Owner {
		// only the block changed: the subnet's votes stand
		tc.carryTally(s, rec.Epoch, pub.Epoch)
	}
	e.learnOnce(s, pub)
	d.Record, d.Owner, d.OwnerRTT = pub, pub.Owner, pub.OwnerRTT
	if nb, in := e.liveBlock(pub, ip); in {
		d.Owner, d.OwnerRTT = nb.Owner, nb.OwnerRTT
	}
	return d, nil
}

// splits reports whether subnet s spans more than one block (a block of a
// subnet inside one block would be the whole subnet: a review hands such a
// subnet over instead).
func (e *engine) splits(s hierarchy.NodeID) bool {
	n := e.d.Tree.Node(s)
	return n.Start.IsValid() && n.End.IsValid() && BlockOf(n.Start) != BlockOf(n.End)
}

// liveBlock returns the delegation of ip's block in rec when there is one
// and its owner is live.
func (e *engine) liveBlock(rec Record, ip netip.Addr) (BlockDelegation, bool) {
	if len(rec.Blocks) == 0 {
		return BlockDelegation{}, false
	}
	return rec.LiveBlock(ip, e.owns)
}

// carryBlocks returns, in a new slice, the blocks of a subnet's record that
// stay when owner owns the subnet: those of other live crawlers.
func (e *engine) carryBlocks(blocks []BlockDelegation, owner CrawlerID) []BlockDelegation {
	var out []BlockDelegation // nil when none stays, like a record without
	for _, b := range blocks {
		if b.Owner != owner && e.owns(b.Owner) {
			out = append(out, b)
		}
	}
	return out
}

// rank runs the chooser for ip in subnet s, which adds its steps to d.
func (e *engine) rank(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	// the chooser's rank is an interface call: d would move every
	// decision to the heap; the engine's own room does not (engines are
	// not shared)
	dp := &e.ranking
	*dp = *d
	ranked, err := e.ch.rank(ctx, e, ip, s, dp)
	*d, *dp = *dp, Decision{}
	return ranked, err
}

// rankAs is rank with e.redelegating set to redelegation for its length.
func (e *engine) rankAs(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, d *Decision, redelegation bool) ([]ProbeResult, error) {
	e.redelegating = redelegation
	defer func() { e.redelegating = false }()
	return e.rank(ctx, ip, s, d)
}

func (e *engine) decide(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, prev Record, d Decision) (Decision, error) {
	return e.decideAs(ctx, ip, s, prev, d, false)
}

// decideAs decides subnet s for ip; redelegation: a calibration event asked
// for it (the page is counted already and the subnet's pages move).
func (e *engine) decideAs(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, prev Record, d Decision, redelegation bool) (Decision, error) {
	ranked, err := e.rankAs(ctx, ip, s, &d, redelegation)
	if err != nil {
		return d, err
	}
	if err := ctx.Err(); err != nil {
		// probes cut short answer nothing: no decision, nothing published
		return d, err
	}
	if len(ranked) == 0 {
		return e.hashed(ip, ReasonNoAnswer, d)
	}
	win := ranked[0]
	probes := okOnly(ranked)
	if e.c.Balance != BalanceOff {
		// a copy: the chooser's answer may live in its scratch space,
		// which other calls reuse while balancing publishes
		ranked = slices.Clone(ranked)
		win, err = e.balance(ctx, ip, s, ranked, &d, redelegation)
		if err != nil {
			return d, err
		}
		if err := ctx.Err(); err != nil {
			return d, err // probes for room cut short: nothing published
		}
		if win.OK && !slices.ContainsFunc(probes, func(r ProbeResult) bool { return r.Crawler == win.Crawler }) {
			// the owner came from crawlers probed for room: its answer
			// is in the record too, so a record always shows why its
			// owner owns it (learners, a later release's next best). A
			// winner nobody probed (a blind or random decision: OK
			// false) adds nothing. Only its answer: the others of that
			// round, learned as well, cost accuracy under tight
			// capacities (docs/experiments/2026-11-delegation-log.md, load balancing).
			probes = append(probes, win)
			sortRanked(probes)
		}
	}
	rec := Record{
		Subnet: s, Snapshot: e.d.Tree.ID(), Owner: win.Crawler, OwnerRTT: measured(win),
		Probes: probes, Epoch: NextEpoch(prev.Epoch, e.now()), DecidedBy: e.c.Self, At: e.now(),
		Blocks: e.carryBlocks(prev.Blocks, win.Crawler),
	}
	pub, err := e.publish(ctx, rec)
	if err != nil {
		return d, fmt.Errorf("delegation: publish subnet %d: %w", s, err)
	}
	d.Record, d.Owner, d.OwnerRTT = pub, pub.Owner, pub.OwnerRTT
	if redelegation {
		// the page that raised the calibration event was counted when it
		// was delegated: only the subnet's pages change hands
		e.loads.Move(s, pub.Owner)
	} else {
		e.loads.AddPages(s, pub.Owner, 1)
	}
	e.learnOnce(s, pub)
	return d, nil
}

// publish publishes rec and returns the record the directory kept. A
// directory that hides dead owners' records may not have told us their
// epoch: when a dead owner's record wins, rec is published again above it.
func (e *engine) publish(ctx context.Context, rec Record) (Record, error) {
	pub, err := e.d.Dir.Publish(ctx, rec)
	if err == nil && pub.Owner != rec.Owner && !e.owns(pub.Owner) {
		rec.Epoch = NextEpoch(pub.Epoch, rec.At)
		pub, err = e.d.Dir.Publish(ctx, rec)
	}
	return pub, err
}

// hashed answers with the consistent-hash owner of ip, publishing nothing.
func (e *engine) hashed(ip netip.Addr, why Reason, d Decision) (Decision, error) {
	owner, ok := e.hashRing().OwnerOf(ip)
	if !ok {
		return d, fmt.Errorf("delegation: no live crawler for %v", ip)
	}
	d.Owner, d.Reason = owner, why
	d.Steps = append(d.Steps, Step{Kind: StepHash, Node: hierarchy.None, Note: why.String()})
	return d, nil
}

// measured is r's RTT if the crawler answered a probe, else 0: a record's
// OwnerRTT is a measurement its owner can check (it endorses only what it
// answered the decider), never a prediction (micra's blind decisions) or
// a guess (random, hash).
func measured(r ProbeResult) time.Duration {
	if !r.OK {
		return 0
	}
	return r.RTT
}

// Join implements Policy: a joining crawler owns its own subnet.
func (e *engine) Join(ctx context.Context, c Crawler) (Decision, error) {
	d := Decision{IP: c.Addr, Subnet: hierarchy.None, Owner: c.ID, Reason: ReasonPlacement}
	s := e.d.Tree.SmallestNonUnary(c.Addr)
	if s == hierarchy.None || s == hierarchy.Root {
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: hierarchy.None, Note: "crawler address outside the hierarchy: nothing to own"})
		return d, nil
	}
	d.Subnet = s
	rec, ok, err := e.d.Dir.Lookup(ctx, s)
	if err != nil {
		return d, fmt.Errorf("delegation: lookup subnet %d of joining crawler %s: %w", s, c.ID, err)
	}
	_, ownBlockAway := rec.BlockOwner(c.Addr)
	if oc, live := e.members()[rec.Owner]; ok && live && rec.OwnerRTT == 0 && rec.DecidedBy == rec.Owner &&
		oc.Addr.IsValid() && e.d.Tree.SmallestNonUnary(oc.Addr) == s && (rec.Owner != c.ID || !ownBlockAway) {
		// Another live crawler already sits in this subnet: keep it, so
		// two co-located crawlers do not take the subnet in turns. (Its
		// address says so: a decision without probes — random, or
		// micra's blind one — made by the crawler it picked looks the
		// same otherwise.) A crawler back in its own placement whose
		// block went to another crawler meanwhile takes it back below.
		d.Record, d.Cached = rec, true
		d.Owner = rec.OwnerOf(c.Addr, e.owns) // c's block may be another's
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "subnet already placed with " + string(rec.Owner)})
		return d, nil
	}
	place := Record{
		Subnet: s, Snapshot: e.d.Tree.ID(), Owner: c.ID, Epoch: NextEpoch(rec.Epoch, e.now()), DecidedBy: c.ID, At: e.now(),
		Probes: []ProbeResult{{Crawler: c.ID, OK: true}}, Blocks: e.carryBlocks(rec.Blocks, c.ID),
	}
	// a crawler owns the subnet it sits in, its own block included
	place.Blocks = slices.DeleteFunc(place.Blocks, func(b BlockDelegation) bool { return b.Block() == BlockOf(c.Addr) })
	if len(place.Blocks) == 0 {
		place.Blocks = nil
	}
	pub, err := e.publish(ctx, place)
	if err != nil {
		return d, fmt.Errorf("delegation: publish placement of %s: %w", c.ID, err)
	}
	d.Record, d.Owner = pub, pub.Owner
	d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "crawler placement"})
	e.loads.Move(s, pub.Owner)
	e.learnOnce(s, pub)
	return d, nil
}

func probeVariance(ps []ProbeResult) float64 {
	var n, mean, m2 float64
	for _, p := range ps {
		if !p.OK {
			continue
		}
		x := float64(p.RTT) / float64(time.Millisecond)
		n++
		dl := x - mean
		mean += dl / n
		m2 += dl * (x - mean)
	}
	if n < 2 {
		return 0
	}
	return m2 / (n - 1)
}

// sortRanked orders probe results best first: answered before unanswered,
// then by RTT, then by crawler ID (deterministic).
func sortRanked(rs []ProbeResult) {
	slices.SortStableFunc(rs, func(a, b ProbeResult) int {
		if a.OK != b.OK {
			if a.OK {
				return -1
			}
			return 1
		}
		if c := cmp.Compare(a.RTT, b.RTT); c != 0 {
			return c
		}
		return cmp.Compare(a.Crawler, b.Crawler)
	})
}
