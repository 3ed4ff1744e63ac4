package overlay

import (
	"bufio"
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
)

// A member's hand-off is counted against its quota as it is read, not
// after: past its quota, a member that sent the first 64 KiB of a full
// message is answered UNAVAILABLE while the rest is still unsent; and each
// member has at most maxHandoffsInFlight messages read at once (a
// member's hand-off was read in full, up to 4 MiB, before the quota, and a
// member could have any number in flight). Time is the quota's clock.
func TestHandoffReadWithinQuota(t *testing.T) {
	sink := &memSink{}
	p := openHandoffPeer(t, 5*time.Second, sink)
	now := time.Now()
	p.now = func() time.Time { return now }
	member := rawHost(t)
	member.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	heardFrom(p, member.ID())
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	var full bytes.Buffer
	if _, err := protodelim.MarshalTo(&full, &pb.HandoffRequest{Version: wireVersion, BatchId: 1, Snapshot: p.snap[:],
		Batches: largeHandoff(maxHandoffURLs, 1000)}); err != nil {
		t.Fatal(err)
	}
	head := full.Bytes()[:64<<10]
	// open sends the first bytes of the message on a new stream and leaves
	// the rest unsent.
	open := func() network.Stream {
		t.Helper()
		s, err := member.NewStream(ctx, p.ID(), ProtoHandoff)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := s.Write(head); err != nil {
			t.Fatal(err)
		}
		return s
	}
	answer := func(s network.Stream) *pb.HandoffResponse {
		t.Helper()
		var resp pb.HandoffResponse
		if err := (protodelim.UnmarshalOptions{MaxSize: maxHandoffMsg}).UnmarshalFrom(bufio.NewReader(s), &resp); err != nil {
			t.Fatalf("no answer: %v", err)
		}
		return &resp
	}
	// the member spends its burst
	for i := range handoffBurst / maxHandoffURLs {
		var resp pb.HandoffResponse
		req := &pb.HandoffRequest{Version: wireVersion, BatchId: 1, Snapshot: p.snap[:], Batches: largeHandoff(maxHandoffURLs, 64)}
		if err := roundTrip(ctx, member, p.ID(), ProtoHandoff, maxHandoffMsg, 5*time.Second, req, &resp); err != nil || resp.Status != pb.Status_OK {
			t.Fatalf("message %d within the burst: %v %v %s", i, err, resp.Status, resp.Error)
		}
	}
	got := len(sink.got())
	s := open()
	if resp := answer(s); resp.Status != pb.Status_UNAVAILABLE || !strings.Contains(resp.Error, "URLs a second") {
		t.Fatalf("past its quota, the head of a message: %v %q, want UNAVAILABLE: rate limited", resp.Status, resp.Error)
	}
	s.Reset()
	if n := len(sink.got()); n != got {
		t.Fatalf("the crawler got %d URLs of a refused message", n-got)
	}

	// quota back: maxHandoffsInFlight messages are read at once, the next
	// is refused unread, and a held one completes
	now = now.Add(time.Hour)
	var held []network.Stream
	for range maxHandoffsInFlight {
		held = append(held, open())
	}
	for {
		p.handoffReads.mu.Lock()
		n := p.handoffReads.n[member.ID()]
		p.handoffReads.mu.Unlock()
		if n == maxHandoffsInFlight {
			break
		}
		select {
		case <-ctx.Done():
			t.Fatalf("%d of %d hand-offs being read", n, maxHandoffsInFlight)
		case <-time.After(10 * time.Millisecond):
		}
	}
	extra := open()
	if resp := answer(extra); resp.Status != pb.Status_UNAVAILABLE || !strings.Contains(resp.Error, "read at once") {
		t.Fatalf("hand-off %d in flight: %v %q, want UNAVAILABLE: at once", maxHandoffsInFlight+1, resp.Status, resp.Error)
	}
	extra.Reset()
	s = held[0]
	if _, err := s.Write(full.Bytes()[len(head):]); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	if resp := answer(s); resp.Status != pb.Status_OK || resp.Accepted != maxHandoffURLs {
		t.Fatalf("a held hand-off, completed: %v %q accepted %d", resp.Status, resp.Error, resp.Accepted)
	}
	for _, s := range held[1:] {
		s.Reset()
	}
}

// readHandoff takes what proto.Unmarshal takes, and counts each URL
// against the quota before reading it.
func TestReadHandoffAsUnmarshal(t *testing.T) {
	req := &pb.HandoffRequest{Version: wireVersion, BatchId: 7, Snapshot: make([]byte, 32),
		Batches: []*pb.HandoffBatch{{Subnet: 3, Urls: []string{"http://a/", "http://b/"}, Addr: []byte{1, 2, 3, 4}}, {Subnet: 4, Urls: []string{"http://c/"}}}}
	var buf bytes.Buffer
	if _, err := protodelim.MarshalTo(&buf, req); err != nil {
		t.Fatal(err)
	}
	lim := (&peerLimiter{}).limiter("m", 1, 3)
	now := time.Unix(1_700_000_000, 0)
	q := &quotaTaker{lim: lim, now: now}
	got, err := readHandoff(bufio.NewReader(bytes.NewReader(buf.Bytes())), maxHandoffMsg, q)
	if err != nil || !proto.Equal(got, req) {
		t.Fatalf("read %v, %v; want %v", got, err, req)
	}
	q.settle()
	if tok := lim.TokensAt(now); tok > 0.001 {
		t.Fatalf("%.1f tokens left of 3 after 3 URLs", tok)
	}
	// 2 tokens: refused at the third URL, and every token given back
	lim = (&peerLimiter{}).limiter("m", 1, 2)
	q = &quotaTaker{lim: lim, now: now}
	if _, err := readHandoff(bufio.NewReader(bytes.NewReader(buf.Bytes())), maxHandoffMsg, q); err != errHandoffQuota {
		t.Fatalf("3 URLs on 2 tokens: %v, want %v", err, errHandoffQuota)
	}
	q.refund()
	if tok := lim.TokensAt(now); tok < 1.999 {
		t.Fatalf("%.1f tokens after a refund, want 2", tok)
	}
}
