package delegation

import (
	"context"
	"fmt"
	"net/netip"
	"strconv"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// Reviewer is implemented by the policies that re-examine a delegation when
// its owner crawls another host of the subnet (NewMicra).
//
// A subnet is delegated on its first host, but hosts of one subnet can sit
// in different places, and the first may not be typical. The owner times
// every host it crawls anyway: Review takes that timing (took, its first
// fetch's round trip) as a free answer, and probes other crawlers only when
// the learned statistics say one of them is likely nearer for this host (and
// at least one on the subnet's early hosts: MicraConfig.ReviewProbeUpTo). The
// subnet changes hands when another crawler has been nearest for more of its
// reviewed hosts than the owner (the owner counts the host that decided it,
// and every host it was confidently nearest for).
//
// With MicraConfig.BlockMargin set, a review whose nearest crawler for the
// host is not the owner, and whose answer beats the owner's timing by that
// margin, delegates the host's block (BlockOf) to it while the subnet stays
// (reason ReasonBlockDelegated), or hands the subnet over when the subnet
// lies inside one block or load balancing is on (its book counts pages by
// subnet); hosts of a delegated block are not reviewed.
//
// Review accounts no page (Delegate did). It is a no-op, returning the
// current record (reason cached), when ip's subnet is not delegated to
// owner, when ip's block is delegated, when owner is dead, when took is
// not positive, or when owner sits in the subnet (placement: a crawler owns its own subnet); for an IP outside
// the hierarchy it answers as Delegate does (the hashed owner). Like every policy call it must be
// serialised with Delegate, Join, Redelegate and Learn.
type Reviewer interface {
	Review(ctx context.Context, ip netip.Addr, owner CrawlerID, took time.Duration) (Decision, error)
}

// reviewChooser is implemented by choosers that can review: they return the
// answers for ip (given ones included), best first, and their verdict
// (zero: the owner stays).
type reviewChooser interface {
	review(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, rec Record, took time.Duration, d *Decision) (ranked []ProbeResult, v verdict, err error)
}

// verdict is what a review concludes beyond "the owner stays".
type verdict struct {
	handTo  CrawlerID // the subnet goes to this crawler
	blockTo CrawlerID // the host's block goes to this crawler (the subnet stays)
}

// tallyCarrier is implemented by review choosers whose tally survives a
// record that changes only the subnet's blocks (its epoch moves from old
// to new).
type tallyCarrier interface {
	carryTally(s hierarchy.NodeID, old, new uint64)
}

// Review implements Reviewer.
func (le learningEngine) Review(ctx context.Context, ip netip.Addr, owner CrawlerID, took time.Duration) (Decision, error) {
	e := le.engine
	d := Decision{IP: ip, Subnet: hierarchy.None, Owner: owner}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	s := e.d.Tree.SmallestNonUnary(ip)
	if s == hierarchy.None || s == hierarchy.Root {
		return e.hashed(ip, ReasonOutsideHierarchy, d) // hashed, not delegated: nothing to review
	}
	d.Subnet = s
	rec, ok, err := e.d.Dir.Lookup(ctx, s)
	if err != nil {
		return d, fmt.Errorf("delegation: lookup subnet %d for %v: %w", s, ip, err)
	}
	if ok {
		d.Owner, d.OwnerRTT, d.Record = rec.Owner, rec.OwnerRTT, rec
	}
	b, inBlock := e.liveBlock(rec, ip)
	if inBlock {
		d.Owner, d.OwnerRTT, d.Record = b.Owner, b.OwnerRTT, rec
	}
	rc, can := e.ch.(reviewChooser)
	if !ok || !can || inBlock || rec.Owner != owner || !e.live(owner) || took <= 0 || e.d.Tree.Contains(s, e.members()[owner].Addr) {
		// (a crawler owns the subnet it sits in: placement, not a
		// decision a review could improve)
		d.Cached, d.Reason = ok, ReasonCached
		return d, nil
	}
	d.Steps = append(make([]Step, 0, 2), Step{Kind: StepLookup, Node: s, Note: "review: owner " + string(owner) + " timed the host at " + took.Round(time.Microsecond).String()})
	ranked, v, err := rc.review(ctx, e, ip, s, rec, took, &d)
	if err != nil {
		return d, err
	}
	handTo := v.handTo
	if v.blockTo != "" && handTo == "" {
		switch {
		case !e.splits(s):
			// the block would be the whole subnet: the clear margin
			// hands the subnet over instead
			handTo = v.blockTo
		case e.c.Balance != BalanceOff:
			// balancing: blocks are not delegated (the load book counts
			// pages by subnet), so the clear margin hands the subnet over
			// — unless the record shows that crawler slower than the
			// owner for the host that decided the subnet: its hosts sit
			// apart, and handing it over would only start a tug of war
			if !slowerForDecider(rec, v.blockTo) {
				handTo = v.blockTo
			}
		case e.live(v.blockTo) && len(e.carryBlocks(rec.Blocks, rec.Owner)) < MaxBlocks:
			return e.delegateBlock(ctx, ip, s, rec, ranked, v.blockTo, d)
		}
	}
	if handTo == "" || (e.c.Balance != BalanceOff && !e.hasRoom(handTo, e.loads.Pages(s))) {
		d.Cached, d.Reason = true, ReasonKept
		if d.Probes > 0 {
			// answers no record carries: learn them here
			if l, ok := e.ch.(learner); ok {
				l.learn(e, s, Record{Subnet: s, Snapshot: e.d.Tree.ID(), Owner: rec.Owner, Probes: okOnly(ranked)})
			}
		}
		return d, nil
	}
	win, _ := answerOf(ranked, handTo)
	nr := Record{
		Subnet: s, Snapshot: e.d.Tree.ID(), Owner: win.Crawler, OwnerRTT: measured(win),
		Probes: okOnly(ranked), Epoch: NextEpoch(rec.Epoch, e.now()), DecidedBy: e.c.Self, At: e.now(),
		Blocks: e.carryBlocks(rec.Blocks, win.Crawler),
	}
	pub, err := e.publish(ctx, nr) // (above a dead owner's record that wins)
	if err != nil {
		return d, fmt.Errorf("delegation: publish subnet %d: %w", s, err)
	}
	e.loads.Move(s, pub.Owner)
	e.learnOnce(s, pub)
	d.Record, d.Owner, d.OwnerRTT, d.Reason = pub, pub.Owner, pub.OwnerRTT, ReasonHandedOver
	return d, nil
}

// delegateBlock publishes rec with ip's block given to to (one of ranked).
// The record carries the review's answers, as a hand-over's does: they are
// why it changed, and learners learn them once (the kept reviews' answers
// are learned locally instead).
func (e *engine) delegateBlock(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, rec Record, ranked []ProbeResult, to CrawlerID, d Decision) (Decision, error) {
	win, _ := answerOf(ranked, to)
	nr := rec
	nr.Blocks = append(e.carryBlocks(rec.Blocks, rec.Owner), BlockDelegation{Host: ip, Owner: to, OwnerRTT: win.RTT})
	nr.Probes, nr.DecidedBy, nr.At = okOnly(ranked), e.c.Self, e.now()
	nr.Epoch = NextEpoch(rec.Epoch, nr.At)
	pub, err := e.publish(ctx, nr) // (above a dead owner's record that wins)
	if err != nil {
		return d, fmt.Errorf("delegation: publish subnet %d: %w", s, err)
	}
	if tc, ok := e.ch.(tallyCarrier); ok && pub.Epoch == nr.Epoch && pub.Owner == rec.Owner {
		tc.carryTally(s, rec.Epoch, pub.Epoch)
	}
	e.learnOnce(s, pub)
	d.Record, d.Owner, d.OwnerRTT, d.Reason = pub, pub.Owner, pub.OwnerRTT, ReasonBlockDelegated
	if b, in := e.liveBlock(pub, ip); in {
		d.Owner, d.OwnerRTT = b.Owner, b.OwnerRTT
	}
	return d, nil
}

// slowerForDecider reports whether rec's answers (those of the host that
// decided it, or of the review that handed it over) show c slower than the
// owner.
func slowerForDecider(rec Record, c CrawlerID) bool {
	a, ok := answerOf(rec.Probes, c)
	if !ok || !a.OK {
		return false
	}
	own := rec.OwnerRTT
	if o, ok := answerOf(rec.Probes, rec.Owner); ok && o.OK {
		own = o.RTT
	}
	return own > 0 && a.RTT > own
}

// answerOf returns c's answer among rs.
func answerOf(rs []ProbeResult, c CrawlerID) (ProbeResult, bool) {
	for _, r := range rs {
		if r.Crawler == c {
			return r, true
		}
	}
	return ProbeResult{}, false
}

func okOnly(rs []ProbeResult) []ProbeResult {
	out := make([]ProbeResult, 0, len(rs))
	for _, r := range rs {
		if r.OK {
			out = append(out, r)
		}
	}
	return out
}

// subnetTally counts, per crawler, the reviewed hosts of one subnet it was
// nearest for, under one record epoch: every new record (a hand-over, a
// re-delegation after the owner died, a calibration event, load balancing)
// starts a new tally, in which its owner has the host that decided it.
type subnetTally struct {
	epoch uint64
	used  uint64 // micraChooser.tick of its last review (MaxContexts)
	hosts uint32 // hosts of the subnet under this record, the deciding one included
	// against: reviews whose best answer beat the owner's timing by
	// MicraConfig.ReviewPool
	against uint32
	counts  []struct{ ci, n uint32 }
}

func (t *subnetTally) add(ci uint32) {
	for i := range t.counts {
		if t.counts[i].ci == ci {
			t.counts[i].n++
			return
		}
	}
	t.counts = append(t.counts, struct{ ci, n uint32 }{ci, 1})
}

func (t *subnetTally) count(ci uint32) uint32 {
	for _, e := range t.counts {
		if e.ci == ci {
			return e.n
		}
	}
	return 0
}

// review runs the decision procedure for ip with the owner's timing as a
// free answer and MicraConfig.ReviewMiss as its risk, and tallies the
// nearest crawler for this host.
func (m *micraChooser) review(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, rec Record, took time.Duration, d *Decision) ([]ProbeResult, verdict, error) {
	given := [1]ProbeResult{{Crawler: rec.Owner, RTT: took, OK: true}}
	if m.tally == nil {
		m.tally = make(map[hierarchy.NodeID]subnetTally)
	}
	t, seen := m.tally[s]
	owner := m.crawler.id(rec.Owner)
	if !seen || t.epoch != rec.Epoch {
		t = subnetTally{epoch: rec.Epoch, hosts: 1}
		t.add(owner) // the host that decided the subnet
	}
	ranked := given[:]
	t.hosts++
	if n := int(t.hosts); m.cfg.ReviewEvery > 0 && n > m.cfg.ReviewEvery && n&(n-1) != 0 {
		// the tally is settled: past ReviewEvery hosts only the 2^k-th
		// host votes (the owner keeps the subnet, nothing is counted)
		t.used = m.tick
		m.tally[s] = t
		d.Steps = append(d.Steps, Step{Kind: StepPredict, Node: s, Note: "review skipped: host " + strconv.Itoa(n) + " of the subnet, only powers of two vote past " + strconv.Itoa(m.cfg.ReviewEvery)})
		return ranked, verdict{}, nil
	}
	if m.cfg.ReviewMiss > 0 {
		minProbes := 0
		if n := int(t.hosts); n <= m.cfg.ReviewProbeUpTo && n&(n-1) == 0 {
			// (n ≥ 2: the deciding host is the first)
			minProbes = 1
			d.Steps = append(d.Steps, Step{Kind: StepPredict, Node: s, Note: "review of host " + strconv.Itoa(n) + " of the subnet: at least one probe (up to host " + strconv.Itoa(m.cfg.ReviewProbeUpTo) + ")"})
		}
		var err error
		if ranked, err = m.rankWith(ctx, e, ip, s, d, given[:], m.cfg.ReviewMiss, minProbes); err != nil {
			return nil, verdict{}, err
		}
		if err := ctx.Err(); err != nil {
			// probes cut short answer "no answer": the owner did not win
			return nil, verdict{}, err
		}
	}
	win := owner
	if len(ranked) > 0 && ranked[0].OK {
		win = m.crawler.id(ranked[0].Crawler)
	}
	t.add(win)
	pooled := false
	if win != owner && m.cfg.ReviewPool > 0 && m.cfg.ReviewPool < 1 && float64(ranked[0].RTT) <= (1-m.cfg.ReviewPool)*float64(took) {
		t.against++
		pooled = t.against > t.count(owner)
	}
	t.used = m.tick
	m.tally[s] = t
	switch {
	case win == owner:
	case t.count(win) > t.count(owner) || pooled:
		// the record the engine now publishes starts a new tally, in
		// which its owner has this host
		return ranked, verdict{handTo: ranked[0].Crawler}, nil
	case m.cfg.BlockMargin > 0 && float64(ranked[0].RTT) <= (1-m.cfg.BlockMargin)*float64(took):
		// one jittered sample each: only a clear margin over the owner's
		// timing moves the block (a block given away on noise keeps
		// every later host of it from its nearest crawler)
		return ranked, verdict{blockTo: ranked[0].Crawler}, nil
	}
	return ranked, verdict{}, nil
}

// carryTally implements tallyCarrier.
func (m *micraChooser) carryTally(s hierarchy.NodeID, old, new uint64) {
	if t, ok := m.tally[s]; ok && t.epoch == old {
		t.epoch = new
		m.tally[s] = t
	}
}
