package overlay

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	record "github.com/libp2p/go-libp2p-record"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/libp2p/go-libp2p/p2p/protocol/ping"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// The DHT's protocol: kad-dht's /kad/1.0.0 under micra's prefix (the
// /ipfs prefix refuses extra namespaces).
const (
	dhtPrefix               = "/micra"
	dhtProtocol protocol.ID = dhtPrefix + "/kad/1.0.0"
)

// Services are the parts of a crawler the overlay calls into. Any may be
// nil: the matching protocol then answers UNAVAILABLE / NOT_FOUND.
type Services struct {
	Sink HandoffSink // /micra/handoff/1 deliveries
	// Ledger is told of hand-offs an owner acknowledged that were spooled
	// for no owner or another one (nil: nobody is).
	Ledger HandoffLedger
	Pages  PageHistory // /micra/recover/1 (serve and import)
	// Archive is asked for a subnet's page history when its previous
	// owner is dead or does not answer (nil: nobody else is).
	Archive   PageArchive
	Snapshots SnapshotStore // /micra/snapshot/1
	Measurer  Measurer      // probe measurements; nil: NetMeasurer with cfg.ProbeGuard
}

// Peer is one overlay peer: host, DHT, gossip, protocols, and the
// delegation engine wired to them.
type Peer struct {
	cfg       Config
	log       *slog.Logger
	h         host.Host
	ownsHost  bool
	dht       *dht.IpfsDHT
	ps        *pubsub.PubSub
	topicCal  *pubsub.Topic
	topicMem  *pubsub.Topic
	swim      *swimRunner // Membership "swim": the protocol behind members
	subCal    *pubsub.Subscription
	subMem    *pubsub.Subscription
	tree      delegation.Tree
	snap      hierarchy.SnapshotID
	sk        crypto.PrivKey
	selfID    delegation.CrawlerID
	validator RecordValidator
	metrics   *metrics

	dir     *Directory
	members *Members
	prober  *Prober
	audit   *auditor // members that lie within their rights (audit.go)
	handoff *handoffQueue
	probes  probeLog
	// revs spreads the revocation lists of a network with admission (nil:
	// an open network)
	revs *revocationSync
	// probeLimit bounds the probes each requester has this peer send;
	// calLimit the cache-emptying calibration events each author has this
	// peer apply; ownedLimit the owned records each member has it verify
	// and ownedReplies how often it sends its own back (ProtoOwned)
	probeLimit, calLimit, ownedLimit, ownedReplies peerLimiter
	// ownedGiven: when this peer last gave each member its owned records
	ownedGiven givenLog
	// probeScope bounds the addresses each requester has this peer probe
	// to few per subnet being decided
	probeScope probeScope
	// idLimits bounds an open network's members per IP and per neighbour
	// (nil: a network with admission, or no limits)
	idLimits *identityLimits
	// handoffLimit bounds the URLs each member hands this peer, and
	// handoffReads the messages of each read at once
	handoffLimit peerLimiter
	handoffReads handoffReads
	// now is the clock of the rate limits (tests set it)
	now     func() time.Time
	sink    HandoffSink
	ledger  HandoffLedger
	pages   PageHistory
	archive PageArchive
	// arriving counts the page recoveries running, by subnet and block
	// (Arriving)
	arrivingMu sync.Mutex
	arriving   map[arrivingKey]int
	snapshots  SnapshotStore
	measurer   Measurer

	// polMu serialises the policy's computation; decide (decide.go) never
	// holds it across network I/O. attempt is the attempt of the policy
	// call holding it (nil: the policy is called otherwise — WithPolicy,
	// tests — and its Directory and Prober do their I/O in place).
	polMu       sync.Mutex
	policy      delegation.Policy
	attempt     *attempt
	rng         *attemptSource // the policy's randomness (of the latest Deps)
	subnetLocks subnetLocks
	// dhtDelay, when set (tests, benchmarks), runs before every DHT read a
	// decision waits for: an emulated Internet lookup.
	dhtDelay func(context.Context) error
	// learnQ: verified delegation records waiting for the policy to learn
	// from them (learn.go)
	learnMu sync.Mutex
	learnQ  []delegation.Record
	loads   atomic.Pointer[LoadBook] // of the latest Deps
	// balancing: the installed policy balances load, so a cached owner
	// may be moved by it (Delegate's fast path is off)
	balancing atomic.Bool
	// loadSet: the crawler reported its load (SetLoad).
	loadSet atomic.Bool

	hookMu   sync.RWMutex
	calHooks []func(CalibrationNotice)

	provideCh chan hierarchy.NodeID
	// dialCh: members heard of by gossip but not yet connected (members.go
	// dialMembers); a small network meshes fully without waiting for the
	// DHT's next routing-table refresh.
	dialCh   chan peer.ID
	psCancel context.CancelFunc
	// tracer watches gossipsub: rejected messages (metrics) and where a
	// leave announcement was queued (Leave).
	tracer *gossipTracer

	// hbMu guards this peer's heartbeat sequence; left: the leave was
	// announced, no heartbeat follows (members.go nextHeartbeat).
	hbMu  sync.Mutex
	hbSeq uint64
	left  bool

	ctx    context.Context
	cancel context.CancelFunc
	wg     sync.WaitGroup
	// bgMu orders goBackground's wg.Add before Close's wg.Wait: closing is
	// set under it before Close waits, and no goroutine starts after.
	bgMu    sync.Mutex
	closing bool

	closeOnce sync.Once
	closeErr  error
}

// CalibrationNotice is a received calibration event.
type CalibrationNotice struct {
	From     peer.ID
	Event    *pb.CalibrationEvent
	Record   *delegation.Record // DELEGATED only
	Received time.Time
}

// Open builds a host from cfg and a peer on it; Close closes both.
func Open(ctx context.Context, tree delegation.Tree, cfg Config, svc Services) (*Peer, error) {
	h, err := NewHost(cfg)
	if err != nil {
		return nil, err
	}
	p, err := New(ctx, h, tree, cfg, svc)
	if err != nil {
		h.Close()
		return nil, err
	}
	p.ownsHost = true
	return p, nil
}

// New starts the overlay on an existing host (e.g. a mocknet host). The
// caller keeps ownership of h.
func New(ctx context.Context, h host.Host, tree delegation.Tree, cfg Config, svc Services) (*Peer, error) {
	if err := cfg.validatePeer(); err != nil {
		return nil, err
	}
	if tree == nil {
		return nil, errors.New("overlay: a hierarchy tree is required")
	}
	sk := h.Peerstore().PrivKey(h.ID())
	if sk == nil {
		return nil, errors.New("overlay: host has no private key in its peerstore")
	}
	log := cfg.logger().With("peer", shortID(h.ID()))
	pctx, cancel := context.WithCancel(context.WithoutCancel(ctx))
	p := &Peer{
		cfg: cfg, log: log, h: h, tree: tree, snap: tree.ID(), sk: sk,
		selfID: delegation.CrawlerID(h.ID().String()),
		sink:   svc.Sink, ledger: svc.Ledger, pages: svc.Pages, archive: svc.Archive, snapshots: svc.Snapshots, measurer: svc.Measurer,
		provideCh: make(chan hierarchy.NodeID, 4096),
		now:       time.Now,
		dialCh:    make(chan peer.ID, 256),
		ctx:       pctx, cancel: cancel,
	}
	var err error
	if p.metrics, err = newMetrics(cfg.Registerer, h.ID().String()); err != nil {
		cancel()
		return nil, err
	}
	if p.measurer == nil {
		p.measurer = NetMeasurer{Guard: cfg.ProbeGuard}
	}
	if p.audit, err = newAuditor(p, cfg.Audit, cfg.Registerer); err != nil {
		cancel()
		return nil, err
	}
	p.tracer = newGossipTracer(p.metrics)
	if cfg.Admission == nil && (cfg.IdentitiesPerIP > 0 || cfg.IdentitiesPerPeer > 0) {
		silence := 2 * max(cfg.FailureTimeout, 3*cfg.HeartbeatInterval)
		if cfg.Membership == MembershipSWIM {
			silence = 0 // SWIM sends no record while nothing changes: its deaths free the places
		}
		p.idLimits = newIdentityLimits(cfg.IdentitiesPerIP, cfg.IdentitiesPerPeer, silence)
	}
	p.validator = RecordValidator{Snapshot: p.snap, Nodes: tree.Len(), Tree: tree, MaxAge: cfg.MaxRecordAge, Verified: NewVerifiedCache(8192), Admission: cfg.Admission}
	p.members = newMembers(h.ID(), p.selfCrawler(), cfg.FailureTimeout, log)
	p.members.grace = cfg.OwnerGrace
	p.members.distrusts = p.audit.distrusts
	p.members.OnChange(func(ev MemberEvent) {
		if ev.Dead {
			p.metrics.deaths.WithLabelValues(ev.Reason).Inc()
			p.dir.invalidateProviders()
			return
		}
		p.learnMemberAddrs(ev.Peer)
	})
	p.dir = newDirectory(p)
	p.prober = &Prober{p: p}
	if cfg.Admission != nil {
		p.revs = newRevocationSync(cfg.Admission, h, p.members, log, cfg.RequestTimeout)
	}
	p.watchReturns()

	var boot []peer.AddrInfo
	boot, err = ParseBootstrap(cfg.Bootstrap)
	if err != nil {
		cancel()
		return nil, err
	}
	dopts := []dht.Option{
		dht.ProtocolPrefix(dhtPrefix),
		dht.Mode(dht.ModeServer),
		dht.Validator(record.NamespacedValidator{DelegNamespace: p.validator}),
		dht.MaxRecordAge(cfg.MaxRecordAge),
		dht.BootstrapPeers(boot...),
	}
	if cfg.PublicDHTFilters {
		dopts = append(dopts, dht.QueryFilter(dht.PublicQueryFilter), dht.RoutingTableFilter(dht.PublicRoutingTableFilter))
	}
	if p.dht, err = dht.New(pctx, h, dopts...); err != nil {
		cancel()
		return nil, fmt.Errorf("overlay: dht: %w", err)
	}
	if err := p.startGossip(); err != nil {
		if p.psCancel != nil {
			p.psCancel()
		}
		p.dht.Close()
		cancel()
		return nil, err
	}
	if cfg.Membership == MembershipSWIM {
		p.swim, err = newSWIMRunner(h, log, p.members, p.revs, boot, cfg.HeartbeatInterval, p.snap, tree.Len(), cfg.Admission, p.swimHeartbeat)
		if err != nil {
			p.topicMem.Close()
			p.topicCal.Close()
			p.psCancel()
			p.dht.Close()
			cancel()
			return nil, err
		}
		p.swim.suspects = func() { p.metrics.swimSuspicions.Inc() }
		p.swim.refused = func() { p.metrics.swimRefused.Inc() }
		p.swim.publicOnly = cfg.PublicDHTFilters
		if p.idLimits != nil {
			p.swim.admit = p.admitIdentity
			p.members.OnChange(func(ev MemberEvent) {
				if ev.Dead {
					p.idLimits.release(ev.Peer)
				}
			})
		}
	}
	if p.handoff, err = newHandoffQueue(p); err != nil {
		p.topicMem.Close()
		p.topicCal.Close()
		p.psCancel()
		p.dht.Close()
		cancel()
		return nil, err
	}
	h.SetStreamHandler(ProtoProbe, p.handleProbe)
	h.SetStreamHandler(ProtoEndorse, p.handleEndorse)
	h.SetStreamHandler(ProtoHandoff, p.handleHandoff)
	h.SetStreamHandler(ProtoSnapshot, p.handleSnapshot)
	h.SetStreamHandler(ProtoRecover, p.handleRecover)
	h.SetStreamHandler(ProtoOwned, p.handleOwned)
	if p.revs != nil {
		h.SetStreamHandler(ProtoRevocations, p.revs.serve)
		p.wg.Add(1)
		go func() { defer p.wg.Done(); p.revs.run(pctx) }()
	}

	if p.swim != nil {
		p.swim.start(pctx)
	} else {
		p.runMembership(pctx, p.subMem)
	}
	p.wg.Add(4)
	go func() { defer p.wg.Done(); p.dialMembers(pctx) }()
	go func() { defer p.wg.Done(); p.runCalibration(pctx) }()
	go func() { defer p.wg.Done(); p.handoff.run(pctx) }()
	go func() { defer p.wg.Done(); p.runMaintenance(pctx) }()

	for _, ai := range boot {
		cctx, ccancel := context.WithTimeout(pctx, cfg.RequestTimeout)
		if err := h.Connect(cctx, ai); err != nil {
			log.Warn("overlay: bootstrap peer unreachable", "peer", ai.ID, "err", err)
		}
		ccancel()
	}
	return p, nil
}

func (p *Peer) startGossip() error {
	// Gossipsub gets its own context, cancelled only after the topics are
	// closed (closing a topic of a stopped pubsub fails).
	psCtx, psCancel := context.WithCancel(context.Background())
	p.psCancel = psCancel
	ps, err := newPubSub(psCtx, p.h, p.cfg, p.tracer)
	if err != nil {
		return err
	}
	p.ps = ps
	if err := ps.RegisterTopicValidator(TopicMembership, p.validateHeartbeat); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if err := ps.RegisterTopicValidator(TopicCalibration, p.validateCalibration); err != nil {
		return fmt.Errorf("overlay: %w", err)
	}
	if p.topicMem, err = ps.Join(TopicMembership); err != nil {
		return fmt.Errorf("overlay: join %s: %w", TopicMembership, err)
	}
	if p.topicCal, err = ps.Join(TopicCalibration); err != nil {
		return fmt.Errorf("overlay: join %s: %w", TopicCalibration, err)
	}
	if p.cfg.Membership == MembershipSWIM {
		// no heartbeats: the topic is joined (a handle) but not subscribed
	} else if p.subMem, err = p.topicMem.Subscribe(); err != nil {
		return fmt.Errorf("overlay: subscribe %s: %w", TopicMembership, err)
	}
	if p.subCal, err = p.topicCal.Subscribe(); err != nil {
		return fmt.Errorf("overlay: subscribe %s: %w", TopicCalibration, err)
	}
	return p.audit.startGossip()
}

// Close stops the peer: it announces its leave (Leave, for at most
// LeaveTimeout), then stops loops, gossip, DHT, and the host if Open built
// it. Closing again returns the first Close's error.
func (p *Peer) Close() error {
	p.closeOnce.Do(func() {
		if err := p.Leave(context.Background()); err != nil {
			// those it did not reach declare this peer dead after the
			// failure timeout, as for a crash
			p.log.Info("overlay: leave not confirmed by every peer", "err", err)
		}
		p.closeErr = p.shutdown()
	})
	return p.closeErr
}

// Kill stops the peer as Close does but without announcing its leave: to
// the others it is a crash, which they detect after the failure timeout
// (a node restarting on a release, whose peers hold its subnets meanwhile;
// tests and benchmarks of the failure detector).
func (p *Peer) Kill() error {
	p.closeOnce.Do(func() { p.closeErr = p.shutdown() })
	return p.closeErr
}

// Leave announces on micra/membership/1 that this peer is leaving (a clean
// stop): a last heartbeat with leaving set, signed like every message, and
// no heartbeat after it. Every peer that receives it declares this one dead
// at once (MemberEvent reason "left") and re-routes what it owned, instead
// of waiting for the failure timeout; a later run of this peer (a later
// start time in its heartbeats) is a member again at its first heartbeat.
//
// It returns once the announcement has been queued to every peer the router
// sent it to and each of them answered a ping on its connection since (so
// the announcement's bytes were on the wire before the answer), or with
// ctx's error, and within LeaveTimeout in any case. Delivery is best
// effort: a peer that misses it declares this one dead after the failure
// timeout, as for a crash. Close calls Leave; calling it again, or after
// Kill, does nothing.
func (p *Peer) Leave(ctx context.Context) error {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, p.cfg.leaveTimeout())
	defer cancel()
	if p.swim != nil {
		return p.swim.leave(ctx)
	}
	data, err := p.nextHeartbeat(true)
	if err != nil || data == nil {
		return err // nil, nil: left already
	}
	peers := p.topicMem.ListPeers()
	w := p.tracer.watch(MessageID(&pubsubpb.Message{Data: data}))
	defer p.tracer.unwatch(w)
	if err := p.topicMem.Publish(ctx, data); err != nil {
		return fmt.Errorf("overlay: leave: %w", err)
	}
	if len(peers) == 0 {
		p.log.Info("overlay: left (no peer to tell)")
		return nil
	}
	// The router queues a published message to all the peers it sends it
	// to in one turn of pubsub's event loop; ListPeers, evaluated by that
	// loop once the first copy is queued, returns after the turn.
	select {
	case <-w.first:
	case <-ctx.Done():
		return fmt.Errorf("overlay: leave not sent: %w", ctx.Err())
	}
	p.topicMem.ListPeers()
	to := w.peers()
	var answered atomic.Int32
	var wg sync.WaitGroup
	for _, id := range to {
		wg.Go(func() {
			pctx, cancel := context.WithCancel(ctx)
			defer cancel()
			select {
			case r := <-ping.Ping(pctx, p.h, id):
				if r.Error == nil {
					answered.Add(1)
				}
			case <-pctx.Done():
			}
		})
	}
	wg.Wait()
	p.log.Info("overlay: left", "sent_to", len(to), "confirmed", answered.Load(), "took", time.Since(start).Round(time.Millisecond))
	if n := int(answered.Load()); n < len(to) {
		return fmt.Errorf("overlay: leave: %d of %d peers it was sent to answered a ping after it", n, len(to))
	}
	return nil
}

// shutdown stops loops, gossip, DHT, and the host if Open built it.
func (p *Peer) shutdown() error {
	p.hbMu.Lock()
	p.left = true // nothing more to announce
	p.hbMu.Unlock()
	p.cancel()
	for _, proto := range []string{string(ProtoProbe), string(ProtoEndorse), string(ProtoHandoff), string(ProtoSnapshot), string(ProtoRecover), string(ProtoRevocations), string(ProtoOwned)} {
		p.h.RemoveStreamHandler(protocolID(proto))
	}
	if p.subMem != nil {
		p.subMem.Cancel()
	}
	p.subCal.Cancel()
	p.audit.stopGossip()
	p.bgMu.Lock()
	p.closing = true
	p.bgMu.Unlock()
	p.wg.Wait()
	if p.swim != nil {
		p.swim.stop()
	}
	var errs []error
	errs = append(errs, p.handoff.close(), p.topicMem.Close(), p.topicCal.Close(), p.audit.closeTopic())
	p.psCancel()
	errs = append(errs, p.dht.Close())
	if p.ownsHost {
		errs = append(errs, p.h.Close())
	}
	return errors.Join(errs...)
}

// goBackground runs fn in a goroutine that Close waits for, unless Close
// has begun: then it starts nothing and returns false. Work started on
// demand (a subnet re-read after a refused hand-off, a page recovery, a
// provider query) may be asked for while the peer closes — by a stream
// handler still running or a caller's Delegate — and a WaitGroup must not
// be added to once Wait may have returned (the goroutine would outlive
// Close and use a closed DHT).
func (p *Peer) goBackground(fn func()) bool {
	p.bgMu.Lock()
	defer p.bgMu.Unlock()
	if p.closing {
		return false
	}
	p.wg.Add(1)
	go func() {
		defer p.wg.Done()
		fn()
	}()
	return true
}

// ID is this peer's libp2p id; CrawlerID the same as a delegation.CrawlerID.
func (p *Peer) ID() peer.ID                     { return p.h.ID() }
func (p *Peer) CrawlerID() delegation.CrawlerID { return p.selfID }
func (p *Peer) Host() host.Host                 { return p.h }
func (p *Peer) DHT() *dht.IpfsDHT               { return p.dht }
func (p *Peer) Directory() *Directory           { return p.dir }
func (p *Peer) Members() *Members               { return p.members }
func (p *Peer) Prober() delegation.Prober       { return p.prober }
func (p *Peer) Tree() delegation.Tree           { return p.tree }
func (p *Peer) AddrInfo() peer.AddrInfo         { return peer.AddrInfo{ID: p.h.ID(), Addrs: p.h.Addrs()} }
func (p *Peer) Snapshot() hierarchy.SnapshotID  { return p.snap }

// Deps returns the delegation engine's dependencies backed by this peer.
func (p *Peer) Deps() delegation.Deps {
	seed := p.cfg.Seed
	if seed == 0 {
		id := []byte(p.h.ID())
		seed = binary.LittleEndian.Uint64(id[len(id)-8:])
	}
	loads := newLoadBook(p)
	p.loads.Store(loads)
	p.rng = &attemptSource{base: rand.NewPCG(seed, seed^0x9e3779b97f4a7c15)}
	return delegation.Deps{
		Tree: p.tree, Dir: decisionDirectory{p}, Prober: decisionProber{p}, Members: p.members.Crawlers(), Clock: realClock{},
		Rand:  rand.New(p.rng),
		Loads: loads,
	}
}

type realClock struct{}

func (realClock) Now() time.Time { return time.Now() }

// UsePolicy installs the delegation policy, built over p.Deps() with
// Config.Self = p.CrawlerID() (only this peer can sign its decisions);
// NewPolicy does both.
//
// A policy that learns (delegation.Learner) is first fed every record the
// peer's cache holds, then every verified record that reaches it.
func (p *Peer) UsePolicy(pol delegation.Policy) {
	p.polMu.Lock()
	p.policy = pol
	b, ok := pol.(interface{ Balancing() bool })
	p.balancing.Store(ok && b.Balancing())
	p.learnMu.Lock()
	p.learnQ = append(p.dir.Records(), p.learnQ...)
	p.learnMu.Unlock()
	p.drainLearnLocked()
	p.polMu.Unlock()
}

// NewPolicy builds a policy with ctor (delegation.NewIPMicra, NewMicra, …)
// over this peer's dependencies, with c.Self set to this peer, and installs it.
func (p *Peer) NewPolicy(ctor func(delegation.Deps, delegation.Config) delegation.Policy, c delegation.Config) delegation.Policy {
	c.Self = p.selfID
	pol := ctor(p.Deps(), c)
	p.UsePolicy(pol)
	return pol
}

var errNoPolicy = errors.New("overlay: no delegation policy installed (UsePolicy)")

// Delegate returns the owner of ip's subnet, delegating it first if nobody
// alive owns it. An owner in the cache is answered at once, without the
// policy's lock (cachedOwner); a decision waits on the network without it
// (decide).
func (p *Peer) Delegate(ctx context.Context, ip netip.Addr) (delegation.Decision, error) {
	if d, ok := p.cachedOwner(ip); ok {
		return d, nil
	}
	d, err := p.decide(ctx, p.tree.SmallestNonUnary(ip), func(ctx context.Context, pol delegation.Policy) (delegation.Decision, error) {
		return pol.Delegate(ctx, ip)
	})
	if err == nil && !d.Cached && !p.members.DecisionQuorum() {
		// a decision left unpublished (hashed when no probe answered):
		// the other side of a partition may route the subnet elsewhere
		return delegation.Decision{}, ErrNoQuorum
	}
	if err == nil && !d.Cached {
		p.metrics.delegations.Inc()
	}
	return d, err
}

// cachedOwner is Delegate's answer from a cached record, as the policy's
// own cached path gives it (one page accounted to the subnet), when the
// record stands (its owner, or ip's block's owner, is live) and the policy
// does not balance load (a cached owner without room is the policy's to
// move).
func (p *Peer) cachedOwner(ip netip.Addr) (delegation.Decision, bool) {
	if p.balancing.Load() {
		return delegation.Decision{}, false
	}
	s := p.tree.SmallestNonUnary(ip)
	if s == hierarchy.None || s == hierarchy.Root {
		return delegation.Decision{}, false
	}
	e, ok := p.dir.entry(s)
	if !ok || e.stale {
		return delegation.Decision{}, false
	}
	rec := e.rec
	d := delegation.Decision{IP: ip, Subnet: s, Record: rec, Cached: true, Reason: delegation.ReasonCached}
	ownerLive := p.members.IsLive(rec.Owner)
	if b, in := rec.LiveBlock(ip, p.members.IsLive); in {
		d.Owner, d.OwnerRTT = b.Owner, b.OwnerRTT
	} else if ownerLive {
		d.Owner, d.OwnerRTT = rec.Owner, rec.OwnerRTT
	} else {
		return delegation.Decision{}, false // re-decided by the policy
	}
	if ownerLive {
		if lb := p.loads.Load(); lb != nil {
			lb.AddPages(s, rec.Owner, 1)
		}
	}
	p.metrics.cachedRoutes.Inc()
	return d, true
}

// Join publishes this crawler's own subnet's delegation.
func (p *Peer) Join(ctx context.Context) (delegation.Decision, error) {
	self := p.selfCrawler()
	return p.decide(ctx, p.tree.SmallestNonUnary(self.Addr), func(ctx context.Context, pol delegation.Policy) (delegation.Decision, error) {
		return pol.Join(ctx, self)
	})
}

// ReportSlowPage is dynamic calibration: announce that url (on ip) was slow
// on this crawler, and re-run delegation for its subnet.
func (p *Peer) ReportSlowPage(ctx context.Context, ip netip.Addr, url string, observed, expected time.Duration) (delegation.Decision, error) {
	s := p.tree.SmallestNonUnary(ip)
	announced := false
	return p.decide(ctx, s, func(ctx context.Context, pol delegation.Policy) (delegation.Decision, error) {
		if s != hierarchy.None && s != hierarchy.Root {
			// only the owner's path says anything about the delegation;
			// under the subnet's lock, so a re-delegation that just gave
			// the subnet away is seen
			rec, ok, err := decisionDirectory{p}.Lookup(ctx, s)
			if err != nil {
				return delegation.Decision{}, fmt.Errorf("overlay: slow page %s: %w", url, err)
			}
			if o := p.blockOwner(rec, ip); !ok || o != p.selfID {
				return delegation.Decision{}, fmt.Errorf("overlay: slow page %s: %v is crawled by %s, not this crawler", url, ip, o)
			}
		}
		if !announced {
			announced = true
			p.announce(ctx, &pb.CalibrationEvent{Kind: pb.CalibrationKind_SLOW_PAGE, Subnet: uint32(s), Url: url,
				ObservedNs: int64(observed), ExpectedNs: int64(expected)})
		}
		return pol.Redelegate(ctx, ip)
	})
}

// Review gives this crawler's timing of its first fetch from a host at ip
// (a subnet it owns) to the policy, when the policy reviews delegations
// (delegation.Reviewer: micra). The policy may probe peers and hand the
// subnet over to a crawler nearer most of its hosts; the new record is
// published like any decision. reviewed is false when the policy does not
// review (nothing happened).
func (p *Peer) Review(ctx context.Context, ip netip.Addr, took time.Duration) (d delegation.Decision, reviewed bool, err error) {
	d, err = p.decide(ctx, p.tree.SmallestNonUnary(ip), func(ctx context.Context, pol delegation.Policy) (delegation.Decision, error) {
		rv, ok := pol.(delegation.Reviewer)
		if !ok {
			return delegation.Decision{}, nil
		}
		reviewed = true
		return rv.Review(ctx, ip, p.CrawlerID(), took)
	})
	if err == nil && d.Reason == delegation.ReasonHandedOver {
		p.metrics.delegations.Inc() // a new record, decided here
	}
	return d, reviewed, err
}

// announce publishes a calibration event (filling version, snapshot, time).
func (p *Peer) announce(ctx context.Context, ev *pb.CalibrationEvent) {
	ev.Version, ev.Snapshot, ev.AtUnixNano = wireVersion, p.snap[:], time.Now().UnixNano()
	data, err := proto.Marshal(ev)
	if err != nil {
		return
	}
	if err := p.topicCal.Publish(ctx, data); err != nil && ctx.Err() == nil {
		p.log.Warn("overlay: calibration publish failed", "kind", ev.Kind, "subnet", ev.Subnet, "err", err)
	}
}

// Announce publishes a raw calibration event (benchmarks, the crawler).
func (p *Peer) Announce(ctx context.Context, ev *pb.CalibrationEvent) { p.announce(ctx, ev) }

// OnCalibration registers fn for every calibration event received
// (including this peer's own). fn must not block.
func (p *Peer) OnCalibration(fn func(CalibrationNotice)) {
	p.hookMu.Lock()
	p.calHooks = append(p.calHooks, fn)
	p.hookMu.Unlock()
}

// calibrationRate and calibrationBurst bound the slow-page and release
// events one author has this peer apply: a crawler reports a subnet at
// most once in 10 minutes (node's calibrationCooldown), so even one with
// thousands of subnets stays far below.
const (
	calibrationRate  = 20
	calibrationBurst = 200
)

type calData struct {
	ev  *pb.CalibrationEvent
	rec *delegation.Record
	sum [32]byte // SHA-256 of ev.Value, with rec
}

// validateCalibration is the micra/calibration/1 topic validator: schema,
// size, plausible numbers, author a member, and for DELEGATED a record that
// passes the DHT validator and was signed by the author (decider or owner).
func (p *Peer) validateCalibration(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	author := msg.GetFrom()
	ev, err := decodeCalibration(msg.Data)
	if err != nil {
		p.log.Debug("overlay: rejected calibration event", "author", author, "via", from, "err", err)
		return pubsub.ValidationReject
	}
	if string(ev.Snapshot) != string(p.snap[:]) {
		return pubsub.ValidationIgnore
	}
	if !p.members.IsPeerLive(author) || (p.cfg.Admission != nil && !p.isMember(author)) {
		// not (or no longer) a member; with admission, not one whose
		// admitted heartbeat was heard yet
		return pubsub.ValidationIgnore
	}
	if ev.Kind != pb.CalibrationKind_DELEGATED && author != p.h.ID() && !p.calLimit.allow(author, calibrationRate, calibrationBurst, time.Now()) {
		// each such event empties a record from every peer's cache: one
		// member's flood would empty them all
		p.metrics.gossipRejected.WithLabelValues(TopicCalibration, "rate_limited").Inc()
		return pubsub.ValidationIgnore
	}
	cd := &calData{ev: ev}
	if ev.Kind == pb.CalibrationKind_DELEGATED {
		rec, sum, err := p.validator.check(DelegKey(hierarchy.NodeID(ev.Subnet)), ev.Value)
		if err != nil {
			p.log.Debug("overlay: rejected delegation announcement", "author", author, "err", err)
			return pubsub.ValidationReject
		}
		if a := author.String(); string(rec.DecidedBy) != a && string(rec.Owner) != a {
			return pubsub.ValidationReject
		}
		cd.rec, cd.sum = &rec, sum
	}
	msg.ValidatorData = cd
	return pubsub.ValidationAccept
}

func (p *Peer) runCalibration(ctx context.Context) {
	for {
		msg, err := p.subCal.Next(ctx)
		if err != nil {
			return
		}
		cd, ok := msg.ValidatorData.(*calData)
		if !ok {
			continue
		}
		now := time.Now()
		p.metrics.calibrationEvents.Inc()
		s := hierarchy.NodeID(cd.ev.Subnet)
		switch cd.ev.Kind {
		case pb.CalibrationKind_DELEGATED:
			p.dir.merge(*cd.rec, cd.sum, cd.ev.Value)
			p.tryDrainLearn()
		case pb.CalibrationKind_SLOW_PAGE, pb.CalibrationKind_RELEASED:
			if msg.GetFrom() != p.h.ID() {
				p.dir.Invalidate(s)
			}
		}
		p.hookMu.RLock()
		hooks := p.calHooks
		p.hookMu.RUnlock()
		for _, fn := range hooks {
			fn(CalibrationNotice{From: msg.GetFrom(), Event: cd.ev, Record: cd.rec, Received: now})
		}
	}
}

// onGained runs when this peer becomes the owner of rec.Subnet (raw: the
// record's sealed value): announce it as a holder (provider records) and,
// if a live previous owner had it, pull its page history.
func (p *Peer) onGained(rec delegation.Record, prev delegation.CrawlerID, raw []byte) {
	select {
	case p.provideCh <- rec.Subnet:
	default:
		p.log.Warn("overlay: provide queue full; the reprovide loop will catch up", "subnet", rec.Subnet)
	}
	p.recoverFrom(prev, rec.Subnet, netip.Addr{}, raw)
}

// recoverFrom pulls, in the background, the page history of subnet s —
// only of host's block (delegation.BlockOf) when host is valid — that prev,
// the crawler that crawled it, kept: ownership of the subnet, or of the
// block (a block delegation made, re-decided or dissolved), moved here
// from prev. prev is asked itself (briefly if it is held dead); raw, the
// sealed record that moved the hosts, goes with the request: prev learns
// the move from it and finishes its own fetches of those hosts before it
// answers. When prev does not answer, the archive (the index sink) is
// asked for what prev delivered. Until the history is in (or both failed), Arriving
// reports those hosts, so this crawler does not fetch a page it is
// receiving.
func (p *Peer) recoverFrom(prev delegation.CrawlerID, s hierarchy.NodeID, host netip.Addr, raw []byte) {
	if prev == "" || prev == p.selfID || p.pages == nil {
		return
	}
	live := p.members.IsLive(prev)
	if !live && p.archive == nil {
		return
	}
	from, err := peer.Decode(string(prev))
	asked := err == nil
	log := p.log.With("subnet", s, "from", prev)
	var block netip.Prefix
	if host.IsValid() {
		block = delegation.BlockOf(host)
		log = log.With("block", block)
	}
	p.arrive(s, block, +1)
	if !p.goBackground(func() {
		defer p.arrive(s, block, -1)
		if asked {
			// a crawler this peer holds dead is asked too, briefly: under
			// load a live one is sometimes held dead, and only its own
			// answer fences its fetches of the hosts that moved
			open := p.cfg.RequestTimeout
			if !live {
				open /= 4
			}
			n, err := p.recoverPagesOpen(p.ctx, from, s, host, raw, open)
			if err == nil {
				log.Debug("overlay: pages received", "pages", n)
				return
			}
			if p.ctx.Err() != nil {
				return
			}
			if p.archive == nil {
				log.Warn("overlay: page recovery failed", "err", err)
				return
			}
			log.Debug("overlay: page recovery failed; asking the archive", "err", err, "live", live)
		}
		n, err := p.recoverArchived(p.ctx, s, block)
		if err != nil {
			if p.ctx.Err() == nil {
				log.Warn("overlay: page recovery from the archive failed", "err", err)
			}
			return
		}
		// (rare: after a crash or a silent owner, worth a line)
		log.Info("overlay: pages received from the archive", "pages", n)
	}) {
		p.arrive(s, block, -1)
	}
}

// arrive counts a recovery of subnet s (block, or the whole subnet when
// block is not valid) starting (+1) or ending (-1).
func (p *Peer) arrive(s hierarchy.NodeID, block netip.Prefix, delta int) {
	p.arrivingMu.Lock()
	defer p.arrivingMu.Unlock()
	if p.arriving == nil {
		p.arriving = make(map[arrivingKey]int)
	}
	k := arrivingKey{s, block}
	if p.arriving[k] += delta; p.arriving[k] <= 0 {
		delete(p.arriving, k)
	}
}

type arrivingKey struct {
	subnet hierarchy.NodeID
	block  netip.Prefix // zero: the whole subnet
}

// Arriving reports whether the page history of the host at address a (as
// delegation sees it) is still being received from its previous owner:
// this peer owns it now, and a page of it fetched before the history is in
// could be one the previous owner fetched already.
func (p *Peer) Arriving(a netip.Addr) bool {
	p.arrivingMu.Lock()
	defer p.arrivingMu.Unlock()
	if len(p.arriving) == 0 {
		return false
	}
	s := p.tree.SmallestNonUnary(a)
	if p.arriving[arrivingKey{s, netip.Prefix{}}] > 0 {
		return true
	}
	return p.arriving[arrivingKey{s, delegation.BlockOf(a)}] > 0
}

// arrivingIn reports whether page history of subnet s — of block, when
// valid; else of s or any block of it — is still being received.
func (p *Peer) arrivingIn(s hierarchy.NodeID, block netip.Prefix) bool {
	p.arrivingMu.Lock()
	defer p.arrivingMu.Unlock()
	for k, n := range p.arriving {
		if n > 0 && k.subnet == s && (!k.block.IsValid() || !block.IsValid() || k.block == block) {
			return true
		}
	}
	return false
}

// runMaintenance provides holder records for owned subnets, reprovides them
// and republishes owned delegations well inside MaxRecordAge.
func (p *Peer) runMaintenance(ctx context.Context) {
	republish := time.NewTicker(p.cfg.RepublishInterval)
	defer republish.Stop()
	reprovide := time.NewTicker(p.cfg.ReprovideInterval)
	defer reprovide.Stop()
	provided := make(map[cid.Cid]time.Time)
	provide := func(s hierarchy.NodeID, force bool) {
		for _, c := range p.holderCIDs(s) {
			if t, ok := provided[c]; ok && !force && time.Since(t) < p.cfg.ReprovideInterval/2 {
				continue
			}
			pctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
			err := p.dht.Provide(pctx, c, true)
			cancel()
			if err != nil {
				if ctx.Err() == nil {
					p.log.Debug("overlay: provide failed", "subnet", s, "err", err)
				}
				continue
			}
			provided[c] = time.Now()
		}
	}
	for {
		select {
		case <-ctx.Done():
			return
		case s := <-p.provideCh:
			provide(s, false)
		case <-reprovide.C:
			clear(provided)
			for _, s := range p.dir.Owned() {
				provide(s, true)
			}
		case <-republish.C:
			for _, s := range p.dir.Owned() {
				rec, ok := p.dir.get(s)
				if !ok || rec.Owner != p.selfID {
					continue
				}
				// a block of a crawler that died is not kept alive by the
				// subnet's owner: the engine never re-decides it, and the
				// crawler coming back weeks later would take it without its
				// page history
				live := slices.DeleteFunc(slices.Clone(rec.Blocks), func(b delegation.BlockDelegation) bool { return !p.members.IsLive(b.Owner) })
				changed := len(live) != len(rec.Blocks)
				if changed {
					if len(live) == 0 {
						live = nil
					}
					rec.Blocks, rec.Epoch = live, delegation.NextEpoch(rec.Epoch, time.Now())
				}
				val, err := p.republishValue(rec)
				if err == nil {
					_, err = p.dir.put(ctx, s, val, changed)
				}
				if err != nil && ctx.Err() == nil {
					p.log.Warn("overlay: republish failed", "subnet", s, "err", err)
				}
			}
		}
	}
}

// WaitMembers blocks until this peer sees at least n live members (itself
// included) and its DHT routing table holds at least min(n-1, 20) peers.
func (p *Peer) WaitMembers(ctx context.Context, n int) error {
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		if p.members.Count() >= n && p.dht.RoutingTable().Size() >= min(n-1, 20) {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("overlay: %d of %d members, routing table %d: %w", p.members.Count(), n, p.dht.RoutingTable().Size(), ctx.Err())
		case <-t.C:
		}
	}
}
