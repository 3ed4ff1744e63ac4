package delegation

import (
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// This file holds the rules that judge members who lie within their rights
// (a probe answer no network allows, a subnet taken and not crawled). The
// overlay gathers the measurements and the sink's answers; the verdicts are
// made here, on plain values, so they are the same everywhere and testable
// on a fake clock.

// MaxDetour and RTTSlack make the triangle bound safe on the Internet:
// round trips obey the triangle inequality only loosely, since the direct
// path between two places may detour where a path through a third does
// not (triangle inequality violations), and a sample carries jitter. A
// claim is impossible only when even a direct path MaxDetour times longer
// than the path through the claimant, plus RTTSlack, cannot explain the
// checker's own RTT to the target. On the simulator's world (path stretch
// drawn per pair, exponential jitter; 20 crawlers, 300 hosts) a factor of
// 4 judged 0.009 % of honest answers impossible (2: 1.0 %) and still
// caught a crawler answering 1 ms in 6.6 % of the triples it was asked
// about (testnet/bench's BenchmarkTriangleBoundOnTheWorld).
const (
	MaxDetour = 4
	RTTSlack  = 2 * time.Millisecond
)

// ImpossibleRTT reports whether a claimant's RTT to a target is impossible
// given the checker's own RTT to that target and to the claimant: a path
// from the checker through the claimant to the target takes toClaimant +
// claimed, and the checker's own round trip toTarget cannot exceed
// MaxDetour times that plus RTTSlack. A toClaimant that overstates the
// real round trip between checker and claimant (a request's whole round
// trip, say) only weakens the bound, never accuses an honest claim. A zero
// or negative measurement proves nothing.
func ImpossibleRTT(claimed, toTarget, toClaimant time.Duration) bool {
	if toTarget <= 0 || toClaimant < 0 || claimed < 0 {
		return false
	}
	return MaxDetour*(claimed+toClaimant)+RTTSlack < toTarget
}

// ImpossibleMargin is how far below toTarget the bound of a claim of 0 ms
// lies: positive only where a checker at toClaimant from a claimant can
// see any of its claims about that target to be impossible.
func ImpossibleMargin(toTarget, toClaimant time.Duration) time.Duration {
	return toTarget - MaxDetour*toClaimant - RTTSlack
}

// EvidenceKind is what a piece of evidence against a member shows.
type EvidenceKind uint8

const (
	// FalseRTT: a probe answer below the triangle bound of the witness's
	// own measurements (ImpossibleRTT).
	FalseRTT EvidenceKind = iota + 1
	// Stalled: the member acknowledged hand-offs for a subnet it owned and
	// the sink, the trusted record of crawl progress, holds no page of that
	// subnet fetched since, past the grace period.
	Stalled
)

func (k EvidenceKind) String() string {
	switch k {
	case FalseRTT:
		return "false_rtt"
	case Stalled:
		return "stalled"
	}
	return "unknown"
}

// Evidence is one observation against a member, made by Witness.
type Evidence struct {
	Kind    EvidenceKind
	Accused CrawlerID
	Witness CrawlerID
	At      time.Time
	// FalseRTT: the target, the claim and the witness's measurements that
	// make it impossible.
	Target     netip.Addr
	Claimed    time.Duration
	ToTarget   time.Duration
	ToClaimant time.Duration
	// Stalled: the subnet and when its first hand-off was acknowledged.
	Subnet  hierarchy.NodeID
	Handoff time.Time
}

// Valid reports whether e carries what its kind needs: a false RTT must
// carry measurements that make its claim impossible (an accusation without
// them is refused, whoever makes it).
func (e Evidence) Valid() bool {
	if e.Accused == "" || e.Witness == "" || e.Accused == e.Witness || e.At.IsZero() {
		return false
	}
	switch e.Kind {
	case FalseRTT:
		return e.Target.IsValid() && ImpossibleRTT(e.Claimed, e.ToTarget, e.ToClaimant)
	case Stalled:
		return !e.Handoff.IsZero() && e.Handoff.Before(e.At)
	}
	return false
}

// SuspectConfig says how much evidence makes a member a suspect.
type SuspectConfig struct {
	// Window: evidence older than this is forgotten (default 30 min), so
	// a member's jittered past does not add up for ever.
	Window time.Duration
	// Self is the member keeping the book: its own evidence of false RTTs
	// on Targets targets makes a suspect alone.
	Self CrawlerID
	// Witnesses: distinct witnesses of false RTTs needed when Self's own
	// evidence does not suffice (default 2): others' evidence carries the
	// measurements that make each claim impossible, but a witness could
	// lie about its own measurements, so one accuser is never enough.
	Witnesses int
	// Targets: distinct targets with an impossible claim needed (default
	// 2): one impossible answer may be a witness's bad sample.
	Targets int
	// Stalls: subnets found stalled needed (default 1: the sink, not the
	// witness, is what says nothing was crawled).
	Stalls int
	// PerMember bounds the evidence kept per accused member (default 16).
	PerMember int
}

func (c SuspectConfig) withDefaults() SuspectConfig {
	if c.Window <= 0 {
		c.Window = 30 * time.Minute
	}
	if c.Witnesses <= 0 {
		c.Witnesses = 2
	}
	if c.Targets <= 0 {
		c.Targets = 2
	}
	if c.Stalls <= 0 {
		c.Stalls = 1
	}
	if c.PerMember <= 0 {
		c.PerMember = 16
	}
	return c
}

// Suspicions is a book of evidence against members and the rule that makes
// a member a suspect: a suspect is given no subnet and its records are
// re-decided. It is pure state (the caller supplies the time) and not safe
// for concurrent use.
type Suspicions struct {
	cfg SuspectConfig
	ev  map[CrawlerID][]Evidence
}

// NewSuspicions returns an empty book under cfg (zero fields: defaults).
func NewSuspicions(cfg SuspectConfig) *Suspicions {
	return &Suspicions{cfg: cfg.withDefaults(), ev: map[CrawlerID][]Evidence{}}
}

// Add records e and reports whether it was taken: invalid evidence, and a
// repeat of a witness's evidence about the same target or subnet, are not.
func (s *Suspicions) Add(e Evidence) bool {
	if !e.Valid() {
		return false
	}
	es := s.ev[e.Accused]
	for _, o := range es {
		if o.Kind == e.Kind && o.Witness == e.Witness && o.Target == e.Target && o.Subnet == e.Subnet && e.At.Sub(o.At) < s.cfg.Window {
			return false
		}
	}
	es = append(es, e)
	if len(es) > s.cfg.PerMember {
		es = es[len(es)-s.cfg.PerMember:]
	}
	s.ev[e.Accused] = es
	return true
}

// Suspect reports whether the evidence against c within the window at now
// makes it a suspect.
func (s *Suspicions) Suspect(c CrawlerID, now time.Time) bool {
	var witnesses []CrawlerID
	var targets, own []netip.Addr
	var stalls []hierarchy.NodeID
	for _, e := range s.ev[c] {
		if now.Sub(e.At) > s.cfg.Window || e.At.After(now) {
			continue
		}
		switch e.Kind {
		case FalseRTT:
			if !slices.Contains(witnesses, e.Witness) {
				witnesses = append(witnesses, e.Witness)
			}
			if !slices.Contains(targets, e.Target) {
				targets = append(targets, e.Target)
			}
			if e.Witness == s.cfg.Self && s.cfg.Self != "" && !slices.Contains(own, e.Target) {
				own = append(own, e.Target)
			}
		case Stalled:
			if !slices.Contains(stalls, e.Subnet) {
				stalls = append(stalls, e.Subnet)
			}
		}
	}
	return len(own) >= s.cfg.Targets || (len(witnesses) >= s.cfg.Witnesses && len(targets) >= s.cfg.Targets) ||
		len(stalls) >= s.cfg.Stalls
}

// Suspects lists the members that are suspects at now, sorted, and
// forgets evidence past the window.
func (s *Suspicions) Suspects(now time.Time) []CrawlerID {
	var out []CrawlerID
	for c, es := range s.ev {
		es = slices.DeleteFunc(es, func(e Evidence) bool { return now.Sub(e.At) > s.cfg.Window })
		if len(es) == 0 {
			delete(s.ev, c)
			continue
		}
		s.ev[c] = es
		if s.Suspect(c, now) {
			out = append(out, c)
		}
	}
	slices.Sort(out)
	return out
}

// Count is the evidence held against the members match selects.
func (s *Suspicions) Count(match func(CrawlerID) bool) int {
	n := 0
	for c, es := range s.ev {
		if match(c) {
			n += len(es)
		}
	}
	return n
}

// Evidence returns the evidence held against c (a copy).
func (s *Suspicions) Evidence(c CrawlerID) []Evidence { return slices.Clone(s.ev[c]) }

// StallConfig bounds the crawl-progress audit of hand-offs.
type StallConfig struct {
	// Grace: how long after a subnet's first acknowledged hand-off its
	// owner may show no page at the sink (default 30 min: the owner's
	// frontier, politeness and its outbox's delivery all delay a page).
	Grace time.Duration
}

// HandoffAudit is one subnet whose owner acknowledged a hand-off, waiting
// for the sink to show progress.
type HandoffAudit struct {
	Subnet hierarchy.NodeID
	Owner  CrawlerID
	Epoch  uint64    // the record's epoch the hand-off was routed under
	Since  time.Time // its first acknowledged hand-off
}

// Due reports whether a is old enough to ask the sink about at now.
func (c StallConfig) Due(a HandoffAudit, now time.Time) bool {
	g := c.Grace
	if g <= 0 {
		g = 30 * time.Minute
	}
	return now.Sub(a.Since) >= g
}

// Progressed reports whether a page fetched at lastFetch shows progress on
// a: fetched after the hand-off (less a second of clock granularity).
func (a HandoffAudit) Progressed(lastFetch time.Time) bool {
	return !lastFetch.IsZero() && !lastFetch.Before(a.Since.Add(-time.Second))
}
