package overlay

import (
	"context"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/control"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"golang.org/x/sync/errgroup"
)

// Partition is a testnet's network partition on one peer: a libp2p
// connection gater that refuses every connection to or from the peers it
// denies, in both directions, at dial and after the handshake
// (Config.Partition). A partition of a testnet into two halves is each
// peer of one half denying every peer of the other; nothing else changes,
// so the peers see what a real split shows them — dials that fail,
// heartbeats that stop, owners declared dead — while they run on one
// machine's loopback, where no network namespace separates them.
type Partition struct {
	mu   sync.RWMutex
	deny map[peer.ID]bool
}

// NewPartition is a partition that denies nobody.
func NewPartition() *Partition { return &Partition{deny: map[peer.ID]bool{}} }

// Set replaces the denied peers (none: the partition heals) and closes h's
// connections to the newly denied ones. Healing dials nobody: the peers
// find each other again through their membership dialling and the DHT.
func (pt *Partition) Set(h host.Host, deny []peer.ID) {
	pt.mu.Lock()
	pt.deny = make(map[peer.ID]bool, len(deny))
	for _, id := range deny {
		pt.deny[id] = true
	}
	pt.mu.Unlock()
	if h == nil {
		return
	}
	for _, id := range deny {
		_ = h.Network().ClosePeer(id)
	}
}

// Denied lists the peers the partition denies.
func (pt *Partition) Denied() []peer.ID {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	out := make([]peer.ID, 0, len(pt.deny))
	for id := range pt.deny {
		out = append(out, id)
	}
	slices.Sort(out)
	return out
}

func (pt *Partition) denied(id peer.ID) bool {
	pt.mu.RLock()
	defer pt.mu.RUnlock()
	return pt.deny[id]
}

// InterceptPeerDial refuses dials to denied peers.
func (pt *Partition) InterceptPeerDial(p peer.ID) bool { return !pt.denied(p) }

// InterceptAddrDial refuses dials to denied peers at any address.
func (pt *Partition) InterceptAddrDial(p peer.ID, _ ma.Multiaddr) bool { return !pt.denied(p) }

// InterceptAccept lets every inbound connection through to the handshake,
// where the remote peer is known.
func (pt *Partition) InterceptAccept(network.ConnMultiaddrs) bool { return true }

// InterceptSecured refuses connections from denied peers once the
// handshake has named them.
func (pt *Partition) InterceptSecured(_ network.Direction, p peer.ID, _ network.ConnMultiaddrs) bool {
	return !pt.denied(p)
}

// InterceptUpgraded lets through what InterceptSecured accepted.
func (pt *Partition) InterceptUpgraded(network.Conn) (bool, control.DisconnectReason) { return true, 0 }

// returnDelays are when a peer announces its own records again after
// another member returns (revived after it was declared dead: a restart or
// a healed partition): once the returning peer's gossip mesh has had time
// to form, gathering the other returns of the same heal into one round,
// and twice more later, because a peer drops announcements of an author it
// does not yet count as live itself, and on a loaded machine it may hear
// this peer's heartbeat many seconds after this peer heard its (a 12-node
// testnet on a loaded machine had one subnet disagree for over a minute
// with the first two rounds only).
var returnDelays = []time.Duration{2 * time.Second, 10 * time.Second, 30 * time.Second}

// Redialling members declared dead: the first try redialFirst after the
// death, each next one twice as late up to redialMax (redialMaxLeft for a
// member that left), none after redialFor; at most redialBatch dials a
// tick. A short redialMax bounds how long two healed halves stay apart (a
// dial to a crashed peer's closed port costs one refused connection). A
// member that left is redialled too, more slowly: it may be started again
// (an upgrade, a restart) with no bootstrap peer of its own — a network's
// first node — and would stay alone if nobody dialled it.
const (
	redialFirst   = 2 * time.Second
	redialMax     = 10 * time.Second
	redialMaxLeft = time.Minute
	redialFor     = 30 * time.Minute
	redialBatch   = 8
	redialTick    = time.Second
	maxWatchDead  = 4096
)

// lost is a member declared dead, watched for its return.
type lost struct {
	addrs []ma.Multiaddr // where it was last reachable
	died  time.Time
	next  time.Time // the next redial
	wait  time.Duration
	left  bool // it announced its leave (else: failed)
}

// watchReturns heals what a partition or a crash leaves behind. While
// peers cannot reach each other, each side declares the other dead; a
// side with a quorum re-delegates the subnets whose owners it lost
// (Members.IsLive), new subnets are delegated on either side, and each
// side's records reach only its own caches and DHT nodes. Two things
// would otherwise keep the sides apart once the network is whole again:
//   - nobody dials a dead member (the membership dials live ones only), so
//     this peer redials the members that failed or left, with back-off,
//     for a while (under SWIM it also tells a failed one reached that it
//     was declared dead: swimRunner.recheck);
//   - gossip does not replay what a peer missed, so when a member returns
//     this peer announces its owned records again: every cache merges them
//     by the Select rule, which picks the same winner everywhere, and a
//     losing owner learns it lost and hands the subnet's URLs on.
func (p *Peer) watchReturns() {
	var mu sync.Mutex
	dead := map[peer.ID]*lost{}
	// One schedule of rounds at a time, timed from the return that started
	// it: the returns that come while it runs (a heal's, or members
	// declared dead and alive again on a loaded machine) join its later
	// rounds and get one more schedule once it ends, not one each. Timing
	// the rounds from the latest return instead starved them while returns
	// kept coming. returned holds the members back that have not taken
	// this peer's records yet.
	returned := map[peer.ID]bool{}
	running, again := false, false
	p.members.OnChange(func(ev MemberEvent) {
		mu.Lock()
		defer mu.Unlock()
		if ev.Dead {
			if (ev.Reason == ReasonFailed || ev.Reason == ReasonLeft) && len(dead) < maxWatchDead {
				now := time.Now()
				dead[ev.Peer] = &lost{addrs: p.h.Peerstore().Addrs(ev.Peer), died: now, next: now.Add(redialFirst), wait: redialFirst,
					left: ev.Reason == ReasonLeft}
			}
			return
		}
		l, ok := dead[ev.Peer]
		if !ok {
			return // a first join: it asks for what it needs
		}
		delete(dead, ev.Peer)
		if l.left {
			return // a leave's return: it asks for what it needs
		}
		returned[ev.Peer] = true
		if running {
			again = true
			return
		}
		running = true
		p.goBackground(func() {
			for {
				start := time.Now()
				for n, d := range returnDelays {
					select {
					case <-time.After(time.Until(start.Add(d))):
					case <-p.ctx.Done():
						return
					}
					mu.Lock()
					to := make([]peer.ID, 0, len(returned))
					for id := range returned {
						to = append(to, id)
					}
					mu.Unlock()
					if len(to) == 0 {
						continue // all took them
					}
					// the DHT once, so that lookups read the winners too
					took := p.giveOwned(p.ctx, to, n == 0)
					mu.Lock()
					for _, id := range took {
						delete(returned, id)
					}
					mu.Unlock()
				}
				mu.Lock()
				if !again {
					// those that never took them get them on their next return
					clear(returned)
					running = false
					mu.Unlock()
					return
				}
				again = false
				mu.Unlock()
			}
		})
	})
	p.goBackground(func() {
		tick := time.NewTicker(redialTick)
		defer tick.Stop()
		for {
			select {
			case <-p.ctx.Done():
				return
			case <-tick.C:
			}
			now := time.Now()
			var due []peer.AddrInfo
			mu.Lock()
			for id, l := range dead {
				if now.Sub(l.died) > redialFor {
					delete(dead, id)
					continue
				}
				if len(due) < redialBatch && !now.Before(l.next) {
					due = append(due, peer.AddrInfo{ID: id, Addrs: l.addrs})
					ceil := redialMax
					if l.left {
						ceil = redialMaxLeft
					}
					l.wait = min(2*l.wait, ceil)
					l.next = now.Add(l.wait)
				}
			}
			mu.Unlock()
			for _, ai := range due {
				if p.h.Network().Connectedness(ai.ID) == network.Connected {
					if p.swim != nil {
						p.swim.recheck(ai.ID)
					}
					continue
				}
				// past the swarm's dial back-off: the dials refused while
				// the peers were apart grew it to minutes
				dctx, cancel := context.WithTimeout(network.WithForceDirectDial(p.ctx, "redial a member declared dead"), p.cfg.RequestTimeout)
				err := p.h.Connect(dctx, ai)
				cancel()
				if err == nil {
					p.log.Info("overlay: reconnected to a member declared dead", "member", shortID(ai.ID))
					if p.swim != nil {
						// connected is not alive to SWIM: ask it
						p.swim.recheck(ai.ID)
					}
				}
			}
		}
	})
}

// resealOwned seals again every delegation this peer owns (a fresh time:
// the receivers' freshness checks) and keeps the new values in its cache.
func (p *Peer) resealOwned() []ownedValue {
	var out []ownedValue
	for _, s := range p.dir.Owned() {
		rec, ok := p.dir.get(s)
		if !ok || rec.Owner != p.selfID {
			continue
		}
		val, err := p.republishValue(rec)
		if err != nil {
			p.log.Warn("overlay: re-sealing an owned record failed", "subnet", s, "err", err)
			continue
		}
		if rec, sum, err := p.validator.check(DelegKey(s), val); err == nil {
			p.dir.merge(rec, sum, val)
		}
		out = append(out, ownedValue{s, val})
	}
	return out
}

// giveOwned sends this peer's owned records to the members back from the
// dead in to (ProtoOwned, asking for theirs in return) and, if put, puts
// them in the DHT too. It returns the members that took them, those no
// longer live (they get them on their next return) and light members. A member that
// refused (it does not count this peer live yet) is left for a later
// round.
func (p *Peer) giveOwned(ctx context.Context, to []peer.ID, put bool) (took []peer.ID) {
	recs := p.resealOwned()
	var mu sync.Mutex
	var g errgroup.Group
	g.SetLimit(ownedSenders)
	for _, id := range to {
		g.Go(func() error {
			// a light member (the index sink) keeps no records; a member
			// this peer just answered with them has them
			if info, known := p.members.Member(id); p.members.IsPeerLive(id) && !(known && info.Sink) && !p.ownedGiven.recently(id, time.Now()) {
				if err := p.sendOwned(ctx, id, recs, true); err != nil {
					p.log.Debug("overlay: owned records not taken yet", "member", shortID(id), "err", err)
					return nil
				}
			}
			mu.Lock()
			took = append(took, id)
			mu.Unlock()
			return nil
		})
	}
	_ = g.Wait()
	if put {
		for _, r := range recs {
			if _, err := p.dir.put(ctx, r.s, r.val, false); err != nil {
				if ctx.Err() != nil {
					return took
				}
				p.log.Warn("overlay: putting an owned record after a return failed", "subnet", r.s, "err", err)
			}
		}
	}
	p.log.Info("overlay: owned records given to members back from the dead", "records", len(recs),
		"members", len(to), "took", len(took), "dht", put)
	return took
}
