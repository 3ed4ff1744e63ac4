package hostile

import (
	"crypto/rand"
	"encoding/binary"
	"fmt"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
)

// sybil is one identity the attacker announces.
type sybil struct {
	id  peer.ID
	sk  crypto.PrivKey
	seq uint64
}

// newSybils makes n Ed25519 identities (their peer ids inline their keys,
// so a message needs no key field); first, if not nil, is the first.
func newSybils(n int, first crypto.PrivKey) ([]sybil, error) {
	out := make([]sybil, 0, n)
	for i := range n {
		sk := first
		if i > 0 || sk == nil {
			var err error
			if sk, _, err = crypto.GenerateEd25519Key(rand.Reader); err != nil {
				return nil, err
			}
		}
		id, err := peer.IDFromPrivateKey(sk)
		if err != nil {
			return nil, err
		}
		out = append(out, sybil{id: id, sk: sk})
	}
	return out, nil
}

// sybilInterval is the heartbeat interval the identities claim: the most a
// heartbeat may (overlay.decodeHeartbeat). A member is judged by its own
// pace — dead after three intervals' silence — so one heartbeat keeps an
// identity live for three minutes.
const sybilInterval = 60 * time.Second

// heartbeat is s's next membership heartbeat for a peer on snapshot snap,
// as an honest crawler's reads: a capacity, a position, the listen
// addresses given. It carries no certificate.
func (s *sybil) heartbeat(snap hierarchy.SnapshotID, start time.Time, listen []ma.Multiaddr, n int) ([]byte, error) {
	s.seq++
	now := time.Now()
	hb := &pb.Heartbeat{
		Version:       1,
		Seq:           s.seq,
		AtUnixNano:    now.UnixNano(),
		StartUnixNano: start.UnixNano(),
		IntervalMs:    uint32(sybilInterval / time.Millisecond),
		Snapshot:      snap[:],
		CrawlerAddr:   []byte{127, 0, 0, 1},
		Capacity:      100_000,
		// spread over the globe, as volunteers would be
		HasPos: true,
		Lat:    -60 + 120*float64(n%97)/97,
		Lon:    -180 + 360*float64(n%89)/89,
	}
	for _, a := range listen {
		hb.ListenAddrs = append(hb.ListenAddrs, a.Bytes())
	}
	return proto.Marshal(hb)
}

// signedMessage wraps data as a gossipsub message on topic authored and
// signed by s, as go-libp2p-pubsub's StrictSign policy checks it: the
// signature covers SignPrefix and the message marshalled without its
// signature and key fields.
func (s *sybil) signedMessage(topic string, data []byte) (*pubsubpb.Message, error) {
	seqno := make([]byte, 8)
	binary.BigEndian.PutUint64(seqno, s.seq)
	m := &pubsubpb.Message{From: []byte(s.id), Data: data, Seqno: seqno, Topic: proto.String(topic)}
	b, err := proto.Marshal(m)
	if err != nil {
		return nil, err
	}
	sig, err := s.sk.Sign(append([]byte(pubsub.SignPrefix), b...))
	if err != nil {
		return nil, err
	}
	m.Signature = sig
	return m, nil
}

// maxRPCBytes keeps an RPC of heartbeats under the victim's gossipsub
// message size limit (overlay's, 17 KiB), which bounds a whole RPC.
const maxRPCBytes = 15 << 10

// heartbeatRPCs announces every sybil once, in RPCs of at most
// maxRPCBytes, and passes each to send (which may block: the victim's
// pace). It stops at send's first error.
func heartbeatRPCs(sybils []sybil, snap hierarchy.SnapshotID, start time.Time, listen []ma.Multiaddr, send func(*pubsubpb.RPC, int) error) error {
	rpc, size, n := &pubsubpb.RPC{}, 0, 0
	for i := range sybils {
		data, err := sybils[i].heartbeat(snap, start, listen, i)
		if err != nil {
			return err
		}
		m, err := sybils[i].signedMessage(overlay.TopicMembership, data)
		if err != nil {
			return fmt.Errorf("hostile: sign a heartbeat: %w", err)
		}
		ms := proto.Size(m) + 8
		if size+ms > maxRPCBytes && n > 0 {
			if err := send(rpc, n); err != nil {
				return err
			}
			rpc, size, n = &pubsubpb.RPC{}, 0, 0
		}
		rpc.Publish = append(rpc.Publish, m)
		size += ms
		n++
	}
	if n > 0 {
		return send(rpc, n)
	}
	return nil
}
