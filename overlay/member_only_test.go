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
