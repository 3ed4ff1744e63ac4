package overlay

import (
	"context"
	"log/slog"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
)

// ProtoRevocations answers with the latest revocation list a peer holds.
const ProtoRevocations protocol.ID = "/micra/revocations/1"

const (
	// revocationReload: how often the revocation file is looked at, so a
	// list the operator writes there (micra admit revoke) is taken.
	revocationReload = 10 * time.Second
	// revocationServeRate and revocationServeBurst bound the lists one
	// peer is sent (a list is up to maxRevocationBytes).
	revocationServeRate  = 1
	revocationServeBurst = 5
)

// revocationSync spreads a network's revocation lists with the heartbeats:
// each heartbeat says which list its sender holds (Heartbeat.revocations),
// and a peer holding an older one fetches the sender's. A list thus reaches
// every peer in a few heartbeat rounds, and a peer that joins later learns
// it from its first neighbour's heartbeat. The list the operator writes
// into a peer's revocation file enters the same way. Revoked members are
// declared dead and disconnected.
type revocationSync struct {
	adm     *Admission
	h       host.Host
	members *Members
	log     *slog.Logger
	timeout time.Duration
	want    chan wanted
	limit   peerLimiter

	fileMu  sync.Mutex
	fileMod time.Time
	fileLen int64
}

type wanted struct {
	from peer.ID
	seq  uint64
}

func newRevocationSync(adm *Admission, h host.Host, members *Members, log *slog.Logger, timeout time.Duration) *revocationSync {
	return &revocationSync{adm: adm, h: h, members: members, log: log, timeout: timeout, want: make(chan wanted, 16)}
}

// held is the sequence number heartbeats announce.
func (r *revocationSync) held() uint64 {
	_, seq := r.adm.Revocations()
	return seq
}

// heard notes that from holds list seq (from its heartbeat).
func (r *revocationSync) heard(from peer.ID, seq uint64) {
	if seq <= r.held() {
		return
	}
	select {
	case r.want <- wanted{from, seq}:
	default: // a fetch backlog: the next heartbeat asks again
	}
}

// run fetches announced lists and reloads the revocation file until ctx ends.
func (r *revocationSync) run(ctx context.Context) {
	reload := time.NewTicker(revocationReload)
	defer reload.Stop()
	r.reload()
	for {
		select {
		case <-ctx.Done():
			return
		case <-reload.C:
			r.reload()
		case w := <-r.want:
			if w.seq <= r.held() {
				continue // fetched from another in the meantime
			}
			if err := r.fetch(ctx, w.from); err != nil && ctx.Err() == nil {
				r.log.Debug("overlay: revocation list not fetched", "from", shortID(w.from), "err", err)
			}
		}
	}
}

// reload applies the revocation file if it changed since it was last read.
func (r *revocationSync) reload() {
	if r.adm.file == "" {
		return
	}
	fi, err := os.Stat(r.adm.file)
	if err != nil {
		return
	}
	r.fileMu.Lock()
	same := fi.ModTime().Equal(r.fileMod) && fi.Size() == r.fileLen
	r.fileMod, r.fileLen = fi.ModTime(), fi.Size()
	r.fileMu.Unlock()
	if same {
		return
	}
	raw, err := os.ReadFile(r.adm.file)
	if err != nil {
		r.log.Warn("overlay: revocation file unreadable", "file", r.adm.file, "err", err)
		return
	}
	added, err := r.adm.applyRevocations(raw, false)
	if err != nil {
		r.log.Warn("overlay: revocation file refused", "file", r.adm.file, "err", err)
		return
	}
	r.revoke(added)
}

// fetch asks from for its list and applies it.
func (r *revocationSync) fetch(ctx context.Context, from peer.ID) error {
	var resp pb.RevocationsResponse
	if err := roundTrip(ctx, r.h, from, ProtoRevocations, maxRevocationBytes+1<<10, r.timeout,
		&pb.RevocationsRequest{Version: wireVersion}, &resp); err != nil {
		return err
	}
	if err := remoteErr(from, ProtoRevocations, resp.Status, resp.Error); err != nil {
		return err
	}
	added, err := r.adm.ApplyRevocations(resp.List)
	if err != nil {
		return err
	}
	r.revoke(added)
	return nil
}

// revoke declares the newly revoked members dead and closes their
// connections.
func (r *revocationSync) revoke(ids []peer.ID) {
	if len(ids) == 0 {
		return
	}
	_, seq := r.adm.Revocations()
	r.log.Info("overlay: revocation list taken", "seq", seq, "newly_revoked", len(ids))
	r.members.revoke(ids, time.Now())
	for _, id := range ids {
		if id != r.h.ID() {
			_ = r.h.Network().ClosePeer(id)
		}
	}
}

// serve answers /micra/revocations/1.
func (r *revocationSync) serve(s network.Stream) {
	from := s.Conn().RemotePeer()
	ServeRequest(s, 1<<10, r.timeout, &pb.RevocationsRequest{}, func() proto.Message {
		raw, _ := r.adm.Revocations()
		switch {
		case !r.limit.allow(from, revocationServeRate, revocationServeBurst, time.Now()):
			return &pb.RevocationsResponse{Version: wireVersion, Status: pb.Status_UNAVAILABLE, Error: "rate limited"}
		case raw == nil:
			return &pb.RevocationsResponse{Version: wireVersion, Status: pb.Status_NOT_FOUND, Error: "no revocation list"}
		}
		return &pb.RevocationsResponse{Version: wireVersion, List: raw}
	})
}
