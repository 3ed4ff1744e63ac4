package overlay

import (
	"context"
	"crypto/sha256"
	"encoding/base64"
	"fmt"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
)

// Gossip topics.
const (
	TopicCalibration = "micra/calibration/1"
	TopicMembership  = "micra/membership/1"

	maxHeartbeatBytes   = 4 << 10
	maxCalibrationBytes = 16 << 10
	maxListenAddrs      = 16
	maxAddrBytes        = 256
	maxCapacity         = 1 << 30
)

// MessageID is the content-hash message id: base64url(SHA-256(data)). Any
// implementation computes the same id from the same bytes, so duplicates are
// suppressed across implementations.
func MessageID(m *pubsubpb.Message) string {
	sum := sha256.Sum256(m.Data)
	return base64.RawURLEncoding.EncodeToString(sum[:])
}

// newPubSub builds gossipsub with strict signing, content-hash ids, flood
// publish (small networks: a publisher sends to every topic peer, which is
// what gets an event to all peers in one hop) and peer scoring.
func newPubSub(ctx context.Context, h host.Host, cfg Config, tr *gossipTracer) (*pubsub.PubSub, error) {
	topicParams := &pubsub.TopicScoreParams{
		TopicWeight:                     1,
		TimeInMeshWeight:                0.01,
		TimeInMeshQuantum:               time.Second,
		TimeInMeshCap:                   3600,
		FirstMessageDeliveriesWeight:    1,
		FirstMessageDeliveriesDecay:     pubsub.ScoreParameterDecay(10 * time.Minute),
		FirstMessageDeliveriesCap:       100,
		InvalidMessageDeliveriesWeight:  -100,
		InvalidMessageDeliveriesDecay:   pubsub.ScoreParameterDecay(time.Hour),
		MeshMessageDeliveriesWeight:     0, // small, bursty topics: no mesh delivery quota
		MeshFailurePenaltyWeight:        0,
		MeshMessageDeliveriesDecay:      0,
		MeshMessageDeliveriesActivation: 0,
	}
	colocation := -10.0
	if cfg.LoopbackTestnet {
		// Every testnet peer shares 127.0.0.1: the colocation penalty would
		// graylist the whole network.
		colocation = 0
	}
	params := &pubsub.PeerScoreParams{
		Topics: map[string]*pubsub.TopicScoreParams{
			TopicCalibration: topicParams,
			TopicMembership:  topicParams,
		},
		TopicScoreCap:               100,
		AppSpecificScore:            func(peer.ID) float64 { return 0 },
		AppSpecificWeight:           1,
		IPColocationFactorWeight:    colocation,
		IPColocationFactorThreshold: 4,
		BehaviourPenaltyWeight:      -10,
		BehaviourPenaltyThreshold:   6,
		BehaviourPenaltyDecay:       pubsub.ScoreParameterDecay(10 * time.Minute),
		DecayInterval:               time.Second,
		DecayToZero:                 0.01,
		RetainScore:                 10 * time.Minute,
	}
	thresholds := &pubsub.PeerScoreThresholds{
		GossipThreshold:             -100,
		PublishThreshold:            -500,
		GraylistThreshold:           -1000,
		AcceptPXThreshold:           10,
		OpportunisticGraftThreshold: 5,
	}
	ps, err := pubsub.NewGossipSub(ctx, h,
		pubsub.WithMessageSignaturePolicy(pubsub.StrictSign),
		pubsub.WithMessageIdFn(MessageID),
		// validators accept messages up to clockSkew old or ahead: the seen
		// cache must outlive that window, or a signed event forwarded again
		// after the default 2 minutes is delivered twice
		pubsub.WithSeenMessagesTTL(2*clockSkew+time.Minute),
		pubsub.WithFloodPublish(cfg.FloodPublish),
		pubsub.WithPeerScore(params, thresholds),
		pubsub.WithMaxMessageSize(maxCalibrationBytes+1024),
		// Deeper queues than the defaults (32): a burst of announcements
		// must not drop heartbeats, which would look like deaths.
		pubsub.WithPeerOutboundQueueSize(256),
		pubsub.WithValidateQueueSize(1024),
		pubsub.WithRawTracer(tr),
		pubsub.WithAppSpecificRpcInspector(dropOwnMessages(h.ID())),
	)
	if err != nil {
		return nil, fmt.Errorf("overlay: gossipsub: %w", err)
	}
	return ps, nil
}

// dropOwnMessages removes from an incoming RPC the messages this peer
// authored. A peer restarted within the gossip history's window (a few
// heartbeats) is offered its last run's messages by its neighbours (IHAVE;
// its seen-cache is new, so it asks for them), and gossipsub counts each as
// an invalid delivery by the forwarder (RejectSelfOrigin, a squared
// penalty): after a handful the correct neighbour is graylisted, and the
// restarted peer neither hears it nor publishes to it — its heartbeats and
// its leave go nowhere (TestRestartedPeerKeepsItsNeighbours). Dropped
// before pubsub handles them, they cost nothing. (The inspector runs on
// pubsub's event loop, which owns the RPC.)
func dropOwnMessages(self peer.ID) func(peer.ID, *pubsub.RPC) error {
	return func(_ peer.ID, rpc *pubsub.RPC) error {
		if len(rpc.Publish) > 0 {
			rpc.Publish = slices.DeleteFunc(rpc.Publish, func(m *pubsubpb.Message) bool { return peer.ID(m.GetFrom()) == self })
		}
		return nil
	}
}

// decodeHeartbeat checks a membership message: schema, size, plausibility,
// and a time within clockSkew of this peer's clock.
func decodeHeartbeat(data []byte) (*pb.Heartbeat, error) {
	hb, err := decodeHeartbeatFields(data)
	if err != nil {
		return nil, err
	}
	at := time.Unix(0, hb.AtUnixNano)
	if d := time.Since(at); d > clockSkew || d < -clockSkew {
		return nil, fmt.Errorf("heartbeat: time %v off by %v", at, d)
	}
	return hb, nil
}

// decodeHeartbeatFields is decodeHeartbeat without the time check: a SWIM
// member record (swimrun.go) is sealed once and stays its member's
// statement until it changes.
func decodeHeartbeatFields(data []byte) (*pb.Heartbeat, error) {
	if len(data) > maxHeartbeatBytes {
		return nil, fmt.Errorf("heartbeat of %d bytes exceeds %d", len(data), maxHeartbeatBytes)
	}
	var hb pb.Heartbeat
	if err := proto.Unmarshal(data, &hb); err != nil {
		return nil, fmt.Errorf("heartbeat: %w", err)
	}
	if hb.Version == 0 {
		return nil, fmt.Errorf("heartbeat: missing version")
	}
	if len(hb.Snapshot) != 32 {
		return nil, fmt.Errorf("heartbeat: snapshot id of %d bytes", len(hb.Snapshot))
	}
	if hb.IntervalMs < 10 || hb.IntervalMs > 60_000 {
		return nil, fmt.Errorf("heartbeat: interval %d ms implausible", hb.IntervalMs)
	}
	if hb.Capacity > maxCapacity || hb.Load > maxCapacity {
		return nil, fmt.Errorf("heartbeat: capacity %d / load %d implausible", hb.Capacity, hb.Load)
	}
	if hb.HasPos && !plausiblePos(hb.Lat, hb.Lon) {
		return nil, fmt.Errorf("heartbeat: position %g,%g implausible", hb.Lat, hb.Lon)
	}
	if !hb.HasPos && (hb.Lat != 0 || hb.Lon != 0) {
		return nil, fmt.Errorf("heartbeat: position %g,%g without has_pos", hb.Lat, hb.Lon)
	}
	if len(hb.ListenAddrs) > maxListenAddrs {
		return nil, fmt.Errorf("heartbeat: %d listen addresses, limit %d", len(hb.ListenAddrs), maxListenAddrs)
	}
	for _, a := range hb.ListenAddrs {
		if len(a) > maxAddrBytes {
			return nil, fmt.Errorf("heartbeat: listen address of %d bytes", len(a))
		}
	}
	if len(hb.CrawlerAddr) != 0 && len(hb.CrawlerAddr) != 4 && len(hb.CrawlerAddr) != 16 {
		return nil, fmt.Errorf("heartbeat: crawler address of %d bytes", len(hb.CrawlerAddr))
	}
	if hb.StartUnixNano < 0 || hb.StartUnixNano > hb.AtUnixNano {
		// a run cannot start after its own heartbeat: such a start would
		// order the sender's next run before this one
		return nil, fmt.Errorf("heartbeat: start %d after its time %d", hb.StartUnixNano, hb.AtUnixNano)
	}
	return &hb, nil
}

// decodeCalibration checks a calibration event's schema and numbers; the
// record inside a DELEGATED event is verified by the caller.
func decodeCalibration(data []byte) (*pb.CalibrationEvent, error) {
	if len(data) > maxCalibrationBytes {
		return nil, fmt.Errorf("calibration event of %d bytes exceeds %d", len(data), maxCalibrationBytes)
	}
	var ev pb.CalibrationEvent
	if err := proto.Unmarshal(data, &ev); err != nil {
		return nil, fmt.Errorf("calibration event: %w", err)
	}
	if ev.Version == 0 || len(ev.Snapshot) != 32 {
		return nil, fmt.Errorf("calibration event: missing version or snapshot")
	}
	switch ev.Kind {
	case pb.CalibrationKind_SLOW_PAGE:
		if len(ev.Url) == 0 || len(ev.Url) > maxURLLen {
			return nil, fmt.Errorf("calibration event: url of %d bytes", len(ev.Url))
		}
		if ev.ObservedNs <= 0 || ev.ExpectedNs <= 0 || ev.ObservedNs < ev.ExpectedNs || time.Duration(ev.ObservedNs) > 10*time.Minute {
			return nil, fmt.Errorf("calibration event: slow page timings %v/%v implausible", time.Duration(ev.ObservedNs), time.Duration(ev.ExpectedNs))
		}
	case pb.CalibrationKind_DELEGATED:
		if len(ev.Value) == 0 || len(ev.Value) > maxRecordBytes {
			return nil, fmt.Errorf("calibration event: delegation value of %d bytes", len(ev.Value))
		}
	case pb.CalibrationKind_RELEASED:
	default:
		return nil, fmt.Errorf("calibration event: unknown kind %d", ev.Kind)
	}
	at := time.Unix(0, ev.AtUnixNano)
	if d := time.Since(at); d > clockSkew || d < -clockSkew {
		return nil, fmt.Errorf("calibration event: time %v off by %v", at, d)
	}
	return &ev, nil
}

// gossipTracer is a peer's pubsub RawTracer. It counts the messages
// gossipsub rejects, ignores or drops, by topic and reason
// (micra_overlay_gossip_rejected_total: a signature that is not the
// author's, a validator's refusal, a full validation queue, a reader
// behind), and tells
// Leave to which peers its announcement was queued. Its methods run on
// pubsub's goroutines and never block.
type gossipTracer struct {
	rejected *prometheus.CounterVec
	w        atomic.Pointer[sentWatch]
	traffic  gossipTraffic
}

// GossipTraffic is what gossipsub carried for one topic ("control": the
// IHAVE/IWANT/GRAFT/PRUNE/IDONTWANT of every topic), both ways: messages
// and their bytes as encoded in the RPCs, every copy to or from a peer
// counted (each peer of the mesh a message is forwarded to, each duplicate
// received).
type GossipTraffic struct {
	MsgsIn, MsgsOut   uint64
	BytesIn, BytesOut uint64
}

// gossipTraffic counts GossipTraffic per topic without a lock per message
// (topics are few: the map is written when a topic is first seen).
type gossipTraffic struct {
	mu sync.RWMutex
	by map[string]*topicCounters
}

type topicCounters struct{ msgsIn, msgsOut, bytesIn, bytesOut atomic.Uint64 }

func (g *gossipTraffic) of(topic string) *topicCounters {
	g.mu.RLock()
	c := g.by[topic]
	g.mu.RUnlock()
	if c != nil {
		return c
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.by == nil {
		g.by = make(map[string]*topicCounters)
	}
	if c = g.by[topic]; c == nil {
		c = &topicCounters{}
		g.by[topic] = c
	}
	return c
}

func (g *gossipTraffic) count(rpc *pubsub.RPC, in bool) {
	for _, m := range rpc.GetPublish() {
		c := g.of(m.GetTopic())
		if in {
			c.msgsIn.Add(1)
			c.bytesIn.Add(uint64(proto.Size(m)))
		} else {
			c.msgsOut.Add(1)
			c.bytesOut.Add(uint64(proto.Size(m)))
		}
	}
	if ctl := rpc.GetControl(); ctl != nil {
		c := g.of("control")
		if in {
			c.bytesIn.Add(uint64(proto.Size(ctl)))
		} else {
			c.bytesOut.Add(uint64(proto.Size(ctl)))
		}
	}
}

func (g *gossipTraffic) snapshot() map[string]GossipTraffic {
	g.mu.RLock()
	defer g.mu.RUnlock()
	out := make(map[string]GossipTraffic, len(g.by))
	for t, c := range g.by {
		out[t] = GossipTraffic{MsgsIn: c.msgsIn.Load(), MsgsOut: c.msgsOut.Load(), BytesIn: c.bytesIn.Load(), BytesOut: c.bytesOut.Load()}
	}
	return out
}

// GossipTraffic returns what gossipsub carried per topic since the peer
// opened (the pubsub tracer's count, not an estimate).
func (p *Peer) GossipTraffic() map[string]GossipTraffic { return p.tracer.traffic.snapshot() }

func newGossipTracer(m *metrics) *gossipTracer { return &gossipTracer{rejected: m.gossipRejected} }

// sentWatch collects the peers one message (by id) was queued to.
type sentWatch struct {
	id    string
	once  sync.Once
	first chan struct{} // closed when the first copy is queued
	mu    sync.Mutex
	to    []peer.ID
}

// watch starts collecting the peers message id is queued to (one watch at
// a time: Leave's).
func (t *gossipTracer) watch(id string) *sentWatch {
	w := &sentWatch{id: id, first: make(chan struct{})}
	t.w.Store(w)
	return w
}

func (t *gossipTracer) unwatch(w *sentWatch) { t.w.CompareAndSwap(w, nil) }

// peers is every peer the message was queued to so far.
func (w *sentWatch) peers() []peer.ID {
	w.mu.Lock()
	defer w.mu.Unlock()
	return slices.Clone(w.to)
}

func (t *gossipTracer) SendRPC(rpc *pubsub.RPC, p peer.ID) {
	t.traffic.count(rpc, false)
	w := t.w.Load()
	if w == nil {
		return
	}
	for _, m := range rpc.GetPublish() {
		if m.GetTopic() == TopicMembership && MessageID(m) == w.id {
			w.mu.Lock()
			w.to = append(w.to, p)
			w.mu.Unlock()
			w.once.Do(func() { close(w.first) })
		}
	}
}

func (t *gossipTracer) RejectMessage(msg *pubsub.Message, reason string) {
	t.rejected.WithLabelValues(msg.GetTopic(), reason).Inc()
}

// UndeliverableMessage counts a valid message dropped because this peer's
// reader of its topic was behind (gossipsub's subscription queue full): a
// heartbeat lost so is a member's silence, and a flood shows here.
func (t *gossipTracer) UndeliverableMessage(msg *pubsub.Message) {
	t.rejected.WithLabelValues(msg.GetTopic(), ReasonSubscriberBehind).Inc()
}

// ReasonSubscriberBehind is the reason of
// micra_overlay_gossip_rejected_total for valid messages dropped before
// this peer read them.
const ReasonSubscriberBehind = "subscriber behind"

func (t *gossipTracer) OnNewOutboundStream(peer.ID, protocol.ID) {}
func (t *gossipTracer) OnClosedOutboundStream(peer.ID)           {}
func (t *gossipTracer) Join(string)                              {}
func (t *gossipTracer) Leave(string)                             {}
func (t *gossipTracer) Graft(peer.ID, string)                    {}
func (t *gossipTracer) Prune(peer.ID, string)                    {}
func (t *gossipTracer) ValidateMessage(*pubsub.Message)          {}
func (t *gossipTracer) DeliverMessage(*pubsub.Message)           {}
func (t *gossipTracer) DuplicateMessage(*pubsub.Message)         {}
func (t *gossipTracer) ThrottlePeer(peer.ID)                     {}
func (t *gossipTracer) RecvRPC(rpc *pubsub.RPC)                  { t.traffic.count(rpc, true) }
func (t *gossipTracer) DropRPC(*pubsub.RPC, peer.ID)             {}
