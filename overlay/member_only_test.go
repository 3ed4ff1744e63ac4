package overlay

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

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

// The probe protocol is not a scanner (issue 22: any peer had 1,200 ports
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
	probe := func(port uint32, url string) error {
		t.Helper()
		var resp pb.ProbeResponse
		err := roundTrip(ctx, asker, p.ID(), ProtoProbe, maxProbeMsg, 2*time.Second,
			&pb.ProbeRequest{Version: wireVersion, Target: target, Port: port, Url: url}, &resp)
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
	var l probeLimiter
	now := time.Unix(1_700_000_000, 0)
	a, b := peer.ID("a"), peer.ID("b")
	for i := range probeBurst {
		if !l.allow(a, now) {
			t.Fatalf("probe %d of a burst refused", i)
		}
	}
	if l.allow(a, now) {
		t.Fatal("a probe past the burst allowed at the same instant")
	}
	if !l.allow(b, now) {
		t.Fatal("another requester limited by the first")
	}
	if !l.allow(a, now.Add(time.Second/probeRate)) {
		t.Fatal("the next token never came")
	}
}
