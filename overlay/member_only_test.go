package overlay

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// heardFrom makes id a live member of p's membership, as a valid heartbeat
// from it would (for tests that speak the wire from a bare host).
func heardFrom(p *Peer, id peer.ID) {
	p.members.observe(id, &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
		Snapshot: p.snap[:]}, time.Now())
}

// A hand-off from a peer that is not a member is refused before its
// message is read, nothing reaches the crawler, and the refusal is
// counted; once the peer is a member, the same hand-off is taken.
// (Issue 22: a non-member handed off 409,600 URLs in 5 s.)
func TestHandoffFromStrangerRefused(t *testing.T) {
	sink := &memSink{}
	p := openHandoffPeer(t, 2*time.Second, sink)
	stranger := rawHost(t)
	stranger.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	req := &pb.HandoffRequest{Version: wireVersion, BatchId: 1, Snapshot: p.snap[:], Batches: largeHandoff(10, 64)}
	var resp pb.HandoffResponse
	err := roundTrip(ctx, stranger, p.ID(), ProtoHandoff, maxHandoffMsg, 2*time.Second, req, &resp)
	if err == nil {
		err = remoteErr(p.ID(), ProtoHandoff, resp.Status, resp.Error)
	}
	if StatusOf(err) != pb.Status_REFUSED || !strings.Contains(err.Error(), "not a live member") {
		t.Fatalf("a stranger's hand-off: %v, want REFUSED: not a live member", err)
	}
	if n := len(sink.got()); n != 0 {
		t.Fatalf("%d URLs of a stranger's hand-off reached the crawler", n)
	}
	if v := counterValue(t, p.metrics.handoffsRefused); v != 1 {
		t.Fatalf("handoffs_refused_total %v, want 1", v)
	}
	heardFrom(p, stranger.ID())
	resp.Reset()
	if err := roundTrip(ctx, stranger, p.ID(), ProtoHandoff, maxHandoffMsg, 2*time.Second, req, &resp); err != nil {
		t.Fatal(err)
	}
	if resp.Status != pb.Status_OK || resp.Accepted != 10 || len(sink.got()) != 10 {
		t.Fatalf("a member's hand-off: %v accepted %d, crawler got %d", resp.Status, resp.Accepted, len(sink.got()))
	}
}

// The probe protocol is not a scanner (any peer had 1,200 ports
// probed in 244 ms): a stranger is refused; a member may ask only for the
// network's probe ports and, for an HTTP probe, only / or /robots.txt of
// the target address itself; and each requester is rate-limited.
func TestProbeScansNothing(t *testing.T) {
	p := openHandoffPeer(t, 2*time.Second, nil) // a modelled measurer: nothing is dialled
	asker := rawHost(t)
	asker.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	target := []byte{127, 6, 1, 1}
	subnet := uint32(p.tree.SmallestNonUnary(netip.AddrFrom4([4]byte(target))))
	probe := func(port uint32, url string) error {
		t.Helper()
		var resp pb.ProbeResponse
		err := roundTrip(ctx, asker, p.ID(), ProtoProbe, maxProbeMsg, 2*time.Second,
			&pb.ProbeRequest{Version: wireVersion, Target: target, Subnet: subnet, Port: port, Url: url}, &resp)
		if err != nil {
			return err
		}
		return remoteErr(p.ID(), ProtoProbe, resp.Status, resp.Error)
	}
	if err := probe(0, ""); StatusOf(err) != pb.Status_REFUSED || !strings.Contains(err.Error(), "not a live member") {
		t.Fatalf("a stranger's probe: %v, want REFUSED", err)
	}
	heardFrom(p, asker.ID())
	if err := probe(0, ""); err != nil {
		t.Fatalf("a member's probe: %v", err)
	}
	for _, c := range []struct {
		port uint32
		url  string
	}{
		{22, ""},
		{8081, ""},
		{0, "http://127.6.1.1/admin"},
		{0, "http://victim.example/"},
		{0, "http://127.6.1.2/"},
		{0, "http://127.6.1.1/?q=1"},
	} {
		if err := probe(c.port, c.url); StatusOf(err) != pb.Status_REFUSED {
			t.Errorf("probe of port %d url %q: %v, want REFUSED", c.port, c.url, err)
		}
	}
	for _, u := range []string{"http://127.6.1.1/", "http://127.6.1.1/robots.txt", "https://127.6.1.1"} {
		if err := probe(0, u); err != nil {
			t.Errorf("probe url %q: %v", u, err)
		}
	}
}

// A requester gets probeBurst probes at once, then probeRate a second.
func TestProbeRateLimit(t *testing.T) {
	var l peerLimiter
	now := time.Unix(1_700_000_000, 0)
	a, b := peer.ID("a"), peer.ID("b")
	for i := range probeBurst {
		if !l.allow(a, probeRate, probeBurst, now) {
			t.Fatalf("probe %d of a burst refused", i)
		}
	}
	if l.allow(a, probeRate, probeBurst, now) {
		t.Fatal("a probe past the burst allowed at the same instant")
	}
	if !l.allow(b, probeRate, probeBurst, now) {
		t.Fatal("another requester limited by the first")
	}
	if !l.allow(a, probeRate, probeBurst, now.Add(time.Second/probeRate)) {
		t.Fatal("the next token never came")
	}
}

// A dead member is forgotten once silent for memberForget (the
// member table kept every identity ever announced), and a heartbeat of its
// makes it a member again; a live one is kept however long. Time is the
// sweep's.
func TestDeadMembersForgotten(t *testing.T) {
	self, gone, alive := newKeyed(t), newKeyed(t), newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	gid, _ := peer.Decode(string(gone.id))
	aid, _ := peer.Decode(string(alive.id))
	m := newMembers(sid, delegation.Crawler{ID: self.id}, 5*time.Second, slog.Default())
	t0 := time.Now()
	m.started = t0.Add(-time.Hour) // past the grace for peers never heard of
	hb := func(seq uint64, at time.Time) *pb.Heartbeat {
		return &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: at.UnixNano(), StartUnixNano: t0.Add(-time.Minute).UnixNano(),
			IntervalMs: 1000, Snapshot: make([]byte, 32)}
	}
	m.observe(gid, hb(1, t0), t0)
	m.observe(aid, hb(1, t0), t0)
	m.sweep(t0.Add(6 * time.Second))
	if _, ok := m.Member(gid); !ok || m.IsLive(gone.id) {
		t.Fatal("a member silent past the failure timeout is not kept as dead")
	}
	end := t0.Add(memberForget + time.Second)
	for at := t0.Add(time.Second); !at.After(end); at = at.Add(time.Second) {
		m.observe(aid, hb(uint64(at.Sub(t0)/time.Second)+1, at), at)
	}
	m.sweep(end)
	if _, ok := m.Member(gid); ok {
		t.Fatalf("a member dead for %v still in the table", memberForget)
	}
	if m.IsLive(gone.id) {
		t.Fatal("a forgotten member is live")
	}
	if _, ok := m.Member(aid); !ok || !m.IsLive(alive.id) {
		t.Fatal("a live member was forgotten")
	}
	m.observe(gid, hb(2, end), end)
	if !m.IsLive(gone.id) {
		t.Fatal("a forgotten member's new heartbeat does not make it a member again")
	}
}

// A member's flood of slow-page events (each empties a record from every
// peer's cache) is applied up to the author's burst and rate, the rest
// ignored and counted (one member's flood emptied every cache).
func TestCalibrationFloodBounded(t *testing.T) {
	tn := newTestNet(t, 2, nil)
	a, b := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	before := counterValue(t, a.metrics.calibrationEvents)
	start := time.Now()
	const flood = 3 * calibrationBurst
	for i := range flood {
		b.Announce(ctx, &pb.CalibrationEvent{Kind: pb.CalibrationKind_RELEASED, Subnet: uint32(10 + i)})
		time.Sleep(3 * time.Millisecond) // (gossipsub's queues drop a burst of hundreds)
	}
	limited := func() float64 {
		return counterValue(t, a.metrics.gossipRejected.WithLabelValues(TopicCalibration, "rate_limited"))
	}
	// until the counts stop moving for half a second
	last, still := -1.0, time.Now()
	waitFor(t, 20*time.Second, func() bool {
		n := counterValue(t, a.metrics.calibrationEvents) + limited()
		if n != last {
			last, still = n, time.Now()
		}
		return n-before > calibrationBurst && time.Since(still) > 500*time.Millisecond
	})
	took := time.Since(start)
	applied := counterValue(t, a.metrics.calibrationEvents) - before
	if max := calibrationBurst + calibrationRate*took.Seconds() + 1; applied > max {
		t.Fatalf("%v of %d events applied in %v, want at most %.0f (burst %d, %d a second)", applied, flood, took, max, calibrationBurst, calibrationRate)
	}
	if limited() < flood/2 {
		t.Fatalf("%v events counted as rate-limited of %d sent, %v applied: the flood did not arrive", limited(), flood, applied)
	}
	t.Logf("%v of %d applied in %v, %v ignored", applied, flood, took.Round(time.Millisecond), limited())
}

// Only members have a peer endorse a record that names it owner: a
// stranger's request is refused before the record is looked at.
func TestEndorseFromStrangerRefused(t *testing.T) {
	tn := newTestNet(t, 1, nil)
	p := tn.peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := p.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	stranger := newKeyed(t)
	sid, _ := peer.Decode(string(stranger.id))
	rec := d.Record
	rec.DecidedBy, rec.At = stranger.id, time.Now()
	rec.Epoch = delegation.NextEpoch(rec.Epoch, rec.At)
	m, err := toPB(rec)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := proto.Marshal(m)
	if err != nil {
		t.Fatal(err)
	}
	st, msg, env := p.checkEndorse(sid, raw, 0)
	if st != pb.Status_REFUSED || env != nil || !strings.Contains(msg, "not a live member") {
		t.Fatalf("a stranger's endorsement request: %v %q (envelope %d bytes), want REFUSED", st, msg, len(env))
	}
	heardFrom(p, sid)
	if st, msg, _ := p.checkEndorse(sid, raw, 0); st == pb.Status_REFUSED && strings.Contains(msg, "member") {
		t.Fatalf("a member's request refused as a stranger's: %q", msg)
	}
}

// A member's hand-offs are bounded (409,600 URLs in 5 s): past
// its burst it is answered UNAVAILABLE with the reason, nothing of the
// refused message reaches the crawler, and the bucket refills with time;
// a batch whose address is not in its subnet is refused.
func TestHandoffQuota(t *testing.T) {
	sink := &memSink{}
	p := openHandoffPeer(t, 5*time.Second, sink)
	now := time.Now()
	p.now = func() time.Time { return now }
	member := rawHost(t)
	member.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	heardFrom(p, member.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	send := func(batches []*pb.HandoffBatch) (*pb.HandoffResponse, error) {
		t.Helper()
		var resp pb.HandoffResponse
		err := roundTrip(ctx, member, p.ID(), ProtoHandoff, maxHandoffMsg, 5*time.Second,
			&pb.HandoffRequest{Version: wireVersion, BatchId: 1, Snapshot: p.snap[:], Batches: batches}, &resp)
		return &resp, err
	}
	full := largeHandoff(maxHandoffURLs, 64)
	for i := range handoffBurst / maxHandoffURLs {
		if resp, err := send(full); err != nil || resp.Status != pb.Status_OK {
			t.Fatalf("message %d within the burst: %v %v %s", i, err, resp.Status, resp.Error)
		}
	}
	resp, err := send(full)
	if err != nil || resp.Status != pb.Status_UNAVAILABLE || !strings.Contains(resp.Error, "rate limited") {
		t.Fatalf("past the burst: %v %v %q, want UNAVAILABLE: rate limited", err, resp.Status, resp.Error)
	}
	if got := len(sink.got()); got != handoffBurst {
		t.Fatalf("the crawler got %d URLs, want the burst's %d", got, handoffBurst)
	}
	now = now.Add(3 * time.Second) // 6,000 tokens back: one full message
	if resp, err := send(full); err != nil || resp.Status != pb.Status_OK {
		t.Fatalf("after the refill: %v %v %s", err, resp.Status, resp.Error)
	}
	now = now.Add(time.Hour)
	outside := largeHandoff(1, 64)
	outside[0].Addr = []byte{10, 9, 9, 9}
	if resp, err := send(outside); err != nil || resp.Status != pb.Status_BAD_REQUEST || !strings.Contains(resp.Error, "not in it") {
		t.Fatalf("an address outside its subnet: %v %v %q", err, resp.Status, resp.Error)
	}
}
