package overlay

import (
	"context"
	"crypto/sha256"
	"fmt"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// SnapshotStore serves hierarchy snapshots by id (canonical bytes whose
// SHA-256 is the id).
type SnapshotStore interface {
	Snapshot(id hierarchy.SnapshotID) ([]byte, bool)
}

// TreeSnapshots serves the snapshots of the given trees.
type TreeSnapshots map[hierarchy.SnapshotID][]byte

// Snapshot implements SnapshotStore.
func (t TreeSnapshots) Snapshot(id hierarchy.SnapshotID) ([]byte, bool) {
	b, ok := t[id]
	return b, ok
}

func (p *Peer) handleSnapshot(s network.Stream) {
	defer s.Close()
	st := newStream(s, maxSnapshotMsg, 4*p.cfg.RequestTimeout)
	var req pb.SnapshotRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	hdr := &pb.SnapshotHeader{Version: wireVersion}
	var data []byte
	switch {
	case len(req.Id) != len(hierarchy.SnapshotID{}):
		hdr.Status, hdr.Error = pb.Status_BAD_REQUEST, fmt.Sprintf("snapshot id of %d bytes", len(req.Id))
	case p.snapshots == nil:
		hdr.Status, hdr.Error = pb.Status_NOT_FOUND, "this peer serves no snapshots"
	default:
		var ok bool
		data, ok = p.snapshots.Snapshot(hierarchy.SnapshotID(req.Id))
		if !ok {
			hdr.Status, hdr.Error = pb.Status_NOT_FOUND, fmt.Sprintf("snapshot %x not held", req.Id[:6])
		}
		hdr.Size = uint64(len(data))
	}
	if err := st.write(hdr); err != nil || hdr.Status != pb.Status_OK {
		return
	}
	for off := 0; off < len(data); off += snapshotChunk {
		if err := st.write(&pb.SnapshotChunk{Data: data[off:min(off+snapshotChunk, len(data))]}); err != nil {
			s.Reset()
			return
		}
	}
}

// FetchSnapshot downloads snapshot id from peer from and verifies its hash.
func (p *Peer) FetchSnapshot(ctx context.Context, from peer.ID, id hierarchy.SnapshotID) ([]byte, error) {
	timeout := 4 * p.cfg.RequestTimeout
	if d, ok := ctx.Deadline(); ok {
		timeout = time.Until(d)
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	s, err := p.h.NewStream(ctx, from, ProtoSnapshot)
	if err != nil {
		return nil, fmt.Errorf("%s: open stream to %s: %w", ProtoSnapshot, shortID(from), err)
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	st := newStream(s, maxSnapshotMsg, timeout)
	if err := st.write(&pb.SnapshotRequest{Version: wireVersion, Id: id[:]}); err != nil {
		return nil, fmt.Errorf("%s: %w", ProtoSnapshot, err)
	}
	_ = s.CloseWrite()
	var hdr pb.SnapshotHeader
	if err := st.read(&hdr); err != nil {
		return nil, fmt.Errorf("%s: header from %s: %w", ProtoSnapshot, shortID(from), err)
	}
	if err := remoteErr(from, ProtoSnapshot, hdr.Status, hdr.Error); err != nil {
		return nil, err
	}
	if hdr.Size > maxSnapshot {
		s.Reset()
		return nil, fmt.Errorf("%s: %s announces %d bytes, limit %d", ProtoSnapshot, shortID(from), hdr.Size, maxSnapshot)
	}
	data := make([]byte, 0, min(hdr.Size, 4*snapshotChunk)) // (grows with the data, not on the header's word)
	for uint64(len(data)) < hdr.Size {
		var ch pb.SnapshotChunk
		if err := st.read(&ch); err != nil {
			return nil, fmt.Errorf("%s: after %d of %d bytes from %s: %w", ProtoSnapshot, len(data), hdr.Size, shortID(from), err)
		}
		if len(ch.Data) == 0 || uint64(len(data)+len(ch.Data)) > hdr.Size {
			s.Reset()
			return nil, fmt.Errorf("%s: %s sent a bad chunk (%d bytes at %d of %d)", ProtoSnapshot, shortID(from), len(ch.Data), len(data), hdr.Size)
		}
		data = append(data, ch.Data...)
	}
	if sum := sha256.Sum256(data); sum != id {
		return nil, fmt.Errorf("%s: %s sent bytes hashing to %x, want %x", ProtoSnapshot, shortID(from), sum[:6], id[:6])
	}
	return data, nil
}

// FetchSnapshotAny tries live members in turn until one serves a verified copy.
func (p *Peer) FetchSnapshotAny(ctx context.Context, id hierarchy.SnapshotID) ([]byte, peer.ID, error) {
	var errs []error
	for _, c := range p.members.Live() {
		if c.ID == p.selfID {
			continue
		}
		pid, err := peer.Decode(string(c.ID))
		if err != nil {
			continue
		}
		data, err := p.FetchSnapshot(ctx, pid, id)
		if err == nil {
			return data, pid, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, "", fmt.Errorf("overlay: snapshot %x: no peer served it (%d tried): %v", id[:6], len(errs), errs)
}
