package overlay

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// LightConfig configures a LightMember.
type LightConfig struct {
	// Snapshot is the network's hierarchy snapshot id and Nodes its tree's
	// size. A heartbeat of another snapshot is ignored, as a Peer ignores
	// it: its sender is no member of this network.
	Snapshot hierarchy.SnapshotID
	Nodes    int
	// Sink announces this member as the network's index sink
	// (Heartbeat.sink): crawlers given no sink deliver their carriers to it.
	Sink bool
	// Admission, if set: the network's admission, with this member's
	// certificate (which must give the sink role if Sink is set). Its
	// revocation file is where the operator writes the network's
	// revocation list (micra admit revoke): this member spreads it.
	Admission *Admission
	// Bootstrap peers to join through (multiaddrs with /p2p/<id>). Without
	// any, the member hears the members that connect to it (a crawler
	// delivering to the sink does).
	Bootstrap []string
	// HeartbeatInterval, FailureTimeout and LeaveTimeout as in Config
	// (0: DefaultConfig's).
	HeartbeatInterval, FailureTimeout, LeaveTimeout time.Duration
	// Membership is the network's membership protocol: MembershipSWIM or
	// MembershipHeartbeat; "" is DefaultConfig's (swim), as for the durations
	// above, so that a light member left at the zero value joins a network
	// of peers on DefaultConfig.
	Membership string
	// LoopbackTestnet disables the gossipsub IP-colocation penalty (every
	// peer on 127.0.0.1), as in Config.
	LoopbackTestnet bool
	Logger          *slog.Logger
	// Registerer takes micra_overlay_peers_declared_dead_total and
	// micra_overlay_gossip_rejected_total (nil: not registered).
	Registerer prometheus.Registerer
}

// LightMember takes part in the membership only: it follows the members'
// heartbeats on micra/membership/1 with the same failure detector as a
// Peer (Members) and publishes heartbeats of its own, advertising no
// capacity, and its leave when it closes. It runs no DHT, no delegation
// and no hand-offs, and needs no hierarchy beyond the snapshot's id. The
// index sink is one: it admits carriers from live members only and
// announces itself (LightConfig.Sink) to the crawlers.
type LightMember struct {
	cfg     LightConfig
	log     *slog.Logger
	revs    *revocationSync // nil: an open network
	swim    *swimRunner     // Membership "swim"
	h       host.Host
	boot    []peer.AddrInfo
	members *Members
	metrics *metrics
	tracer  *gossipTracer

	topic    *pubsub.Topic
	sub      *pubsub.Subscription
	psCancel context.CancelFunc
	cancel   context.CancelFunc
	wg       sync.WaitGroup

	hbMu sync.Mutex
	seq  uint64
	left bool

	closeOnce sync.Once
	closeErr  error
}

// JoinMembership starts a light member on h (the caller keeps h): it
// joins micra/membership/1, connects to the bootstrap peers (in the
// background: it returns at once) and heartbeats until Close.
func JoinMembership(ctx context.Context, h host.Host, cfg LightConfig) (*LightMember, error) {
	d := DefaultConfig()
	if cfg.HeartbeatInterval == 0 {
		cfg.HeartbeatInterval = d.HeartbeatInterval
	}
	if cfg.FailureTimeout == 0 {
		cfg.FailureTimeout = max(d.FailureTimeout, 2*cfg.HeartbeatInterval)
	}
	if cfg.LeaveTimeout == 0 {
		cfg.LeaveTimeout = d.LeaveTimeout
	}
	if cfg.Membership == "" {
		cfg.Membership = d.Membership
	}
	switch {
	case cfg.Admission != nil && cfg.Admission.Own() == nil:
		return nil, errors.New("overlay: light member: a network with admission needs this member's certificate (micra admit)")
	case cfg.Admission != nil && cfg.Sink && !cfg.Admission.OwnCertificate().Sink:
		return nil, errors.New("overlay: light member: its certificate does not give the sink role (micra admit --sink)")
	case cfg.Nodes <= 0:
		return nil, errors.New("overlay: light member: the snapshot's node count is required")
	case cfg.HeartbeatInterval < 10*time.Millisecond || cfg.HeartbeatInterval > time.Minute:
		return nil, fmt.Errorf("overlay: light member: HeartbeatInterval (%v) must be 10ms..1m", cfg.HeartbeatInterval)
	case cfg.Membership != MembershipHeartbeat && cfg.Membership != MembershipSWIM:
		return nil, fmt.Errorf("overlay: light member: Membership %q: want %q or %q", cfg.Membership, MembershipHeartbeat, MembershipSWIM)
	case cfg.FailureTimeout < 2*cfg.HeartbeatInterval:
		return nil, fmt.Errorf("overlay: light member: FailureTimeout (%v) must be at least two heartbeats", cfg.FailureTimeout)
	}
	boot, err := ParseBootstrap(cfg.Bootstrap)
	if err != nil {
		return nil, err
	}
	log := cfg.Logger
	if log == nil {
		log = slog.Default()
	}
	log = log.With("peer", shortID(h.ID()))
	m, _ := newMetrics(nil, "")
	if cfg.Registerer != nil {
		reg := prometheus.WrapRegistererWith(prometheus.Labels{"peer": h.ID().String()}, cfg.Registerer)
		for _, c := range []prometheus.Collector{m.deaths, m.gossipRejected} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("overlay: metrics: %w", err)
			}
		}
	}
	l := &LightMember{cfg: cfg, log: log, h: h, boot: boot, metrics: m, tracer: newGossipTracer(m),
		members: newMembers(h.ID(), delegation.Crawler{ID: delegation.CrawlerID(h.ID().String())}, cfg.FailureTimeout, log)}
	l.members.OnChange(func(ev MemberEvent) {
		if ev.Dead {
			l.metrics.deaths.WithLabelValues(ev.Reason).Inc()
		}
	})
	psCtx, psCancel := context.WithCancel(context.Background())
	ps, err := newPubSub(psCtx, h, Config{FloodPublish: true, LoopbackTestnet: cfg.LoopbackTestnet}, l.tracer)
	if err != nil {
		psCancel()
		return nil, err
	}
	snap, nodes, adm := cfg.Snapshot, cfg.Nodes, cfg.Admission
	if err := ps.RegisterTopicValidator(TopicMembership, func(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
		return checkHeartbeat(snap, nodes, adm, log, from, msg)
	}); err != nil {
		psCancel()
		return nil, fmt.Errorf("overlay: %w", err)
	}
	if l.topic, err = ps.Join(TopicMembership); err != nil {
		psCancel()
		return nil, fmt.Errorf("overlay: join %s: %w", TopicMembership, err)
	}
	if cfg.Membership != MembershipSWIM {
		if l.sub, err = l.topic.Subscribe(); err != nil {
			l.topic.Close()
			psCancel()
			return nil, fmt.Errorf("overlay: subscribe %s: %w", TopicMembership, err)
		}
	}
	l.psCancel = psCancel
	var lctx context.Context
	lctx, l.cancel = context.WithCancel(context.WithoutCancel(ctx))
	if adm != nil {
		l.revs = newRevocationSync(adm, h, l.members, log, 10*time.Second)
		h.SetStreamHandler(ProtoRevocations, l.revs.serve)
		l.wg.Add(1)
		go func() { defer l.wg.Done(); l.revs.run(lctx) }()
	}
	if cfg.Membership == MembershipSWIM {
		l.swim, err = newSWIMRunner(h, log, l.members, l.revs, boot, cfg.HeartbeatInterval, snap, nodes, adm, func(minSeq uint64, leaving bool) ([]byte, error) {
			l.hbMu.Lock()
			l.seq = max(l.seq, minSeq)
			l.hbMu.Unlock()
			return l.heartbeat(leaving)
		})
		if err != nil {
			l.cancel()
			l.wg.Wait()
			l.topic.Close()
			psCancel()
			return nil, err
		}
		l.swim.start(lctx)
		return l, nil
	}
	l.wg.Add(2)
	go func() { defer l.wg.Done(); l.listen(lctx) }()
	go func() { defer l.wg.Done(); l.beat(lctx) }()
	return l, nil
}

// Members is the failure detector's view: every peer heard of, live or
// declared dead.
func (l *LightMember) Members() *Members { return l.members }

// listen applies the members' heartbeats.
func (l *LightMember) listen(ctx context.Context) {
	for {
		msg, err := l.sub.Next(ctx)
		if err != nil {
			return
		}
		if msg.GetFrom() == l.h.ID() {
			continue
		}
		if hb, ok := msg.ValidatorData.(*pb.Heartbeat); ok {
			l.members.observe(msg.GetFrom(), hb, time.Now())
			if l.revs != nil {
				l.revs.heard(msg.GetFrom(), hb.Revocations)
			}
		}
	}
}

// beat publishes heartbeats, sweeps the silent members and, while no
// member is connected, dials the bootstrap peers and live members.
func (l *LightMember) beat(ctx context.Context) {
	beat := time.NewTicker(l.cfg.HeartbeatInterval)
	defer beat.Stop()
	sweep := time.NewTicker(l.cfg.HeartbeatInterval / 4)
	defer sweep.Stop()
	upkeep := time.NewTicker(l.cfg.FailureTimeout)
	defer upkeep.Stop()
	l.connect(ctx, l.boot)
	l.publish(ctx)
	for {
		select {
		case <-ctx.Done():
			return
		case <-beat.C:
			l.publish(ctx)
		case now := <-sweep.C:
			l.members.sweep(now)
		case <-upkeep.C:
			if len(l.topic.ListPeers()) > 0 {
				continue
			}
			// cut off (the bootstrap peers gone, or none given): whoever
			// is reachable of those heard of
			infos := slices.Clone(l.boot)
			live := l.members.livePeers()
			rand.Shuffle(len(live), func(i, j int) { live[i], live[j] = live[j], live[i] })
			for _, id := range live[:min(len(live), 8)] {
				infos = append(infos, peer.AddrInfo{ID: id, Addrs: l.members.Addrs(id)})
			}
			l.connect(ctx, infos)
		}
	}
}

// connect dials each peer not connected yet, each within 10 s.
func (l *LightMember) connect(ctx context.Context, infos []peer.AddrInfo) {
	for _, ai := range infos {
		if ctx.Err() != nil {
			return
		}
		if l.h.Network().Connectedness(ai.ID) == network.Connected {
			continue
		}
		cctx, cancel := context.WithTimeout(ctx, 10*time.Second)
		if err := l.h.Connect(cctx, ai); err != nil && ctx.Err() == nil {
			l.log.Warn("overlay: peer unreachable", "peer", ai.ID, "err", err)
		}
		cancel()
	}
}

func (l *LightMember) publish(ctx context.Context) {
	data, err := l.heartbeat(false)
	if err != nil || data == nil {
		return
	}
	if err := l.topic.Publish(ctx, data); err != nil && ctx.Err() == nil {
		l.log.Debug("overlay: heartbeat publish failed", "err", err)
	}
}

// heartbeat is the member's next heartbeat, encoded (nil once it left).
func (l *LightMember) heartbeat(leaving bool) ([]byte, error) {
	l.hbMu.Lock()
	defer l.hbMu.Unlock()
	if l.left {
		return nil, nil
	}
	l.seq++
	l.left = leaving
	hb := &pb.Heartbeat{
		Version:       wireVersion,
		Seq:           l.seq,
		AtUnixNano:    time.Now().UnixNano(),
		StartUnixNano: l.members.started.UnixNano(),
		Leaving:       leaving,
		IntervalMs:    uint32(l.cfg.HeartbeatInterval / time.Millisecond),
		Snapshot:      l.cfg.Snapshot[:],
		Sink:          l.cfg.Sink,
	}
	if l.revs != nil {
		hb.Certificate, hb.Revocations = l.cfg.Admission.Own(), l.revs.held()
	}
	for i, a := range l.h.Addrs() {
		if i == maxListenAddrs {
			break
		}
		hb.ListenAddrs = append(hb.ListenAddrs, a.Bytes())
	}
	return proto.Marshal(hb)
}

// Close announces the leave (as Peer.Leave: every member that receives it
// declares this one dead at once; for at most LeaveTimeout) and stops. The
// host stays open. Closing again returns the first Close's error.
func (l *LightMember) Close() error {
	l.closeOnce.Do(func() {
		if l.swim != nil {
			ctx, cancel := context.WithTimeout(context.Background(), l.cfg.LeaveTimeout)
			if err := l.swim.leave(ctx); err != nil {
				l.log.Info("overlay: leave not confirmed by every neighbour", "err", err)
			}
			cancel()
			if l.revs != nil {
				l.h.RemoveStreamHandler(ProtoRevocations)
			}
			l.cancel()
			l.wg.Wait()
			l.swim.stop()
			l.closeErr = l.topic.Close()
			l.psCancel()
			return
		}
		if err := l.leave(); err != nil {
			l.log.Info("overlay: leave not confirmed by every peer", "err", err)
		}
		if l.revs != nil {
			l.h.RemoveStreamHandler(ProtoRevocations)
		}
		l.cancel()
		l.sub.Cancel()
		l.wg.Wait()
		l.closeErr = l.topic.Close()
		l.psCancel()
	})
	return l.closeErr
}

// leave publishes the last heartbeat, leaving set, and waits until each
// peer it was queued to answered a ping on its connection since.
func (l *LightMember) leave() error {
	ctx, cancel := context.WithTimeout(context.Background(), l.cfg.LeaveTimeout)
	defer cancel()
	data, err := l.heartbeat(true)
	if err != nil || data == nil {
		return err
	}
	peers := l.topic.ListPeers()
	w := l.tracer.watch(MessageID(&pubsubpb.Message{Data: data}))
	defer l.tracer.unwatch(w)
	if err := l.topic.Publish(ctx, data); err != nil {
		return fmt.Errorf("overlay: leave: %w", err)
	}
	if len(peers) == 0 {
		return nil
	}
	select {
	case <-w.first:
	case <-ctx.Done():
		return fmt.Errorf("overlay: leave not sent: %w", ctx.Err())
	}
	l.topic.ListPeers() // (after the event loop's turn that queued every copy)
	to := w.peers()
	var answered atomic.Int32
	var wg sync.WaitGroup
	for _, id := range to {
		wg.Go(func() {
			pctx, cancel := context.WithCancel(ctx)
			defer cancel() // (stops the pinging)
			select {
			case r := <-ping.Ping(pctx, l.h, id):
				if r.Error == nil {
					answered.Add(1)
				}
			case <-pctx.Done():
			}
		})
	}
	wg.Wait()
	if n := int(answered.Load()); n < len(to) {
		return fmt.Errorf("overlay: leave: %d of %d peers it was sent to answered a ping after it", n, len(to))
	}
	return nil
}
