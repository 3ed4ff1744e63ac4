package sink

import (
	"bufio"
	"context"
	"encoding/binary"
	"fmt"
	"log/slog"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/overlay"
)

// ProtoCarrier is the libp2p protocol crawlers deliver carriers on.
const ProtoCarrier protocol.ID = "/micra/carrier/1"

// wireVersion is the minor version of the messages this side sends: 2
// since NOT_MEMBER (a sender of version 1 is answered UNAVAILABLE instead).
const wireVersion = 2

// maxPushMsg bounds a push message: the largest carrier the sink takes by
// default plus the framing.
const maxPushMsg = 8<<20 + 1<<10

// Server answers ProtoCarrier and ProtoPages on a libp2p host: the sender's identity is
// the peer the stream comes from (authenticated by the libp2p handshake),
// and it must be the carrier's crawler.
type Server struct {
	Store *Store
	// Admit, if set, may refuse a sender before its carrier is decoded.
	// An error is answered NOT_MEMBER with the error as the
	// reason, and the sender keeps the carrier and sends it again later
	// (it may not be a member yet, or the sink may not have heard it yet);
	// a *RefusedError is answered with its own status and reason.
	Admit func(peer.ID) error
	// Timeout bounds each read and write of a push (default 30 s).
	Timeout time.Duration
	// MaxWaiting bounds the pushes waiting for the commit lock; past it a
	// push is answered UNAVAILABLE and the crawler keeps the carrier in its
	// outbox for later (back-pressure, default 16: each decoded carrier
	// may take several times its raw size in memory).
	MaxWaiting int
	Logger     *slog.Logger

	waiting chan struct{}
	queries chan struct{} // page queries running (ProtoPages)
}

// Register installs the protocol handlers on h: carriers in
// (ProtoCarrier), and page queries (ProtoPages, recover.go) under the same
// admission.
func (s *Server) Register(h host.Host) {
	if s.Timeout <= 0 {
		s.Timeout = 30 * time.Second
	}
	if s.MaxWaiting <= 0 {
		s.MaxWaiting = 16
	}
	if s.Logger == nil {
		s.Logger = slog.Default()
	}
	s.waiting = make(chan struct{}, s.MaxWaiting)
	s.queries = make(chan struct{}, maxQueries)
	h.SetStreamHandler(ProtoCarrier, s.handle)
	h.SetStreamHandler(ProtoPages, s.handlePages)
}

func (s *Server) handle(st network.Stream) {
	var req pb.CarrierPush
	from := st.Conn().RemotePeer()
	if s.Admit != nil {
		if err := s.Admit(from); err != nil {
			s.refuseUnread(st, from, err)
			return
		}
	}
	overlay.ServeRequest(st, maxPushMsg, s.Timeout, &req, func() proto.Message {
		ack := s.push(from, &req)
		if ack.Status != pb.Status_OK {
			s.Logger.Warn("carrier refused", "from", from.String(), "status", strings.ToLower(ack.Status.String()), "reason", ack.Reason)
		}
		return ack
	})
}

// refusal is the answer to a sender Admit refused (err), counted.
func (s *Server) refusal(err error, version uint32) *pb.CarrierAck {
	re, ok := err.(*RefusedError)
	if !ok {
		re = &RefusedError{Status: pb.Status_NOT_MEMBER, Reason: err.Error()}
	}
	s.Store.countRefusal(re.Status)
	st := re.Status
	if st == pb.Status_NOT_MEMBER && version < 2 {
		// a sender that predates NOT_MEMBER would keep the carrier
		// aside: it is told to send it later
		st = pb.Status_UNAVAILABLE
	}
	return &pb.CarrierAck{Version: wireVersion, Status: st, Reason: re.Reason}
}

// refuseUnread answers a sender Admit refused having read only its
// message's length and wire version (the message's first field), not its
// carrier: a stranger's push of up to 8 MiB costs the sink a few bytes. A
// sender still writing a large carrier sees its stream closed instead, and
// keeps the carrier as after any failed delivery.
func (s *Server) refuseUnread(st network.Stream, from peer.ID, err error) {
	defer st.Close()
	_ = st.SetDeadline(time.Now().Add(s.Timeout))
	br := bufio.NewReaderSize(st, 16)
	if _, rerr := binary.ReadUvarint(br); rerr != nil {
		st.Reset()
		return
	}
	var version uint32
	if tag, rerr := br.ReadByte(); rerr == nil && tag == versionTag {
		v, _ := binary.ReadUvarint(br)
		version = uint32(min(v, 1<<31))
	}
	ack := s.refusal(err, version)
	s.Logger.Warn("carrier refused unread", "from", from.String(), "status", strings.ToLower(ack.Status.String()), "reason", ack.Reason)
	if _, werr := protodelim.MarshalTo(st, ack); werr != nil {
		st.Reset()
	}
}

// versionTag is the key of a message's field 1 (version, a varint): the
// first bytes of every message of this protocol that sets it.
const versionTag = 1<<3 | 0

func (s *Server) push(from peer.ID, req *pb.CarrierPush) *pb.CarrierAck {
	nack := func(st pb.Status, reason string) *pb.CarrierAck {
		return &pb.CarrierAck{Version: wireVersion, Status: st, Reason: reason}
	}
	if s.Admit != nil {
		if err := s.Admit(from); err != nil {
			return s.refusal(err, req.Version)
		}
	}
	select {
	case s.waiting <- struct{}{}:
		defer func() { <-s.waiting }()
	default:
		s.Store.countRefusal(pb.Status_UNAVAILABLE)
		return nack(pb.Status_UNAVAILABLE, "sink busy: too many carriers waiting; keep it and send it later")
	}
	a, err := s.Store.Commit(from.String(), req.Carrier)
	if err != nil {
		if re, ok := err.(*RefusedError); ok {
			return nack(re.Status, re.Reason)
		}
		return nack(pb.Status_INTERNAL, err.Error())
	}
	return &pb.CarrierAck{Version: wireVersion, Status: pb.Status_OK, First: a.First, Records: uint32(a.Records), Duplicate: a.Duplicate}
}

// Client delivers carriers to a sink over ProtoCarrier: the pack.Receiver a
// crawler's outbox pushes to. A carrier is acknowledged only once the sink
// committed it; a refusal that cannot pass (malformed, too large, wrong
// sender, refused) wraps pack.ErrRejected, so the outbox keeps it aside,
// and any other failure (busy, not a member yet, unreachable) is retried
// by the outbox.
type Client struct {
	Host host.Host
	Sink peer.AddrInfo
	// Timeout bounds each read and write of a push (default 30 s).
	Timeout time.Duration
}

// Deliver implements pack.Receiver.
func (c *Client) Deliver(ctx context.Context, car pack.Carrier) error {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if len(c.Sink.Addrs) > 0 {
		c.Host.Peerstore().AddAddrs(c.Sink.ID, c.Sink.Addrs, time.Hour)
	}
	var ack pb.CarrierAck
	err := overlay.RoundTrip(ctx, c.Host, c.Sink.ID, ProtoCarrier, maxPushMsg, timeout,
		&pb.CarrierPush{Version: wireVersion, Carrier: car.Data}, &ack)
	if err != nil {
		return fmt.Errorf("sink: deliver %s: %w", car.ID(), err)
	}
	if ack.Status == pb.Status_OK {
		return nil
	}
	re := &RefusedError{Status: ack.Status, Reason: ack.Reason}
	if re.Permanent() {
		return fmt.Errorf("sink %s refused carrier %s: %w (%w)", c.Sink.ID, car.ID(), re, pack.ErrRejected)
	}
	return fmt.Errorf("sink %s did not take carrier %s: %w", c.Sink.ID, car.ID(), re)
}
