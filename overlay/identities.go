package overlay

import (
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	manet "github.com/multiformats/go-multiaddr/net"
	"golang.org/x/time/rate"
)

// Open networks: how many identities become members through one address.
//
// In an open network anyone who runs the binary is a member, and one
// machine may make up any number of identities (20,000 announced
// over one connection all became crawlers). A network with admission needs
// none of this: a certificate costs its operator's signature. Open, a
// heartbeat's author that is not a member yet becomes one only within the
// limits of how it reached this peer, which the author cannot choose:
//
//   - over its own connection (the author is the neighbour that relayed
//     it): at most Config.IdentitiesPerIP such members per remote IP;
//   - relayed by a neighbour: at most Config.IdentitiesPerPeer members
//     introduced by that neighbour (per connection).
//
// Each of them admits new identities at identityRate a second past its
// limit's worth at once. A member stays counted while it heartbeats; one
// silent for identitySilence (this peer's pace, whatever interval its
// heartbeats claim) is declared dead and frees its place, so identities
// that announce themselves once and go quiet do not hold the table.
//
// Under SWIM the same limits apply to the records a message or a
// full-state exchange delivers (swimRunner.admit): the neighbour is the
// peer that sent it, the author's own connection when the record is the
// sender's. SWIM sends no record while nothing changes, so a member stays
// counted until the protocol declares it dead or gone (an identity that
// goes quiet stops answering its probes), which frees its place.

// identityRate is how many new identities one IP or one neighbour may
// introduce a second, past its limit at once.
const identityRate = 4

type identityKey struct {
	ip  netip.Addr // counted per IP: the author's own connection
	via peer.ID    // else per neighbour that relayed it
}

type identityEntry struct {
	key  identityKey
	seen time.Time
}

type identityLimits struct {
	perIP, perPeer int // 0: no limit of that kind
	silence        time.Duration

	mu        sync.Mutex
	ids       map[peer.ID]*identityEntry
	count     map[identityKey]int
	intro     map[identityKey]*rate.Limiter
	lastSweep time.Time
}

func newIdentityLimits(perIP, perPeer int, silence time.Duration) *identityLimits {
	return &identityLimits{perIP: perIP, perPeer: perPeer, silence: silence,
		ids: make(map[peer.ID]*identityEntry), count: make(map[identityKey]int), intro: make(map[identityKey]*rate.Limiter)}
}

// admit reports whether author's heartbeat, relayed by via (whose
// connection comes from viaIP), may make or keep it a member at now, and
// returns the identities silent past the silence to prune.
func (l *identityLimits) admit(author, via peer.ID, viaIP netip.Addr, now time.Time) (bool, []peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	pruned := l.sweepLocked(now)
	if e := l.ids[author]; e != nil {
		e.seen = now
		return true, pruned
	}
	key, limit := identityKey{via: via}, l.perPeer
	if author == via && viaIP.IsValid() {
		key, limit = identityKey{ip: viaIP}, l.perIP
	}
	if limit > 0 {
		if l.count[key] >= limit {
			return false, pruned
		}
		lim := l.intro[key]
		if lim == nil {
			lim = rate.NewLimiter(identityRate, limit)
			l.intro[key] = lim
		}
		if !lim.AllowN(now, 1) {
			return false, pruned
		}
	}
	l.ids[author] = &identityEntry{key: key, seen: now}
	l.count[key]++
	return true, pruned
}

// sweepLocked forgets identities silent past the silence (at most every
// quarter of it) and returns them.
func (l *identityLimits) sweepLocked(now time.Time) []peer.ID {
	if l.silence <= 0 || now.Sub(l.lastSweep) < l.silence/4 {
		return nil // (0: SWIM's deaths release identities)
	}
	l.lastSweep = now
	var out []peer.ID
	for id, e := range l.ids {
		if now.Sub(e.seen) > l.silence {
			out = append(out, id)
			delete(l.ids, id)
			if l.count[e.key]--; l.count[e.key] <= 0 {
				delete(l.count, e.key)
			}
		}
	}
	for k, lim := range l.intro {
		// a bucket full again says no more than a new one would
		if l.count[k] == 0 && lim.TokensAt(now) >= float64(lim.Burst()) {
			delete(l.intro, k)
		}
	}
	return out
}

// release frees the place of a member declared dead or gone.
func (l *identityLimits) release(id peer.ID) {
	l.mu.Lock()
	defer l.mu.Unlock()
	e := l.ids[id]
	if e == nil {
		return
	}
	delete(l.ids, id)
	if l.count[e.key]--; l.count[e.key] <= 0 {
		delete(l.count, e.key)
	}
}

// members is how many identities are counted.
func (l *identityLimits) members() int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return len(l.ids)
}

// admitIdentity applies the open network's identity limits to a heartbeat
// (or SWIM record) of author relayed by via (the membership topic's
// validator, swimRunner.admit).
func (p *Peer) admitIdentity(author, via peer.ID) bool {
	if p.idLimits == nil || author == p.h.ID() {
		return true
	}
	var ip netip.Addr
	for _, c := range p.h.Network().ConnsToPeer(via) {
		if a, err := manet.ToIP(c.RemoteMultiaddr()); err == nil {
			ip, _ = netip.AddrFromSlice(a)
			ip = ip.Unmap()
			break
		}
	}
	now := p.now()
	ok, pruned := p.idLimits.admit(author, via, ip, now)
	if len(pruned) > 0 {
		p.members.pruneSilent(pruned, now)
	}
	if !ok {
		p.metrics.identitiesRefused.Inc()
	}
	return ok
}

// pruneSilent declares dead the live members among ids: the identity
// limits found them silent for longer than this peer's failure timeout,
// whatever interval their heartbeats claimed. They stay in the table as
// dead members do (so an old heartbeat of theirs cannot revive them) and a
// new heartbeat revives them within the limits.
func (m *Members) pruneSilent(ids []peer.ID, now time.Time) {
	var evs []MemberEvent
	m.mu.Lock()
	for _, id := range ids {
		st, ok := m.byID[id]
		if !ok || st.dead {
			continue
		}
		st.dead, st.reason = true, ReasonFailed
		evs = append(evs, MemberEvent{Peer: id, Dead: true, Reason: ReasonFailed, Silence: now.Sub(st.lastSeen), LastSeen: st.lastSeen})
	}
	if len(evs) > 0 {
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
