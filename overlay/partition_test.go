package overlay

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
)

// A partition's gater refuses connections both ways and drops the ones
// open; with no peer denied, the same peers connect again.
func TestPartitionGatesConnections(t *testing.T) {
	tree := testTree(t)
	parts := []*Partition{NewPartition(), NewPartition()}
	var ps []*Peer
	for i := range 2 {
		cfg := TestnetConfig()
		cfg.CrawlerAddr = netip.AddrFrom4([4]byte{127, byte(i), 0, 1})
		cfg.Partition = parts[i]
		ps = append(ps, openPeer(t, tree, cfg, Services{}))
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := ps[0].Host().Connect(ctx, ps[1].AddrInfo()); err != nil {
		t.Fatal(err)
	}
	// peer 1 alone denies peer 0: the open connection closes, and neither
	// side can dial the other (peer 0's dial is refused after the handshake)
	parts[1].Set(ps[1].Host(), []peer.ID{ps[0].ID()})
	if c := ps[1].Host().Network().Connectedness(ps[0].ID()); c == network.Connected {
		t.Fatalf("still connected after the partition")
	}
	if err := ps[1].Host().Connect(ctx, ps[0].AddrInfo()); err == nil {
		t.Fatal("peer 1 dialled a denied peer")
	}
	ps[0].Host().Peerstore().AddAddrs(ps[1].ID(), ps[1].Host().Addrs(), time.Minute)
	if err := ps[0].Host().Network().ClosePeer(ps[1].ID()); err != nil {
		t.Fatal(err)
	}
	if _, err := ps[0].Host().Network().DialPeer(ctx, ps[1].ID()); err == nil {
		// the dialler may see its side succeed before the gater's close
		// reaches it: what must hold is that no connection stays
		waitFor(t, 5*time.Second, func() bool {
			return ps[0].Host().Network().Connectedness(ps[1].ID()) != network.Connected
		})
	}
	if got := parts[1].Denied(); len(got) != 1 || got[0] != ps[0].ID() {
		t.Fatalf("denied %v", got)
	}
	parts[1].Set(ps[1].Host(), nil)
	if err := ps[0].Host().Connect(ctx, ps[1].AddrInfo()); err != nil {
		t.Fatalf("after the heal: %v", err)
	}
}

// Two halves of a network, split by their gaters, decide the same subnets
// differently in the seconds before they declare each other dead; once
// healed, the halves find
// each other again by themselves (members declared dead are redialled)
// and every cache agrees on one owner per subnet (owners announce their
// records again when a member returns). Under SWIM nobody probes a dead
// member: the redialled ones are told they were declared dead and refute
// (swimRunner.recheck).
func TestPartitionHealConverges(t *testing.T) { forEachProtocol(t, testPartitionHealConverges) }

func testPartitionHealConverges(t *testing.T, membership string) {
	const n = 6
	parts := make([]*Partition, n)
	tn := newTestNet(t, n, func(i int, c *Config, _ *Services) {
		parts[i] = NewPartition()
		c.Partition = parts[i]
		c.Membership = membership
		// the decisions below come before the members across the split
		// are unheard: heartbeats late for half the failure timeout, or
		// suspected by SWIM a period after their last answered probe
		c.FailureTimeout = 10 * time.Second
		if membership == MembershipSWIM {
			c.HeartbeatInterval = 3 * time.Second
		}
	})
	tn.joinWithMicra(t)
	half := func(i int) []peer.ID {
		var out []peer.ID
		for j, p := range tn.peers {
			if (j < n/2) != (i < n/2) {
				out = append(out, p.ID())
			}
		}
		return out
	}
	for i, p := range tn.peers {
		parts[i].Set(p.Host(), half(i))
	}
	liveCount := func(p *Peer) int {
		c := 0
		for _, q := range tn.peers {
			if q == p || p.Members().IsPeerLive(q.ID()) {
				c++
			}
		}
		return c
	}
	// each side decides the same fresh subnets among its own members (the
	// probes across the split fail at once), before either side has
	// declared the other dead: once it has, neither half of 6 has a quorum
	// and neither decides anything (TestNoQuorumNoDelegation)
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*60*time.Second)
	defer cancel()
	var targets []netip.Addr
	for i := range 6 {
		targets = append(targets, netip.AddrFrom4([4]byte{127, byte(i), 3, 9}))
	}
	for _, p := range []*Peer{tn.peers[0], tn.peers[n/2]} {
		for _, ip := range targets {
			if _, err := p.Delegate(ctx, ip); err != nil {
				t.Fatalf("%s: %v: %v", shortID(p.ID()), ip, err)
			}
		}
	}
	for _, ip := range targets {
		s := tn.tree.SmallestNonUnary(ip)
		a, _ := tn.peers[0].Directory().get(s)
		b, _ := tn.peers[n/2].Directory().get(s)
		if a.Owner == b.Owner {
			t.Fatalf("subnet %d: both halves chose %s across the partition", s, a.Owner)
		}
	}
	split := time.Now()
	// half the probes now go unanswered: under SWIM each member's local
	// health stretches its probe period, as Lifeguard means it to
	detect := detectionTime(tn.peers[0].cfg, n)
	if membership == MembershipSWIM {
		detect = SWIMConfig(tn.peers[0].cfg.HeartbeatInterval).DeadWithinUnhealthy(n) + 2*tn.peers[0].cfg.HeartbeatInterval
	}
	waitFor(t, slowdown*(detect+2*tn.peers[0].cfg.FailureTimeout), func() bool {
		for _, p := range tn.peers {
			if liveCount(p) != n/2 {
				return false
			}
		}
		return true
	})
	detected := time.Since(split)
	bad, _ := tn.disagreements(tn.peers)
	healed := time.Now()
	for i, p := range tn.peers {
		parts[i].Set(p.Host(), nil)
	}
	waitFor(t, slowdown*30*time.Second, func() bool {
		for _, p := range tn.peers {
			if liveCount(p) != n {
				return false
			}
		}
		return true
	})
	rejoined := time.Since(healed)
	owners := tn.settle(t, tn.peers, slowdown*30*time.Second)
	for _, ip := range targets {
		if s := tn.tree.SmallestNonUnary(ip); owners[s] == "" {
			t.Errorf("subnet %d has no owner after the heal", s)
		}
	}
	t.Logf("%d subnets disagreed across the partition, split detected in %v; after the heal every peer saw all %d members in %v and every cache agreed in %v",
		bad, detected.Round(time.Millisecond), n, rejoined, time.Since(healed))
}
