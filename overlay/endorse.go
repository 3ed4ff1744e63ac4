package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// endorse asks owner to countersign m over /micra/endorse/1 and checks the
// returned envelope: signed by owner, over exactly m.
func (p *Peer) endorse(ctx context.Context, owner peer.ID, m *pb.DelegationRecord) ([]byte, error) {
	env, err := p.askEndorse(ctx, owner, m, 0)
	if err != nil {
		return nil, err
	}
	var op ownerPayload
	e, err := record.ConsumeTypedEnvelope(env, &op)
	if err != nil {
		return nil, fmt.Errorf("endorse: envelope from %s: %w", shortID(owner), err)
	}
	signer, err := peer.IDFromPublicKey(e.PublicKey)
	if err != nil || signer != owner {
		return nil, fmt.Errorf("endorse: envelope from %s signed by %s", shortID(owner), signer)
	}
	if !proto.Equal(&op.DelegationRecord, m) {
		return nil, fmt.Errorf("endorse: %s signed a different record", shortID(owner))
	}
	p.metrics.endorsements.Inc()
	return env, nil
}

// askEndorse sends m to peer over /micra/endorse/1 asking, for block 0,
// its endorsement as the record's owner, else its consent to block
// block (1-based), and returns the envelope it sealed (unchecked).
func (p *Peer) askEndorse(ctx context.Context, to peer.ID, m *pb.DelegationRecord, block uint32) ([]byte, error) {
	raw, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		return nil, err
	}
	var resp pb.EndorseResponse
	if err := roundTrip(ctx, p.h, to, ProtoEndorse, maxEndorseMsg, p.cfg.RequestTimeout,
		&pb.EndorseRequest{Version: wireVersion, Record: raw, Block: block}, &resp); err != nil {
		return nil, err
	}
	if err := remoteErr(to, ProtoEndorse, resp.Status, resp.Error); err != nil {
		return nil, err
	}
	return resp.Envelope, nil
}

// handleEndorse countersigns a delegation naming this peer as owner, after
// checking it: our snapshot, a real subnet, a fresh time, and an owner RTT
// that agrees with what we measured (probeLog.consistent).
func (p *Peer) handleEndorse(s network.Stream) {
	defer s.Close()
	st := newStream(s, maxEndorseMsg, p.cfg.RequestTimeout)
	var req pb.EndorseRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	resp := &pb.EndorseResponse{Version: wireVersion}
	resp.Status, resp.Error, resp.Envelope = p.checkEndorse(s.Conn().RemotePeer(), req.Record, int(req.Block))
	if err := st.write(resp); err != nil {
		s.Reset()
	}
}

// checkEndorse answers an endorse request: for block 0 this peer's
// endorsement as the record's owner, else its consent to that block
// (1-based) as the block's owner (checkBlockConsent).
func (p *Peer) checkEndorse(from peer.ID, raw []byte, block int) (pb.Status, string, []byte) {
	var m pb.DelegationRecord
	if err := proto.Unmarshal(raw, &m); err != nil {
		return pb.Status_BAD_REQUEST, "record: " + err.Error(), nil
	}
	rec, err := fromPB(&m)
	if err != nil {
		return pb.Status_BAD_REQUEST, "record: " + err.Error(), nil
	}
	switch {
	case p.ctx.Err() != nil:
		return pb.Status_UNAVAILABLE, "shutting down", nil
	case !p.isMember(from):
		// only members decide: a stranger's record naming this peer would
		// otherwise carry its signature
		return pb.Status_REFUSED, fmt.Sprintf("%s is not a live member of this network", shortID(from)), nil
	case block == 0 && rec.Owner != p.selfID:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("record names owner %s, not this peer", rec.Owner), nil
	case string(rec.DecidedBy) != from.String():
		return pb.Status_BAD_REQUEST, fmt.Sprintf("record decided by %s but sent by %s", rec.DecidedBy, from), nil
	case rec.Snapshot != p.snap:
		return pb.Status_WRONG_SNAPSHOT, fmt.Sprintf("snapshot %x, this peer runs %x", rec.Snapshot[:6], p.snap[:6]), nil
	case int(rec.Subnet) >= p.tree.Len() || rec.Subnet == hierarchy.Root:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d not in the hierarchy", rec.Subnet), nil
	case time.Since(rec.At) > clockSkew || time.Until(rec.At) > clockSkew:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("record time %v is not fresh", rec.At), nil
	case rec.Epoch > delegation.EpochCeiling(rec.At):
		return pb.Status_BAD_REQUEST, fmt.Sprintf("epoch %d is past its time's ceiling %d", rec.Epoch, delegation.EpochCeiling(rec.At)), nil
	}
	if block > 0 {
		return p.checkBlockConsent(from, rec, block-1)
	}
	in := func(a netip.Addr) bool { return p.tree.Contains(rec.Subnet, a) }
	if !p.probes.consistent(from, in, rec.OwnerRTT) {
		return pb.Status_REFUSED, fmt.Sprintf("owner rtt %v disagrees with what this peer measured for subnet %d", rec.OwnerRTT, rec.Subnet), nil
	}
	env, err := sealOwner(&m, p.sk)
	if err != nil {
		return pb.Status_INTERNAL, err.Error(), nil
	}
	return pb.Status_OK, "", env
}
