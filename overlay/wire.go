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
	max int
}

func newStream(s network.Stream, max int, deadline time.Duration) *stream {
	_ = s.SetDeadline(time.Now().Add(deadline))
	return &stream{s: s, r: bufio.NewReader(s), max: max}
}

func (st *stream) write(m proto.Message) error {
	if n := proto.Size(m); n > st.max {
		return fmt.Errorf("%s: message of %d bytes exceeds limit %d", st.s.Protocol(), n, st.max)
	}
	_, err := protodelim.MarshalTo(st.s, m)
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

// roundTrip opens a stream to p, writes req and reads resp, all within the
// context's deadline (or timeout if the context has none).
func roundTrip(ctx context.Context, h interface {
	NewStream(context.Context, peer.ID, ...protocol.ID) (network.Stream, error)
}, p peer.ID, proto protocol.ID, max int, timeout time.Duration, req, resp proto.Message) error {
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := h.NewStream(ctx, p, proto)
	if err != nil {
		return fmt.Errorf("%s: open stream to %s: %w", proto, shortID(p), err)
	}
	defer s.Close()
	st := newStream(s, max, timeout)
	// Reset the stream if the context ends first, so reads unblock.
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	if err := st.write(req); err != nil {
		s.Reset()
		return fmt.Errorf("%s: send to %s: %w", proto, shortID(p), err)
	}
	_ = s.CloseWrite()
	if err := st.read(resp); err != nil {
		s.Reset()
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %s: %w", proto, shortID(p), ctx.Err())
		}
		return fmt.Errorf("%s: read from %s: %w", proto, shortID(p), err)
	}
	return nil
}

func protocolID(s string) protocol.ID { return protocol.ID(s) }
