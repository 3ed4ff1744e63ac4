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

// learner is implemented by choosers that learn from published records.
type learner interface {
	learn(e *engine, s hierarchy.NodeID, rec Record)
}

// Learner is implemented by the policies that learn from delegation records
// (NewMicra). Records are public (the overlay's DHT values and their gossip
// announcements), so every peer can learn from every decision, not only its
// own: Learn folds a record decided elsewhere into the policy's statistics
// exactly as if this policy had made that decision.
//
// Learn is idempotent: a record already learned (same subnet, epoch and
// decider — including the policy's own decisions and placements) changes
// nothing. A record of another hierarchy snapshot, or for a subnet outside
// the tree, is ignored (its node ids mean other subnets). Like every policy
// call it must be serialised with Delegate, Join and Redelegate.
type Learner interface {
	Learn(rec Record) bool // reports whether rec was new and learned
}

// learnedPerSubnet bounds the dedup memory of one subnet: the newest epochs
// learned. Older records arriving late are learned again only if more than
// this many newer decisions of the same subnet were seen in between, which a
// subnet re-delegated that often does not mind.
const learnedPerSubnet = 4

// learnedKey names one record of a subnet: its epoch and a 64-bit FNV-1a
// hash of its decider. Not the decider's name: a node that decodes every
// record afresh kept a copy of a 52-byte peer ID per key (up to four per
// subnet learned); two deciders colliding in one subnet's epoch would need
// odds of 2^-64.
type learnedKey struct {
	epoch   uint64
	decider uint64
}

func fnv64a(s CrawlerID) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// learnedSet is the dedup memory of one subnet, held in a slice by value
// (no allocation per subnet learned).
type learnedSet struct {
	n    uint8
	used uint64 // engine.learnTick when the subnet last had a record to learn
	k    [learnedPerSubnet]learnedKey
}

// learningEngine is an engine whose chooser learns: it exports Learn.
type learningEngine struct{ *engine }

// Learn implements Learner.
func (le learningEngine) Learn(rec Record) bool {
	e := le.engine
	if rec.Snapshot != e.d.Tree.ID() || rec.Subnet == hierarchy.None || rec.Subnet == hierarchy.Root || int(rec.Subnet) >= e.d.Tree.Len() {
		return false
	}
	if l, ok := e.ch.(interface{ prepare(e *engine) }); ok {
		l.prepare(e)
	}
	if k, ok := e.ch.(interface{ knows(CrawlerID) bool }); ok {
		rec.Probes = knownOnly(rec.Probes, k.knows)
	}
	return e.learnOnce(rec.Subnet, rec)
}

// knownOnly drops the answers of crawlers the learner never saw in its
// membership. Every crawler a record names costs a learner state in every
// context it learns, kept for good, so a record of made-up crawlers (up to
// 64 answers each) would grow it without bound; a crawler that has joined
// is known as soon as this peer's membership lists it. The answers of one
// that joined too recently for that are lost, which costs little: its
// next decisions bring new ones. rec's slice is shared with the caller:
// it is copied only when something is dropped.
func knownOnly(ps []ProbeResult, known func(CrawlerID) bool) []ProbeResult {
	for i, p := range ps {
		if known(p.Crawler) {
			continue
		}
		out := slices.Clone(ps[:i])
		for _, q := range ps[i+1:] {
			if known(q.Crawler) {
				out = append(out, q)
			}
		}
		return out
	}
	return ps
}

// learnOnce feeds rec to the chooser unless it was learned before.
func (e *engine) learnOnce(s hierarchy.NodeID, rec Record) bool {
	l, ok := e.ch.(learner)
	if !ok {
		return false
	}
	if e.learnedAt == nil {
		e.learnedAt = make(map[hierarchy.NodeID]int32)
	}
	e.dropForgotten(l)
	k := learnedKey{rec.Epoch, fnv64a(rec.DecidedBy)}
	e.learnTick++
	at, ok := e.learnedAt[s]
	if !ok {
		at = e.newLearnedSet(l)
		e.learnedAt[s] = at
	}
	set := e.learnedSets.at(at)
	set.used = e.learnTick
	seen := set.k[:set.n]
	if slices.Contains(seen, k) {
		return false
	}
	if len(seen) >= learnedPerSubnet {
		// forget the lowest epoch — unless rec is older still: forgetting
		// one of the newest would learn it again when it comes back
		lo := 0
		for i := range seen {
			if seen[i].epoch < seen[lo].epoch {
				lo = i
			}
		}
		if k.epoch < seen[lo].epoch {
			return false
		}
		seen = slices.Delete(seen, lo, lo+1)
	}
	seen = append(seen, k)
	set.n = uint8(len(seen))
	if rec.DecidedBy != e.c.Self {
		// another peer's record (the one the directory kept, or a
		// placement): only answers of crawlers this peer knows, as Learn
		// does, or a made-up crawler would enter the learned state
		if kn, ok := e.ch.(interface{ knows(CrawlerID) bool }); ok {
			rec.Probes = knownOnly(rec.Probes, kn.knows)
		}
	}
	l.learn(e, s, rec)
	return true
}

// learnBounder is implemented by learners whose learned state is bounded
// (MicraConfig.MaxContexts): the engine forgets a subnet's dedup memory when
// the learner forgets the subnet's own statistics (takeForgotten), so a
// record is learned twice only into statistics that no longer hold it.
type learnBounder interface {
	learnBound() int
	takeForgotten() []hierarchy.NodeID
}

// dropForgotten forgets the dedup memory of the subnets the learner has
// forgotten.
func (e *engine) dropForgotten(l learner) {
	b, ok := l.(learnBounder)
	if !ok {
		return
	}
	for _, s := range b.takeForgotten() {
		if at, ok := e.learnedAt[s]; ok {
			delete(e.learnedAt, s)
			e.learnedFree = append(e.learnedFree, at)
		}
	}
}

// newLearnedSet returns the index of an empty dedup set for a subnet. The
// sets follow the learner's statistics (dropForgotten); records that leave
// no statistics (every answer unknown or failed) leave a set all the same,
// so past twice the learner's bound the least recently offered quarter is
// forgotten as well: a record of such a subnet learned again adds nothing.
func (e *engine) newLearnedSet(l learner) int32 {
	if b, ok := l.(learnBounder); ok {
		if bound := b.learnBound(); bound > 0 && len(e.learnedAt) >= 2*bound {
			stamps := make([]uint64, 0, len(e.learnedAt))
			for _, at := range e.learnedAt {
				stamps = append(stamps, e.learnedSets.at(at).used)
			}
			slices.Sort(stamps)
			cut := max(stamps[len(stamps)/4], stamps[0]+1)
			for s, at := range e.learnedAt {
				if e.learnedSets.at(at).used < cut {
					delete(e.learnedAt, s)
					e.learnedFree = append(e.learnedFree, at)
				}
			}
		}
	}
	if n := len(e.learnedFree); n > 0 {
		at := e.learnedFree[n-1]
		e.learnedFree = e.learnedFree[:n-1]
		*e.learnedSets.at(at) = learnedSet{}
		return at
	}
	return e.learnedSets.add()
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

	// redelegating is set while Redelegate decides, up to publishing: a
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
		if ok && e.live(rec.Owner) {
			// the load book counts pages per subnet (blocks are
			// delegated only with balancing off)
			e.loads.AddPages(s, rec.Owner, 1)
		}
		return d, nil
	}
	if ok && e.live(rec.Owner) {
		d.Owner, d.OwnerRTT, d.Record, d.Cached, d.Reason = rec.Owner, rec.OwnerRTT, rec, true, ReasonCached
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "already delegated"})
		if e.c.Balance != BalanceOff && !e.hasRoom(rec.Owner, 1) {
			if err := e.rebalanceCached(ctx, s, rec, &d); err != nil {
				return d, err
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
	e.redelegating = true
	defer func() { e.redelegating = false }()
	if b, in := e.liveBlock(rec, ip); in {
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "re-delegation of block " + b.Block().String() + " requested"})
		return e.redecideBlock(ctx, ip, s, rec, b, d)
	}
	d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "re-delegation requested"})
	return e.decide(ctx, ip, s, rec, d)
}

// redecideBlock decides ip's block b of subnet s afresh (a calibration
// event came from its owner): the winner takes the block, or, when the
// winner is the subnet's owner, the block returns to the subnet.
func (e *engine) redecideBlock(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, rec Record, b BlockDelegation, d Decision) (Decision, error) {
	ranked, err := e.rank(ctx, ip, s, &d)
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
	nr.Probes, nr.Blocks, nr.Epoch, nr.DecidedBy, nr.At = okOnly(ranked), blocks, rec.Epoch+1, e.c.Self, e.now()
	if r, ok := answerOf(nr.Probes, rec.Owner); ok {
		// the owner's answer now: what it endorses on the overlay (it
		// checks the record's RTT against what it answered)
		nr.OwnerRTT = r.RTT
	}
	e.redelegating = false // (as in decide: not across publishing)
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
	return rec.LiveBlock(ip, e.live)
}

// carryBlocks returns, in a new slice, the blocks of a subnet's record that
// stay when owner owns the subnet: those of other live crawlers.
func (e *engine) carryBlocks(blocks []BlockDelegation, owner CrawlerID) []BlockDelegation {
	var out []BlockDelegation // nil when none stays, like a record without
	for _, b := range blocks {
		if b.Owner != owner && e.live(b.Owner) {
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

func (e *engine) decide(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, prev Record, d Decision) (Decision, error) {
	ranked, err := e.rank(ctx, ip, s, &d)
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
		win, err = e.balance(ctx, ip, s, ranked, &d)
		if err != nil {
			return d, err
		}
		if win.OK && !slices.ContainsFunc(probes, func(r ProbeResult) bool { return r.Crawler == win.Crawler }) {
			// the owner came from crawlers probed for room: its answer
			// is in the record too, so a record always shows why its
			// owner owns it (learners, a later release's next best). A
			// winner nobody probed (a blind or random decision: OK
			// false) adds nothing. Only its answer: the others of that
			// round, learned as well, cost accuracy under tight
			// capacities (docs/delegation.md, load balancing).
			probes = append(probes, win)
			sortRanked(probes)
		}
	}
	rec := Record{
		Subnet: s, Snapshot: e.d.Tree.ID(), Owner: win.Crawler, OwnerRTT: win.RTT,
		Probes: probes, Epoch: prev.Epoch + 1, DecidedBy: e.c.Self, At: e.now(),
		Blocks: e.carryBlocks(prev.Blocks, win.Crawler),
	}
	// The flag is this call's only until here: a Directory may let other
	// decisions run while it publishes (the overlay does, around its
	// network I/O), and they must not see it.
	moving := e.redelegating
	e.redelegating = false
	pub, err := e.publish(ctx, rec)
	if err != nil {
		return d, fmt.Errorf("delegation: publish subnet %d: %w", s, err)
	}
	d.Record, d.Owner, d.OwnerRTT = pub, pub.Owner, pub.OwnerRTT
	if moving {
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
	if err == nil && pub.Owner != rec.Owner && !e.live(pub.Owner) {
		rec.Epoch = pub.Epoch + 1
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
	if oc, live := e.members()[rec.Owner]; ok && live && rec.OwnerRTT == 0 && rec.DecidedBy == rec.Owner &&
		oc.Addr.IsValid() && e.d.Tree.SmallestNonUnary(oc.Addr) == s {
		// Another live crawler already sits in this subnet: keep it, so
		// two co-located crawlers do not take the subnet in turns. (Its
		// address says so: a decision without probes — random, or
		// micra's blind one — made by the crawler it picked looks the
		// same otherwise.)
		d.Owner, d.Record, d.Cached = rec.Owner, rec, true
		d.Steps = append(d.Steps, Step{Kind: StepLookup, Node: s, Note: "subnet already placed with " + string(rec.Owner)})
		return d, nil
	}
	place := Record{
		Subnet: s, Snapshot: e.d.Tree.ID(), Owner: c.ID, Epoch: rec.Epoch + 1, DecidedBy: c.ID, At: e.now(),
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

func (e *engine) hasRoom(c CrawlerID, pages int) bool {
	cr, ok := e.members()[c]
	if !ok {
		return false
	}
	return cr.Capacity <= 0 || e.loads.Load(c)+pages <= cr.Capacity
}

// balance applies the configured load-balancing option to the ranked
// candidates of subnet s and returns the winner.
func (e *engine) balance(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, ranked []ProbeResult, d *Decision) (ProbeResult, error) {
	// the pages a crawler takes on with s: the subnet's pages and the one
	// being delegated; a re-delegation's page is counted already, and the
	// current owner's load holds the subnet's pages
	extra := 1
	if e.redelegating {
		extra = 0
	}
	pages := e.loads.Pages(s) + extra
	owner, owned := e.loads.Owner(s)
	need := func(c CrawlerID) int {
		if owned && owner == c {
			return extra
		}
		return pages
	}
	best := ranked[0]
	if e.hasRoom(best.Crawler, need(best.Crawler)) {
		return best, nil
	}
	step := Step{Kind: StepBalance, Node: s}
	if e.c.Balance == BalanceRelease {
		moved, err := e.release(ctx, best.Crawler, s, need(best.Crawler), d, true)
		if err != nil {
			return best, err
		}
		if moved > 0 && e.hasRoom(best.Crawler, need(best.Crawler)) {
			step.Note = fmt.Sprintf("%s full: released %d lowest-variance subnet(s) to their next best", best.Crawler, moved)
			d.Steps = append(d.Steps, step)
			return best, nil
		}
	}
	// Option (b), and the release option's last resort: the best-ranked
	// candidate with room; if none of the ranked ones has room, probe the
	// live crawlers that do.
	for _, r := range ranked[1:] {
		if r.OK && e.hasRoom(r.Crawler, need(r.Crawler)) {
			step.Note = fmt.Sprintf("%s full: next best with room", best.Crawler)
			d.Steps = append(d.Steps, step)
			return r, nil
		}
	}
	pick, err := e.probeRoom(ctx, ip, s, pages, ranked, &step, d)
	if err != nil {
		return best, err
	}
	if !pick.OK {
		step.Note = "nobody has room: best takes it over capacity"
		d.Steps = append(d.Steps, step)
		return best, nil
	}
	step.Note = fmt.Sprintf("%s full: probed crawlers with room", best.Crawler)
	d.Steps = append(d.Steps, step)
	return pick, nil
}

// probeRoom probes live crawlers (not in skip) that have room for pages
// more and returns the lowest answer. At most Config.RoomProbes are asked,
// so the fallback does not grow with the overlay: a chooser that predicts
// (roomOrderer) names them; otherwise the holders of subnets nearest s in
// the hierarchy (IPMicra's notion of near: the walk from s's parent up),
// then others drawn from Deps.Rand.
func (e *engine) probeRoom(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, pages int, skip []ProbeResult, step *Step, d *Decision) (ProbeResult, error) {
	skipped := func(c CrawlerID) bool {
		return slices.ContainsFunc(skip, func(r ProbeResult) bool { return r.Crawler == c })
	}
	var room []CrawlerID
	for _, c := range e.liveIDs() {
		if e.hasRoom(c, pages) && !skipped(c) {
			room = append(room, c)
		}
	}
	if n := e.c.RoomProbes; len(room) > n {
		if ro, ok := e.ch.(roomOrderer); ok {
			ro.roomOrder(e, s, room)
			room = room[:n]
		} else {
			near, err := e.nearHolders(ctx, s, n, func(c CrawlerID) bool { return e.live(c) && e.hasRoom(c, pages) && !skipped(c) })
			if err != nil {
				return ProbeResult{}, err
			}
			rest := slices.DeleteFunc(room, func(c CrawlerID) bool { return slices.Contains(near, c) })
			// a partial Fisher–Yates: the n−len(near) random ones cost
			// that many draws, not one per crawler of the overlay
			k := n - len(near)
			for i := range k {
				j := i + e.d.Rand.IntN(len(rest)-i)
				rest[i], rest[j] = rest[j], rest[i]
			}
			room = append(near, rest[:k]...)
		}
	}
	var pick ProbeResult
	for _, r := range e.probe(ctx, ip, room, step, d) {
		if r.OK && (!pick.OK || r.RTT < pick.RTT) {
			pick = r
		}
	}
	return pick, nil
}

// nearHolders returns up to n crawlers accepted by ok, holders of subnets
// under s's ancestors, the nearest ancestor first (the root, holders of
// everything, excluded). Within a level the order is drawn from Deps.Rand,
// as IPMicra's walk does: directories list holders by name, and a cut in
// that order would favour the same names everywhere.
func (e *engine) nearHolders(ctx context.Context, s hierarchy.NodeID, n int, ok func(CrawlerID) bool) ([]CrawlerID, error) {
	var near, level []CrawlerID
	for _, a := range e.d.Tree.Ancestors(s) {
		if len(near) == n || a == hierarchy.Root {
			break
		}
		holders, err := e.d.Dir.HoldersUnder(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("delegation: holders under %d: %w", a, err)
		}
		level = level[:0]
		for _, c := range holders {
			if ok(c) && !slices.Contains(near, c) {
				level = append(level, c)
			}
		}
		e.d.Rand.Shuffle(len(level), func(i, j int) { level[i], level[j] = level[j], level[i] })
		near = append(near, level[:min(len(level), n-len(near))]...)
	}
	return near, nil
}

// rebalanceCached handles a delegated subnet whose owner is full when one
// more page arrives: option (a) releases the owner's lowest-variance
// subnet(s) (possibly this one), option (b) hands this subnet to its
// next-best crawler with room. Both use the probe results already in the
// records: no new probes.
func (e *engine) rebalanceCached(ctx context.Context, s hierarchy.NodeID, rec Record, d *Decision) error {
	step := Step{Kind: StepBalance, Node: s}
	if e.c.Balance == BalanceRelease {
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false)
		if err != nil {
			return err
		}
		step.Note = fmt.Sprintf("%s full: released %d lowest-variance subnet(s)", rec.Owner, n)
	} else {
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, s)
		if err != nil {
			return err
		}
		if n == 0 {
			// nobody probed for s has room: free room by moving another
			// of the owner's subnets instead
			n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, false)
			if err != nil {
				return err
			}
		}
		step.Note = fmt.Sprintf("%s full: moved %d subnet(s) to the next best with room", rec.Owner, n)
		if n == 0 {
			// no recorded alternative has room: ask those who have
			pages := e.loads.Pages(s) + 1
			pick, err := e.probeRoom(ctx, d.IP, s, pages, rec.Probes, &step, d)
			if err != nil {
				return err
			}
			if pick.OK {
				nr := rec
				nr.Owner, nr.OwnerRTT, nr.Epoch, nr.DecidedBy, nr.At = pick.Crawler, pick.RTT, rec.Epoch+1, e.c.Self, e.now()
				nr.Blocks = e.carryBlocks(rec.Blocks, pick.Crawler)
				nr.Probes = append(slices.Clone(rec.Probes), pick)
				sortRanked(nr.Probes)
				pub, err := e.d.Dir.Publish(ctx, nr)
				if err != nil {
					return err
				}
				e.loads.Move(s, pub.Owner)
				d.Moved = append(d.Moved, pub)
				step.Note = fmt.Sprintf("%s full, no recorded alternative with room: probed crawlers with room, %s takes it", rec.Owner, pub.Owner)
			}
		}
	}
	for _, m := range d.Moved {
		if m.Subnet == s {
			d.Owner, d.OwnerRTT, d.Record = m.Owner, m.OwnerRTT, m
		}
	}
	d.Steps = append(d.Steps, step)
	return nil
}

// release moves subnets away from crawler c (option a) until it has room
// for pages more, lowest probe-variance first. It returns how many moved.
// With only, the candidates are restricted to those subnets. With whole,
// nothing moves unless the moves make that room: a new subnet that goes to
// its second best anyway gains nothing from them, and the subnets moved
// would be crawled from farther away. (A cached subnet's page is added
// whatever happens, so there any room freed helps.)
func (e *engine) release(ctx context.Context, c CrawlerID, incoming hierarchy.NodeID, pages int, d *Decision, whole bool, only ...hierarchy.NodeID) (int, error) {
	type victim struct {
		rec  Record
		vari float64
	}
	var vs []victim
	subs := only
	if len(subs) == 0 {
		subs = e.loads.Subnets(c)
	}
	for _, s := range subs {
		if s == incoming {
			continue
		}
		rec, ok, err := e.d.Dir.Lookup(ctx, s)
		if err != nil {
			return 0, err
		}
		if !ok || rec.Owner != c || len(rec.Probes) < 2 {
			continue // no next best known (placement or single probe)
		}
		vs = append(vs, victim{rec, probeVariance(rec.Probes)})
	}
	slices.SortFunc(vs, func(a, b victim) int {
		if c := cmp.Compare(a.vari, b.vari); c != 0 {
			return c
		}
		return cmp.Compare(a.rec.Subnet, b.rec.Subnet)
	})
	// plan the moves on the loads as they would become, then publish
	type move struct {
		rec Record
		to  ProbeResult
	}
	var plan []move
	delta := map[CrawlerID]int{} // pages the plan adds (or takes)
	room := func(x CrawlerID, n int) bool { return e.hasRoom(x, delta[x]+n) }
	for _, v := range vs {
		if room(c, pages) {
			break
		}
		vp := e.loads.Pages(v.rec.Subnet)
		if v.rec.Subnet == d.Subnet {
			vp++ // the page being delegated goes with it
		}
		alts := slices.Clone(v.rec.Probes)
		slices.SortStableFunc(alts, func(a, b ProbeResult) int { return cmp.Compare(a.RTT, b.RTT) })
		for _, a := range alts {
			if a.Crawler == c || !a.OK || !room(a.Crawler, vp) {
				continue
			}
			plan = append(plan, move{v.rec, a})
			delta[c] -= vp
			delta[a.Crawler] += vp
			break
		}
	}
	if whole && !room(c, pages) {
		return 0, nil
	}
	for moved, mv := range plan {
		nr := mv.rec
		nr.Owner, nr.OwnerRTT, nr.Epoch, nr.DecidedBy, nr.At = mv.to.Crawler, mv.to.RTT, mv.rec.Epoch+1, e.c.Self, e.now()
		nr.Blocks = e.carryBlocks(mv.rec.Blocks, mv.to.Crawler)
		pub, err := e.d.Dir.Publish(ctx, nr)
		if err != nil {
			return moved, err
		}
		e.loads.Move(mv.rec.Subnet, pub.Owner)
		d.Moved = append(d.Moved, pub)
	}
	return len(plan), nil
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
