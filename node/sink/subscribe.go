package sink

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/micra-crawler/micra/node/sink/pb"
)

// ProtoSubscribe is the libp2p protocol indexers subscribe on: the same
// change log, filters and resumption as GET /v1/records, over the
// network's own transport and identities.
const ProtoSubscribe protocol.ID = "/micra/subscribe/1"

const (
	maxSubscribeReq = 4 << 10
	maxFrame        = 16 << 20
	// keepAlive is how often a quiet subscription sends an empty frame,
	// so a subscriber tells a quiet log from a dead sink.
	keepAlive = 15 * time.Second
)

// RegisterSubscribe installs the subscription handler on h. timeout bounds
// the request's arrival and each frame's write (a subscriber that stops
// reading is dropped after it).
func (s *Store) RegisterSubscribe(h host.Host, timeout time.Duration) {
	h.SetStreamHandler(ProtoSubscribe, func(st network.Stream) { s.serveSubscription(st, timeout) })
}

func (s *Store) serveSubscription(st network.Stream, timeout time.Duration) {
	defer st.Close()
	_ = st.SetReadDeadline(time.Now().Add(timeout))
	req, f, err := readSubscribeRequest(bufio.NewReader(st))
	if err != nil {
		st.Reset()
		return
	}
	// the subscriber closes its side after the request (EOF here); a
	// reset (it went away) ends the subscription at once
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	go func() {
		_ = st.SetReadDeadline(time.Time{})
		if _, err := io.Copy(io.Discard, st); err != nil {
			cancel()
		}
	}()
	rd := s.readers.add("libp2p", st.Conn().RemotePeer().String(), req.Follow, f, req.After)
	defer rd.done()
	w := bufio.NewWriter(st)
	send := func(fr *pb.RecordFrame) error {
		_ = st.SetWriteDeadline(time.Now().Add(timeout))
		if _, err := protodelim.MarshalTo(w, fr); err != nil {
			return err
		}
		return w.Flush()
	}
	cursor, sent := req.After, uint32(0)
	for ctx.Err() == nil {
		batch := 1000
		if req.Limit > 0 {
			batch = min(batch, int(req.Limit-sent))
		}
		es, last, err := s.Read(cursor, batch, f)
		if err != nil {
			_ = send(&pb.RecordFrame{Error: err.Error()})
			return
		}
		for i := range es {
			b, err := json.Marshal(StreamEntry(&es[i]))
			if err != nil {
				return
			}
			if send(&pb.RecordFrame{Seq: es[i].Seq, Record: b}) != nil {
				st.Reset()
				return
			}
		}
		sent += uint32(len(es))
		cursor = last
		rd.advance(cursor, len(es))
		if req.Limit > 0 && sent >= req.Limit {
			return
		}
		if last < s.Head() {
			continue
		}
		if !req.Follow {
			return
		}
		wctx, wcancel := context.WithTimeout(ctx, keepAlive)
		more := s.Wait(wctx, cursor)
		wcancel()
		if !more && ctx.Err() == nil {
			if wctx.Err() == nil {
				return // the store closed
			}
			if send(&pb.RecordFrame{}) != nil {
				st.Reset()
				return
			}
		}
	}
}

// readSubscribeRequest reads a subscriber's request (at most
// maxSubscribeReq bytes) and the filter it asks for.
func readSubscribeRequest(r *bufio.Reader) (*pb.SubscribeRequest, Filter, error) {
	var req pb.SubscribeRequest
	if err := (protodelim.UnmarshalOptions{MaxSize: maxSubscribeReq}).UnmarshalFrom(r, &req); err != nil {
		return nil, Filter{}, err
	}
	return &req, Filter{Host: req.Host, Suffix: req.Suffix, Keyword: req.Keyword, Lang: req.Lang, Changed: req.Changed}, nil
}

// Subscription is a subscriber's end of /micra/subscribe/1.
type Subscription struct {
	st network.Stream
	r  *bufio.Reader
}

// Subscribe opens a subscription at the sink. Next returns its records.
func Subscribe(ctx context.Context, h host.Host, sink peer.AddrInfo, req *pb.SubscribeRequest, timeout time.Duration) (*Subscription, error) {
	if len(sink.Addrs) > 0 {
		h.Peerstore().AddAddrs(sink.ID, sink.Addrs, time.Hour)
	}
	octx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	st, err := h.NewStream(octx, sink.ID, ProtoSubscribe)
	if err != nil {
		return nil, fmt.Errorf("sink: subscribe at %s: %w", sink.ID, err)
	}
	req.Version = wireVersion
	_ = st.SetWriteDeadline(time.Now().Add(timeout))
	if _, err := protodelim.MarshalTo(st, req); err != nil {
		st.Reset()
		return nil, fmt.Errorf("sink: subscribe at %s: %w", sink.ID, err)
	}
	_ = st.SetWriteDeadline(time.Time{})
	_ = st.CloseWrite()
	context.AfterFunc(ctx, func() { st.Reset() })
	return &Subscription{st: st, r: bufio.NewReader(st)}, nil
}

// Next returns the next record (its sequence and JSON), skipping
// keep-alives; io.EOF when the sink ended the subscription (a finite one
// reached its end). A subscriber that sees no frame for twice the
// keep-alive interval may take the sink for gone (idle bounds it).
func (s *Subscription) Next(idle time.Duration) (uint64, []byte, error) {
	for {
		if idle > 0 {
			_ = s.st.SetReadDeadline(time.Now().Add(idle))
		}
		var fr pb.RecordFrame
		err := (protodelim.UnmarshalOptions{MaxSize: maxFrame}).UnmarshalFrom(s.r, &fr)
		if errors.Is(err, io.EOF) {
			return 0, nil, io.EOF
		}
		if err != nil {
			return 0, nil, err
		}
		if fr.Error != "" {
			if bs, ok := ParseBeforeStart(fr.Error); ok {
				return 0, nil, fmt.Errorf("sink: subscription ended: %w", bs)
			}
			return 0, nil, fmt.Errorf("sink: subscription ended: %s", fr.Error)
		}
		if fr.Seq == 0 {
			continue // keep-alive
		}
		return fr.Seq, fr.Record, nil
	}
}

// Close ends the subscription.
func (s *Subscription) Close() error { return s.st.Reset() }
