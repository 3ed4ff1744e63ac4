package overlay

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// ProtoOwned carries a peer's owned delegation records straight to a
// member that returned after it was declared dead (watchReturns). The
// records a returning member missed are those its own caches lack, so they
// go to it alone: a peer's cost per return is its own records, whatever
// the network's size, where announcing them on gossip cost every peer
// every owner's records on every return.
const ProtoOwned protocol.ID = "/micra/owned/1"

// Owned-record transfer bounds: records per message and bytes per message
// (a record is at most maxRecordBytes), and each member's budget of
// records at a receiver, which verifies two signatures or more per record.
// A member owning more than the burst gets the rest through on the later
// rounds of returnDelays.
const (
	ownedBatchRecords = 256
	ownedBatchBytes   = 1 << 20
	maxOwnedMsg       = ownedBatchBytes + ownedBatchRecords*64 + maxRecordBytes
	ownedRate         = 512  // records a second, per sender
	ownedBurst        = 8192 // records
	// ownedSenders bounds the members a peer sends its records to at once
	ownedSenders = 4
	// ownedReplyEvery: a member's request for this peer's records in
	// return is served at most this often
	ownedReplyEvery = 10 * time.Second
)

// ownedValue is one of this peer's owned records, sealed again.
type ownedValue struct {
	s   hierarchy.NodeID
	val []byte
}

// handleOwned serves ProtoOwned.
func (p *Peer) handleOwned(s network.Stream) {
	from := s.Conn().RemotePeer()
	var req pb.OwnedRequest
	ServeRequest(s, maxOwnedMsg, p.cfg.RequestTimeout, &req, func() proto.Message {
		return p.acceptOwned(from, &req, time.Now())
	})
}

// acceptOwned merges the records of req that member from sends as their
// owner or decider, each checked as a DELEGATED calibration event is
// (validateCalibration): the DHT validator's checks and the author's name
// on the record. A record refused loses nothing of the others.
func (p *Peer) acceptOwned(from peer.ID, req *pb.OwnedRequest, now time.Time) *pb.OwnedResponse {
	resp := &pb.OwnedResponse{Version: wireVersion}
	fail := func(st pb.Status, format string, a ...any) *pb.OwnedResponse {
		resp.Status, resp.Error = st, fmt.Sprintf(format, a...)
		return resp
	}
	switch {
	case p.ctx.Err() != nil:
		return fail(pb.Status_UNAVAILABLE, "shutting down")
	case !p.isMember(from):
		// the sender tries again on its next round, once its heartbeat
		// or SWIM record has reached this peer
		return fail(pb.Status_REFUSED, "%s is not a live member of this network", shortID(from))
	case string(req.Snapshot) != string(p.snap[:]):
		return fail(pb.Status_WRONG_SNAPSHOT, "snapshot %x, this peer runs %x", req.Snapshot[:min(6, len(req.Snapshot))], p.snap[:6])
	case len(req.Records) > ownedBatchRecords:
		return fail(pb.Status_TOO_LARGE, "%d records in one message, at most %d", len(req.Records), ownedBatchRecords)
	case !p.ownedLimit.allowN(from, ownedRate, ownedBurst, now, len(req.Records)):
		return fail(pb.Status_UNAVAILABLE, "over %d records a second", ownedRate)
	}
	author := from.String()
	for i, r := range req.Records {
		rec, sum, err := p.validator.check(DelegKey(hierarchy.NodeID(r.Subnet)), r.Value)
		if err == nil && string(rec.DecidedBy) != author && string(rec.Owner) != author {
			err = fmt.Errorf("record of subnet %d neither owned nor decided by its sender", r.Subnet)
		}
		if err != nil {
			if resp.Refused == 0 {
				resp.Error = fmt.Sprintf("record %d: %v", i, err)
			}
			resp.Refused++
			continue
		}
		p.dir.merge(rec, sum, r.Value)
		resp.Merged++
	}
	p.metrics.ownedRecords.WithLabelValues("merged").Add(float64(resp.Merged))
	p.metrics.ownedRecords.WithLabelValues("refused").Add(float64(resp.Refused))
	if resp.Merged > 0 {
		p.tryDrainLearn()
	}
	if req.Reply && !p.ownedGiven.recently(from, now) && p.ownedReplies.allow(from, 1/ownedReplyEvery.Seconds(), 1, now) {
		p.goBackground(func() {
			if err := p.sendOwned(p.ctx, from, p.resealOwned(), false); err != nil {
				p.log.Debug("overlay: owned records in return not taken", "member", shortID(from), "err", err)
			}
		})
	}
	if resp.Refused > 0 {
		p.log.Debug("overlay: refused owned records", "from", shortID(from), "refused", resp.Refused, "first", resp.Error)
	}
	return resp
}

// sendOwned sends recs to member to, in messages of at most
// ownedBatchRecords records and ownedBatchBytes bytes, the first asking for
// to's records in return if reply. It stops at the first message not
// taken and says why.
func (p *Peer) sendOwned(ctx context.Context, to peer.ID, recs []ownedValue, reply bool) error {
	if len(recs) == 0 && !reply {
		return nil
	}
	for first := true; first || len(recs) > 0; first = false {
		req := &pb.OwnedRequest{Version: wireVersion, Snapshot: p.snap[:], Reply: reply && first}
		size := 0
		for len(recs) > 0 && len(req.Records) < ownedBatchRecords && (size == 0 || size+len(recs[0].val) <= ownedBatchBytes) {
			req.Records = append(req.Records, &pb.OwnedRecord{Subnet: uint32(recs[0].s), Value: recs[0].val})
			size += len(recs[0].val)
			recs = recs[1:]
		}
		var resp pb.OwnedResponse
		if err := roundTrip(ctx, p.h, to, ProtoOwned, maxOwnedMsg, p.cfg.RequestTimeout, req, &resp); err != nil {
			return err
		}
		if err := remoteErr(to, ProtoOwned, resp.Status, resp.Error); err != nil {
			return err
		}
		p.metrics.ownedRecords.WithLabelValues("sent").Add(float64(len(req.Records) - int(resp.Refused)))
		if resp.Refused > 0 {
			// this peer's own records, refused: a clock or snapshot
			// disagreement the log should show; sending them again
			// would not change it
			p.log.Warn("overlay: a returning member refused owned records", "member", shortID(to),
				"refused", resp.Refused, "first", resp.Error)
		}
	}
	p.ownedGiven.mark(to, time.Now())
	return nil
}

// givenLog is when this peer last gave its owned records to each member:
// when both sides of a return send theirs and ask for the other's, each
// side's records would otherwise go twice (its own round and its reply).
type givenLog struct {
	mu sync.Mutex
	at map[peer.ID]time.Time
}

func (g *givenLog) mark(id peer.ID, now time.Time) {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.at == nil || len(g.at) >= maxLimitedPeers {
		g.at = make(map[peer.ID]time.Time)
	}
	g.at[id] = now
}

// recently reports whether id was given them within ownedReplyEvery.
func (g *givenLog) recently(id peer.ID, now time.Time) bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	at, ok := g.at[id]
	return ok && now.Sub(at) < ownedReplyEvery
}
