package overlay

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// The audit of members that lie within their rights (docs/SECURITY.md,
// "Members that lie"). A member's probe answers and its crawl progress are
// checked against what this peer can measure or ask the sink; the evidence
// is judged by delegation's rules (delegation/plausible.go), and a suspect
// is, for this peer, a crawler that is not live: it is given no subnet, its
// records are re-decided as a dead owner's, and URLs are not handed to it.
// Suspicion is each peer's own: its own evidence suffices, others' only
// from two witnesses, each accusation carrying the measurements that
// prove it, so one liar cannot make others distrust an honest member by
// saying so.

// AuditConfig tunes the audit (zero values: defaults).
type AuditConfig struct {
	// Off disables it.
	Off bool
	// Suspect: how much evidence makes a suspect, and for how long.
	Suspect delegation.SuspectConfig
	// Stall: the grace period of an acknowledged hand-off.
	Stall delegation.StallConfig
	// CheckEvery: how often hand-offs past their grace are checked at the
	// sink and the suspects recomputed (default 1 min).
	CheckEvery time.Duration
	// SinkQueries bounds the sink queries of one check (default 4): the
	// audit's cost at the sink is at most SinkQueries per CheckEvery per
	// peer, whatever the number of hand-offs.
	SinkQueries int
	// MaxAudits bounds the subnets waiting for their check (default 256);
	// hand-offs past it are not audited (a sample).
	MaxAudits int
}

func (c AuditConfig) withDefaults() AuditConfig {
	if c.CheckEvery <= 0 {
		c.CheckEvery = time.Minute
	}
	if c.SinkQueries <= 0 {
		c.SinkQueries = 4
	}
	if c.MaxAudits <= 0 {
		c.MaxAudits = 256
	}
	if c.Suspect.Stalls <= 0 {
		// two subnets, so that one whose hosts never answer (a dead site
		// leaves no page at the sink) does not make an honest owner a suspect
		c.Suspect.Stalls = 2
	}
	return c
}

// PeerRTTs is implemented by a Measurer that models the world (a testnet's
// emulated one): the round trip, in that world, between this peer and the
// peer listening at remote. The audit of probe answers needs it, because a
// modelled probe answer and a real loopback round trip do not obey one
// triangle inequality. Without it the audit uses the probe request's own
// round trip with NetMeasurer (the real wire) and audits no probe answer
// with any other Measurer.
type PeerRTTs interface {
	PeerRTT(remote netip.Addr) (time.Duration, bool)
}

// Suspect is a member this peer holds to be lying, and why.
type Suspect struct {
	Crawler  delegation.CrawlerID
	Since    time.Time
	Evidence []delegation.Evidence
}

type selfRTT struct {
	rtt time.Duration
	at  time.Time
}

const (
	selfRTTAge = 10 * time.Minute
	maxSelfRTT = 4096
)

type auditor struct {
	p       *Peer
	cfg     AuditConfig
	now     func() time.Time
	metrics auditMetrics

	mu       sync.Mutex
	book     *delegation.Suspicions
	suspects map[delegation.CrawlerID]time.Time // → since
	self     map[netip.Addr]selfRTT             // this peer's own RTT per target, reused by a decision's rounds
	pending  map[hierarchy.NodeID]delegation.HandoffAudit
	running  bool
	gossip   *auditGossip // nil until the topic is joined

	stats      AuditStats                    // under mu
	distrusted map[delegation.CrawlerID]bool // read by Members.IsLive: swapped whole, never written in place
	dmu        sync.RWMutex
}

type auditMetrics struct {
	evidence   *prometheus.CounterVec // by kind
	refused    prometheus.Counter
	sinkChecks prometheus.Counter
	suspects   prometheus.Gauge
}

func newAuditor(p *Peer, cfg AuditConfig, reg prometheus.Registerer) (*auditor, error) {
	cfg = cfg.withDefaults()
	cfg.Suspect.Self = p.selfID
	a := &auditor{
		p: p, cfg: cfg, now: time.Now,
		book:     delegation.NewSuspicions(cfg.Suspect),
		suspects: map[delegation.CrawlerID]time.Time{},
		self:     map[netip.Addr]selfRTT{},
		pending:  map[hierarchy.NodeID]delegation.HandoffAudit{},
		metrics: auditMetrics{
			evidence: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "audit_evidence_total",
				Help: "Evidence this peer found against members, by kind: false_rtt (a probe answer below the triangle bound of its own measurements), stalled (a subnet with acknowledged hand-offs and no page at the sink past the grace period)."}, []string{"kind"}),
			refused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "audit_probe_answers_refused_total",
				Help: "Probe answers left out of decisions as impossible."}),
			sinkChecks: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "audit_sink_queries_total",
				Help: "Queries to the sink for a subnet's crawl progress."}),
			suspects: prometheus.NewGauge(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "overlay", Name: "audit_suspects",
				Help: "Members this peer holds to be lying: given no subnet, their records re-decided."}),
		},
	}
	if reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"peer": p.h.ID().String()}, reg)
		for _, c := range []prometheus.Collector{a.metrics.evidence, a.metrics.refused, a.metrics.sinkChecks, a.metrics.suspects} {
			if err := reg.Register(c); err != nil {
				return nil, err
			}
		}
	}
	return a, nil
}

// distrusts reports whether c is a suspect (Members.IsLive's hook).
func (a *auditor) distrusts(c delegation.CrawlerID) bool {
	a.dmu.RLock()
	defer a.dmu.RUnlock()
	return a.distrusted[c]
}

// AuditStats counts what this peer's audit found and cost.
type AuditStats struct {
	FalseRTT    int // evidence taken: impossible probe answers (distinct witness and target)
	Stalled     int // evidence taken: subnets stalled at the sink
	Refused     int // probe answers left out of decisions as impossible
	SinkQueries int // crawl-progress queries to the sink
}

// AuditStats returns what the audit found and cost so far.
func (p *Peer) AuditStats() AuditStats {
	if p.audit == nil {
		return AuditStats{}
	}
	p.audit.mu.Lock()
	defer p.audit.mu.Unlock()
	return p.audit.stats
}

// AuditEvidenceAgainst counts the evidence this peer holds (within the
// window) against the members match selects: its own and other
// witnesses' it took.
func (p *Peer) AuditEvidenceAgainst(match func(delegation.CrawlerID) bool) int {
	if p.audit == nil {
		return 0
	}
	p.audit.mu.Lock()
	defer p.audit.mu.Unlock()
	return p.audit.book.Count(match)
}

// Suspects lists the members this peer holds to be lying, with the
// evidence against each.
func (p *Peer) Suspects() []Suspect {
	a := p.audit
	if a == nil {
		return nil
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	out := make([]Suspect, 0, len(a.suspects))
	for c, since := range a.suspects {
		out = append(out, Suspect{Crawler: c, Since: since, Evidence: a.book.Evidence(c)})
	}
	slices.SortFunc(out, func(x, y Suspect) int {
		switch {
		case x.Crawler < y.Crawler:
			return -1
		case x.Crawler > y.Crawler:
			return 1
		}
		return 0
	})
	return out
}

// add records e and recomputes the suspects.
func (a *auditor) add(e delegation.Evidence) {
	a.mu.Lock()
	took := a.book.Add(e)
	if took {
		switch e.Kind {
		case delegation.FalseRTT:
			a.stats.FalseRTT++
		case delegation.Stalled:
			a.stats.Stalled++
		}
	}
	a.mu.Unlock()
	if !took {
		return
	}
	a.accuse(e)
	a.ensureRunning() // suspicion ends with its evidence
	a.metrics.evidence.WithLabelValues(e.Kind.String()).Inc()
	a.p.log.Warn("overlay: evidence against a member", "member", e.Accused, "kind", e.Kind.String(),
		"target", e.Target, "claimed", e.Claimed, "own_rtt", e.ToTarget, "rtt_to_member", e.ToClaimant, "subnet", e.Subnet)
	a.refresh()
}

// refresh recomputes the suspects at now and, when they changed, makes
// the membership re-read them: records of a new suspect are re-decided
// when next looked up, a cleared one may be given subnets again.
func (a *auditor) refresh() {
	now := a.now()
	a.mu.Lock()
	cur := a.book.Suspects(now)
	changed := len(cur) != len(a.suspects)
	next := make(map[delegation.CrawlerID]time.Time, len(cur))
	for _, c := range cur {
		since, ok := a.suspects[c]
		if !ok {
			since, changed = now, true
			a.p.log.Warn("overlay: member is a suspect: no subnets for it, its records re-decided", "member", c)
		}
		next[c] = since
	}
	a.suspects = next
	a.mu.Unlock()
	if !changed {
		return
	}
	d := make(map[delegation.CrawlerID]bool, len(next))
	for c := range next {
		d[c] = true
	}
	a.dmu.Lock()
	a.distrusted = d
	a.dmu.Unlock()
	a.metrics.suspects.Set(float64(len(d)))
	a.p.members.distrustChanged()
	a.p.dir.invalidateProviders()
}

// peerRTT is this peer's round trip to crawler c for the triangle bound:
// the world's when the measurer models it, else the probe request's own
// round trip on the real wire (took, which also holds c's measurement:
// an overstatement, which only weakens the bound). ok is false when
// neither applies.
func (a *auditor) peerRTT(c delegation.CrawlerID, took time.Duration) (time.Duration, bool) {
	switch m := a.p.measurer.(type) {
	case PeerRTTs:
		id, err := peer.Decode(string(c))
		if err != nil {
			return 0, false
		}
		for _, ip := range a.p.peerAddrs(id) {
			if rtt, ok := m.PeerRTT(ip); ok {
				return rtt, true
			}
		}
		return 0, false
	case NetMeasurer, *NetMeasurer:
		return took, took > 0
	}
	return 0, false
}

// peerAddrs are the IP addresses id listens at (its signed heartbeat's)
// and those of this peer's connections to it.
func (p *Peer) peerAddrs(id peer.ID) []netip.Addr {
	var out []netip.Addr
	add := func(ip net.IP) {
		if a, ok := netip.AddrFromSlice(ip); ok && !slices.Contains(out, a.Unmap()) {
			out = append(out, a.Unmap())
		}
	}
	for _, m := range p.members.Addrs(id) {
		if ip, err := manet.ToIP(m); err == nil {
			add(ip)
		}
	}
	for _, c := range p.h.Network().ConnsToPeer(id) {
		if ip, err := manet.ToIP(c.RemoteMultiaddr()); err == nil {
			add(ip)
		}
	}
	return out
}

// ownRTT is this peer's RTT to target: from res when it probed itself,
// else measured (once per target per selfRTTAge).
func (a *auditor) ownRTT(ctx context.Context, target netip.Addr, res []delegation.ProbeResult) (time.Duration, bool) {
	now := a.now()
	for _, r := range res {
		if r.Crawler == a.p.selfID && r.OK {
			a.keepOwn(target, r.RTT, now)
			return r.RTT, true
		}
	}
	a.mu.Lock()
	s, ok := a.self[target]
	a.mu.Unlock()
	if ok && now.Sub(s.at) < selfRTTAge {
		return s.rtt, true
	}
	ctx, cancel := context.WithTimeout(ctx, a.p.cfg.RequestTimeout)
	defer cancel()
	rtts, _, err := a.p.measureLocal(ctx, ProbeTarget{Addr: target, Method: a.p.cfg.ProbeMethod, Port: a.p.cfg.ProbePort}, 1)
	if err != nil {
		return 0, false
	}
	a.keepOwn(target, rtts[0], now)
	return rtts[0], true
}

// keepOwn remembers this peer's RTT to target.
func (a *auditor) keepOwn(target netip.Addr, rtt time.Duration, now time.Time) {
	a.mu.Lock()
	if len(a.self) >= maxSelfRTT {
		clear(a.self)
	}
	a.self[target] = selfRTT{rtt, now}
	a.mu.Unlock()
}

// challengeTarget is the target this peer measured itself whose RTT most
// exceeds its RTT to c: where a false claim of c is easiest to see from
// here (the accusation's target may not be: the bound catches a claim
// only about targets much further from the checker than the claimant is).
func (a *auditor) challengeTarget(toC time.Duration, not netip.Addr) (netip.Addr, bool) {
	now := a.now()
	a.mu.Lock()
	defer a.mu.Unlock()
	var best netip.Addr
	var margin time.Duration
	for t, s := range a.self {
		if t == not || now.Sub(s.at) >= selfRTTAge {
			continue
		}
		if m := delegation.ImpossibleMargin(s.rtt, toC); m > margin {
			best, margin = t, m
		}
	}
	return best, best.IsValid()
}

// probed audits a probe round's answers (Prober.Probe's hook): an answer
// below the triangle bound of this peer's own RTTs to the target and to
// the answering crawler is impossible; it is left out of the decision
// (OK = false) and recorded as evidence. took is each request's round trip.
func (a *auditor) probed(ctx context.Context, target netip.Addr, res []delegation.ProbeResult, took []time.Duration) {
	if a == nil || a.cfg.Off {
		return
	}
	var own time.Duration
	measured := false
	for i, r := range res {
		if !r.OK || r.Crawler == a.p.selfID {
			continue
		}
		toC, ok := a.peerRTT(r.Crawler, took[i])
		if !ok {
			continue
		}
		if !measured {
			var ok bool
			if own, ok = a.ownRTT(ctx, target, res); !ok {
				return
			}
			measured = true
		}
		if !delegation.ImpossibleRTT(r.RTT, own, toC) {
			continue
		}
		res[i].OK = false
		a.metrics.refused.Inc()
		a.mu.Lock()
		a.stats.Refused++
		a.mu.Unlock()
		a.add(delegation.Evidence{Kind: delegation.FalseRTT, Accused: r.Crawler, Witness: a.p.selfID, At: a.now(),
			Target: target, Claimed: r.RTT, ToTarget: own, ToClaimant: toC})
	}
}

// delivered notes the batches owner acknowledged (deliver's hook): the
// first acknowledged hand-off of a subnet to its owner starts its audit,
// checked at the sink once past the grace period.
func (a *auditor) delivered(owner delegation.CrawlerID, batches []*pb.HandoffBatch, acked []bool) {
	if a == nil || a.cfg.Off || a.p.archive == nil || owner == a.p.selfID {
		return
	}
	now := a.now()
	a.mu.Lock()
	for i, b := range batches {
		if !acked[i] {
			continue
		}
		s := hierarchy.NodeID(b.Subnet)
		if _, ok := a.pending[s]; ok || len(a.pending) >= a.cfg.MaxAudits {
			continue
		}
		rec, ok := a.p.dir.Cached(s)
		if !ok || rec.Owner != owner {
			continue // a block's owner: not audited
		}
		a.pending[s] = delegation.HandoffAudit{Subnet: s, Owner: owner, Epoch: rec.Epoch, Since: now}
	}
	waiting := len(a.pending) > 0
	a.mu.Unlock()
	if waiting {
		a.ensureRunning()
	}
}

// ensureRunning starts run once: when there is a hand-off to check or
// evidence that must expire.
func (a *auditor) ensureRunning() {
	a.mu.Lock()
	if a.running {
		a.mu.Unlock()
		return
	}
	a.running = true
	a.mu.Unlock()
	if !a.p.goBackground(a.run) {
		a.mu.Lock()
		a.running = false
		a.mu.Unlock()
	}
}

// run checks due hand-offs and recomputes the suspects (evidence expires)
// every CheckEvery, until the peer closes.
func (a *auditor) run() {
	t := time.NewTicker(a.cfg.CheckEvery)
	defer t.Stop()
	for {
		select {
		case <-a.p.ctx.Done():
			return
		case <-t.C:
			a.checkStalls(a.p.ctx)
			a.refresh()
		}
	}
}

var errProgress = errors.New("progress found")

// checkStalls asks the sink about at most SinkQueries subnets past their
// grace period: a page of the subnet fetched since its first acknowledged
// hand-off is progress; none is evidence that its owner stalls it. A
// subnet that changed hands since is no longer its owner's to answer for.
func (a *auditor) checkStalls(ctx context.Context) {
	now := a.now()
	var due []delegation.HandoffAudit
	a.mu.Lock()
	for _, h := range a.pending {
		if a.cfg.Stall.Due(h, now) {
			due = append(due, h)
		}
	}
	a.mu.Unlock()
	slices.SortFunc(due, func(x, y delegation.HandoffAudit) int { return x.Since.Compare(y.Since) })
	if len(due) > a.cfg.SinkQueries {
		due = due[:a.cfg.SinkQueries]
	}
	for _, h := range due {
		if ctx.Err() != nil {
			return
		}
		rec, ok := a.p.dir.Cached(h.Subnet)
		if !ok || rec.Owner != h.Owner || rec.Epoch != h.Epoch || !a.p.members.IsLive(h.Owner) {
			a.forget(h.Subnet)
			continue
		}
		first, last, ok := a.p.rangeOf(h.Subnet, netip.Prefix{})
		if !ok {
			a.forget(h.Subnet)
			continue
		}
		a.metrics.sinkChecks.Inc()
		a.mu.Lock()
		a.stats.SinkQueries++
		a.mu.Unlock()
		qctx, cancel := context.WithTimeout(ctx, recoverBudget*a.p.cfg.RequestTimeout)
		err := a.p.archive.Pages(qctx, first, last, func(pages []PageState) error {
			for _, ps := range pages {
				// the range holds the subnet's smaller subnets too
				if (!ps.Addr.IsValid() || a.p.tree.SmallestNonUnary(ps.Addr) == h.Subnet) && h.Progressed(ps.LastFetch) {
					return errProgress
				}
			}
			return nil
		})
		cancel()
		switch {
		case errors.Is(err, errProgress):
			a.forget(h.Subnet)
		case err != nil:
			a.p.log.Debug("overlay: audit: sink query failed; asking again later", "subnet", h.Subnet, "err", err)
		default:
			a.forget(h.Subnet)
			a.add(delegation.Evidence{Kind: delegation.Stalled, Accused: h.Owner, Witness: a.p.selfID, At: a.now(),
				Subnet: h.Subnet, Handoff: h.Since})
		}
	}
}

func (a *auditor) forget(s hierarchy.NodeID) {
	a.mu.Lock()
	delete(a.pending, s)
	a.mu.Unlock()
}

// distrustChanged makes the live lists be built again: the audit's
// suspects changed.
func (m *Members) distrustChanged() {
	m.mu.Lock()
	m.rebuild()
	m.mu.Unlock()
}

// Accusations: a peer that finds an impossible probe answer says so on
// TopicAudit, with the measurements that make it impossible. A receiver
// does not take it as evidence: it checks the claim itself (asks the
// accused for its RTT to the same target, measures its own), and only
// what it finds is evidence. So the topic spreads detection to peers that
// never decided with the liar, and a liar accusing honest members costs
// each receiver a rate-limited probe and nothing else.

// TopicAudit carries accusations.
const TopicAudit = "micra/audit/1"

const (
	maxAccusationBytes = 1 << 10
	accusationRate     = 1  // per second per author
	accusationBurst    = 20 // at once per author
	verifyQueue        = 64 // accusations waiting for their check; more are dropped
	verifyRate         = 2  // checks per second, all authors together
)

// accusation is the wire form of a FalseRTT evidence (JSON, signed by its
// author through gossipsub's StrictSign).
type accusation struct {
	Accused    string `json:"accused"`
	Target     string `json:"target"`
	ClaimedNs  int64  `json:"claimed_ns"`
	TargetNs   int64  `json:"to_target_ns"`
	ClaimantNs int64  `json:"to_claimant_ns"`
	AtMs       int64  `json:"at_ms"`
}

func (ac accusation) evidence(author peer.ID) (delegation.Evidence, error) {
	t, err := netip.ParseAddr(ac.Target)
	if err != nil {
		return delegation.Evidence{}, err
	}
	return delegation.Evidence{Kind: delegation.FalseRTT, Accused: delegation.CrawlerID(ac.Accused), Witness: delegation.CrawlerID(author.String()),
		At: time.UnixMilli(ac.AtMs), Target: t.Unmap(), Claimed: time.Duration(ac.ClaimedNs),
		ToTarget: time.Duration(ac.TargetNs), ToClaimant: time.Duration(ac.ClaimantNs)}, nil
}

type auditGossip struct {
	topic   *pubsub.Topic
	sub     *pubsub.Subscription
	limit   peerLimiter
	verify  chan delegation.Evidence
	checked map[string]bool // accused|target already checked (cleared when large)
	mu      sync.Mutex
}

// startGossip joins TopicAudit (startGossip's hook).
func (a *auditor) startGossip() error {
	if a.cfg.Off {
		return nil
	}
	ps := a.p.ps
	g := &auditGossip{verify: make(chan delegation.Evidence, verifyQueue), checked: map[string]bool{}}
	a.gossip = g // before the validator, which reads it
	if err := ps.RegisterTopicValidator(TopicAudit, a.validate); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	var err error
	if g.topic, err = ps.Join(TopicAudit); err != nil {
		return fmt.Errorf("overlay: join %s: %w", TopicAudit, err)
	}
	if g.sub, err = g.topic.Subscribe(); err != nil {
		return fmt.Errorf("overlay: subscribe %s: %w", TopicAudit, err)
	}
	a.p.wg.Add(2)
	go func() { defer a.p.wg.Done(); a.receive(a.p.ctx) }()
	go func() { defer a.p.wg.Done(); a.verifyLoop(a.p.ctx) }()
	return nil
}

// stopGossip cancels the subscription (shutdown's hook, before it waits).
func (a *auditor) stopGossip() {
	if a.gossip != nil && a.gossip.sub != nil {
		a.gossip.sub.Cancel()
	}
}

// closeTopic leaves TopicAudit (shutdown's hook, after the loops ended).
func (a *auditor) closeTopic() error {
	if a.gossip == nil || a.gossip.topic == nil {
		return nil
	}
	return a.gossip.topic.Close()
}

// validate is TopicAudit's validator: size, schema, an author that is a
// live member and not the accused, a fresh time, measurements that make
// the claim impossible, and a rate per author.
func (a *auditor) validate(_ context.Context, _ peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	author := msg.GetFrom()
	if len(msg.Data) > maxAccusationBytes {
		return pubsub.ValidationReject
	}
	var ac accusation
	dec := json.NewDecoder(bytes.NewReader(msg.Data))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&ac); err != nil {
		return pubsub.ValidationReject
	}
	e, err := ac.evidence(author)
	if err != nil || !e.Valid() {
		return pubsub.ValidationReject // an accusation must carry its proof
	}
	if d := time.Since(e.At); d > clockSkew || d < -clockSkew {
		return pubsub.ValidationIgnore
	}
	if !a.p.isMember(author) {
		return pubsub.ValidationIgnore
	}
	if author != a.p.h.ID() && !a.gossip.limit.allow(author, accusationRate, accusationBurst, time.Now()) {
		a.p.metrics.gossipRejected.WithLabelValues(TopicAudit, "rate_limited").Inc()
		return pubsub.ValidationIgnore
	}
	msg.ValidatorData = e
	return pubsub.ValidationAccept
}

// receive queues others' accusations for this peer's own check.
func (a *auditor) receive(ctx context.Context) {
	for {
		msg, err := a.gossip.sub.Next(ctx)
		if err != nil {
			return
		}
		e, ok := msg.ValidatorData.(delegation.Evidence)
		if !ok || msg.GetFrom() == a.p.h.ID() {
			continue
		}
		if e.Accused == a.p.selfID {
			a.p.log.Warn("overlay: this peer is accused of a false probe answer", "by", e.Witness, "target", e.Target, "claimed", e.Claimed)
			continue
		}
		if !a.p.members.IsLive(e.Accused) && !a.distrusts(e.Accused) {
			continue // not a member this peer knows
		}
		a.add(e) // counts with a second witness (SuspectConfig.Witnesses)
		if a.distrusts(e.Accused) {
			continue
		}
		key := string(e.Accused) + "|" + e.Target.String()
		a.gossip.mu.Lock()
		seen := a.gossip.checked[key]
		if !seen {
			if len(a.gossip.checked) >= 4096 {
				clear(a.gossip.checked)
			}
			a.gossip.checked[key] = true
		}
		a.gossip.mu.Unlock()
		if seen {
			continue
		}
		select {
		case a.gossip.verify <- e:
		default: // full: the accused's next lie will be heard again
		}
	}
}

// verifyLoop checks queued accusations, verifyRate a second: it asks the
// accused for its RTT to the target as any decision would, and audits the
// answer (probed): evidence only if this peer finds it impossible.
func (a *auditor) verifyLoop(ctx context.Context) {
	lim := rate.NewLimiter(verifyRate, 1)
	for {
		var e delegation.Evidence
		select {
		case <-ctx.Done():
			return
		case e = <-a.gossip.verify:
		}
		if err := lim.Wait(ctx); err != nil {
			return
		}
		if a.distrusts(e.Accused) || !a.p.members.IsLive(e.Accused) {
			continue
		}
		took, ok := a.challenge(ctx, e.Accused, e.Target)
		if !ok || a.distrusts(e.Accused) {
			continue
		}
		if toC, ok := a.peerRTT(e.Accused, took); ok {
			if t, ok := a.challengeTarget(toC, e.Target); ok {
				a.challenge(ctx, e.Accused, t)
			}
		}
	}
}

// challenge asks c for its RTT to target, as a decision would, audits the
// answer and returns the request's round trip.
func (a *auditor) challenge(ctx context.Context, c delegation.CrawlerID, target netip.Addr) (time.Duration, bool) {
	start := time.Now()
	rtt, err := a.p.ProbeOne(ctx, c, ProbeTarget{Addr: target, Method: a.p.cfg.ProbeMethod, Port: a.p.cfg.ProbePort})
	took := time.Since(start)
	a.p.metrics.probesSent.Inc()
	if err != nil {
		return 0, false
	}
	a.probed(ctx, target, []delegation.ProbeResult{{Crawler: c, RTT: rtt, OK: true}}, []time.Duration{took})
	return took, true
}

// accuse publishes e, this peer's own evidence, on TopicAudit.
func (a *auditor) accuse(e delegation.Evidence) {
	g := a.gossip
	if g == nil || e.Kind != delegation.FalseRTT || e.Witness != a.p.selfID {
		return // only this peer's own evidence: others' was published by them
	}
	data, err := json.Marshal(accusation{Accused: string(e.Accused), Target: e.Target.String(), ClaimedNs: int64(e.Claimed),
		TargetNs: int64(e.ToTarget), ClaimantNs: int64(e.ToClaimant), AtMs: e.At.UnixMilli()})
	if err != nil {
		return
	}
	a.p.goBackground(func() {
		ctx, cancel := context.WithTimeout(a.p.ctx, a.p.cfg.RequestTimeout)
		defer cancel()
		if err := g.topic.Publish(ctx, data); err != nil && ctx.Err() == nil {
			a.p.log.Debug("overlay: accusation not published", "member", e.Accused, "err", err)
		}
	})
}
