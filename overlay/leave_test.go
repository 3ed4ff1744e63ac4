package overlay

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"net/netip"
	"path/filepath"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/overlay/swim"
)

// neverFails is a failure timeout no test outlives: a member declared dead
// under it was declared so by its leave, not by the failure detector.
const neverFails = time.Hour

// memberEvents collects p's membership events about one peer.
func memberEvents(p *Peer, about peer.ID) <-chan MemberEvent {
	ch := make(chan MemberEvent, 16)
	p.Members().OnChange(func(ev MemberEvent) {
		if ev.Peer == about {
			select {
			case ch <- ev:
			default:
			}
		}
	})
	return ch
}

// nextEvent waits for the next event on ch (the limit only stops a broken
// test; what is asserted is which event comes).
func nextEvent(t *testing.T, ch <-chan MemberEvent, what string) MemberEvent {
	t.Helper()
	select {
	case ev := <-ch:
		return ev
	case <-time.After(slowdown * 30 * time.Second):
		t.Fatalf("no membership event: waited for %s", what)
	}
	return MemberEvent{}
}

// awaitLive returns once p counts id a live member: at once if it does
// already (ch, subscribed after id's peer opened, may have missed its join),
// else at the next event on ch, which must be a join.
func awaitLive(t *testing.T, p *Peer, id peer.ID, ch <-chan MemberEvent, what string) {
	t.Helper()
	if info, ok := p.Members().Member(id); ok && !info.Dead {
		return
	}
	if ev := nextEvent(t, ch, what); ev.Dead {
		t.Fatalf("%+v, want %s", ev, what)
	}
}

// nextDeath is nextEvent after awaitLive: it skips the join event awaitLive
// may have left on ch.
func nextDeath(t *testing.T, ch <-chan MemberEvent, what string) MemberEvent {
	t.Helper()
	for {
		if ev := nextEvent(t, ch, what); ev.Dead {
			return ev
		}
	}
}

// A peer that closes announces its leave: the others declare it dead at
// once with reason "left" — the failure timeout is an hour, so nothing else
// explains the death — and count it so; the same peer started again (same
// key, a later run) is a member again at its first heartbeat, although its
// sequence starts from 1 within the failure timeout of its leave.
func TestLeaveDeclaredDeadAtOnceAndRestartRevives(t *testing.T) {
	forEachProtocol(t, testLeaveDeclaredDeadAtOnceAndRestartRevives)
}

func testLeaveDeclaredDeadAtOnceAndRestartRevives(t *testing.T, membership string) {
	keyDir := t.TempDir()
	tn := newTestNet(t, 3, func(i int, c *Config, _ *Services) {
		c.Membership = membership
		c.FailureTimeout = neverFails
		if i == 2 {
			c.KeyFile = filepath.Join(keyDir, "leaver.key")
		}
	})
	leaver := tn.peers[2]
	id := leaver.ID()
	events := []<-chan MemberEvent{memberEvents(tn.peers[0], id), memberEvents(tn.peers[1], id)}
	if err := leaver.Close(); err != nil {
		t.Fatal(err)
	}
	for i, ch := range events {
		ev := nextEvent(t, ch, "the leaver declared dead")
		if !ev.Dead || ev.Reason != ReasonLeft || ev.Silence != 0 {
			t.Fatalf("peer %d: first event about the closed peer %+v, want dead with reason %q", i, ev, ReasonLeft)
		}
		p := tn.peers[i]
		if p.Members().IsPeerLive(id) {
			t.Errorf("peer %d still lists the peer that left as live", i)
		}
		if n := counterValue(t, p.metrics.deaths.WithLabelValues(ReasonLeft)); n != 1 {
			t.Errorf("peer %d counted %v deaths by leave, want 1", i, n)
		}
		if n := counterValue(t, p.metrics.deaths.WithLabelValues(ReasonFailed)); n != 0 {
			t.Errorf("peer %d counted %v deaths by failure, want 0", i, n)
		}
	}

	// Restart: same identity, bootstrapped to peer 0.
	cfg := TestnetConfig()
	cfg.Membership = membership
	cfg.FailureTimeout = neverFails
	cfg.KeyFile = filepath.Join(keyDir, "leaver.key")
	cfg.CrawlerAddr = leaver.cfg.CrawlerAddr
	cfg.Bootstrap = []string{tn.peers[0].h.Addrs()[0].String() + "/p2p/" + tn.peers[0].ID().String()}
	again := openPeer(t, tn.tree, cfg, Services{})
	if again.ID() != id {
		t.Fatalf("restarted with another identity %s, want %s", again.ID(), id)
	}
	for i, ch := range events {
		if ev := nextEvent(t, ch, "the restarted peer's return"); ev.Dead {
			t.Fatalf("peer %d: event %+v after the restart, want the peer revived", i, ev)
		}
		if !tn.peers[i].Members().IsPeerLive(id) {
			t.Errorf("peer %d does not list the restarted peer as live", i)
		}
	}
}

// signedMessage is a gossipsub message on topic whose From is author,
// signed with sk as pubsub signs (sk need not be author's key).
func signedMessage(t *testing.T, topic string, author peer.ID, sk crypto.PrivKey, data []byte, seqno uint64) *pubsubpb.Message {
	t.Helper()
	m := &pubsubpb.Message{From: []byte(author), Data: data, Seqno: binary.BigEndian.AppendUint64(nil, seqno), Topic: &topic}
	b, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	if m.Signature, err = sk.Sign(append([]byte(pubsub.SignPrefix), b...)); err != nil {
		t.Fatal(err)
	}
	return m
}

// A leave is the author's own: a forged leave for another peer — a
// heartbeat with leaving set whose From names that peer, signed by the
// forger (under SWIM: a leaving record naming that peer, signed by the
// forger) — is rejected by the signature check and changes nothing, while
// the forger, speaking the same wire, can join and then leave itself.
func TestForgedLeaveRejected(t *testing.T) {
	t.Run("heartbeat", testForgedLeaveRejectedHeartbeat)
	t.Run("swim", testForgedLeaveRejectedSWIM)
}

// checkForgedLeaveIgnored checks that b, after a forged leave of victim and
// the forger's own join and leave, still holds victim live, told nothing of
// it (victimEvents) and counted one death by leave (the forger's).
func checkForgedLeaveIgnored(t *testing.T, b, victim *Peer, victimEvents <-chan MemberEvent) {
	t.Helper()
	if !b.Members().IsPeerLive(victim.ID()) {
		t.Error("a forged leave made the victim dead")
	}
	select {
	case ev := <-victimEvents:
		t.Errorf("event about the victim after a forged leave: %+v", ev)
	default:
	}
	if n := counterValue(t, b.metrics.deaths.WithLabelValues(ReasonLeft)); n != 1 {
		t.Errorf("%v deaths by leave counted, want 1 (the forger's own)", n)
	}
}

func testForgedLeaveRejectedHeartbeat(t *testing.T) {
	tn := newTestNet(t, 2, func(_ int, c *Config, _ *Services) {
		c.Membership = MembershipHeartbeat
		c.FailureTimeout = neverFails
	})
	victim, b := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()

	m := rawHost(t)
	if err := m.Connect(ctx, b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	s, err := m.NewStream(ctx, b.ID(), pubsub.GossipSubID_v11)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Reset()
	sk := m.Peerstore().PrivKey(m.ID())
	hb := func(seq uint64, leaving bool) []byte {
		now := time.Now()
		data, err := proto.Marshal(&pb.Heartbeat{Version: wireVersion, Seq: seq, AtUnixNano: now.UnixNano(),
			StartUnixNano: now.Add(-time.Minute).UnixNano(), IntervalMs: 1000, Snapshot: b.snap[:], Leaving: leaving})
		if err != nil {
			t.Fatal(err)
		}
		return data
	}
	send := func(msgs ...*pubsubpb.Message) {
		t.Helper()
		sub := true
		topic := TopicMembership
		rpc := &pubsubpb.RPC{Subscriptions: []*pubsubpb.RPC_SubOpts{{Subscribe: &sub, Topicid: &topic}}, Publish: msgs}
		if _, err := protodelim.MarshalTo(s, rpc); err != nil {
			t.Fatal(err)
		}
	}
	victimEvents := memberEvents(b, victim.ID())
	forgerEvents := memberEvents(b, m.ID())
	rejected := func() float64 {
		return counterValue(t, b.metrics.gossipRejected.WithLabelValues(TopicMembership, pubsub.RejectInvalidSignature))
	}

	// the forgery: From is the victim, the signature the forger's
	send(signedMessage(t, TopicMembership, victim.ID(), sk, hb(1_000_000, true), 1))
	waitFor(t, slowdown*30*time.Second, func() bool { return rejected() == 1 })
	// the same wire carries the forger's own heartbeat, then its own leave
	send(signedMessage(t, TopicMembership, m.ID(), sk, hb(1, false), 2))
	if ev := nextEvent(t, forgerEvents, "the forger's own heartbeat"); ev.Dead {
		t.Fatalf("forger's heartbeat: %+v, want a join", ev)
	}
	send(signedMessage(t, TopicMembership, m.ID(), sk, hb(2, true), 3))
	if ev := nextEvent(t, forgerEvents, "the forger's own leave"); !ev.Dead || ev.Reason != ReasonLeft {
		t.Fatalf("forger's own leave: %+v, want dead with reason %q", ev, ReasonLeft)
	}

	checkForgedLeaveIgnored(t, b, victim, victimEvents)
}

func testForgedLeaveRejectedSWIM(t *testing.T) {
	tn := newTestNet(t, 2, func(_ int, c *Config, _ *Services) { c.Membership = MembershipSWIM })
	victim, b := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()

	m := rawHost(t)
	if err := m.Connect(ctx, b.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	sk := m.Peerstore().PrivKey(m.ID())
	// record is member's record as the forger seals it (with its own key)
	record := func(member peer.ID, seq uint64, leaving bool) []byte {
		now := time.Now()
		hb, err := proto.Marshal(&pb.Heartbeat{Version: wireVersion, Seq: seq, AtUnixNano: now.UnixNano(),
			StartUnixNano: now.Add(-time.Minute).UnixNano(), IntervalMs: 1000, Snapshot: b.snap[:], Leaving: leaving})
		if err != nil {
			t.Fatal(err)
		}
		rec, err := sealSWIMRecord(sk, member, hb)
		if err != nil {
			t.Fatal(err)
		}
		return rec
	}
	send := func(rec []byte) {
		t.Helper()
		s, err := m.NewStream(ctx, b.ID(), ProtoSWIM)
		if err != nil {
			t.Fatal(err)
		}
		body := swim.Msg{Kind: swim.MsgGossip, Updates: []swim.Update{{Kind: swim.UpAlive, Record: rec}}}.Encode()
		if _, err := s.Write(append(binary.AppendUvarint(nil, uint64(len(body))), body...)); err != nil {
			t.Fatal(err)
		}
		s.Close()
	}
	victimEvents := memberEvents(b, victim.ID())
	forgerEvents := memberEvents(b, m.ID())
	refused := func() float64 { return counterValue(t, b.metrics.swimRefused) }

	// the forgery: the victim's leaving record, the forger's signature
	send(record(victim.ID(), 1_000_000, true))
	waitFor(t, slowdown*30*time.Second, func() bool { return refused() == 1 })
	// the forger joins by a full-state exchange with its own record, then
	// leaves by its own leaving record
	s, err := m.NewStream(ctx, b.ID(), ProtoSWIMSync)
	if err != nil {
		t.Fatal(err)
	}
	if err := writeRecords(s, [][]byte{record(m.ID(), 1, false)}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	if _, err := readRecords(bufio.NewReader(s)); err != nil {
		t.Fatalf("the forger's own join refused: %v", err)
	}
	s.Close()
	if ev := nextEvent(t, forgerEvents, "the forger's own record"); ev.Dead {
		t.Fatalf("forger's record: %+v, want a join", ev)
	}
	send(record(m.ID(), 2, true))
	if ev := nextEvent(t, forgerEvents, "the forger's own leave"); !ev.Dead || ev.Reason != ReasonLeft {
		t.Fatalf("forger's own leave: %+v, want dead with reason %q", ev, ReasonLeft)
	}

	checkForgedLeaveIgnored(t, b, victim, victimEvents)
	if n := refused(); n != 1 {
		t.Errorf("%v records refused, want 1 (the forgery)", n)
	}
}

// The ordering of heartbeats and leaves, without a network: a leave kills at
// once; heartbeats of the same run sent before it (delayed, replayed) do not
// revive; a later run does, even with a lower seq and within the failure
// timeout; a leave from a peer never heard alive is remembered, silently.
func TestMembersLeaveAndRestartOrdering(t *testing.T) {
	self, other, stranger := newKeyed(t), newKeyed(t), newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	oid, _ := peer.Decode(string(other.id))
	xid, _ := peer.Decode(string(stranger.id))
	m := newMembers(sid, delegation.Crawler{ID: self.id}, time.Hour, slog.Default())
	var evs []MemberEvent
	m.OnChange(func(ev MemberEvent) { evs = append(evs, ev) })
	t0 := time.Now()
	hb := func(start time.Time, seq uint64, at time.Time, leaving bool) *pb.Heartbeat {
		return &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: at.UnixNano(), StartUnixNano: start.UnixNano(), IntervalMs: 1000,
			Snapshot: make([]byte, 32), Leaving: leaving, Subnets: 1}
	}
	run1 := t0.Add(-time.Minute)
	m.observe(oid, hb(run1, 7, t0, false), t0)
	m.observe(oid, hb(run1, 9, t0.Add(2*time.Second), true), t0.Add(2*time.Second))
	if m.IsLive(other.id) || len(evs) != 2 || !evs[1].Dead || evs[1].Reason != ReasonLeft {
		t.Fatalf("after the leave: live %v, events %+v", m.IsLive(other.id), evs)
	}
	m.observe(oid, hb(run1, 8, t0.Add(time.Second), false), t0.Add(3*time.Second)) // sent before the leave
	if m.IsLive(other.id) || len(evs) != 2 {
		t.Fatalf("a heartbeat sent before the leave revived the peer: events %+v", evs)
	}
	run2 := t0.Add(3 * time.Second)
	m.observe(oid, hb(run2, 1, t0.Add(4*time.Second), false), t0.Add(4*time.Second))
	if !m.IsLive(other.id) || len(evs) != 3 || evs[2].Dead {
		t.Fatalf("the next run's first heartbeat: live %v, events %+v", m.IsLive(other.id), evs)
	}
	m.observe(oid, hb(run1, 10, t0.Add(5*time.Second), true), t0.Add(5*time.Second)) // the last run's leave, replayed
	if !m.IsLive(other.id) || len(evs) != 3 {
		t.Fatalf("a replayed leave of the last run killed the new one: events %+v", evs)
	}

	m.observe(xid, hb(run1, 3, t0, true), t0)
	m.observe(xid, hb(run1, 2, t0.Add(-time.Second), false), t0)
	if m.IsLive(stranger.id) || len(evs) != 3 {
		t.Fatalf("a peer known only by its leave: live %v, events %+v", m.IsLive(stranger.id), evs)
	}
}

// Regression: a peer restarted within the
// failure timeout counts its seq from 1 again, and its heartbeats were
// ignored as replays until the timeout had passed since its last run's last
// heartbeat — so peers declared it dead after it had already rejoined. Its
// later start time makes its first heartbeat count.
func TestRestartWithinTimeoutNotDeclaredDead(t *testing.T) {
	self, other := newKeyed(t), newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	oid, _ := peer.Decode(string(other.id))
	const timeout = 5 * time.Second
	m := newMembers(sid, delegation.Crawler{ID: self.id}, timeout, slog.Default())
	t0 := time.Now()
	hb := func(start time.Time, seq uint64, at time.Time) *pb.Heartbeat {
		return &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: at.UnixNano(), StartUnixNano: start.UnixNano(), IntervalMs: 1000,
			Snapshot: make([]byte, 32)}
	}
	m.observe(oid, hb(t0.Add(-time.Hour), 3600, t0), t0)
	// stopped without a leave (killed), back 2.5 s later; swept four
	// times a heartbeat, as runMembership does
	back := t0.Add(2500 * time.Millisecond)
	for i := range 6 {
		at := back.Add(time.Duration(i) * time.Second)
		m.observe(oid, hb(back, uint64(i+1), at), at)
		for k := range 4 {
			now := at.Add(time.Duration(k) * 250 * time.Millisecond)
			m.sweep(now)
			if !m.IsLive(other.id) {
				t.Fatalf("restarted peer declared dead %v after its last run's last heartbeat, heartbeating again since %v",
					now.Sub(t0), back.Sub(t0))
			}
		}
	}
}

// Leave needs no peer to tell, and Close after Leave announces nothing more.
func TestLeaveAloneThenClose(t *testing.T) {
	p := lonePeer(t, testTree(t))
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := p.Leave(ctx); err != nil {
		t.Fatal(err)
	}
	if data, err := p.nextHeartbeat(false); data != nil || err != nil {
		t.Fatalf("a heartbeat after the leave: %d bytes, %v", len(data), err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Regression (the defect it caught): a peer restarted with its key while
// its neighbour still held its last run's messages in gossipsub's history
// was offered them (IHAVE), asked for them, and pubsub counted each as an
// invalid delivery by the neighbour (a message "from itself"): within two or
// three restarts the neighbour was graylisted, and the restarted peer's
// heartbeats and leave never reached it. Restarted five times, the peer is
// revived and then declared left by its neighbour every time.
func TestRestartedPeerKeepsItsNeighbours(t *testing.T) {
	tree := testTree(t)
	cfg := TestnetConfig()
	cfg.FailureTimeout = neverFails
	a := openPeer(t, tree, cfg, Services{})
	key := filepath.Join(t.TempDir(), "restarting.key")
	var events <-chan MemberEvent
	for run := range 5 {
		c := TestnetConfig()
		c.FailureTimeout = neverFails
		c.KeyFile = key
		c.Bootstrap = []string{a.h.Addrs()[0].String() + "/p2p/" + a.ID().String()}
		b, err := Open(context.Background(), tree, c, Services{})
		if err != nil {
			t.Fatal(err)
		}
		if events == nil {
			events = memberEvents(a, b.ID())
		}
		awaitLive(t, a, b.ID(), events, fmt.Sprintf("run %d: the restarted peer live", run))
		// a gossip round or two, in which the neighbour offers this
		// peer's last run's messages
		time.Sleep(1500 * time.Millisecond)
		err = b.Close()
		if ev := nextDeath(t, events, "the restarted peer's leave"); ev.Reason != ReasonLeft {
			t.Fatalf("run %d: %+v, want dead with reason %q (Close: %v)", run, ev, ReasonLeft, err)
		}
		if n := counterValue(t, b.metrics.gossipRejected.WithLabelValues(TopicMembership, pubsub.RejectSelfOrigin)); n != 0 {
			t.Errorf("run %d: %v of its own messages reached pubsub, which counts them against the neighbour", run, n)
		}
	}
}

// A network's first peer, which has no bootstrap peer, stops cleanly and
// is started again on its key and address: the others heard it leave, and
// they redial it, so it is a member again without dialling anyone itself.
// Before, only members that failed were redialled, and it stayed alone.
func TestLeftMemberRedialled(t *testing.T) { forEachProtocol(t, testLeftMemberRedialled) }

func testLeftMemberRedialled(t *testing.T, membership string) {
	tree := testTree(t)
	key := filepath.Join(t.TempDir(), "first.key")
	cfg := TestnetConfig()
	cfg.Membership = membership
	cfg.FailureTimeout = neverFails
	cfg.KeyFile = key
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	first := openPeer(t, tree, cfg, Services{})
	id, addr := first.ID(), first.h.Addrs()[0]
	c := TestnetConfig()
	c.Membership = membership
	c.FailureTimeout = neverFails
	c.CrawlerAddr = netip.MustParseAddr("127.0.1.1")
	c.Bootstrap = []string{addr.String() + "/p2p/" + id.String()}
	other := openPeer(t, tree, c, Services{})
	events := memberEvents(other, id)
	awaitLive(t, other, id, events, "the first peer live")
	if err := first.Close(); err != nil {
		t.Fatal(err)
	}
	if ev := nextDeath(t, events, "the first peer's leave"); ev.Reason != ReasonLeft {
		t.Fatalf("%+v, want dead with reason %q", ev, ReasonLeft)
	}
	cfg.ListenAddrs = []string{addr.String()} // (no bootstrap: it dials nobody)
	again := openPeer(t, tree, cfg, Services{})
	if ev := nextEvent(t, events, "the first peer's return"); ev.Dead {
		t.Fatalf("%+v, want the restarted first peer live", ev)
	}
	back := memberEvents(again, other.ID())
	if _, heard := again.Members().Member(other.ID()); !heard {
		if ev := nextEvent(t, back, "the other peer heard by the restarted one"); ev.Dead {
			t.Fatalf("%+v, want the other peer live at the restarted one", ev)
		}
	}
}
