package overlay

import (
	"bytes"
	"context"
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// A block delegation gives one /24 (or /48) of a subnet to a crawler other
// than the subnet's owner. The record's owner endorses the record, but the
// block's crawler is another peer: it consents to its block by sealing a
// BlockConsent (the subnet, the block's host and the RTT it reported) when
// the decider asks over /micra/endorse/1. The consent travels inside the
// block, so a block carried into a successor record keeps it, and every
// peer's validator checks it: nobody can hand a crawler a block it did not
// agree to, nor put made-up RTTs in its name.

const consentDomain = "micra-block-consent"

var consentCodec = []byte("/micra/deleg/block-consent/1")

type consentPayload struct{ pb.BlockConsent }

func (*consentPayload) Domain() string { return consentDomain }
func (*consentPayload) Codec() []byte  { return consentCodec }
func (c *consentPayload) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&c.BlockConsent)
}
func (c *consentPayload) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, &c.BlockConsent) }

// sealConsent is the consent of block b's owner (sk) to b in subnet s of
// snapshot snap, decided by decider.
func sealConsent(sk crypto.PrivKey, snap hierarchy.SnapshotID, s hierarchy.NodeID, b delegation.BlockDelegation, decider peer.ID, at time.Time) ([]byte, error) {
	env, err := record.Seal(&consentPayload{pb.BlockConsent{
		Version: wireVersion, Snapshot: snap[:], Subnet: uint32(s), Host: b.Host.Unmap().AsSlice(),
		OwnerRttNs: int64(b.OwnerRTT), DecidedBy: []byte(decider), AtUnixNano: at.UnixNano(),
	}}, sk)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// maxConsentBytes bounds one block's consent (about 200 bytes in practice).
const maxConsentBytes = 512

// checkConsent verifies that b carries its owner's consent to exactly b in
// subnet s of snapshot snap.
func checkConsent(snap hierarchy.SnapshotID, s hierarchy.NodeID, b delegation.BlockDelegation) error {
	if len(b.Consent) == 0 {
		return fmt.Errorf("block %v: no consent of its owner %s", b.Block(), b.Owner)
	}
	if len(b.Consent) > maxConsentBytes {
		return fmt.Errorf("block %v: consent of %d bytes exceeds %d", b.Block(), len(b.Consent), maxConsentBytes)
	}
	var cp consentPayload
	env, err := record.ConsumeTypedEnvelope(b.Consent, &cp)
	if err != nil {
		return fmt.Errorf("block %v: consent: %w", b.Block(), err)
	}
	if !bytes.Equal(env.PayloadType, consentCodec) {
		return fmt.Errorf("block %v: consent: wrong payload type", b.Block())
	}
	if len(cp.ProtoReflect().GetUnknown()) > 0 {
		return fmt.Errorf("block %v: consent: fields this version does not know", b.Block())
	}
	signer, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return fmt.Errorf("block %v: consent: %w", b.Block(), err)
	}
	host, _ := netip.AddrFromSlice(cp.Host)
	switch {
	case string(b.Owner) != signer.String():
		return fmt.Errorf("block %v: consent signed by %s, not its owner %s", b.Block(), signer, b.Owner)
	case !bytes.Equal(cp.Snapshot, snap[:]) || hierarchy.NodeID(cp.Subnet) != s:
		return fmt.Errorf("block %v: consent is to subnet %d of another record", b.Block(), cp.Subnet)
	case host != b.Host.Unmap():
		return fmt.Errorf("block %v: consent is to host %v, the block names %v", b.Block(), host, b.Host)
	case time.Duration(cp.OwnerRttNs) != b.OwnerRTT:
		return fmt.Errorf("block %v: consent states rtt %v, the block %v", b.Block(), time.Duration(cp.OwnerRttNs), b.OwnerRTT)
	}
	return nil
}

// gatherConsents gives every block of rec its owner's consent: a block
// that carries a valid one keeps it, this peer's own blocks are sealed
// here, and each other owner is asked over /micra/endorse/1.
func (p *Peer) gatherConsents(ctx context.Context, rec *delegation.Record) error {
	for i := range rec.Blocks {
		b := &rec.Blocks[i]
		if checkConsent(rec.Snapshot, rec.Subnet, *b) == nil {
			continue
		}
		b.Consent = nil
		if b.Owner == p.selfID {
			c, err := sealConsent(p.sk, rec.Snapshot, rec.Subnet, *b, p.h.ID(), time.Now())
			if err != nil {
				return err
			}
			b.Consent = c
			continue
		}
		owner, err := peer.Decode(string(b.Owner))
		if err != nil {
			return fmt.Errorf("block %v owner: %w", b.Block(), err)
		}
		m, err := toPB(*rec)
		if err != nil {
			return err
		}
		env, err := p.askEndorse(ctx, owner, m, uint32(i+1))
		if err != nil {
			return fmt.Errorf("block %v: owner %s: %w", b.Block(), shortID(owner), err)
		}
		b.Consent = env
		if err := checkConsent(rec.Snapshot, rec.Subnet, *b); err != nil {
			b.Consent = nil
			return fmt.Errorf("block %v: %s answered with %w", b.Block(), shortID(owner), err)
		}
	}
	return nil
}

// checkBlockConsent is the block owner's side of /micra/endorse/1: it
// consents to block i (0-based) of rec, decided by from, if the block is
// its own, in the subnet, and states an RTT this peer measured for it
// (probeLog.consistent).
func (p *Peer) checkBlockConsent(from peer.ID, rec delegation.Record, i int) (pb.Status, string, []byte) {
	if i < 0 || i >= len(rec.Blocks) {
		return pb.Status_BAD_REQUEST, fmt.Sprintf("block %d of a record of %d blocks", i+1, len(rec.Blocks)), nil
	}
	b := rec.Blocks[i]
	switch {
	case b.Owner != p.selfID:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("block %v is given to %s, not this peer", b.Block(), b.Owner), nil
	case p.tree.SmallestNonUnary(b.Host) != rec.Subnet:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("block %v is not in subnet %d", b.Block(), rec.Subnet), nil
	}
	block := b.Block()
	if !p.probes.consistent(from, block.Contains, b.OwnerRTT) {
		return pb.Status_REFUSED, fmt.Sprintf("rtt %v disagrees with what this peer measured for block %v", b.OwnerRTT, block), nil
	}
	c, err := sealConsent(p.sk, rec.Snapshot, rec.Subnet, b, from, time.Now())
	if err != nil {
		return pb.Status_INTERNAL, err.Error(), nil
	}
	return pb.Status_OK, "", c
}
