package overlay

import (
	"context"
	"crypto/rand"
	"encoding/binary"
	"net/netip"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/overlay/swim"
)

func newPeerID(t testing.TB) peer.ID {
	t.Helper()
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// In an open network, the identities one neighbour relays become members
// only up to IdentitiesPerPeer (20,000 identities announced over
// one connection all became crawlers); they are judged by this peer's pace
// (a heartbeat that claims a minute's interval does not keep its author a
// member for three), and one pruned frees its place. Heartbeats go through
// the membership topic's validator as gossipsub delivers them, from a real
// neighbour; time is the limits' clock.
func TestOpenNetworkIdentityLimits(t *testing.T) {
	cfg := TestnetConfig()
	cfg.Membership = MembershipHeartbeat // (TestOpenNetworkIdentityLimitsSWIM: the same for SWIM)
	cfg.IdentitiesPerPeer = 16
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	now := time.Now()
	p.now = func() time.Time { return now }
	relay := rawHost(t)
	relay.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	if err := relay.Connect(context.Background(), peer.AddrInfo{ID: p.ID(), Addrs: p.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	// heartbeat: author's heartbeat, claiming a 60 s interval, relayed by
	// relay; what the validator says, and the member table after it
	heartbeat := func(author peer.ID, seq uint64) pubsub.ValidationResult {
		t.Helper()
		hb := &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: now.UnixNano(), StartUnixNano: now.Add(-time.Minute).UnixNano(),
			IntervalMs: 60_000, Snapshot: p.snap[:], Capacity: 1000}
		data, err := proto.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		msg := &pubsub.Message{Message: &pubsubpb.Message{From: []byte(author), Data: data}}
		res := p.validateHeartbeat(context.Background(), relay.ID(), msg)
		if res == pubsub.ValidationAccept {
			p.members.observe(author, msg.ValidatorData.(*pb.Heartbeat), now)
		}
		return res
	}
	sybils := make([]peer.ID, 100)
	accepted := 0
	for i := range sybils {
		sybils[i] = newPeerID(t)
		if heartbeat(sybils[i], 1) == pubsub.ValidationAccept {
			accepted++
		}
	}
	if accepted != cfg.IdentitiesPerPeer {
		t.Fatalf("%d of 100 identities relayed by one neighbour accepted, want %d", accepted, cfg.IdentitiesPerPeer)
	}
	if n := len(p.members.Live()); n != 1+cfg.IdentitiesPerPeer {
		t.Fatalf("%d members live, want this peer and %d", n, cfg.IdentitiesPerPeer)
	}
	if heartbeat(sybils[0], 2) != pubsub.ValidationAccept {
		t.Fatal("a member's next heartbeat refused")
	}
	// silent past this peer's pace: the sybils are pruned (their claimed
	// minute notwithstanding), the one that kept heartbeating is not
	now = now.Add(p.idLimits.silence / 2)
	heartbeat(sybils[0], 3)
	now = now.Add(p.idLimits.silence/2 + time.Second)
	if heartbeat(sybils[0], 4) != pubsub.ValidationAccept {
		t.Fatal("a member that heartbeats refused")
	}
	if got := p.idLimits.members(); got != 1 {
		t.Fatalf("%d identities counted after the silence, want 1", got)
	}
	if n := len(p.members.Live()); n != 2 {
		t.Fatalf("%d members live after the silence, want this peer and the one heartbeating", n)
	}
	// their places free, at identityRate a second: a second's worth now
	now = now.Add(time.Second)
	accepted = 0
	for range 40 {
		if heartbeat(newPeerID(t), 1) == pubsub.ValidationAccept {
			accepted++
		}
	}
	if accepted == 0 || accepted > cfg.IdentitiesPerPeer-1 {
		t.Fatalf("%d new identities accepted after the prune, want 1..%d", accepted, cfg.IdentitiesPerPeer-1)
	}
}

// Per IP, per neighbour and per second, on the limits alone.
func TestIdentityLimitsCount(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	l := newIdentityLimits(2, 3, 10*time.Second)
	ip := netip.MustParseAddr("198.51.100.7")
	a, b, c, r := peer.ID("a"), peer.ID("b"), peer.ID("c"), peer.ID("relay")
	// over their own connections from one IP: two
	for i, id := range []peer.ID{a, b, c} {
		ok, _ := l.admit(id, id, ip, now)
		if ok != (i < 2) {
			t.Fatalf("identity %d from one IP: admitted %v", i+1, ok)
		}
	}
	if ok, _ := l.admit(c, c, netip.MustParseAddr("198.51.100.8"), now); !ok {
		t.Fatal("an identity from another IP refused")
	}
	// relayed by one neighbour: three, whatever IP the neighbour has
	n := 0
	for i := range 10 {
		if ok, _ := l.admit(peer.ID(rune('A'+i)), r, ip, now); ok {
			n++
		}
	}
	if n != 3 {
		t.Fatalf("%d identities relayed by one neighbour, want 3", n)
	}
	// silent: pruned, and returned
	now = now.Add(11 * time.Second)
	ok, pruned := l.admit(a, a, ip, now)
	if !ok || len(pruned) != 6 {
		t.Fatalf("after the silence: admitted %v, pruned %d, want all 6", ok, len(pruned))
	}
}

// Under SWIM the same limits hold for the records a neighbour's messages
// carry: of 100 identities one neighbour introduces, IdentitiesPerPeer
// become members and the rest are refused; an identity that does not
// answer its probes is declared dead by the protocol, which frees its
// place (SWIM sends nothing while a member answers, so silence on the
// wire is no reason), and new identities are taken again at identityRate.
// Alone with them, the peer is their only observer: it probes its ring
// successors, so at least one dies per detection time.
func TestOpenNetworkIdentityLimitsSWIM(t *testing.T) {
	const limit = 4
	cfg := TestnetConfig()
	cfg.Membership = MembershipSWIM
	cfg.HeartbeatInterval = 500 * time.Millisecond
	cfg.IdentitiesPerPeer = limit
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*60*time.Second)
	defer cancel()
	relay := rawHost(t)
	if err := relay.Connect(ctx, peer.AddrInfo{ID: p.ID(), Addrs: p.h.Addrs()}); err != nil {
		t.Fatal(err)
	}
	newIdentity := func() (peer.ID, []byte) {
		sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPrivateKey(sk)
		now := time.Now()
		hb, err := proto.Marshal(&pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: now.UnixNano(), StartUnixNano: now.Add(-time.Minute).UnixNano(),
			IntervalMs: 1000, Snapshot: p.snap[:], Capacity: 1000})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := sealSWIMRecord(sk, id, hb)
		if err != nil {
			t.Fatal(err)
		}
		return id, rec
	}
	// introduce sends the records, 50 a message, from the relay
	introduce := func(recs [][]byte) {
		t.Helper()
		for len(recs) > 0 {
			n := min(len(recs), 50)
			m := swim.Msg{Kind: swim.MsgGossip}
			for _, r := range recs[:n] {
				m.Updates = append(m.Updates, swim.Update{Kind: swim.UpAlive, Record: r})
			}
			recs = recs[n:]
			s, err := relay.NewStream(ctx, p.ID(), ProtoSWIM)
			if err != nil {
				t.Fatal(err)
			}
			body := m.Encode()
			if _, err := s.Write(append(binary.AppendUvarint(nil, uint64(len(body))), body...)); err != nil {
				t.Fatal(err)
			}
			s.Close()
		}
	}
	known := func(ids []peer.ID) int {
		n := 0
		for _, id := range ids {
			if _, ok := p.Members().Member(id); ok {
				n++
			}
		}
		return n
	}
	refused := func() float64 { return counterValue(t, p.metrics.swimRefused) }
	var sybils []peer.ID
	var recs [][]byte
	for range 100 {
		id, rec := newIdentity()
		sybils, recs = append(sybils, id), append(recs, rec)
	}
	introduce(recs)
	waitFor(t, slowdown*10*time.Second, func() bool { return refused() == 100-limit })
	if n := known(sybils); n != limit {
		t.Fatalf("%d of 100 identities introduced by one neighbour are members, want %d", n, limit)
	}
	// they answer no probe: the protocol declares them dead, which frees
	// their places. Every helper the peer could ask is one of them and
	// never nacks, so Lifeguard reads each miss as the peer's own slowness
	// and stretches its probe period: each death takes the unhealthy
	// detection time.
	dead := SWIMConfig(cfg.HeartbeatInterval).DeadWithinUnhealthy(limit+1) + 2*cfg.HeartbeatInterval
	waitFor(t, slowdown*limit*dead, func() bool { return p.idLimits.members() == 0 })
	if n := len(p.Members().Live()); n != 1 {
		t.Fatalf("%d members live after the identities died, want this peer alone", n)
	}
	var more [][]byte
	var fresh []peer.ID
	for range 40 {
		id, rec := newIdentity()
		fresh, more = append(fresh, id), append(more, rec)
	}
	before := refused()
	introduce(more)
	waitFor(t, slowdown*10*time.Second, func() bool { return int(refused()-before)+known(fresh) == 40 })
	if n := known(fresh); n == 0 || n > limit {
		t.Fatalf("%d new identities taken after the deaths, want 1..%d", n, limit)
	}
}
