package overlay

import (
	"context"
	"fmt"
	"hash/fnv"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// testTree is a small hierarchy over loopback space: 127.0.0.0/8 split into
// 8 /16s (4 organisations), each split into 4 /24s.
func testTree(t testing.TB) *hierarchy.Tree { return loopbackTree(t, 8, 4) }

// loopbackTree splits 127.0.0.0/8 into n16 /16s (an organisation per two),
// each split into n24 /24s.
func loopbackTree(t testing.TB, n16, n24 int) *hierarchy.Tree {
	t.Helper()
	b := hierarchy.NewBuilder()
	add := func(start, end, org string) {
		if err := b.Add(hierarchy.Range{Start: netip.MustParseAddr(start), End: netip.MustParseAddr(end), Org: org,
			Registry: hierarchy.Registry(1), Country: "NL"}); err != nil {
			t.Fatal(err)
		}
	}
	add("127.0.0.0", "127.255.255.255", "LOOPBACK-NIC")
	for i := range n16 {
		org := fmt.Sprintf("ORG-%d", i/2)
		add(fmt.Sprintf("127.%d.0.0", i), fmt.Sprintf("127.%d.255.255", i), org)
		for j := range n24 {
			add(fmt.Sprintf("127.%d.%d.0", i, j), fmt.Sprintf("127.%d.%d.255", i, j), org)
		}
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// openPeer opens a peer over tree with cfg and svc, closed when the test
// ends.
func openPeer(t testing.TB, tree *hierarchy.Tree, cfg Config, svc Services) *Peer {
	t.Helper()
	p, err := Open(context.Background(), tree, cfg, svc)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// lonePeer opens a peer on its own (no other peers, no services) over
// tree, closed when the test ends.
func lonePeer(t testing.TB, tree *hierarchy.Tree) *Peer {
	t.Helper()
	cfg := TestnetConfig()
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	return openPeer(t, tree, cfg, Services{})
}

// rawHost is a bare libp2p host (testnet config, no micra protocols) for
// a test to speak the wire itself, closed when the test ends.
func rawHost(t testing.TB) host.Host {
	t.Helper()
	h, err := NewHost(TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// modelMeasurer is a deterministic latency model: RTT from crawler index i
// to a target depends on the distance between i and the target's /16 — a
// stand-in for geography that makes owners predictable.
type modelMeasurer struct{ i int }

func (m modelMeasurer) Measure(_ context.Context, t ProbeTarget) (time.Duration, error) {
	b := t.Addr.As4()
	d := int(b[1])*3 - m.i
	if d < 0 {
		d = -d
	}
	h := fnv.New32a()
	h.Write(b[:])
	h.Write([]byte{byte(m.i)})
	return time.Duration(d*7+1)*time.Millisecond + time.Duration(h.Sum32()%1000)*time.Microsecond, nil
}

type testNet struct {
	tree  *hierarchy.Tree
	peers []*Peer
	sinks []*memSink
}

type memSink struct {
	mu   sync.Mutex
	urls []string
}

func (s *memSink) Accept(_ context.Context, urls []string) error {
	s.mu.Lock()
	s.urls = append(s.urls, urls...)
	s.mu.Unlock()
	return nil
}

func (s *memSink) got() []string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return append([]string(nil), s.urls...)
}

// newTestNet starts n peers on 127.0.0.1 (real TCP), each bootstrapped to
// the first three, with the IPMicra policy, and waits until every peer sees
// every other as a member.
func newTestNet(t *testing.T, n int, tune func(i int, c *Config, s *Services)) *testNet {
	t.Helper()
	return newTestNetOn(t, testTree(t), n, tune)
}

// newTestNetOn is newTestNet over tree.
func newTestNetOn(t testing.TB, tree *hierarchy.Tree, n int, tune func(i int, c *Config, s *Services)) *testNet {
	t.Helper()
	return newTestNetOnWait(t, tree, n, n, tune)
}

// newTestNetOnWait is newTestNetOn waiting until each of the first members
// peers sees that many members (the others may be no members of theirs).
func newTestNetOnWait(t testing.TB, tree *hierarchy.Tree, n, members int, tune func(i int, c *Config, s *Services)) *testNet {
	t.Helper()
	tn := &testNet{tree: tree}
	ctx := context.Background()
	var boot []string
	for i := range n {
		cfg := TestnetConfig()
		cfg.RequestTimeout *= slowdown // a DHT lookup among twenty peers under -race can pass 10 s
		cfg.CrawlerAddr = netip.AddrFrom4([4]byte{127, byte(i % 8), byte(i / 8 % 4), 1})
		cfg.Bootstrap = boot
		sink := &memSink{}
		svc := Services{Sink: sink, Measurer: modelMeasurer{i: i}}
		if tune != nil {
			tune(i, &cfg, &svc)
		}
		p, err := Open(ctx, tn.tree, cfg, svc)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { p.Close() })
		p.NewPolicy(delegation.NewIPMicra, delegation.Config{})
		tn.peers = append(tn.peers, p)
		tn.sinks = append(tn.sinks, sink)
		if i < 3 {
			for _, a := range p.h.Addrs() {
				boot = append(boot, a.String()+"/p2p/"+p.ID().String())
			}
		}
	}
	wctx, cancel := context.WithTimeout(ctx, slowdown*30*time.Second)
	defer cancel()
	for _, p := range tn.peers {
		p.DHT().RefreshRoutingTable()
	}
	for _, p := range tn.peers[:members] {
		// A refresh that ran before the last peers joined leaves a routing
		// table short until the next periodic one: refresh again every
		// few seconds while waiting (it matters on a loaded machine).
		for {
			rctx, rcancel := context.WithTimeout(wctx, 5*time.Second)
			err := p.WaitMembers(rctx, members)
			rcancel()
			if err == nil {
				break
			}
			if wctx.Err() != nil {
				t.Fatal(err)
			}
			p.DHT().RefreshRoutingTable()
		}
	}
	return tn
}

// joinWithMicra installs the micra policy on every peer and publishes each
// peer's own subnet.
func (tn *testNet) joinWithMicra(t testing.TB) {
	t.Helper()
	for _, p := range tn.peers {
		p.NewPolicy(delegation.NewMicra, delegation.Config{})
		if _, err := p.Join(context.Background()); err != nil {
			t.Fatal(err)
		}
	}
}

// disagreements counts subnets whose cached owner differs between peers
// (a peer that has no record for a subnet others know counts too).
func (tn *testNet) disagreements(alive []*Peer) (int, map[hierarchy.NodeID]delegation.CrawlerID) {
	owners := map[hierarchy.NodeID]delegation.CrawlerID{}
	for _, p := range alive {
		for _, r := range p.Directory().Records() {
			owners[r.Subnet] = ""
		}
	}
	bad := 0
	for s := range owners {
		var first delegation.CrawlerID
		for i, p := range alive {
			r, ok := p.Directory().get(s)
			o := delegation.CrawlerID("<none>")
			if ok {
				o = r.Owner
			}
			if i == 0 {
				first = o
			} else if o != first {
				bad++
				break
			}
		}
		owners[s] = first
	}
	return bad, owners
}

func (tn *testNet) settle(t *testing.T, alive []*Peer, within time.Duration) map[hierarchy.NodeID]delegation.CrawlerID {
	t.Helper()
	deadline := time.Now().Add(within)
	for {
		bad, owners := tn.disagreements(alive)
		if bad == 0 {
			return owners
		}
		if time.Now().After(deadline) {
			t.Fatalf("%d subnets with disagreeing owners after %v", bad, within)
		}
		time.Sleep(50 * time.Millisecond)
	}
}
