package overlay

import (
	"context"
	"crypto/sha256"
	"errors"
	"fmt"
	"maps"
	"net"
	"net/netip"
	"net/url"
	"os"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// TestMain checks that closing peers leaves no goroutine behind. No
// library goroutine needs ignoring: Close stops the DHT, gossipsub (its own
// context, cancelled after the topics close) and, for Open-built peers, the
// host with its connection and resource managers.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}

func TestConcurrentDiscoverersAgree(t *testing.T) {
	tn := newTestNet(t, 20, nil)
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*60*time.Second)
	defer cancel()
	var jwg sync.WaitGroup
	for _, p := range tn.peers {
		jwg.Add(1)
		go func() {
			defer jwg.Done()
			if _, err := p.Join(ctx); err != nil {
				t.Error(err)
			}
		}()
	}
	jwg.Wait()
	// 8 fresh subnets, discovered by all 20 peers at the same time.
	var targets []netip.Addr
	for i := range 8 {
		targets = append(targets, netip.AddrFrom4([4]byte{127, byte(i % 8), byte(2 + i/8), 77}))
	}
	var wg sync.WaitGroup
	errs := make(chan error, len(tn.peers)*len(targets))
	for _, p := range tn.peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for _, ip := range targets {
				if _, err := p.Delegate(ctx, ip); err != nil {
					errs <- fmt.Errorf("%s: %v: %w", shortID(p.ID()), ip, err)
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Error(err)
	}
	owners := tn.settle(t, tn.peers, 5*time.Second)
	for _, ip := range targets {
		s := tn.tree.SmallestNonUnary(ip)
		if owners[s] == "" {
			t.Errorf("subnet %d of %v has no owner", s, ip)
		}
	}
	// The DHT agrees with the caches.
	for _, ip := range targets[:3] {
		s := tn.tree.SmallestNonUnary(ip)
		rec, found, err := tn.peers[7].Directory().fetch(ctx, s)
		if err != nil || !found {
			t.Fatalf("dht lookup of subnet %d: found=%v err=%v", s, found, err)
		}
		if rec.Owner != owners[s] {
			t.Errorf("subnet %d: dht says %s, caches say %s", s, rec.Owner, owners[s])
		}
	}
	// A second round is answered from the cache.
	d, err := tn.peers[3].Delegate(ctx, targets[0])
	if err != nil || !d.Cached {
		t.Fatalf("second delegation not cached: %v %v", d, err)
	}
}

// A crashed peer (no leave) is declared dead by every other, within the
// protocol's detection time: the failure timeout after its last
// heartbeat, or SWIM's probe round and longest suspicion.
func TestKilledPeerDeclaredDead(t *testing.T) { forEachProtocol(t, testKilledPeerDeclaredDead) }

func testKilledPeerDeclaredDead(t *testing.T, membership string) {
	tn := newTestNet(t, 8, func(_ int, c *Config, _ *Services) { c.Membership = membership })
	victim := tn.peers[5]
	var mu sync.Mutex
	declared := map[int]time.Duration{}
	for i, p := range tn.peers {
		p.Members().OnChange(func(ev MemberEvent) {
			if ev.Dead && ev.Peer == victim.ID() {
				mu.Lock()
				declared[i] = ev.Silence
				mu.Unlock()
			}
		})
	}
	killed := time.Now()
	if err := victim.Kill(); err != nil { // a crash: no leave announced
		t.Fatal(err)
	}
	timeout := detectionTime(tn.peers[0].cfg, len(tn.peers))
	deadline := killed.Add(slowdown * timeout)
	for {
		mu.Lock()
		n := len(declared)
		mu.Unlock()
		if n == len(tn.peers)-1 {
			break
		}
		if time.Now().After(deadline) {
			t.Fatalf("only %d of %d peers declared the killed peer dead within %v", n, len(tn.peers)-1, time.Since(killed))
		}
		time.Sleep(20 * time.Millisecond)
	}
	t.Logf("declared dead by all %d peers %v after the kill (timeout %v)", len(declared), time.Since(killed), timeout)
	for i, p := range tn.peers {
		if i != 5 && p.Members().IsPeerLive(victim.ID()) {
			t.Errorf("peer %d still lists the victim as live", i)
		}
	}
}

// detectionTime bounds how long after a member of a network of n crashes
// every other declares it dead, for cfg's membership protocol (one more
// period: the sweep or the death's dissemination).
func detectionTime(cfg Config, n int) time.Duration {
	if cfg.Membership == MembershipSWIM {
		return SWIMConfig(cfg.HeartbeatInterval).DeadWithin(n) + 2*cfg.HeartbeatInterval
	}
	return cfg.FailureTimeout + cfg.HeartbeatInterval + time.Second
}

func TestCalibrationReachesAll(t *testing.T) {
	tn := newTestNet(t, 10, nil)
	var mu sync.Mutex
	got := map[int]bool{}
	for i, p := range tn.peers {
		p.OnCalibration(func(n CalibrationNotice) {
			if n.Event.Kind == pb.CalibrationKind_SLOW_PAGE && n.Event.Url == "http://127.3.1.9/slow" {
				mu.Lock()
				got[i] = true
				mu.Unlock()
			}
		})
	}
	tn.peers[2].Announce(context.Background(), &pb.CalibrationEvent{Kind: pb.CalibrationKind_SLOW_PAGE, Subnet: 5,
		Url: "http://127.3.1.9/slow", ObservedNs: int64(900 * time.Millisecond), ExpectedNs: int64(100 * time.Millisecond)})
	deadline := time.Now().Add(3 * time.Second)
	for {
		mu.Lock()
		n := len(got)
		mu.Unlock()
		if n == len(tn.peers) {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("event reached %d of %d peers", n, len(tn.peers))
		}
		time.Sleep(10 * time.Millisecond)
	}
}

func TestHandoffFollowsOwnership(t *testing.T) {
	tn := newTestNet(t, 6, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	ip := netip.MustParseAddr("127.6.3.10")
	d, err := tn.peers[0].Delegate(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	ownerIdx := slices.IndexFunc(tn.peers, func(p *Peer) bool { return p.CrawlerID() == d.Owner })
	if ownerIdx < 0 {
		t.Fatalf("owner %s is not in the network", d.Owner)
	}
	sender := tn.peers[(ownerIdx+1)%len(tn.peers)]
	tn.settle(t, tn.peers, 3*time.Second)
	for i := range 10 {
		if err := sender.Handoff(ctx, d.Subnet, ip, fmt.Sprintf("http://127.6.3.10/page/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	// The sender counts a message once it has read the owner's answer, a
	// moment after the owner's sink has the URLs: wait for both. (The first
	// hand-off waits for the membership to form, ~2 s after start: 10 s
	// leave room on a loaded machine.)
	waitFor(t, slowdown*10*time.Second, func() bool {
		return len(tn.sinks[ownerIdx].got()) == 10 && sender.HandoffStats().URLs == 10
	})
	st := sender.HandoffStats()
	if st.Messages == 0 || st.Messages > 2 || st.URLs != 10 {
		t.Fatalf("hand-off stats %+v: want 10 URLs in at most 2 messages", st)
	}
	// Kill the owner; queued URLs go to the new owner once it is declared dead.
	if err := tn.peers[ownerIdx].Close(); err != nil {
		t.Fatal(err)
	}
	for i := range 5 {
		if err := sender.Handoff(ctx, d.Subnet, ip, fmt.Sprintf("http://127.6.3.10/after/%d", i)); err != nil {
			t.Fatal(err)
		}
	}
	var alive []*Peer
	var aliveSinks []*memSink
	for i, p := range tn.peers {
		if i != ownerIdx {
			alive = append(alive, p)
			aliveSinks = append(aliveSinks, tn.sinks[i])
		}
	}
	waitFor(t, 15*time.Second, func() bool {
		n := 0
		for _, s := range aliveSinks {
			n += len(s.got())
		}
		return n == 5
	})
	owners := tn.settle(t, alive, 5*time.Second)
	if owners[d.Subnet] == d.Owner {
		t.Fatalf("subnet %d still owned by the dead peer", d.Subnet)
	}
}

func waitFor(t *testing.T, within time.Duration, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(within)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("condition not met within %v", within)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

type memPages struct {
	mu       sync.Mutex
	pages    map[hierarchy.NodeID][]PageState
	imported map[hierarchy.NodeID][]PageState
}

func (m *memPages) History(_ context.Context, s hierarchy.NodeID, block netip.Prefix, emit func(PageState) error) error {
	m.mu.Lock()
	ps := append([]PageState(nil), m.pages[s]...)
	m.mu.Unlock()
	for _, p := range ps {
		if block.IsValid() {
			u, err := url.Parse(p.URL)
			if err != nil {
				return err
			}
			if a, err := netip.ParseAddr(u.Hostname()); err != nil || !block.Contains(a) {
				continue
			}
		}
		if err := emit(p); err != nil {
			return err
		}
	}
	return nil
}

func (m *memPages) Import(_ context.Context, s hierarchy.NodeID, ps []PageState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.imported == nil {
		m.imported = map[hierarchy.NodeID][]PageState{}
	}
	m.imported[s] = append(m.imported[s], ps...)
	return nil
}

func TestSnapshotAndRecoverProtocols(t *testing.T) {
	tree := testTree(t)
	snapBytes := tree.Encode()
	id := tree.ID()
	if sha256.Sum256(snapBytes) != id {
		t.Fatal("hierarchy snapshot id is not the SHA-256 of Encode(): the snapshot protocol verifies by it")
	}
	old := &memPages{pages: map[hierarchy.NodeID][]PageState{}}
	for i := range 1100 { // more than two frames
		old.pages[7] = append(old.pages[7], PageState{URL: fmt.Sprintf("http://127.1.0.1/%d", i), ETag: `"x"`,
			ContentHash: []byte{1, 2, 3}, LastFetch: time.Unix(1700000000, 0), FetchTimes: []time.Duration{time.Millisecond}, HTTPStatus: 200})
	}
	fresh := &memPages{}
	tn := newTestNet(t, 2, func(i int, c *Config, s *Services) {
		if i == 0 {
			s.Snapshots = TreeSnapshots{id: snapBytes}
			s.Pages = old
		} else {
			s.Pages = fresh
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[1]
	got, err := b.FetchSnapshot(ctx, a.ID(), id)
	if err != nil || len(got) != len(snapBytes) {
		t.Fatalf("fetch snapshot: %d bytes, %v", len(got), err)
	}
	var other hierarchy.SnapshotID
	other[0] = 1
	if _, err := b.FetchSnapshot(ctx, a.ID(), other); StatusOf(err) != pb.Status_NOT_FOUND {
		t.Fatalf("unknown snapshot: got %v, want NOT_FOUND", err)
	}
	n, err := b.RecoverPages(ctx, a.ID(), 7)
	if err != nil || n != 1100 || len(fresh.imported[7]) != 1100 || fresh.imported[7][1099].URL != "http://127.1.0.1/1099" {
		t.Fatalf("recover: %d pages, %v", n, err)
	}

	// a block's recovery: only the pages of that /24 of the subnet
	host := netip.MustParseAddr("127.5.12.1") // in 127.5.0.0/16, outside its /24 children
	sub := tree.SmallestNonUnary(host)
	old.mu.Lock()
	for _, u := range []string{"http://127.5.12.1/a", "http://127.5.12.200/b", "http://127.5.13.9/c", "http://127.5.200.1/d"} {
		old.pages[sub] = append(old.pages[sub], PageState{URL: u, LastFetch: time.Unix(1700000000, 0), HTTPStatus: 200})
	}
	old.mu.Unlock()
	n, err = b.RecoverBlock(ctx, a.ID(), sub, host)
	var urls []string
	for _, p := range fresh.imported[sub] {
		urls = append(urls, p.URL)
	}
	if err != nil || n != 2 || !slices.Equal(urls, []string{"http://127.5.12.1/a", "http://127.5.12.200/b"}) {
		t.Fatalf("recover block %v of subnet %d: %d pages %v, %v; want the two pages of 127.5.12.0/24", host, sub, n, urls, err)
	}
	if _, err := b.RecoverBlock(ctx, a.ID(), sub, netip.MustParseAddr("127.5.1.1")); StatusOf(err) != pb.Status_BAD_REQUEST {
		t.Fatalf("a block host of another subnet: got %v, want BAD_REQUEST", err)
	}
}

func TestProbeProtocol(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			c.Close()
		}
	}()
	port := uint16(ln.Addr().(*net.TCPAddr).Port)
	tn := newTestNet(t, 2, func(i int, c *Config, s *Services) {
		s.Measurer = nil // real TCP connect
		c.ProbePort = port
	})
	ctx := context.Background()
	a, b := tn.peers[0], tn.peers[1]
	res := a.Prober().Probe(ctx, netip.MustParseAddr("127.0.0.1"), []delegation.CrawlerID{a.CrawlerID(), b.CrawlerID()})
	for _, r := range res {
		if !r.OK || r.RTT <= 0 {
			t.Fatalf("probe %+v failed", r)
		}
	}
	// The guard refuses non-loopback targets before sending anything.
	_, err = a.ProbeOne(ctx, b.CrawlerID(), ProbeTarget{Addr: netip.MustParseAddr("192.0.2.1"), Port: port})
	if StatusOf(err) != pb.Status_REFUSED {
		t.Fatalf("non-loopback probe: got %v, want REFUSED", err)
	}
	// Outside the time window nothing is measured.
	b.cfg.ProbeWindow = Window{From: time.Duration(time.Now().UTC().Hour()+1) * time.Hour % (24 * time.Hour), To: time.Duration(time.Now().UTC().Hour()+2) * time.Hour % (24 * time.Hour)}
	if b.cfg.ProbeWindow.From != b.cfg.ProbeWindow.To {
		_, err = a.ProbeOne(ctx, b.CrawlerID(), ProbeTarget{Addr: netip.MustParseAddr("127.0.0.1"), Port: port})
		if StatusOf(err) != pb.Status_OUTSIDE_WINDOW {
			t.Fatalf("probe outside window: got %v", err)
		}
	}
}

func TestEndorseRefusesForeignOrStaleRecords(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	a, b := tn.peers[0], tn.peers[1]
	ctx := context.Background()
	rec := delegation.Record{Subnet: 3, Snapshot: a.snap, Owner: b.CrawlerID(), OwnerRTT: 5 * time.Millisecond,
		Epoch: 1, DecidedBy: a.CrawlerID(), At: time.Now()}
	if _, err := a.Directory().Publish(ctx, rec); err != nil {
		t.Fatalf("endorsed publish: %v", err)
	}
	stale := rec
	stale.At = time.Now().Add(-time.Hour)
	stale.Epoch = 2
	m, _ := toPB(stale)
	if _, err := a.endorse(ctx, b.ID(), m); StatusOf(err) != pb.Status_BAD_REQUEST {
		t.Fatalf("stale record endorsed: %v", err)
	}
	other := rec
	other.Owner = tn.peers[2].CrawlerID()
	m, _ = toPB(other)
	if _, err := a.endorse(ctx, b.ID(), m); StatusOf(err) != pb.Status_BAD_REQUEST {
		t.Fatalf("record naming another owner endorsed: %v", err)
	}
	// An RTT the owner never reported to the decider is refused once it has
	// reported one for that subnet.
	b.probes.add(a.ID(), netip.MustParseAddr("127.0.0.9"), 9*time.Millisecond)
	lie := rec
	lie.Subnet = tn.tree.SmallestNonUnary(netip.MustParseAddr("127.0.0.9"))
	lie.OwnerRTT = time.Millisecond
	m, _ = toPB(lie)
	if _, err := a.endorse(ctx, b.ID(), m); StatusOf(err) != pb.Status_REFUSED {
		t.Fatalf("implausible rtt endorsed: %v", err)
	}
	// Publish says so as delegation.ErrRefused: load balancing leaves a
	// subnet whose move is refused where it is.
	lie.Epoch = 3
	if _, err := a.Directory().Publish(ctx, lie); !errors.Is(err, delegation.ErrRefused) {
		t.Fatalf("publish of a refused record: %v, want delegation.ErrRefused", err)
	}
	// A record that claims no measurement (a blind or random decision)
	// is endorsed: there is nothing to check, and 0 is not a lie.
	blind := lie
	blind.OwnerRTT = 0
	m, _ = toPB(blind)
	if _, err := a.endorse(ctx, b.ID(), m); err != nil {
		t.Fatalf("unmeasured record refused: %v", err)
	}
}

func TestKeyFilePersistsIdentity(t *testing.T) {
	path := t.TempDir() + "/id/key"
	k1, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	k2, err := LoadOrCreateKey(path)
	if err != nil {
		t.Fatal(err)
	}
	if !k1.Equals(k2) {
		t.Fatal("identity changed across loads")
	}
	st, _ := os.Stat(path)
	if st.Mode().Perm() != 0o600 {
		t.Fatalf("key file mode %v", st.Mode().Perm())
	}
	os.WriteFile(path, []byte("garbage"), 0o600)
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Fatal("garbage key accepted")
	}
}

func TestHostConfig(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ConnHighWater = cfg.MaxConns
	if err := cfg.Validate(); err == nil {
		t.Fatal("high water at the rcmgr limit accepted")
	}
	// PSK networks refuse QUIC.
	psk := t.TempDir() + "/swarm.key"
	os.WriteFile(psk, []byte("/key/swarm/psk/1.0.0/\n/base16/\n"+fmt.Sprintf("%064x", 12345)+"\n"), 0o600)
	cfg = DefaultConfig()
	cfg.PSKFile = psk
	cfg.ListenAddrs = []string{"/ip4/127.0.0.1/udp/0/quic-v1"}
	if _, err := NewHost(cfg); err == nil {
		t.Fatal("QUIC with PSK accepted")
	}
	// TCP + QUIC hosts with the real resource manager talk over QUIC.
	mk := func(addrs ...string) *Config {
		c := DefaultConfig()
		c.ListenAddrs = addrs
		return &c
	}
	h1, err := NewHost(*mk("/ip4/127.0.0.1/tcp/0", "/ip4/127.0.0.1/udp/0/quic-v1"))
	if err != nil {
		t.Fatal(err)
	}
	defer h1.Close()
	h2, err := NewHost(*mk("/ip4/127.0.0.1/udp/0/quic-v1"))
	if err != nil {
		t.Fatal(err)
	}
	defer h2.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	if err := h2.Connect(ctx, h1.Peerstore().PeerInfo(h1.ID())); err != nil {
		t.Fatal(err)
	}
	// Two PSK hosts on TCP connect; a host without the key cannot.
	c := mk("/ip4/127.0.0.1/tcp/0")
	c.PSKFile = psk
	p1, err := NewHost(*c)
	if err != nil {
		t.Fatal(err)
	}
	defer p1.Close()
	p2, err := NewHost(*c)
	if err != nil {
		t.Fatal(err)
	}
	defer p2.Close()
	if err := p2.Connect(ctx, p1.Peerstore().PeerInfo(p1.ID())); err != nil {
		t.Fatalf("psk peers: %v", err)
	}
	outsider, err := NewHost(*mk("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer outsider.Close()
	octx, ocancel := context.WithTimeout(ctx, 3*time.Second)
	defer ocancel()
	if err := outsider.Connect(octx, p1.Peerstore().PeerInfo(p1.ID())); err == nil {
		t.Fatal("peer without the PSK connected to a private network")
	}
	_ = errors.New
}

// TestRoutingTableRepair: a connected member missing from the DHT routing
// table (kad-dht drops a peer whose FIND_NODE lookup check failed, and
// refills only below 10 peers) is put back by the overlay's repair.
func TestRoutingTableRepair(t *testing.T) {
	tn := newTestNet(t, 13, nil)
	p := tn.peers[0]
	victim := tn.peers[5].ID()
	rt := p.DHT().RoutingTable()
	rt.RemovePeer(victim)
	if rt.Find(victim) != "" {
		t.Fatal("RemovePeer left the peer in the routing table")
	}
	if p.Host().Network().Connectedness(victim) != network.Connected {
		t.Fatal("the member should still be connected")
	}
	deadline := time.Now().Add(3 * meshRepairEvery)
	for rt.Find(victim) == "" {
		if time.Now().After(deadline) {
			t.Fatalf("member %s still missing from a routing table of %d after %v", shortID(victim), rt.Size(), 3*meshRepairEvery)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// TestHandoffFlushManyMessagesPerOwner: when one owner's queued URLs need
// more than one message, every message reports (the flush once waited for
// ever on the second one, and with it every later hand-off and Close).
func TestHandoffFlushManyMessagesPerOwner(t *testing.T) {
	tn := newTestNet(t, 1, nil)
	p := tn.peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	var items []HandoffItem
	for _, a := range []string{"127.6.3.10", "127.7.3.10"} {
		ip := netip.MustParseAddr(a)
		if _, err := p.Delegate(ctx, ip); err != nil {
			t.Fatal(err)
		}
		it := HandoffItem{Subnet: tn.tree.SmallestNonUnary(ip), IP: ip}
		for i := range 3000 {
			it.URLs = append(it.URLs, fmt.Sprintf("http://%s/p/%d", a, i))
		}
		items = append(items, it)
	}
	if err := p.HandoffAll(ctx, items); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*10*time.Second, func() bool { return len(tn.sinks[0].got()) == 6000 && p.HandoffStats().Pending == 0 })
	if err := p.Handoff(ctx, items[0].Subnet, items[0].IP, "http://127.6.3.10/later"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*10*time.Second, func() bool { return len(tn.sinks[0].got()) == 6001 && p.HandoffStats().Pending == 0 })
}

// memLedger records what HandoffLedger.Delivered is told.
type memLedger struct {
	mu  sync.Mutex
	got map[delegation.CrawlerID][]string
}

func (l *memLedger) Delivered(owner delegation.CrawlerID, urls []string) error {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.got == nil {
		l.got = map[delegation.CrawlerID][]string{}
	}
	l.got[owner] = append(l.got[owner], urls...)
	return nil
}

func (l *memLedger) snapshot() map[delegation.CrawlerID][]string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return maps.Clone(l.got)
}

// TestHandoffLedgerRecordsTheOwnerThatAcknowledged: URLs spooled for no
// owner (none could be decided when they were found) or for an owner that
// is gone reach the subnet's owner at a flush; the ledger is told which
// owner acknowledged them, so they are routed again if it dies. URLs that
// reach the owner they were routed to are the sender's to record, unless
// others of their subnet and block were spooled otherwise (the spool keeps
// one owner a block: all of them are told then).
func TestHandoffLedgerRecordsTheOwnerThatAcknowledged(t *testing.T) {
	ledger := &memLedger{}
	tn := newTestNet(t, 2, func(i int, _ *Config, s *Services) {
		if i == 0 {
			s.Ledger = ledger
		}
	})
	p, other := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	var ips []netip.Addr
	var ds []delegation.Decision
	for i := 1; i < 250 && len(ips) < 4; i++ {
		a := netip.AddrFrom4([4]byte{127, byte(i), 3, 10})
		d, err := p.Delegate(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner == other.CrawlerID() {
			ips, ds = append(ips, a), append(ds, d)
		}
	}
	if len(ips) < 4 {
		t.Fatalf("setup: %d subnets of 127.x.3.10 delegated to the other peer, want 4", len(ips))
	}
	item := func(k int, path string, owner delegation.CrawlerID) HandoffItem {
		it := HandoffItem{Subnet: ds[k].Subnet, IP: ips[k], URLs: []string{fmt.Sprintf("http://%v/%s", ips[k], path)}, Owner: owner}
		if owner != "" {
			it.Epoch = ds[k].Record.Epoch
		}
		return it
	}
	const gone = delegation.CrawlerID("12D3KooWGoneGoneGoneGoneGoneGoneGoneGoneGoneGoneGone")
	to := other.CrawlerID()
	items := []HandoffItem{
		item(0, "routed", to),
		item(1, "undecided", ""),
		item(2, "gone", gone),
		item(3, "undecided-first", ""), item(3, "routed-after", to), // one block
	}
	for _, batch := range [][]HandoffItem{items[:1], items[1:2], items[2:3], items[3:]} {
		if err := p.HandoffAll(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	waitFor(t, slowdown*10*time.Second, func() bool { return len(tn.sinks[1].got()) == len(items) && p.HandoffStats().Pending == 0 })
	got := ledger.snapshot()
	var want []string
	for _, it := range items[1:] {
		want = append(want, it.URLs[0])
	}
	slices.Sort(got[to])
	slices.Sort(want)
	if len(got) != 1 || !slices.Equal(got[to], want) {
		t.Fatalf("ledger told %v; want %s told of %v (not the URL routed to it alone)", got, to, want)
	}
}
