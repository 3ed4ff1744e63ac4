package overlay

// Deadlines of /micra/handoff/1. A hand-off message may be up to 4 MiB, but
// both sides bounded the whole exchange by RequestTimeout: a full message
// needed ≈ 3.4 Mbit/s at the default 10 s, and on a slower link every full
// message timed out, was rebuilt the same and re-sent for ever, its URLs
// never acknowledged. The first two tests fail on that code; the stall
// tests guard the other half of the fix — a peer that stops moving bytes is
// still dropped after about RequestTimeout, not after the larger cap (they
// pass on the old code too, and fail on a fix that only lengthens the
// deadline).

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// largeHandoff is a hand-off message of n URLs of about urlLen bytes each,
// for subnet 7 (any subnet of testTree: nobody holds it, so a real
// receiver accepts it).
func largeHandoff(n, urlLen int) []*pb.HandoffBatch {
	pad := strings.Repeat("u", urlLen-40)
	urls := make([]string, n)
	for i := range urls {
		urls[i] = fmt.Sprintf("http://127.3.0.1/%d/%s", i, pad)
	}
	return []*pb.HandoffBatch{{Subnet: 7, Urls: urls}}
}

func openHandoffPeer(t *testing.T, rt time.Duration, sink HandoffSink) *Peer {
	t.Helper()
	cfg := TestnetConfig()
	cfg.RequestTimeout = rt
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}, Sink: sink})
	return p
}

// A receiver on a slow link (it takes in at most 64 KiB every 150 ms) gets
// a 1.5 MiB message steadily, in several times RequestTimeout: the sender
// cut it at RequestTimeout, and every resend the same.
func TestHandoffSlowReceiverNotCut(t *testing.T) {
	const rt = 2 * time.Second
	p := openHandoffPeer(t, rt, nil)
	batches := largeHandoff(1536, 1024) // ≈ 1.5 MiB

	slow := rawHost(t)
	served := make(chan error, 1)
	slow.SetStreamHandler(ProtoHandoff, func(s network.Stream) {
		defer s.Close()
		r := bufio.NewReaderSize(&throttled{r: s, piece: 64 << 10, every: 150 * time.Millisecond}, 64<<10)
		var req pb.HandoffRequest
		if err := (protodelim.UnmarshalOptions{MaxSize: maxHandoffMsg}).UnmarshalFrom(r, &req); err != nil {
			s.Reset()
			served <- err
			return
		}
		n := 0
		for _, b := range req.Batches {
			n += len(b.Urls)
		}
		_, err := protodelim.MarshalTo(s, &pb.HandoffResponse{Version: wireVersion, Status: pb.Status_OK, BatchId: req.BatchId, Accepted: uint32(n)})
		served <- err
	})
	p.h.Peerstore().AddAddrs(slow.ID(), slow.Addrs(), time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	acked, err := p.handoff.deliver(ctx, delegation.CrawlerID(slow.ID().String()), batches)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("a %d-URL hand-off to a receiver reading 64 KiB every 150 ms (RequestTimeout %v) failed after %v: %v",
			len(batches[0].Urls), rt, took.Round(time.Millisecond), err)
	}
	if len(acked) != 1 || !acked[0] {
		t.Fatalf("acknowledged %v", acked)
	}
	if err := <-served; err != nil {
		t.Errorf("receiver: %v", err)
	}
	if took < 2*rt {
		t.Logf("the exchange took only %v: the test does not exercise one longer than RequestTimeout", took)
	}
}

// The receiving side had the same single deadline: a sender on a slow link
// writing a 2.5 MiB message steadily had it cut at RequestTimeout by the
// receiver.
func TestHandoffServerSlowSenderNotCut(t *testing.T) {
	const rt = 2 * time.Second
	sink := &memSink{}
	p := openHandoffPeer(t, rt, sink)
	s, buf, batches := rawHandoffStream(t, p)
	start := time.Now()
	const piece, every = 64 << 10, 150 * time.Millisecond // ≈ 430 KiB/s: ≈ 6 s in all
	wire := buf.Bytes()
	for off := 0; off < len(wire); off += piece {
		if _, err := s.Write(wire[off:min(off+piece, len(wire))]); err != nil {
			t.Fatalf("the receiver cut a steady sender after %d of %d bytes, %v (RequestTimeout %v): %v",
				off, len(wire), time.Since(start).Round(time.Millisecond), rt, err)
		}
		time.Sleep(every)
	}
	_ = s.CloseWrite()
	var resp pb.HandoffResponse
	if err := protodelim.UnmarshalFrom(bufio.NewReader(s), &resp); err != nil {
		t.Fatalf("no answer to a %d-byte hand-off sent steadily in %v (RequestTimeout %v): %v",
			len(wire), time.Since(start).Round(time.Millisecond), rt, err)
	}
	if resp.Status != pb.Status_OK || resp.BatchId != 9 || int(resp.Accepted) != len(batches[0].Urls) {
		t.Fatalf("answer %v %q: batch %d, accepted %d of %d", resp.Status, resp.Error, resp.BatchId, resp.Accepted, len(batches[0].Urls))
	}
	if n := len(sink.got()); n != len(batches[0].Urls) {
		t.Fatalf("sink holds %d of %d URLs", n, len(batches[0].Urls))
	}
}

// A receiver that stops moving bytes — it never reads the message, or
// reads it and never answers — must still cost the sender about
// RequestTimeout (plus, once the whole message is written, the time its
// last bytes may still take on their way), not the exchange's cap
// (RequestTimeout + the message at 64 KiB/s, ≈ 42 s here), and the sender
// must reset its stream.
func TestHandoffStalledReceiverDropped(t *testing.T) {
	const rt = 2 * time.Second
	p := openHandoffPeer(t, rt, nil)
	batches := largeHandoff(2560, 1024)
	for _, tc := range []struct {
		name  string
		reads bool
		bound time.Duration
	}{
		// the writes stop once the stream's window is full
		{"never reads", false, 3 * rt},
		// the allowance for bytes in flight is at most 8 s
		{"never answers", true, 3*rt + 8*time.Second},
	} {
		t.Run(tc.name, func(t *testing.T) {
			h := rawHost(t)
			release, reset := make(chan struct{}), make(chan bool, 1)
			t.Cleanup(func() {
				select {
				case <-release:
				default:
					close(release)
				}
			})
			h.SetStreamHandler(ProtoHandoff, func(s network.Stream) {
				defer s.Close()
				if tc.reads {
					_, _ = io.Copy(io.Discard, s)
				}
				<-release
				for range 250 { // the reset frame may still be on its way
					if _, err := s.Write([]byte{0}); err != nil {
						reset <- true
						return
					}
					time.Sleep(20 * time.Millisecond)
				}
				reset <- false
			})
			p.h.Peerstore().AddAddrs(h.ID(), h.Addrs(), time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			start := time.Now()
			_, err := p.handoff.deliver(ctx, delegation.CrawlerID(h.ID().String()), batches)
			took := time.Since(start)
			if err == nil {
				t.Fatal("a receiver that stalls: deliver returned nil")
			}
			if took > tc.bound {
				t.Fatalf("hand-off to a receiver that %s took %v (err %v); RequestTimeout is %v",
					tc.name, took.Round(time.Millisecond), err, rt)
			}
			close(release)
			select {
			case r := <-reset:
				if !r {
					t.Error("the sender gave up on the stalled stream without resetting it")
				}
			case <-time.After(30 * time.Second):
				t.Error("stalled handler never finished")
			}
		})
	}
}

// rawHandoffStream opens a hand-off stream to p from a bare host, so the
// test writes the message at its own pace; it returns the stream, the
// encoded message of 2560 URLs of 1 KiB, and its batches.
func rawHandoffStream(t *testing.T, p *Peer) (network.Stream, *bytes.Buffer, []*pb.HandoffBatch) {
	t.Helper()
	client := rawHost(t)
	client.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)
	heardFrom(p, client.ID()) // only members hand off
	batches := largeHandoff(2560, 1024)
	var buf bytes.Buffer
	if _, err := protodelim.MarshalTo(&buf, &pb.HandoffRequest{Version: wireVersion, BatchId: 9, Snapshot: p.snap[:], Batches: batches}); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	t.Cleanup(cancel)
	s, err := client.NewStream(ctx, p.ID(), ProtoHandoff)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, &buf, batches
}

func isTimeout(err error) bool {
	var te interface{ Timeout() bool }
	return errors.As(err, &te) && te.Timeout()
}

// A sender that stops in the middle of a message must still cost the
// receiver about RequestTimeout from its last byte, not the cap of a full
// message (RequestTimeout + 4 MiB at 64 KiB/s, 66 s here): the receiver
// resets the stream.
func TestHandoffServerStalledSenderDropped(t *testing.T) {
	const rt = 2 * time.Second
	p := openHandoffPeer(t, rt, &memSink{})
	s, buf, _ := rawHandoffStream(t, p)
	// the first MiB of the message, then nothing
	if _, err := s.Write(buf.Bytes()[:1<<20]); err != nil {
		t.Fatal(err)
	}
	last := time.Now()
	_ = s.SetReadDeadline(time.Now().Add(time.Minute))
	_, err := s.Read(make([]byte, 1))
	took := time.Since(last)
	if err == nil || isTimeout(err) {
		t.Fatalf("the receiver neither reset nor answered a sender stalled mid-message within %v: %v", took.Round(time.Millisecond), err)
	}
	if took > 3*rt {
		t.Fatalf("the receiver dropped a sender stalled mid-message %v after its last byte (RequestTimeout %v): %v", took.Round(time.Millisecond), rt, err)
	}
}
