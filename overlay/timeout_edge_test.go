package overlay

// Deadlines of the request/response and bulk protocols: each test shows one
// defect and fails on the code it was written against.

import (
	"bufio"
	"bytes"
	"context"
	"crypto/sha256"
	"io"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/micra-crawler/micra/overlay/pb"
)

// staller is a real libp2p host on loopback whose handler for one protocol
// reads the request, optionally sends a prefix of an answer, and then never
// answers. Once released (after the client's call returned) it reports
// whether the client reset the stream: a write to a stream the client
// reset fails, one to a stream it merely closed succeeds.
type staller struct {
	h       host.Host
	release chan struct{}
	reset   chan bool
	once    sync.Once
}

func newStaller(t *testing.T, proto protocol.ID, prefix func(s network.Stream)) *staller {
	t.Helper()
	h := rawHost(t)
	st := &staller{h: h, release: make(chan struct{}), reset: make(chan bool, 1)}
	t.Cleanup(st.let) // before h.Close (LIFO)
	h.SetStreamHandler(proto, func(s network.Stream) {
		defer s.Close()
		_, _ = io.Copy(io.Discard, s) // the request; the client half-closes after it
		if prefix != nil {
			prefix(s)
		}
		select {
		case <-st.release:
		case <-time.After(2 * time.Minute):
		}
		for range 250 { // the reset frame may still be on its way
			if _, err := s.Write([]byte{0}); err != nil {
				st.reset <- true
				return
			}
			time.Sleep(20 * time.Millisecond)
		}
		st.reset <- false
	})
	return st
}

func (st *staller) let() { st.once.Do(func() { close(st.release) }) }

// releaseAndCheckReset lets the stalled handler go and fails the test if the
// client left its stream open rather than resetting it.
func (st *staller) releaseAndCheckReset(t *testing.T) {
	t.Helper()
	st.let()
	select {
	case r := <-st.reset:
		if !r {
			t.Error("the client gave up on the stalled stream without resetting it: the server's handler runs on until its own deadline")
		}
	case <-time.After(30 * time.Second):
		t.Error("stalled handler never finished")
	}
}

// roundTrip bounded its exchange by the caller's deadline when the context
// had one, instead of by the earlier of that deadline and the protocol's
// RequestTimeout: endorsements (a decision's context) and hand-off flushes
// waited on a peer that accepts the stream and never answers for as long as
// the caller's context lasted.
func TestRoundTripBoundedByTimeoutUnderLongerDeadline(t *testing.T) {
	const timeout = 2 * time.Second
	st := newStaller(t, ProtoEndorse, nil)
	client := rawHost(t)
	client.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	start := time.Now()
	var resp pb.EndorseResponse
	err := roundTrip(ctx, client, st.h.ID(), ProtoEndorse, maxEndorseMsg, timeout, &pb.EndorseRequest{Version: wireVersion}, &resp)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a peer that never answers: roundTrip returned nil")
	}
	if took > 6*timeout {
		t.Fatalf("roundTrip to a stalled peer took %v (err %v); the protocol's timeout is %v, the caller's deadline 40 s",
			took.Round(time.Millisecond), err, timeout)
	}
	st.releaseAndCheckReset(t)
}

// FetchSnapshot let a caller's deadline replace its own bound: a serving
// peer that stalls — before the header or in the middle of the data — held
// the fetch (and FetchSnapshotAny's walk over the members) until the
// caller's deadline.
func TestFetchSnapshotStalledPeerDroppedAfterIdleTimeout(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = 2 * time.Second
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	for _, tc := range []struct {
		name   string
		prefix func(s network.Stream)
	}{
		{"before the header", nil},
		{"after the header", func(s network.Stream) {
			_, _ = protodelim.MarshalTo(s, &pb.SnapshotHeader{Version: wireVersion, Size: 3 << 20})
			_, _ = protodelim.MarshalTo(s, &pb.SnapshotChunk{Data: make([]byte, snapshotChunk)})
		}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			st := newStaller(t, ProtoSnapshot, tc.prefix)
			p.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Minute)
			ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
			defer cancel()
			start := time.Now()
			_, err := p.FetchSnapshot(ctx, st.h.ID(), p.snap)
			took := time.Since(start)
			if err == nil {
				t.Fatal("a peer that stalls: FetchSnapshot returned nil")
			}
			if took > 6*cfg.RequestTimeout {
				t.Fatalf("snapshot fetch from a peer stalled %s took %v (err %v); RequestTimeout is %v, the caller's deadline 40 s",
					tc.name, took.Round(time.Millisecond), err, cfg.RequestTimeout)
			}
			st.releaseAndCheckReset(t)
		})
	}
}

// A snapshot is a bulk transfer: one deadline of 4 × RequestTimeout for the
// whole stream cut a snapshot on a slow link however steadily its bytes
// came. Bytes arriving more often than RequestTimeout must keep the fetch
// going.
func TestFetchSnapshotSlowLinkNotCut(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = time.Second
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	data := bytes.Repeat([]byte("micra snapshot "), (5<<19)/15) // ≈ 2.5 MiB
	id := sha256.Sum256(data)
	const piece, every = 64 << 10, 150 * time.Millisecond // ≈ 430 KiB/s: 6 s in all, 4 × RequestTimeout is 4 s

	slow := rawHost(t)
	served := make(chan error, 1)
	slow.SetStreamHandler(ProtoSnapshot, func(s network.Stream) {
		defer s.Close()
		var req pb.SnapshotRequest
		if err := protodelim.UnmarshalFrom(bufio.NewReader(s), &req); err != nil {
			s.Reset()
			served <- err
			return
		}
		var buf bytes.Buffer
		_, _ = protodelim.MarshalTo(&buf, &pb.SnapshotHeader{Version: wireVersion, Size: uint64(len(data))})
		for off := 0; off < len(data); off += snapshotChunk {
			_, _ = protodelim.MarshalTo(&buf, &pb.SnapshotChunk{Data: data[off:min(off+snapshotChunk, len(data))]})
		}
		wire := buf.Bytes()
		for off := 0; off < len(wire); off += piece {
			if _, err := s.Write(wire[off:min(off+piece, len(wire))]); err != nil {
				served <- err
				return
			}
			time.Sleep(every)
		}
		served <- nil
	})
	p.h.Peerstore().AddAddrs(slow.ID(), slow.Addrs(), time.Minute)

	start := time.Now()
	got, err := p.FetchSnapshot(context.Background(), slow.ID(), id)
	took := time.Since(start)
	if err != nil {
		t.Fatalf("a %d-byte snapshot arriving steadily in %v (a %d KiB piece every %v) was cut: %v",
			len(data), took.Round(time.Millisecond), piece>>10, every, err)
	}
	if !bytes.Equal(got, data) {
		t.Fatalf("got %d bytes, want the %d served", len(got), len(data))
	}
	if took < 4*cfg.RequestTimeout {
		t.Logf("transfer took only %v: the test does not exercise a transfer longer than the old bound", took)
	}
	if err := <-served; err != nil {
		t.Errorf("server: %v", err)
	}
}

// The serving side had the same single deadline (4 × RequestTimeout for the
// whole stream): a client on a slow link, reading steadily, had its
// snapshot cut by the server.
func TestSnapshotServerSlowReaderNotCut(t *testing.T) {
	data := bytes.Repeat([]byte("micra snapshot "), (5<<19)/15) // ≈ 2.5 MiB
	id := sha256.Sum256(data)
	cfg := TestnetConfig()
	cfg.RequestTimeout = time.Second
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}, Snapshots: TreeSnapshots{id: data}})
	client := rawHost(t)
	client.Peerstore().AddAddrs(p.ID(), p.h.Addrs(), time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	s, err := client.NewStream(ctx, p.ID(), ProtoSnapshot)
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, err := protodelim.MarshalTo(s, &pb.SnapshotRequest{Version: wireVersion, Id: id[:]}); err != nil {
		t.Fatal(err)
	}
	_ = s.CloseWrite()
	// ≈ 530 KiB/s: 5 s for the snapshot, 4 × RequestTimeout is 4 s
	const piece, every = 32 << 10, 60 * time.Millisecond
	r := bufio.NewReaderSize(&throttled{r: s, piece: piece, every: every}, piece)
	start := time.Now()
	var hdr pb.SnapshotHeader
	if err := (protodelim.UnmarshalOptions{MaxSize: maxSnapshotMsg}).UnmarshalFrom(r, &hdr); err != nil || hdr.Size != uint64(len(data)) {
		t.Fatalf("header: %v (size %d)", err, hdr.Size)
	}
	var got []byte
	for len(got) < len(data) {
		var ch pb.SnapshotChunk
		if err := (protodelim.UnmarshalOptions{MaxSize: maxSnapshotMsg}).UnmarshalFrom(r, &ch); err != nil {
			t.Fatalf("the server cut a steady reader after %d of %d bytes, %v: %v", len(got), len(data), time.Since(start).Round(time.Millisecond), err)
		}
		got = append(got, ch.Data...)
	}
	if !bytes.Equal(got, data) {
		t.Fatal("snapshot bytes differ")
	}
}

// throttled reads at most piece bytes per call, one call per every.
type throttled struct {
	r     io.Reader
	piece int
	every time.Duration
}

func (t *throttled) Read(b []byte) (int, error) {
	time.Sleep(t.every)
	return t.r.Read(b[:min(len(b), t.piece)])
}

// Page recovery held a stalled previous owner for its whole budget
// (6 × RequestTimeout) rather than dropping it once no byte came for
// RequestTimeout, and gave it that long whatever the caller's deadline.
func TestRecoverPagesStalledPeerDroppedAfterIdleTimeout(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = 2 * time.Second
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}, Pages: &memPages{}})
	st := newStaller(t, ProtoRecover, nil)
	p.h.Peerstore().AddAddrs(st.h.ID(), st.h.Addrs(), time.Minute)
	ctx, cancel := context.WithTimeout(context.Background(), 40*time.Second)
	defer cancel()
	start := time.Now()
	_, err := p.RecoverPages(ctx, st.h.ID(), 7)
	took := time.Since(start)
	if err == nil {
		t.Fatal("a peer that never answers: RecoverPages returned nil")
	}
	if took > 4*cfg.RequestTimeout {
		t.Fatalf("recovery from a stalled peer took %v (err %v); RequestTimeout is %v", took.Round(time.Millisecond), err, cfg.RequestTimeout)
	}
	st.releaseAndCheckReset(t)
}
