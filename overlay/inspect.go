package overlay

// Read-only views for a node's operator (the node's control API): who is a
// member and how recently it was heard, which cached records hold what.
// Nothing here takes part in delegation.

import (
	"slices"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// MemberInfo is one member as the failure detector sees it.
type MemberInfo struct {
	Peer peer.ID
	// Crawler is what its heartbeats advertise: crawler address,
	// capacity (0: not a crawler) and position.
	Crawler  delegation.Crawler
	Load     uint32 // advertised load, pages per day
	Addrs    []ma.Multiaddr
	LastSeen time.Time     // when its last heartbeat (SWIM: record) was accepted
	Interval time.Duration // its heartbeat interval
	// Heard is when it was last known alive: with heartbeats its last
	// heartbeat; under SWIM, which sends no record while nothing changes,
	// now while the protocol holds it alive and unsuspected, else when
	// the suspicion that ended in its death began (or its death, or its
	// leave). The time since Heard is its silence.
	Heard time.Time
	// Suspected: SWIM suspects it (not refuted yet); it is still live.
	Suspected bool
	Dead      bool   // declared dead (silent for the failure timeout; SWIM: not refuted)
	Reason    string // for Dead: ReasonLeft or ReasonFailed
	Sink      bool   // it announces the index sink role
}

func (m *Members) info(id peer.ID, st *member, now time.Time) MemberInfo {
	heard := st.lastSeen
	if m.bySWIM {
		switch {
		case !st.suspectAt.IsZero():
			heard = st.suspectAt
		case !st.dead:
			heard = now
		case !st.deadAt.IsZero():
			heard = st.deadAt
		}
	}
	return MemberInfo{Peer: id, Crawler: st.crawler, Load: st.load, Addrs: st.addrs,
		LastSeen: st.lastSeen, Interval: st.interval, Heard: heard, Suspected: !st.dead && !st.suspectAt.IsZero(),
		Dead: st.dead, Reason: st.reason, Sink: st.sink}
}

// Snapshot lists every member heard of since start, dead ones included
// (this peer is not one), sorted by peer id.
func (m *Members) Snapshot() []MemberInfo {
	now := m.now()
	m.mu.RLock()
	out := make([]MemberInfo, 0, len(m.byID))
	for id, st := range m.byID {
		out = append(out, m.info(id, st, now))
	}
	m.mu.RUnlock()
	slices.SortFunc(out, func(a, b MemberInfo) int { return strings.Compare(string(a.Peer), string(b.Peer)) })
	return out
}

// Peek returns the cached record of subnet s whatever its state: stale is
// true when a gossip event said the DHT may hold a newer one (Cached and
// the routing paths ignore such a record until it is read again); its
// owner may be dead.
func (d *Directory) Peek(s hierarchy.NodeID) (rec delegation.Record, stale, ok bool) {
	e, ok := d.entry(s)
	return e.rec, e.stale, ok
}

// HeldBlock is a block delegation of a cached record.
type HeldBlock struct {
	Subnet hierarchy.NodeID
	Block  delegation.BlockDelegation
}

// BlocksOf lists the block delegations to c in the cached records, by
// subnet.
func (d *Directory) BlocksOf(c delegation.CrawlerID) []HeldBlock {
	var out []HeldBlock
	d.mu.RLock()
	for s, e := range d.recs {
		for _, b := range e.rec.Blocks {
			if b.Owner == c {
				out = append(out, HeldBlock{Subnet: s, Block: b})
			}
		}
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b HeldBlock) int {
		if a.Subnet != b.Subnet {
			return int(int64(a.Subnet) - int64(b.Subnet))
		}
		return a.Block.Host.Compare(b.Block.Host)
	})
	return out
}
