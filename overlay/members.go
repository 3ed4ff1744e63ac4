package overlay

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// Members is the failure detector and the live-crawler view, fed by
// heartbeats on micra/membership/1. A peer silent for FailureTimeout is
// declared dead (UbiCrawler's reliable failure detector: every correct peer
// eventually distrusts a silent one); a peer that announces its leave (a
// heartbeat with leaving set, signed by it: Peer.Leave) is declared dead at
// once. A later heartbeat revives it: a newer one of the same run (higher
// seq) or any of a later run (its start time is later).
//
// It implements delegation.Membership, delegation.Liveness and
// delegation.Versioned. Liveness (IsLive) is the owners' view, which holds
// a member declared dead for its silence as the owner of its subnets for a
// while and without a quorum (IsLive); Live lists only members heard.
type Members struct {
	self    peer.ID
	selfC   delegation.Crawler
	timeout time.Duration
	started time.Time
	log     *slog.Logger
	// grace: how long a member dead by failure stays its subnets' owner
	// (Config.OwnerGrace); now: the clock of IsLive's judgements
	grace time.Duration
	now   func() time.Time
	// distrusts, when set, names the members this peer's audit holds to
	// be lying (audit.go): not live to delegation, as if dead.
	distrusts func(delegation.CrawlerID) bool

	mu      sync.RWMutex
	byID    map[peer.ID]*member
	byCID   map[delegation.CrawlerID]*member // same members, keyed for the sub-µs IsLive path
	live    []delegation.Crawler             // sorted by ID; built again when read after a change (lists)
	crawls  []delegation.Crawler             // the live peers that crawl (Crawlers)
	stale   bool                             // live, crawls and quorum predate a change
	quorum  bool                             // this peer sees a strict majority of the crawlers it knows (build)
	hasQ    bool                             // quorum was built once (for the log of its changes)
	builds  int                              // times live and crawls were built
	version atomic.Uint64
	load    atomic.Uint32
	subnets atomic.Uint32

	listeners []func(MemberEvent)
	lastJoin  time.Time // when a member last joined or revived
	// bySWIM: the SWIM protocol declares deaths (swimrun.go), not silence
	bySWIM bool
}

type member struct {
	crawler  delegation.Crawler
	interval time.Duration // the sender's heartbeat interval
	lastSeen time.Time
	seq      uint64
	at       int64 // sender's clock of the last heartbeat accepted
	start    int64 // sender's start time (its run); 0: a sender that predates it
	load     uint32
	addrs    []ma.Multiaddr
	dead     bool
	reason   string    // why dead: ReasonLeft or ReasonFailed
	deadAt   time.Time // when declared dead (for ReasonFailed: OwnerGrace runs from it)
	sink     bool      // it announces the index sink role (Heartbeat.sink)
	cert     []byte    // its membership certificate (a network with admission)
	// suspectAt: when SWIM's current suspicion of it began (zero: none;
	// its next record ends it)
	suspectAt time.Time
}

// Why a member was declared dead (MemberEvent.Reason, the logs and
// micra_overlay_peers_declared_dead_total{reason}).
const (
	// ReasonFailed: silent for longer than the failure timeout.
	ReasonFailed = "failed"
	// ReasonLeft: it announced its leave (a clean stop: Peer.Leave).
	ReasonLeft = "left"
	// ReasonRevoked: the network's revocation list names it.
	ReasonRevoked = "revoked"
)

// MemberEvent reports a change in the failure detector's view.
type MemberEvent struct {
	Peer     peer.ID
	Dead     bool          // true: declared dead; false: joined or revived
	Reason   string        // for Dead: ReasonLeft or ReasonFailed
	Silence  time.Duration // for Dead: time since its last heartbeat (0 for a leave)
	LastSeen time.Time
}

func newMembers(self peer.ID, c delegation.Crawler, timeout time.Duration, log *slog.Logger) *Members {
	m := &Members{self: self, selfC: c, timeout: timeout, started: time.Now(), log: log, now: time.Now, byID: make(map[peer.ID]*member), byCID: make(map[delegation.CrawlerID]*member)}
	m.rebuild()
	return m
}

// OnChange registers fn for membership events (called without locks held,
// from the overlay's goroutines; fn must not block).
func (m *Members) OnChange(fn func(MemberEvent)) {
	m.mu.Lock()
	m.listeners = append(m.listeners, fn)
	m.mu.Unlock()
}

// Live implements delegation.Membership: this peer plus every peer heard
// within the failure timeout, sorted by ID. The slice must not be modified.
func (m *Members) Live() []delegation.Crawler {
	live, _ := m.lists()
	return live
}

// Version implements delegation.Versioned.
func (m *Members) Version() uint64 { return m.version.Load() }

// IsLive implements delegation.Liveness: whether c counts as the owner of
// what it was delegated. A peer never heard of is presumed live only during
// the first failure timeout after start (it may simply not have heartbeated
// yet); afterwards it is dead. A member that left or was revoked is dead.
//
// A member declared dead for its silence is held, still live here, for
// OwnerGrace after the declaration, and after that for as long as this
// peer does not see a quorum (Quorum). Silence does not tell a crash from
// a partition: in a partition each side would take over the other's
// subnets and both would crawl them. A side without a strict majority of
// the crawlers it knows therefore keeps the silent owners, and the URLs
// for them wait in the hand-off spool until they or a quorum return; a
// crash of a minority is re-delegated once the grace is over. The grace
// lets a stalled or quickly restarted member come back to its own frontier
// and outbox, and lets a partition's deaths, declared within a heartbeat
// or two of each other, all be in before the quorum is judged.
func (m *Members) IsLive(c delegation.CrawlerID) bool {
	if c == m.selfC.ID {
		return true
	}
	if m.distrusts != nil && m.distrusts(c) {
		return false
	}
	m.mu.RLock()
	st, ok := m.byCID[c]
	var dead, failed bool
	var deadAt time.Time
	if ok {
		dead, failed, deadAt = st.dead, st.reason == ReasonFailed, st.deadAt
	}
	m.mu.RUnlock()
	if !ok {
		return time.Since(m.started) < m.timeout
	}
	if !dead {
		return true
	}
	return failed && m.held(deadAt)
}

// Held reports whether c is a member declared dead for its silence that
// IsLive still holds live (within OwnerGrace, or without a quorum).
func (m *Members) Held(c delegation.CrawlerID) bool {
	m.mu.RLock()
	st, ok := m.byCID[c]
	failed := ok && st.dead && st.reason == ReasonFailed
	var deadAt time.Time
	if failed {
		deadAt = st.deadAt
	}
	m.mu.RUnlock()
	return failed && m.held(deadAt)
}

// DecisionQuorum is Quorum for making a delegation, judged on crawlers
// heard recently rather than on those not yet declared dead: at the start
// of a partition both sides still count each other live for a failure
// timeout, and a subnet each side decided then is crawled by both. A
// crawler counts as heard when its last heartbeat is no older than two of
// its intervals (and half the failure timeout); under SWIM, which sends no
// record while nothing changes, when the protocol holds it alive and does
// not suspect it (its observers probe it every period and suspect it after
// one unanswered). One that is late or suspected counts against the
// quorum, as a dead one does.
func (m *Members) DecisionQuorum() bool {
	if !m.Quorum() {
		return false
	}
	now := m.now()
	m.mu.RLock()
	defer m.mu.RUnlock()
	fresh, known := 1, 1
	for id, st := range m.byID {
		if id == m.self || st.crawler.Capacity <= 0 {
			continue
		}
		switch {
		case !st.dead:
			known++
			if m.heardLately(st, now) {
				fresh++
			}
		case st.reason == ReasonFailed:
			known++
		}
	}
	return 2*fresh > known || known <= 2
}

// heardLately reports whether a live member counts as heard for
// DecisionQuorum (under m.mu).
func (m *Members) heardLately(st *member, now time.Time) bool {
	if m.bySWIM {
		return st.suspectAt.IsZero()
	}
	return now.Sub(st.lastSeen) <= max(2*st.interval, m.timeout/2)
}

// suspect records SWIM's suspicion of a live member: it still owns its
// subnets and is live (the protocol declares it dead if it does not
// refute), but it no longer counts as heard for DecisionQuorum.
func (m *Members) suspect(id peer.ID, now time.Time) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if st, ok := m.byID[id]; ok && !st.dead && st.suspectAt.IsZero() {
		st.suspectAt = now
	}
}

func (m *Members) held(deadAt time.Time) bool {
	return (m.grace > 0 && m.now().Sub(deadAt) < m.grace) || !m.Quorum()
}

// Quorum reports whether this peer sees a strict majority of the crawlers
// it knows: itself and the crawlers heard within the failure timeout,
// against those plus the crawlers declared dead for their silence and not
// yet forgotten (memberForget). Members that left or were revoked are not
// counted; nor are members that do not crawl (the sink). A network of two
// crawlers always has one: with one of two silent, a peer cannot tell a
// crash from a partition, and waiting would stop it until the other is
// forgotten.
func (m *Members) Quorum() bool {
	m.mu.RLock()
	if !m.stale {
		defer m.mu.RUnlock()
		return m.quorum
	}
	m.mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stale {
		m.build()
	}
	return m.quorum
}

// IsPeerLive is IsLive by peer ID.
func (m *Members) IsPeerLive(id peer.ID) bool {
	if id == m.self {
		return true
	}
	m.mu.RLock()
	st, ok := m.byID[id]
	dead := ok && st.dead
	m.mu.RUnlock()
	if !ok {
		return time.Since(m.started) < m.timeout
	}
	return !dead
}

// Addrs returns the listen addresses a member advertised.
func (m *Members) Addrs(id peer.ID) []ma.Multiaddr {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if st, ok := m.byID[id]; ok {
		return st.addrs
	}
	return nil
}

// Sinks returns the live members that announce the index sink role
// (Heartbeat.sink), sorted by peer id: a crawler given no sink delivers to
// the first.
func (m *Members) Sinks() []peer.ID {
	m.mu.RLock()
	var out []peer.ID
	for id, st := range m.byID {
		if st.sink && !st.dead {
			out = append(out, id)
		}
	}
	m.mu.RUnlock()
	slices.Sort(out)
	return out
}

// Member returns what the failure detector knows of id: ok is false for a
// peer never heard of (IsPeerLive may still presume such a peer live
// during the first failure timeout; Member does not).
func (m *Members) Member(id peer.ID) (MemberInfo, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st, ok := m.byID[id]
	if !ok {
		return MemberInfo{}, false
	}
	return m.info(id, st, m.now()), true
}

// LoadOf returns the load a member advertised (pages per day).
func (m *Members) LoadOf(id peer.ID) (uint32, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st, ok := m.byID[id]
	if !ok || st.dead {
		return 0, false
	}
	return st.load, true
}

// loadOfCrawler is LoadOf by crawler id; ok is false for unknown and dead
// members.
func (m *Members) loadOfCrawler(c delegation.CrawlerID) (uint32, bool) {
	m.mu.RLock()
	defer m.mu.RUnlock()
	st, ok := m.byCID[c]
	if !ok || st.dead {
		return 0, false
	}
	return st.load, true
}

// Count returns the number of live peers, this one included.
func (m *Members) Count() int { return len(m.Live()) }

// Formation is the membership as a node waiting for it to form reads it
// (a node given seeds routes them once it has formed: node/formation.go).
type Formation struct {
	Live     int       // live members, this peer included
	LastJoin time.Time // when a member last joined or revived; zero: none yet
	// Joining are the live members that crawl and state a crawler address
	// but hold no subnet this peer knows of: their own subnet is still to
	// be published (Peer.Join) or announced here, and until it is, IPMicra
	// does not ask them (it asks the holders of subnets).
	Joining []peer.ID
}

// Formation reports the membership's formation as this peer sees it.
func (p *Peer) Formation() Formation {
	f := p.members.formation()
	_, held := p.dir.underHolders(hierarchy.Root)
	f.Joining = slices.DeleteFunc(f.Joining, func(id peer.ID) bool {
		return slices.Contains(held, delegation.CrawlerID(id.String()))
	})
	return f
}

// formation is Formation with every live crawler that states an address
// as joining.
func (m *Members) formation() Formation {
	live, _ := m.lists()
	m.mu.RLock()
	defer m.mu.RUnlock()
	f := Formation{Live: len(live), LastJoin: m.lastJoin}
	for id, st := range m.byID {
		if !st.dead && st.sink {
			f.Live-- // the index sink is a member, but no node of the network
		}
		if !st.dead && st.crawler.Capacity > 0 && st.crawler.Addr.IsValid() {
			f.Joining = append(f.Joining, id)
		}
	}
	return f
}

// rebuild marks the live lists stale and changes the version at once;
// the lists are built when next read. A burst of joins — thousands of
// identities announced at once in an open network — then costs one sort,
// not one of the whole table per join.
func (m *Members) rebuild() {
	m.stale = true
	m.version.Add(1)
}

// lists returns the live members and the live crawlers, building them if
// a change made them stale.
func (m *Members) lists() (live, crawls []delegation.Crawler) {
	m.mu.RLock()
	if !m.stale {
		defer m.mu.RUnlock()
		return m.live, m.crawls
	}
	m.mu.RUnlock()
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.stale {
		m.build()
	}
	return m.live, m.crawls
}

// build sorts the live members into live and crawls (under m.mu).
func (m *Members) build() {
	live := make([]delegation.Crawler, 0, len(m.byID)+1)
	live = append(live, m.selfC)
	for _, st := range m.byID {
		if !st.dead && (m.distrusts == nil || !m.distrusts(st.crawler.ID)) {
			live = append(live, st.crawler)
		}
	}
	slices.SortFunc(live, func(a, b delegation.Crawler) int {
		switch {
		case a.ID < b.ID:
			return -1
		case a.ID > b.ID:
			return 1
		}
		return 0
	})
	m.live = live
	m.crawls = slices.DeleteFunc(slices.Clone(live), func(c delegation.Crawler) bool { return c.Capacity <= 0 })
	// the quorum: this peer (whatever its role: it is the one judging) and
	// the crawlers it hears, over those and the crawlers that fell silent
	seen, known := 1, 1
	for id, st := range m.byID {
		if id == m.self || st.crawler.Capacity <= 0 {
			continue
		}
		switch {
		case !st.dead:
			seen++
			known++
		case st.reason == ReasonFailed:
			known++
		}
	}
	q := 2*seen > known || known <= 2
	if m.hasQ && q != m.quorum && m.log != nil {
		if q {
			m.log.Info("overlay: quorum regained: silent members' subnets may be re-delegated", "crawlers_heard", seen, "crawlers_known", known)
		} else {
			m.log.Warn("overlay: no quorum: silent members keep their subnets, URLs for them wait in the spool", "crawlers_heard", seen, "crawlers_known", known)
		}
	}
	m.quorum, m.hasQ = q, true
	m.stale = false
	m.builds++
}

// Crawlers is the membership as delegation sees it: the live peers that
// crawl. A peer without the crawler role advertises capacity 0 and refuses
// hand-offs, so a subnet given to it would be crawled by nobody; delegation
// reads capacity ≤ 0 as "no limit", so such peers are left out here.
func (m *Members) Crawlers() *CrawlerMembers { return &CrawlerMembers{m} }

// CrawlerMembers is Members restricted to crawlers (Members.Crawlers); it
// implements delegation.Membership, Versioned and Liveness.
type CrawlerMembers struct{ m *Members }

// Live is every live crawler, sorted by ID. The slice must not be modified.
func (c *CrawlerMembers) Live() []delegation.Crawler {
	_, crawls := c.m.lists()
	return crawls
}

// Version changes with the membership's.
func (c *CrawlerMembers) Version() uint64 { return c.m.Version() }

// IsLive is Members.IsLive for peers that crawl; a peer not heard of yet
// is presumed to crawl, as it is presumed live.
func (c *CrawlerMembers) IsLive(id delegation.CrawlerID) bool {
	if !c.m.IsLive(id) {
		return false
	}
	if id == c.m.selfC.ID {
		return c.m.selfC.Capacity > 0
	}
	c.m.mu.RLock()
	st, ok := c.m.byCID[id]
	c.m.mu.RUnlock()
	return !ok || st.crawler.Capacity > 0
}

// observe applies a validated heartbeat from id.
func (m *Members) observe(id peer.ID, hb *pb.Heartbeat, now time.Time) {
	if id == m.self {
		return
	}
	addr, _ := netip.AddrFromSlice(hb.CrawlerAddr)
	var addrs []ma.Multiaddr
	for _, b := range hb.ListenAddrs {
		if a, err := ma.NewMultiaddrBytes(b); err == nil {
			addrs = append(addrs, a)
		}
	}
	c := delegation.Crawler{ID: delegation.CrawlerID(id.String()), Addr: addr.Unmap(), Capacity: int(hb.Capacity)}
	if hb.HasPos {
		c.Lat, c.Lon, c.HasPos = hb.Lat, hb.Lon, true
	}
	var ev *MemberEvent
	m.mu.Lock()
	st, ok := m.byID[id]
	if ok && !st.supersededBy(hb, m.timeout) {
		// a replay or reorder
		m.mu.Unlock()
		return
	}
	if hb.Leaving {
		// The author leaves: the message is signed by it (StrictSign; the
		// heartbeat names no other peer), so nobody can make another peer
		// leave. Its newer heartbeats (a later run) revive it.
		if !ok {
			// never heard alive: remember it gone, so that a heartbeat of
			// its run delayed past the leave does not make it a member,
			// and tell nobody
			st = &member{crawler: c}
			m.byID[id] = st
			m.byCID[c.ID] = st
		}
		wasLive := ok && !st.dead
		st.lastSeen, st.seq, st.at, st.start = now, hb.Seq, hb.AtUnixNano, hb.StartUnixNano
		st.dead, st.reason = true, ReasonLeft
		if wasLive {
			m.rebuild()
		}
		ls := m.listeners
		m.mu.Unlock()
		if wasLive {
			m.log.Info("overlay: peer left", "member", id)
			ev := MemberEvent{Peer: id, Dead: true, Reason: ReasonLeft, LastSeen: now}
			for _, fn := range ls {
				fn(ev)
			}
		}
		return
	}
	switch {
	case !ok:
		st = &member{}
		m.byID[id] = st
		m.byCID[c.ID] = st
		ev = &MemberEvent{Peer: id}
	case st.dead:
		ev = &MemberEvent{Peer: id}
	}
	if ev != nil {
		m.lastJoin = now
	}
	changed := !ok || st.dead || st.crawler != c || st.sink != hb.Sink
	st.crawler, st.lastSeen, st.seq, st.at, st.start, st.load, st.addrs = c, now, hb.Seq, hb.AtUnixNano, hb.StartUnixNano, hb.Load, addrs
	st.sink, st.cert = hb.Sink, hb.Certificate
	st.dead, st.reason, st.suspectAt = false, "", time.Time{}
	st.interval = time.Duration(hb.IntervalMs) * time.Millisecond
	if changed {
		m.rebuild()
	}
	ls := m.listeners
	m.mu.Unlock()
	if ev != nil {
		ev.LastSeen = now
		for _, fn := range ls {
			fn(*ev)
		}
	}
}

// supersededBy reports whether hb is newer than the last heartbeat accepted
// from this member. Heartbeats of one run are ordered by seq, and a later
// run (a later start time) supersedes an earlier one whatever its seq: a
// peer that stops and starts again within the failure timeout is live at
// its first heartbeat (with a leave before, it was dead in between). A
// sender that predates start times is ordered as before: by its clock, a
// lower seq counting as a restart only past the failure timeout.
func (st *member) supersededBy(hb *pb.Heartbeat, timeout time.Duration) bool {
	if hb.StartUnixNano != 0 && st.start != 0 {
		if hb.StartUnixNano != st.start {
			return hb.StartUnixNano > st.start
		}
		return hb.Seq > st.seq
	}
	return hb.AtUnixNano > st.at && (hb.Seq > st.seq || hb.AtUnixNano-st.at >= int64(timeout))
}

// Certificate returns the membership certificate a live member's
// heartbeats carry (nil: none, or not a live member).
func (m *Members) Certificate(id peer.ID) []byte {
	m.mu.RLock()
	defer m.mu.RUnlock()
	if st, ok := m.byID[id]; ok && !st.dead {
		return st.cert
	}
	return nil
}

// revoke declares dead the members the network has revoked and forgets
// them: their heartbeats are refused from now on, so they cannot revive.
func (m *Members) revoke(ids []peer.ID, now time.Time) {
	var evs []MemberEvent
	m.mu.Lock()
	for _, id := range ids {
		st, ok := m.byID[id]
		if !ok {
			continue
		}
		if !st.dead {
			evs = append(evs, MemberEvent{Peer: id, Dead: true, Reason: ReasonRevoked, Silence: now.Sub(st.lastSeen), LastSeen: st.lastSeen})
		}
		delete(m.byID, id)
		delete(m.byCID, delegation.CrawlerID(id.String()))
	}
	if len(evs) > 0 {
		m.rebuild()
	}
	ls := m.listeners
	m.mu.Unlock()
	for _, ev := range evs {
		m.log.Warn("overlay: member revoked by the network", "peer", ev.Peer)
		for _, fn := range ls {
			fn(ev)
		}
	}
}

// memberForget is how long a dead member stays in the table after its
// last heartbeat: past twice the age at which its heartbeats are refused.
const memberForget = 3 * clockSkew

// sweep declares dead every peer silent for longer than the timeout, and
// forgets those dead for memberForget.
func (m *Members) sweep(now time.Time) {
	var evs []MemberEvent
	forgot := false
	m.mu.Lock()
	for id, st := range m.byID {
		// a member that heartbeats more slowly than this peer's timeout
		// allows is judged by its own pace, or it would flap dead/alive
		if !m.bySWIM && !st.dead && now.Sub(st.lastSeen) > max(m.timeout, 3*st.interval) {
			st.dead, st.reason, st.deadAt = true, ReasonFailed, now
			evs = append(evs, MemberEvent{Peer: id, Dead: true, Reason: ReasonFailed, Silence: now.Sub(st.lastSeen), LastSeen: st.lastSeen})
		}
	}
	for id, st := range m.byID {
		// a dead member silent this long is forgotten: the table would
		// otherwise keep every identity ever announced, however many one
		// peer makes up. Heartbeats older than clockSkew are refused, so
		// none of its can be replayed to revive it.
		if st.dead && now.Sub(st.lastSeen) > memberForget {
			delete(m.byID, id)
			delete(m.byCID, delegation.CrawlerID(id.String()))
			forgot = true
		}
	}
	if len(evs) > 0 || forgot { // (one forgotten changes the quorum)
		m.rebuild()
	}
	ls := m.listeners
	m.mu.Unlock()
	for _, ev := range evs {
		m.log.Info("overlay: peer declared dead", "peer", ev.Peer, "reason", ev.Reason, "silence", ev.Silence)
		for _, fn := range ls {
			fn(ev)
		}
	}
}

// runMembership publishes heartbeats, reads them and sweeps until ctx ends.
func (p *Peer) runMembership(ctx context.Context, sub *pubsub.Subscription) {
	p.wg.Add(2)
	go func() {
		defer p.wg.Done()
		for {
			msg, err := sub.Next(ctx)
			if err != nil {
				return
			}
			if msg.ReceivedFrom == p.h.ID() && msg.GetFrom() == p.h.ID() {
				continue
			}
			hb, ok := msg.ValidatorData.(*pb.Heartbeat)
			if !ok {
				continue
			}
			p.members.observe(msg.GetFrom(), hb, time.Now())
			if p.revs != nil {
				p.revs.heard(msg.GetFrom(), hb.Revocations)
			}
		}
	}()
	go func() {
		defer p.wg.Done()
		beat := time.NewTicker(p.cfg.HeartbeatInterval)
		defer beat.Stop()
		sweep := time.NewTicker(p.cfg.HeartbeatInterval / 4)
		defer sweep.Stop()
		p.publishHeartbeat(ctx)
		for {
			select {
			case <-ctx.Done():
				return
			case <-beat.C:
				p.publishHeartbeat(ctx)
			case now := <-sweep.C:
				p.members.sweep(now)
			}
		}
	}()
}

func (p *Peer) publishHeartbeat(ctx context.Context) {
	data, err := p.nextHeartbeat(false)
	if err != nil || data == nil {
		return // left: no more heartbeats
	}
	if err := p.topicMem.Publish(ctx, data); err != nil && ctx.Err() == nil {
		p.log.Debug("overlay: heartbeat publish failed", "err", err)
	}
}

// nextHeartbeat is this peer's next heartbeat, encoded; with leaving, the
// last one (Leave). After the last one it returns nil: a peer that left
// stays silent, or its heartbeats would revive it everywhere.
func (p *Peer) nextHeartbeat(leaving bool) ([]byte, error) {
	p.hbMu.Lock()
	defer p.hbMu.Unlock()
	if p.left {
		return nil, nil
	}
	p.hbSeq++
	p.left = leaving
	hb := &pb.Heartbeat{
		Version:       wireVersion,
		Seq:           p.hbSeq,
		AtUnixNano:    time.Now().UnixNano(),
		StartUnixNano: p.members.started.UnixNano(),
		Leaving:       leaving,
		IntervalMs:    uint32(p.cfg.HeartbeatInterval / time.Millisecond),
		Snapshot:      p.snap[:],
		Capacity:      uint32(min(max(p.cfg.Capacity, 0), maxCapacity)),
		Load:          p.advertisedLoad(),
		Subnets:       p.members.subnets.Load(),
	}
	if p.revs != nil {
		hb.Certificate, hb.Revocations = p.cfg.Admission.Own(), p.revs.held()
	}
	if p.cfg.HasPos {
		hb.HasPos, hb.Lat, hb.Lon = true, p.cfg.Lat, p.cfg.Lon
	}
	if p.cfg.CrawlerAddr.IsValid() {
		hb.CrawlerAddr = p.cfg.CrawlerAddr.AsSlice()
	}
	for i, a := range p.h.Addrs() {
		if i == maxListenAddrs {
			break
		}
		hb.ListenAddrs = append(hb.ListenAddrs, a.Bytes())
	}
	return proto.Marshal(hb)
}

// validateHeartbeat is the micra/membership/1 topic validator.
func (p *Peer) validateHeartbeat(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	res := checkHeartbeat(p.snap, p.tree.Len(), p.cfg.Admission, p.log, from, msg)
	if res == pubsub.ValidationAccept && !p.admitIdentity(msg.GetFrom(), from) {
		return pubsub.ValidationIgnore // an open network's identity limits (identities.go)
	}
	return res
}

// checkHeartbeat validates a membership message for a peer on snapshot
// snap (a tree of nodes nodes) in a network with admission adm (nil: open):
// a Peer's and a LightMember's validator.
func checkHeartbeat(snap hierarchy.SnapshotID, nodes int, adm *Admission, log *slog.Logger, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	hb, err := decodeHeartbeat(msg.Data)
	if err != nil {
		log.Debug("overlay: rejected heartbeat", "author", msg.GetFrom(), "via", from, "err", err)
		return pubsub.ValidationReject
	}
	if string(hb.Snapshot) != string(snap[:]) {
		// A peer on another hierarchy snapshot is not a member of this
		// delegation space; not malicious, so ignore rather than penalise
		// (before the subnet count, which is of its snapshot's tree).
		return pubsub.ValidationIgnore
	}
	if hb.Subnets > uint32(nodes) {
		log.Debug("overlay: rejected heartbeat", "author", msg.GetFrom(), "via", from, "err", fmt.Sprintf("holds %d subnets of %d", hb.Subnets, nodes))
		return pubsub.ValidationReject
	}
	if adm != nil {
		// Ignored, not rejected: the peer that relayed it may not have
		// learned of a revocation or an expiry yet, and a heartbeat of an
		// open network is not hostile.
		c, err := adm.Check(msg.GetFrom(), hb.Certificate)
		if err != nil {
			log.Debug("overlay: heartbeat of a peer not admitted", "author", msg.GetFrom(), "via", from, "err", err)
			return pubsub.ValidationIgnore
		}
		if hb.Sink && !c.Sink {
			log.Debug("overlay: rejected heartbeat", "author", msg.GetFrom(), "via", from, "err", "announces the sink role its certificate does not give")
			return pubsub.ValidationReject
		}
	}
	msg.ValidatorData = hb
	return pubsub.ValidationAccept
}

// meshBelow: while the DHT routing table holds fewer peers than one k-bucket
// (kad-dht's default bucket size), a newly heard member is dialled at once.
// Small networks then mesh fully in one heartbeat instead of waiting for the
// DHT's periodic refresh; large ones rely on the DHT as usual.
const meshBelow = 20

// learnMemberAddrs puts the listen addresses a member advertised (in a
// heartbeat signed by it) into the peerstore, so the DHT, probes and
// hand-offs can reach it without a lookup, and queues a dial while the
// routing table is small. Dialling an address that is not the member's
// fails the Noise handshake, so a forged address costs one failed dial.
func (p *Peer) learnMemberAddrs(id peer.ID) {
	addrs := p.members.Addrs(id)
	if p.cfg.PublicDHTFilters {
		// a member may advertise loopback or LAN addresses: dialled, they
		// would reach this machine's or its network's own services
		addrs = slices.DeleteFunc(slices.Clone(addrs), func(a ma.Multiaddr) bool { return !manet.IsPublicAddr(a) })
	}
	if len(addrs) == 0 || id == p.h.ID() {
		return
	}
	p.h.Peerstore().AddAddrs(id, addrs, 2*p.cfg.FailureTimeout)
	if p.dht.RoutingTable().Size() >= meshBelow {
		return
	}
	select {
	case p.dialCh <- id:
	default: // a dial backlog: the DHT's refresh will find the rest
	}
}

// livePeers returns the peers heard within the failure timeout (not this
// one).
func (m *Members) livePeers() []peer.ID {
	m.mu.RLock()
	defer m.mu.RUnlock()
	out := make([]peer.ID, 0, len(m.byID))
	for id, st := range m.byID {
		if !st.dead {
			out = append(out, id)
		}
	}
	return out
}

// meshRepairEvery: how often a peer whose routing table is smaller than its
// membership (up to one k-bucket) repairs it (repairRoutingTable).
const meshRepairEvery = 2 * time.Second

// dialMembers connects to the members queued by learnMemberAddrs and
// repairs the routing table while it is smaller than the membership.
func (p *Peer) dialMembers(ctx context.Context) {
	repair := time.NewTicker(meshRepairEvery)
	defer repair.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-repair.C:
			p.repairRoutingTable()
		case id := <-p.dialCh:
			if p.h.Network().Connectedness(id) == network.Connected {
				continue
			}
			dctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
			err := p.h.Connect(dctx, peer.AddrInfo{ID: id})
			cancel()
			if err != nil && ctx.Err() == nil {
				p.log.Debug("overlay: member unreachable", "member", shortID(id), "err", err)
			}
		}
	}
}

// repairRoutingTable adds live members to the DHT routing table while it
// holds fewer peers than the membership (up to one k-bucket). kad-dht adds
// a connected peer only after a FIND_NODE "lookup check" answered; when
// that check fails (a loaded machine, a stream limit) the peer is dropped
// and not retried while the connection lasts, and the table refills only
// below 10 peers. A member has proven itself by signed heartbeats, so a
// connected member that speaks the DHT protocol goes in directly;
// an unconnected one is dialled.
func (p *Peer) repairRoutingTable() {
	rt := p.dht.RoutingTable()
	members := p.members.livePeers()
	if rt.Size() >= min(len(members), meshBelow) {
		return
	}
	for _, id := range members {
		if rt.Find(id) != "" {
			continue
		}
		if p.h.Network().Connectedness(id) != network.Connected {
			select {
			case p.dialCh <- id:
			default:
			}
			continue
		}
		if ps, err := p.h.Peerstore().SupportsProtocols(id, dhtProtocol); err != nil || len(ps) == 0 {
			continue // identify has not told us yet, or it is no DHT server
		}
		if added, err := rt.TryAddPeer(id, true, false); err == nil && added {
			p.log.Debug("overlay: member added to the routing table", "member", shortID(id))
		}
	}
}

// isMember reports whether id is a member this peer has heard from and not
// declared dead: only members hand off, have this peer probe, or have it
// endorse a record (a peer never heard of is not one, however recently this
// peer started).
func (p *Peer) isMember(id peer.ID) bool {
	if id == p.h.ID() {
		return true
	}
	if _, known := p.members.Member(id); !known {
		return false
	}
	return p.members.IsPeerLive(id)
}
