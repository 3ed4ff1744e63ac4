package overlay

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// A probe measures only an address of the subnet being decided (probes
// only to targets the prober would itself crawl): the request must
// name the subnet a decision for the target decides by the prober's own
// hierarchy, a requester gets few distinct addresses of one subnet, and new
// subnets at a bounded rate. Time is the rate limits' clock.
func TestProbeTargetsTiedToSubnet(t *testing.T) {
	p := openHandoffPeer(t, 2*time.Second, nil) // a modelled measurer: nothing is dialled
	now := time.Unix(1_700_000_000, 0)
	p.now = func() time.Time { return now }
	asker := rawHost(t)
	asker.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	heardFrom(p, asker.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	probe := func(target netip.Addr, subnet hierarchy.NodeID) error {
		t.Helper()
		var resp pb.ProbeResponse
		err := roundTrip(ctx, asker, p.ID(), ProtoProbe, maxProbeMsg, 2*time.Second,
			&pb.ProbeRequest{Version: wireVersion, Target: target.AsSlice(), Subnet: uint32(subnet)}, &resp)
		if err != nil {
			return err
		}
		return remoteErr(p.ID(), ProtoProbe, resp.Status, resp.Error)
	}
	refused := func(err error, why string) bool {
		return StatusOf(err) == pb.Status_REFUSED && strings.Contains(err.Error(), why)
	}
	target := netip.MustParseAddr("127.6.1.1")
	s := p.tree.SmallestNonUnary(target)
	if s == hierarchy.Root || s == hierarchy.None {
		t.Fatalf("test tree: %v decides subnet %d", target, s)
	}
	other := p.tree.SmallestNonUnary(netip.MustParseAddr("127.5.2.1"))
	for _, c := range []struct {
		name   string
		subnet hierarchy.NodeID
	}{
		{"no subnet (the root)", hierarchy.Root},
		{"another subnet", other},
		{"an ancestor of its subnet", p.tree.Parent(s)},
		{"a node past the hierarchy", hierarchy.NodeID(p.tree.Len())},
	} {
		if err := probe(target, c.subnet); !refused(err, "not an address of subnet") {
			t.Errorf("probe of %v naming %s: %v, want REFUSED", target, c.name, err)
		}
	}
	if err := probe(target, s); err != nil {
		t.Fatalf("probe of %v in its subnet: %v", target, err)
	}
	// distinct addresses of one subnet: probeTargetsPerSubnet, then no more;
	// one already probed is measured again
	base := target.As4()
	n := 1
	for i := 2; n < probeTargetsPerSubnet; i++ {
		a := netip.AddrFrom4([4]byte{base[0], base[1], base[2], byte(i)})
		if p.tree.SmallestNonUnary(a) != s {
			continue
		}
		if err := probe(a, s); err != nil {
			t.Fatalf("probe %d of subnet %d (%v): %v", n+1, s, a, err)
		}
		n++
	}
	if err := probe(netip.MustParseAddr("127.6.1.200"), s); !refused(err, scopeTooManyTargets) {
		t.Fatalf("probe %d of one subnet: %v, want REFUSED: %s", probeTargetsPerSubnet+1, err, scopeTooManyTargets)
	}
	if err := probe(target, s); err != nil {
		t.Fatalf("a target probed before, again: %v", err)
	}
	// the subnet's addresses come back once probeLogAge has passed
	now = now.Add(probeLogAge + time.Second)
	if err := probe(netip.MustParseAddr("127.6.1.200"), s); err != nil {
		t.Fatalf("after %v: %v", probeLogAge, err)
	}
}

// A requester names at most probeSubnetBurst new subnets at once, then
// probeSubnetRate a second; each requester on its own.
func TestProbeScopeNewSubnets(t *testing.T) {
	var sc probeScope
	now := time.Unix(1_700_000_000, 0)
	a, b := peer.ID("a"), peer.ID("b")
	addr := netip.MustParseAddr("127.0.0.1")
	for i := range probeSubnetBurst {
		if why := sc.admit(a, hierarchy.NodeID(i+1), addr, now); why != "" {
			t.Fatalf("subnet %d of a burst: %s", i+1, why)
		}
	}
	if why := sc.admit(a, probeSubnetBurst+1, addr, now); why != scopeTooManySubnets {
		t.Fatalf("a subnet past the burst: %q, want %q", why, scopeTooManySubnets)
	}
	if why := sc.admit(a, 1, addr, now); why != "" {
		t.Fatalf("a subnet already named: %s", why)
	}
	if why := sc.admit(b, probeSubnetBurst+1, addr, now); why != "" {
		t.Fatalf("another requester limited by the first: %s", why)
	}
	if why := sc.admit(a, probeSubnetBurst+1, addr, now.Add(time.Second/probeSubnetRate)); why != "" {
		t.Fatalf("the next token never came: %s", why)
	}
}
