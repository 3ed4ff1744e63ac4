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

// A snapshot is a bulk transfer (up to maxSnapshot), not a request /
// response exchange, so RequestTimeout does not bound all of it: a 50 MiB
// snapshot on a 1 Mbit/s link takes 7 minutes, and a volunteer's node on
// such a link must still be able to join. Both sides instead (1) drop a
// peer that moves no bytes for RequestTimeout — the deadline is renewed on
// every read and on every 64 KiB written (newIdleStream), so a stalled or
// vanished peer costs RequestTimeout, whatever the caller's deadline — and
// (2) cap the whole transfer at snapshotBudget of its size: the old 4 ×
// RequestTimeout plus the size at minSnapshotRate, so a peer trickling a
// byte per idle period cannot hold a fetch forever. The caller's context
// bounds the fetch too (the earlier end applies). This is the usual shape
// of a bulk transfer on a libp2p service: a per-read idle deadline plus an
// overall cap, not one short deadline for the whole stream.

// minSnapshotRate is the slowest average rate a snapshot transfer is
// allowed (64 KiB/s, a 512 kbit/s link): it sets the transfer's overall cap.
const minSnapshotRate = 64 << 10

// snapshotBudget is the overall cap of a snapshot transfer of size bytes.
func snapshotBudget(requestTimeout time.Duration, size uint64) time.Duration {
	return 4*requestTimeout + time.Duration(min(size, maxSnapshot))*time.Second/minSnapshotRate
}

func (p *Peer) handleSnapshot(s network.Stream) {
	defer s.Close()
	start := time.Now()
	rt := p.cfg.RequestTimeout
	st := newIdleStream(s, maxSnapshotMsg, rt, start.Add(snapshotBudget(rt, 0)))
	var req pb.SnapshotRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	hdr, data := p.snapshotFor(&req)
	st.setEnd(start.Add(snapshotBudget(rt, hdr.Size)))
	if err := st.write(hdr); err != nil {
		s.Reset()
		return
	}
	if hdr.Status != pb.Status_OK {
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
// The peer must move bytes at least every RequestTimeout, and the whole
// transfer ends by snapshotBudget of the announced size or by ctx, whichever
// comes first (see minSnapshotRate). On any failure the stream is reset.
func (p *Peer) FetchSnapshot(ctx context.Context, from peer.ID, id hierarchy.SnapshotID) (data []byte, err error) {
	start := time.Now()
	rt := p.cfg.RequestTimeout
	end := func(budget time.Duration) time.Time {
		e := start.Add(budget)
		if d, ok := ctx.Deadline(); ok && d.Before(e) {
			e = d
		}
		return e
	}
	octx, ocancel := context.WithTimeout(ctx, rt) // dial and protocol negotiation
	s, err := p.h.NewStream(octx, from, ProtoSnapshot)
	ocancel()
	if err != nil {
		return nil, fmt.Errorf("%s: open stream to %s: %w", ProtoSnapshot, shortID(from), err)
	}
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer func() {
		stop()
		if err != nil {
			s.Reset()
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return
		}
		s.Close()
	}()
	st := newIdleStream(s, maxSnapshotMsg, rt, end(snapshotBudget(rt, 0)))
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
		return nil, fmt.Errorf("%s: %s announces %d bytes, limit %d", ProtoSnapshot, shortID(from), hdr.Size, maxSnapshot)
	}
	st.setEnd(end(snapshotBudget(rt, hdr.Size)))
	data = make([]byte, 0, min(hdr.Size, 4*snapshotChunk)) // (grows with the data, not on the header's word)
	for uint64(len(data)) < hdr.Size {
		var ch pb.SnapshotChunk
		if err := st.read(&ch); err != nil {
			return nil, fmt.Errorf("%s: after %d of %d bytes from %s in %v: %w", ProtoSnapshot, len(data), hdr.Size, shortID(from), time.Since(start).Round(time.Millisecond), err)
		}
		if len(ch.Data) == 0 || uint64(len(data)+len(ch.Data)) > hdr.Size {
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

// snapshotFor answers a snapshot request: its header, and the snapshot's
// bytes when the header is OK.
func (p *Peer) snapshotFor(req *pb.SnapshotRequest) (*pb.SnapshotHeader, []byte) {
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
	return hdr, data
}
