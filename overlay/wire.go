package overlay

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
)

// Protocol IDs. The trailing number is the major version; messages carry a
// minor version field for compatible additions.
const (
	ProtoProbe    protocol.ID = "/micra/probe/1"
	ProtoEndorse  protocol.ID = "/micra/endorse/1"
	ProtoHandoff  protocol.ID = "/micra/handoff/1"
	ProtoSnapshot protocol.ID = "/micra/snapshot/1"
	ProtoRecover  protocol.ID = "/micra/recover/1"

	wireVersion = 1
)

// Per-message size limits: a peer that sends more is cut off with TOO_LARGE.
const (
	maxProbeMsg    = 1 << 10
	maxEndorseMsg  = 16 << 10
	maxHandoffMsg  = 4 << 20
	maxHandoffURLs = 4096
	maxURLLen      = 8 << 10
	maxSnapshotMsg = 1<<20 + 1<<10
	snapshotChunk  = 1 << 20
	maxSnapshot    = 512 << 20
	maxRecoverMsg  = 4 << 20
	recoverBatch   = 512
)

// RemoteError is an error status returned by a peer.
type RemoteError struct {
	Peer     peer.ID
	Protocol protocol.ID
	Status   pb.Status
	Msg      string
}

func (e *RemoteError) Error() string {
	return fmt.Sprintf("%s from %s: %s: %s", e.Protocol, shortID(e.Peer), e.Status, e.Msg)
}

func remoteErr(p peer.ID, proto protocol.ID, st pb.Status, msg string) error {
	if st == pb.Status_OK {
		return nil
	}
	return &RemoteError{Peer: p, Protocol: proto, Status: st, Msg: msg}
}

// StatusOf returns the remote status carried by err, or INTERNAL.
func StatusOf(err error) pb.Status {
	var re *RemoteError
	if errors.As(err, &re) {
		return re.Status
	}
	return pb.Status_INTERNAL
}

func shortID(p peer.ID) string {
	s := p.String()
	if len(s) > 12 {
		return s[len(s)-8:]
	}
	return s
}

// stream wraps a libp2p stream with buffered, size-limited, delimited
// protobuf reads and writes.
type stream struct {
	s   network.Stream
	r   *bufio.Reader
	w   io.Writer
	max int
	// idle, when set, renews the stream's deadlines on every read and write
	// (newIdleStream); nil: one deadline for the whole exchange (newStream).
	idle *idleDeadline
}

// newStream bounds the whole exchange on s by one deadline: the servers of
// the request / response protocols whose messages are small next to their
// timeout (probe, endorse).
func newStream(s network.Stream, max int, deadline time.Duration) *stream {
	_ = s.SetDeadline(time.Now().Add(deadline))
	return &stream{s: s, r: bufio.NewReader(s), w: s, max: max}
}

// newIdleStream is for bulk transfers (snapshots, page recovery) and for
// exchanges whose request may be large (roundTrip, hand-offs): every
// read and write on s must move bytes within idle — the deadline is renewed
// before each call on the stream, so a transfer that keeps moving is never
// cut by it — and no call runs past end (zero: no overall end; the caller
// then bounds the transfer otherwise). A peer that stalls is dropped after
// idle, however long the transfer may last in all.
func newIdleStream(s network.Stream, max int, idle time.Duration, end time.Time) *stream {
	d := &idleDeadline{s: s, idle: idle, end: end}
	return &stream{s: s, r: bufio.NewReader(idleReader{d}), w: idleWriter{d}, max: max, idle: d}
}

// setEnd moves the overall end of an idle stream (a snapshot's, once its
// header announced the size); no-op on a newStream stream.
func (st *stream) setEnd(end time.Time) {
	if st.idle != nil {
		st.idle.end = end
	}
}

// setIdle changes the idle time of an idle stream (a server whose writes
// wait on a slow reader); no-op on a newStream stream.
func (st *stream) setIdle(idle time.Duration) {
	if st.idle != nil {
		st.idle.idle = idle
	}
}

// idleDeadline renews a stream's deadline per call: now + idle, but never
// past end. A stream is read and written by one goroutine at a time here,
// so end needs no lock.
type idleDeadline struct {
	s    network.Stream
	idle time.Duration
	end  time.Time
}

func (d *idleDeadline) next() time.Time {
	t := time.Now().Add(d.idle)
	if !d.end.IsZero() && d.end.Before(t) {
		t = d.end
	}
	return t
}

type idleReader struct{ d *idleDeadline }

func (r idleReader) Read(b []byte) (int, error) {
	_ = r.d.s.SetReadDeadline(r.d.next())
	return r.d.s.Read(b)
}

// idleWriteChunk is the most one write call sends under one renewed
// deadline: a 1 MiB chunk to a slow reader completes in pieces, each of
// which must go within the idle time, rather than all of it.
const idleWriteChunk = 64 << 10

type idleWriter struct{ d *idleDeadline }

func (w idleWriter) Write(b []byte) (int, error) {
	n := 0
	for n < len(b) {
		k := min(len(b)-n, idleWriteChunk)
		_ = w.d.s.SetWriteDeadline(w.d.next())
		m, err := w.d.s.Write(b[n : n+k])
		n += m
		if err != nil {
			return n, err
		}
	}
	return n, nil
}

func (st *stream) write(m proto.Message) error {
	if n := proto.Size(m); n > st.max {
		return fmt.Errorf("%s: message of %d bytes exceeds limit %d", st.s.Protocol(), n, st.max)
	}
	_, err := protodelim.MarshalTo(st.w, m)
	return err
}

func (st *stream) read(m proto.Message) error {
	err := protodelim.UnmarshalOptions{MaxSize: int64(st.max)}.UnmarshalFrom(st.r, m)
	var tooLarge *protodelim.SizeTooLargeError
	if errors.As(err, &tooLarge) {
		return fmt.Errorf("%s: %w", st.s.Protocol(), err)
	}
	if errors.Is(err, io.EOF) {
		return fmt.Errorf("%s: stream closed by %s before a complete message: %w", st.s.Protocol(), shortID(st.s.Conn().RemotePeer()), io.ErrUnexpectedEOF)
	}
	return err
}

// roundTrip opens a stream to p, writes req and reads resp. The exchange is
// bounded by the caller's context and by exchangeBudget — timeout, the
// protocol's own, plus req's size at minSnapshotRate — whichever ends
// first: a long-lived caller's context (a decision's, a flush's) must not
// let a peer that accepts the stream and never answers hold the caller for
// as long as that context lasts. For a probe or an
// endorsement the size adds milliseconds. A hand-off message of up to
// 4 MiB, bounded by timeout alone, needed ≈ 3.4 Mbit/s to fit 10 s: on a
// slower link every full message timed out and was re-sent the same for
// ever. A bound that only grows with the size would let a peer that stalls
// hold the caller for all of it (74 s for a full message at the default
// 10 s), so within it the stream has an idle deadline, as the bulk
// transfers do (newIdleStream): each 64 KiB written must leave within
// timeout, and the answer must come within timeout plus inFlight of the
// last write (the bytes the peer had not read yet when that write returned
// may still be on their way). A stalled or vanished peer costs about
// timeout. The dial and protocol negotiation get timeout. On any failure
// the stream is reset, so the other side's handler stops at once rather
// than at its own deadline.
func roundTrip(ctx context.Context, h interface {
	NewStream(context.Context, peer.ID, ...protocol.ID) (network.Stream, error)
}, p peer.ID, pid protocol.ID, max int, timeout time.Duration, req, resp proto.Message) error {
	size := proto.Size(req)
	ctx, cancel := context.WithTimeout(ctx, exchangeBudget(timeout, size))
	defer cancel()
	end, _ := ctx.Deadline() // the earlier of the caller's and the budget's
	octx, ocancel := context.WithTimeout(ctx, timeout)
	s, err := h.NewStream(octx, p, pid)
	ocancel()
	if err != nil {
		return fmt.Errorf("%s: open stream to %s: %w", pid, shortID(p), err)
	}
	defer s.Close()
	st := newIdleStream(s, max, timeout, end)
	// Reset the stream if the context ends first (cancelled), so reads unblock.
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := st.write(req); err != nil {
		s.Reset()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: send to %s: %w", pid, shortID(p), ctx.Err())
		}
		return fmt.Errorf("%s: send to %s: %w", pid, shortID(p), err)
	}
	_ = s.CloseWrite()
	st.setIdle(timeout + inFlight(size))
	if err := st.read(resp); err != nil {
		s.Reset()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %s: %w", pid, shortID(p), ctx.Err())
		}
		return fmt.Errorf("%s: read from %s: %w", pid, shortID(p), err)
	}
	return nil
}

// exchangeBudget is the overall bound of a request / response exchange
// whose request is size bytes: timeout plus the request at minSnapshotRate
// (a full hand-off message, 4 MiB: 64 s more).
func exchangeBudget(timeout time.Duration, size int) time.Duration {
	return timeout + time.Duration(size)*time.Second/minSnapshotRate
}

// maxInFlight bounds what a peer may not have read yet when the write of
// the last bytes to it returns: a stream's flow-control window, 256 KiB to
// start with on yamux, 512 KiB on QUIC. (A window grows only when the peer
// reads a whole one within a few round trips, so it stays small on a link
// that is slow for its round-trip time.)
const maxInFlight = 512 << 10

// inFlight is how long the bytes a write of size bytes may leave unread
// take at minSnapshotRate (at most 8 s).
func inFlight(size int) time.Duration {
	return time.Duration(min(size, maxInFlight)) * time.Second / minSnapshotRate
}

func protocolID(s string) protocol.ID { return protocol.ID(s) }

// RoundTrip is roundTrip for the protocols other packages run on an
// overlay host (the index sink's carrier protocol): one length-prefixed
// protobuf request of at most max bytes, one response, bounded by ctx and
// by timeout plus the request's size at the slowest rate a peer is given.
func RoundTrip(ctx context.Context, h interface {
	NewStream(context.Context, peer.ID, ...protocol.ID) (network.Stream, error)
}, p peer.ID, pid protocol.ID, max int, timeout time.Duration, req, resp proto.Message) error {
	return roundTrip(ctx, h, p, pid, max, timeout, req, resp)
}

// ServeRequest is the server side of RoundTrip: it reads one request of at
// most max bytes from s (a peer that stalls is dropped after timeout),
// writes handle's answer and closes s. handle may take its time (a
// durable commit): the answer gets timeout of its own.
func ServeRequest(s network.Stream, max int, timeout time.Duration, req proto.Message, handle func() proto.Message) {
	defer s.Close()
	st := newIdleStream(s, max, timeout, time.Now().Add(exchangeBudget(timeout, max)))
	if err := st.read(req); err != nil {
		s.Reset()
		return
	}
	resp := handle()
	st.setEnd(time.Now().Add(timeout))
	if err := st.write(resp); err != nil {
		s.Reset()
	}
}
