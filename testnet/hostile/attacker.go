package hostile

import (
	"bufio"
	"context"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
)

// gossipProtocol is the gossipsub protocol the attacker speaks by hand.
const gossipProtocol protocol.ID = "/meshsub/1.1.0"

// dhtProtocol is micra's DHT protocol (kad-dht under the /micra prefix).
const dhtProtocol protocol.ID = "/micra/kad/1.0.0"

// StreamProtocols are the protocols whose streams the attacker opens and
// holds or resets: every micra protocol a peer serves, and the DHT.
var StreamProtocols = []protocol.ID{overlay.ProtoProbe, overlay.ProtoEndorse, overlay.ProtoRecover,
	overlay.ProtoRevocations, overlay.ProtoSnapshot, dhtProtocol}

// Attacker is one machine's hostile peer: a libp2p host on loopback,
// connected to the victim once, that speaks gossipsub, the hand-off
// protocol and the rest by hand.
type Attacker struct {
	h      host.Host
	sk     crypto.PrivKey
	victim peer.AddrInfo
	snap   hierarchy.SnapshotID

	c attackCounters
}

type attackCounters struct {
	heartbeats, heartbeatRPCs, heartbeatBytes           atomic.Uint64
	handoffMsgs, handoffURLs, handoffAccepted           atomic.Uint64
	handoffRefused, handoffOther, handoffErrors         atomic.Uint64
	streamsOpened, streamsHeld, streamsReset, streamErr atomic.Uint64
	streamsClosedByVictim, gossipStreamsCut             atomic.Uint64
}

// AttackCounts is what the attacker sent and what it was answered.
type AttackCounts struct {
	Heartbeats     uint64 `json:"heartbeats"`      // signed heartbeats written to the victim
	HeartbeatRPCs  uint64 `json:"heartbeat_rpcs"`  // gossipsub RPCs they went in
	HeartbeatBytes uint64 `json:"heartbeat_bytes"` // their bytes
	// GossipStreamsCut: times the victim reset or refused the stream the
	// heartbeats go on (each opened again).
	GossipStreamsCut uint64 `json:"gossip_streams_cut"`
	// Hand-off messages sent (each maximal: 4096 URLs, ~4 MiB) and how
	// they were answered: OK (URLs accepted), REFUSED, another status, or
	// no answer (a reset stream).
	HandoffMsgs     uint64 `json:"handoff_msgs"`
	HandoffURLs     uint64 `json:"handoff_urls"`
	HandoffAccepted uint64 `json:"handoff_urls_accepted"`
	HandoffRefused  uint64 `json:"handoff_refused"`
	HandoffOther    uint64 `json:"handoff_other_status"`
	HandoffErrors   uint64 `json:"handoff_errors"`
	// Streams of StreamProtocols: opened; held until the victim closed or
	// reset them (StreamsClosedByVictim of those) or the attack ended;
	// reset by the attacker after a few bytes; failed to open.
	StreamsOpened         uint64 `json:"streams_opened"`
	StreamsHeld           uint64 `json:"streams_held"`
	StreamsClosedByVictim uint64 `json:"streams_closed_by_victim"`
	StreamsReset          uint64 `json:"streams_reset"`
	StreamErrors          uint64 `json:"stream_errors"`
}

// Counts returns what the attack did so far.
func (a *Attacker) Counts() AttackCounts {
	c := &a.c
	return AttackCounts{Heartbeats: c.heartbeats.Load(), HeartbeatRPCs: c.heartbeatRPCs.Load(), HeartbeatBytes: c.heartbeatBytes.Load(),
		GossipStreamsCut: c.gossipStreamsCut.Load(),
		HandoffMsgs:      c.handoffMsgs.Load(), HandoffURLs: c.handoffURLs.Load(), HandoffAccepted: c.handoffAccepted.Load(),
		HandoffRefused: c.handoffRefused.Load(), HandoffOther: c.handoffOther.Load(), HandoffErrors: c.handoffErrors.Load(),
		StreamsOpened: c.streamsOpened.Load(), StreamsHeld: c.streamsHeld.Load(), StreamsClosedByVictim: c.streamsClosedByVictim.Load(),
		StreamsReset: c.streamsReset.Load(), StreamErrors: c.streamErr.Load()}
}

// NewAttacker starts the attacker's host on 127.0.0.1 and connects it to
// the victim (a loopback address: anything else is refused).
func NewAttacker(ctx context.Context, victim peer.AddrInfo, snap hierarchy.SnapshotID) (*Attacker, error) {
	for _, a := range victim.Addrs {
		if !strings.HasPrefix(a.String(), "/ip4/127.") {
			return nil, fmt.Errorf("hostile: victim address %s is not on loopback: the attacker talks to loopback only", a)
		}
	}
	sk, _, err := crypto.GenerateEd25519Key(nil)
	if err != nil {
		return nil, err
	}
	h, err := libp2p.New(libp2p.Identity(sk), libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"),
		// the attacker limits itself in nothing
		libp2p.ResourceManager(&network.NullResourceManager{}))
	if err != nil {
		return nil, fmt.Errorf("hostile: attacker host: %w", err)
	}
	// The victim's gossipsub opens its own stream to every peer that speaks
	// the protocol; the attacker reads and drops what comes on it.
	h.SetStreamHandler(gossipProtocol, func(s network.Stream) {
		_, _ = io.Copy(io.Discard, s)
		s.Close()
	})
	a := &Attacker{h: h, sk: sk, victim: victim, snap: snap}
	cctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	if err := h.Connect(cctx, victim); err != nil {
		h.Close()
		return nil, fmt.Errorf("hostile: connect to the victim: %w", err)
	}
	return a, nil
}

// ID is the attacker host's own identity (the first of its sybils).
func (a *Attacker) ID() peer.ID { return a.h.ID() }

// Close closes the attacker's host and every stream.
func (a *Attacker) Close() error { return a.h.Close() }

// Identities announces n identities (the host's own among them) to the
// victim over one gossipsub stream, as fast as the victim reads, round
// after round, until ctx ends. Each heartbeat is signed by its own
// identity. A stream the victim resets or refuses (its resource manager,
// its pubsub) is counted and opened again: a persistent attacker.
func (a *Attacker) Identities(ctx context.Context, n int) error {
	if n < 1 {
		return fmt.Errorf("hostile: %d identities: want at least 1", n)
	}
	sybils, err := newSybils(n, a.sk)
	if err != nil {
		return err
	}
	// The host's own identity heartbeats every second besides, as an
	// honest member does: in an open network it is then a member from the
	// start, whose hand-offs the victim reads, however far behind the
	// victim is with the others.
	start, lastOwn := time.Now(), time.Time{}
	for ctx.Err() == nil {
		err := a.identitiesOnce(ctx, sybils, start, &lastOwn)
		var cut streamCut
		switch {
		case ctx.Err() != nil:
			return nil
		case errors.As(err, &cut):
			a.c.gossipStreamsCut.Add(1)
			pause(ctx, 10*time.Millisecond)
		case err != nil:
			return err
		}
	}
	return nil
}

// streamCut is a stream the victim reset, closed or refused to open.
type streamCut struct{ err error }

func (c streamCut) Error() string {
	return "hostile: the victim cut the gossip stream: " + c.err.Error()
}
func (c streamCut) Unwrap() error { return c.err }

// identitiesOnce announces the sybils on one stream until the victim cuts
// it (streamCut) or ctx ends.
func (a *Attacker) identitiesOnce(ctx context.Context, sybils []sybil, start time.Time, lastOwn *time.Time) error {
	s, err := a.h.NewStream(ctx, a.victim.ID, gossipProtocol)
	if err != nil {
		return streamCut{err}
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	defer s.Close()
	w := bufio.NewWriterSize(s, 64<<10)
	write := func(rpc *pubsubpb.RPC) error {
		n, err := protodelim.MarshalTo(w, rpc)
		if err == nil {
			err = w.Flush()
		}
		a.c.heartbeatBytes.Add(uint64(n))
		if err != nil {
			return streamCut{err}
		}
		return nil
	}
	sub := &pubsubpb.RPC{Subscriptions: []*pubsubpb.RPC_SubOpts{{Subscribe: proto.Bool(true), Topicid: proto.String(overlay.TopicMembership)}}}
	if err := write(sub); err != nil {
		return err
	}
	own := &sybils[0]
	send := func(rpc *pubsubpb.RPC, k int) error {
		if time.Since(*lastOwn) >= time.Second {
			data, err := own.heartbeat(a.snap, start, a.h.Addrs(), 0)
			if err != nil {
				return err
			}
			m, err := own.signedMessage(overlay.TopicMembership, data)
			if err != nil {
				return err
			}
			rpc.Publish, k, *lastOwn = append([]*pubsubpb.Message{m}, rpc.Publish...), k+1, time.Now()
		}
		if err := write(rpc); err != nil {
			return err
		}
		a.c.heartbeatRPCs.Add(1)
		a.c.heartbeats.Add(uint64(k))
		return nil
	}
	for ctx.Err() == nil {
		err := heartbeatRPCs(sybils[1:], a.snap, start, a.h.Addrs(), send)
		if len(sybils) == 1 {
			err = send(&pubsubpb.RPC{}, 0)
			pause(ctx, time.Second)
		}
		if err != nil {
			return err
		}
	}
	return nil
}

// Handoff size: the most a hand-off message may carry (4096 URLs, 4 MiB
// less the receiver's framing margin), each URL on a loopback host that
// listens nowhere, so nothing the victim fetches leaves the machine.
const (
	handoffURLs     = 4096
	handoffURLBytes = 1000
)

// HandoffAddr is the address of worker w's hand-offs: its URLs' hosts
// are in its /24.
func HandoffAddr(w int) netip.Addr { return netip.AddrFrom4([4]byte{127, 66, byte(w), 1}) }

// Handoffs sends maximal /micra/handoff/1 messages from one stream per
// subnets entry at once (worker w's URLs on HandoffAddr(w)'s hosts, in
// subnets[w], the victim's subnet of that address), each as soon as the
// previous one is answered, with new URLs each time (the victim's seen-set
// drops none), until ctx ends.
func (a *Attacker) Handoffs(ctx context.Context, subnets []uint32) {
	var wg sync.WaitGroup
	for w, s := range subnets {
		wg.Go(func() {
			for msg := 0; ctx.Err() == nil; msg++ {
				a.handoff(ctx, handoffRequest(a.snap, s, w, msg))
			}
		})
	}
	wg.Wait()
}

// handoffRequest is worker w's msg-th message: one batch of 4096 URLs on
// 16 hosts of HandoffAddr(w)'s /24, in subnet s.
func handoffRequest(snap hierarchy.SnapshotID, s uint32, w, msg int) *pb.HandoffRequest {
	b := &pb.HandoffBatch{Subnet: s, Addr: HandoffAddr(w).AsSlice()}
	pad := strings.Repeat("x", handoffURLBytes)
	for i := range handoffURLs {
		u := fmt.Sprintf("http://127.66.%d.%d/flood/%d/%d/", byte(w), 1+i%16, msg, i)
		b.Urls = append(b.Urls, u+pad[:handoffURLBytes-len(u)])
	}
	return &pb.HandoffRequest{Version: 1, BatchId: uint64(w)<<32 | uint64(msg), Snapshot: snap[:], Batches: []*pb.HandoffBatch{b}}
}

func (a *Attacker) handoff(ctx context.Context, req *pb.HandoffRequest) {
	s, err := a.h.NewStream(ctx, a.victim.ID, overlay.ProtoHandoff)
	if err != nil {
		if ctx.Err() == nil {
			a.c.handoffErrors.Add(1)
			pause(ctx, 10*time.Millisecond) // (the victim is gone or refuses streams)
		}
		return
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	defer s.Close()
	a.c.handoffMsgs.Add(1)
	a.c.handoffURLs.Add(uint64(len(req.Batches[0].Urls)))
	// The answer is read while the request is written: a victim that
	// refuses answers before it reads, and the rest of the request is then
	// cut short (a reset) so the next one goes at once.
	var resp pb.HandoffResponse
	answered := make(chan error, 1)
	go func() {
		err := protodelim.UnmarshalFrom(bufio.NewReader(s), &resp)
		if err == nil {
			s.Reset()
		}
		answered <- err
	}()
	if _, err := protodelim.MarshalTo(s, req); err == nil {
		_ = s.CloseWrite()
	}
	if err := <-answered; err != nil {
		if ctx.Err() == nil {
			a.c.handoffErrors.Add(1)
		}
		s.Reset()
		return
	}
	switch resp.Status {
	case pb.Status_OK:
		a.c.handoffAccepted.Add(uint64(resp.Accepted))
	case pb.Status_REFUSED:
		a.c.handoffRefused.Add(1)
	default:
		a.c.handoffOther.Add(1)
	}
}

// Streams opens perProtocol concurrent streams of each of StreamProtocols
// and keeps them coming until ctx ends: every other stream is held (a
// message's first bytes, then silence, until the victim closes it), the
// others reset after a few bytes.
func (a *Attacker) Streams(ctx context.Context, perProtocol int) {
	var wg sync.WaitGroup
	for _, proto := range StreamProtocols {
		for w := range perProtocol {
			wg.Go(func() {
				for ctx.Err() == nil {
					a.stream(ctx, proto, w%2 == 0)
				}
			})
		}
	}
	wg.Wait()
}

func (a *Attacker) stream(ctx context.Context, proto protocol.ID, hold bool) {
	s, err := a.h.NewStream(ctx, a.victim.ID, proto)
	if err != nil {
		if ctx.Err() == nil {
			a.c.streamErr.Add(1)
			pause(ctx, 10*time.Millisecond)
		}
		return
	}
	a.c.streamsOpened.Add(1)
	// a length prefix announcing a 1000-byte message, and 3 of its bytes
	if _, err := s.Write([]byte{0xe8, 0x07, 0x0a, 0x01, 0x00}); err != nil {
		s.Reset()
		a.c.streamErr.Add(1)
		return
	}
	if !hold {
		s.Reset()
		a.c.streamsReset.Add(1)
		return
	}
	a.c.streamsHeld.Add(1)
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	_, _ = io.Copy(io.Discard, s)
	if ctx.Err() == nil {
		// the victim answered, closed or reset the stream it waited on
		a.c.streamsClosedByVictim.Add(1)
	}
	s.Reset()
}

func pause(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
	case <-t.C:
	}
}
