package overlay

import (
	"context"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
)

// A light member announcing the sink role joins through one peer: every
// peer lists it as the sink (Members.Sinks), with the addresses it
// advertised, but not as a node of the network (Formation.Live), and it
// hears every peer, also one it is not connected to. Its leave removes it
// from the peers' sinks at once.
func TestLightMemberAnnouncesTheSink(t *testing.T) {
	lightMemberAnnouncesTheSink(t, MembershipHeartbeat, 100*time.Millisecond)
}

// The same in a network whose membership is SWIM.
func TestLightMemberAnnouncesTheSinkSWIM(t *testing.T) {
	lightMemberAnnouncesTheSink(t, MembershipSWIM, 200*time.Millisecond)
}

func lightMemberAnnouncesTheSink(t *testing.T, membership string, period time.Duration) {
	tree := testTree(t)
	fast := func(cfg Config) Config {
		cfg.HeartbeatInterval, cfg.FailureTimeout, cfg.Membership = period, 10*period, membership
		return cfg
	}
	c0 := fast(TestnetConfig())
	c0.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	p0 := openPeer(t, tree, c0, Services{})
	boot := p0.Host().Addrs()[0].String() + "/p2p/" + p0.ID().String()
	c1 := fast(TestnetConfig())
	c1.CrawlerAddr = netip.MustParseAddr("127.1.0.1")
	c1.Bootstrap = []string{boot}
	p1 := openPeer(t, tree, c1, Services{})

	h := rawHost(t)
	l, err := JoinMembership(context.Background(), h, LightConfig{Snapshot: tree.ID(), Nodes: tree.Len(), Sink: true,
		Bootstrap: []string{boot}, HeartbeatInterval: period, FailureTimeout: 10 * period, LoopbackTestnet: true, Membership: membership})
	if err != nil {
		t.Fatal(err)
	}
	closed := false
	defer func() {
		if !closed {
			l.Close()
		}
	}()
	for _, p := range []*Peer{p0, p1} {
		waitFor(t, 30*time.Second, func() bool { return slices.Equal(p.Members().Sinks(), []peer.ID{h.ID()}) })
		if got := p.Members().Addrs(h.ID()); len(got) == 0 || !got[0].Equal(h.Addrs()[0]) {
			t.Fatalf("the sink's addresses as a peer has them: %v, want %v", got, h.Addrs())
		}
	}
	waitFor(t, 30*time.Second, func() bool {
		a, ok0 := l.Members().Member(p0.ID())
		b, ok1 := l.Members().Member(p1.ID())
		return ok0 && ok1 && !a.Dead && !b.Dead
	})
	if f := p0.Formation(); f.Live != 2 || p0.Members().Count() != 3 {
		t.Fatalf("formation counts %d live nodes of %d members; want the sink a member but no node (2 of 3)", f.Live, p0.Members().Count())
	}
	if _, ok := l.Members().Member(rawHost(t).ID()); ok {
		t.Fatal("a peer never heard of is a member")
	}
	if len(l.Members().Sinks()) != 0 {
		t.Fatalf("the light member lists sinks %v: only itself announces one", l.Members().Sinks())
	}

	if err := l.Close(); err != nil {
		t.Fatal(err)
	}
	closed = true
	for _, p := range []*Peer{p0, p1} {
		waitFor(t, 30*time.Second, func() bool { return len(p.Members().Sinks()) == 0 })
		if mi, _ := p.Members().Member(h.ID()); !mi.Dead || mi.Reason != ReasonLeft {
			t.Fatalf("after its leave the sink is %+v, want dead for reason %q", mi, ReasonLeft)
		}
	}
}
