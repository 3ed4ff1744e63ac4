// Package node owns the composition of a micra peer from its parts: the
// configuration (and its file form), the data directory, the overlay peer,
// the crawl engine and the adapters between them — the overlay-backed
// crawl.Router, the engine as the overlay's hand-off sink and page history —
// and their lifecycle, logs and metrics.
package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/http"
	"net/netip"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/collectors"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// Node is one running micra peer.
type Node struct {
	// calibration keeps the recent calibration events (calibration_log.go)
	calibration calibrationLog
	// tally is the sink's change log summed up for the console's network
	// page (console_crawl.go), read only while that page is open
	tally crawlTally

	cfg    Config
	log    *slog.Logger
	reg    *prometheus.Registry
	tree   *hierarchy.Tree
	db     *badger.DB
	eng    *crawl.Engine // nil without the crawler role
	router *Router
	peer   *overlay.Peer
	// finder delivers the carriers to the index sink, configured or
	// announced on the network (nil: files, or no crawler role).
	finder *sinkFinder
	// recv is the engine's receiver, with its deliveries' outcome (status).
	recv *deliveries
	// partition gates a loopback testnet node's connections (nil elsewhere).
	partition *overlay.Partition

	rerouted prometheus.Counter
	load     prometheus.Gauge // pages taken on over the last day (reportLoad)
	loadDay  atomic.Int64     // the same, for the status (-1 until reported)
	dead     chan death       // owners declared dead, for the ledger

	opened time.Time     // when the overlay peer started hearing members
	ready  chan struct{} // closed once Run has joined (Ready)

	runMu   sync.Mutex
	running bool
	closed  bool
	// restarting: Run stopped for a release, and the leave is not announced
	restarting atomic.Bool

	adm     *overlay.Admission // nil: an open network
	updates *updates           // signed releases (update.go)

	started atomic.Value // time.Time Run started
	ctlURL  atomic.Value // string: the control API's URL while Run serves it
}

// Open validates cfg, opens the stores under DataDir, the crawl engine and
// the overlay peer (listening and bootstrapping). Run starts the work.
func Open(ctx context.Context, cfg Config) (n *Node, err error) {
	if cfg.Policy == "" {
		cfg.Policy = "micra"
	}
	if err := cfg.Validate(); err != nil {
		return nil, err
	}
	cfg.overlayDefaults(&cfg.Overlay)
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Registry == nil {
		cfg.Registry = prometheus.NewRegistry()
	}
	n = &Node{cfg: cfg, log: cfg.Logger, reg: cfg.Registry, ready: make(chan struct{})}
	defer func() {
		if err != nil {
			n.Close()
			n = nil
		}
	}()
	if err := os.MkdirAll(cfg.DataDir, 0o700); err != nil {
		return n, fmt.Errorf("node: data dir: %w", err)
	}
	if n.updates, err = newUpdates(cfg, n.log, n.reg); err != nil {
		return n, err
	}
	if n.tree, err = loadTree(cfg); err != nil {
		return n, err
	}
	if n.router, err = newRouter(n.tree, cfg.AddrMapper, cfg.resolver(), delegation.Config{}, n.log, n.reg); err != nil {
		return n, err
	}

	var svc overlay.Services
	svc.Measurer = cfg.Measurer
	if cfg.Crawler {
		state := filepath.Join(cfg.DataDir, "state")
		if n.db, err = frontier.OpenDB(state, frontier.DBOptions{SyncWrites: cfg.Crawl.SyncWrites, Logger: n.log}); err != nil {
			return n, fmt.Errorf("node: open state %s: %w", state, err)
		}
		cc := cfg.Crawl
		cc.DB, cc.Router, cc.Logger, cc.Registerer = n.db, n.router, n.log, n.reg
		if cc.CrawlerID == "" && cfg.Overlay.KeyFile != "" {
			// Records and carriers name the crawler by its peer id.
			id, err := identity(cfg.Overlay.KeyFile)
			if err != nil {
				return n, err
			}
			cc.CrawlerID = id.String()
		}
		if cc.Receiver == nil {
			// the sink setting's, else the one the network announces;
			// the host and membership come with the overlay peer, opened
			// below, before the engine runs
			n.finder = &sinkFinder{log: n.log}
			if cfg.Sink != "" {
				n.finder.pinned, _ = peer.AddrInfoFromString(cfg.Sink) // (Validate parsed it)
			}
			cc.Receiver = n.finder
		}
		n.recv = &deliveries{Receiver: cc.Receiver}
		cc.Receiver = n.recv
		if n.eng, err = crawl.New(cc); err != nil {
			return n, err
		}
		n.restorePause()
		svc.Sink = n.eng
		svc.Ledger = handoffLedger{n}
		svc.Pages = &pageHistory{eng: n.eng, router: n.router, monitor: cc.Monitor.Enabled, sleep: cc.Monitor.Sleep}
		if n.finder != nil {
			// a dead owner's delivered pages are recovered from the sink
			svc.Archive = &sinkArchive{finder: n.finder}
		}
	}
	oc := cfg.Overlay
	oc.Logger, oc.Registerer = n.log, n.reg
	if cfg.Network != "" {
		self, err := identity(oc.KeyFile)
		if err != nil {
			return n, err
		}
		if oc.Admission, err = cfg.admission(self, time.Now()); err != nil {
			return n, err
		}
		n.adm = oc.Admission
		c := oc.Admission.OwnCertificate()
		n.log.Info("node: member of a network with admission", "network", c.Network, "certificate_expires", c.NotAfter)
	}
	if oc.LoopbackTestnet && oc.Partition == nil {
		n.partition = overlay.NewPartition()
		oc.Partition = n.partition
	}
	n.opened = time.Now()
	if n.peer, err = overlay.Open(ctx, n.tree, oc, svc); err != nil {
		return n, err
	}
	n.router.peer = n.peer
	if n.finder != nil {
		n.finder.host, n.finder.members = n.peer.Host(), n.peer.Members()
	}
	if n.eng != nil {
		// one resolver for routing and fetching: the engine's (its
		// fetcher's DNS cache)
		eng := n.eng
		n.router.resolveHost = func(ctx context.Context, host string) (netip.Addr, error) {
			a, _, err := eng.ResolveHost(ctx, host)
			return a, err
		}
	}
	n.loadDay.Store(-1)
	if n.eng != nil {
		n.router.ledger = n.recordHandoff
		n.rerouted = prometheus.NewCounter(prometheus.CounterOpts{Name: "micra_node_rerouted_urls_total",
			Help: "URLs handed to an owner that died, routed again to the new owners."})
		n.load = prometheus.NewGauge(prometheus.GaugeOpts{Name: "micra_node_load_pages",
			Help: "Pages this crawler took on over the last day (URLs its frontier admitted): the load its heartbeats advertise against its capacity."})
		for _, c := range []prometheus.Collector{n.rerouted, n.load} {
			if err := n.reg.Register(c); err != nil {
				return n, fmt.Errorf("node: register metrics: %w", err)
			}
		}
		n.dead = make(chan death, 64)
		n.peer.Members().OnChange(func(ev overlay.MemberEvent) {
			if !ev.Dead {
				return
			}
			select {
			case n.dead <- death{delegation.CrawlerID(ev.Peer.String()), ev.Reason}:
			default:
				n.log.Warn("too many deaths at once; the ledger sweep will re-route this owner's hand-offs", "peer", ev.Peer.String())
			}
		})
	}
	n.peer.NewPolicy(policies[cfg.Policy], delegation.Config{Balance: cfg.Balance, BalanceHold: cfg.BalanceHold})
	n.peer.OnCalibration(n.noteCalibration)
	n.log = n.log.With("peer", n.peer.ID().String())
	n.updates.log = n.log
	if err := n.updates.attach(n.peer); err != nil {
		return n, err
	}
	n.log.Info("node open", "addrs", n.peer.Host().Addrs(), "crawler", cfg.Crawler,
		"policy", cfg.Policy, "snapshot", n.tree.ID().String(), "data", cfg.DataDir)
	return n, nil
}

func loadTree(cfg Config) (*hierarchy.Tree, error) {
	switch {
	case cfg.Hierarchy != nil:
		return cfg.Hierarchy, nil
	case cfg.HierarchyFile != "":
		t, err := hierarchy.ReadSnapshotFile(cfg.HierarchyFile)
		if err != nil {
			return nil, fmt.Errorf("node: hierarchy %s: %w", cfg.HierarchyFile, err)
		}
		return t, nil
	}
	t, err := hierarchy.Default()
	if err != nil {
		return nil, fmt.Errorf("node: default hierarchy: %w (give a snapshot file)", err)
	}
	return t, nil
}

// Peer is the node's overlay peer.
func (n *Node) Peer() *overlay.Peer { return n.peer }

// Engine is the node's crawl engine (nil without the crawler role).
func (n *Node) Engine() *crawl.Engine { return n.eng }

// Registry holds every metric of this node.
func (n *Node) Registry() *prometheus.Registry { return n.reg }

// Tree is the hierarchy the node delegates with.
func (n *Node) Tree() *hierarchy.Tree { return n.tree }

// Ready is closed once Run has joined the overlay: with bootstrap peers, a
// first member heard (at most two failure timeouts waited for), then this
// crawler's own subnet published. The node crawls and serves from then on;
// seeds wait for the membership to form (SeedWait) after it.
func (n *Node) Ready() <-chan struct{} { return n.ready }

// Run joins the overlay (publishing this crawler's own subnet), routes the
// seeds once the membership has formed (SeedWait) and crawls until ctx
// ends. A distributed crawl has no local end: other peers may hand URLs to
// this one at any time.
func (n *Node) Run(ctx context.Context) (err error) {
	n.runMu.Lock()
	if n.running || n.closed {
		n.runMu.Unlock()
		return errors.New("node: Run called twice or after Close")
	}
	n.running = true
	n.runMu.Unlock()

	// an installed release ends Run as ctx would (leave, drain), and Run
	// says so
	ctx, restart := context.WithCancelCause(ctx)
	defer func() {
		if errors.Is(context.Cause(ctx), ErrRestart) && (err == nil || errors.Is(err, context.Canceled)) {
			err = ErrRestart
		}
		restart(nil)
	}()
	n.started.Store(time.Now())
	var wg sync.WaitGroup
	defer wg.Wait()
	// When ctx ends the node stops: the leave is announced at once, while
	// the engine stops and flushes its outbox (up to its ShutdownDrain),
	// so peers re-route what this node owned without waiting for either.
	// (Close would announce it otherwise.)
	leaving := make(chan struct{})
	stopLeave := context.AfterFunc(ctx, func() {
		defer close(leaving)
		if errors.Is(context.Cause(ctx), ErrRestart) {
			// Back in seconds on the new release: unannounced, peers
			// hold its subnets and spool its hand-offs for their owner
			// grace (overlay.Config.OwnerGrace), as for a quick restart,
			// instead of crawling again what it had fetched.
			n.restarting.Store(true)
			return
		}
		if err := n.peer.Leave(context.Background()); err != nil {
			n.log.Info("leave not confirmed by every peer", "err", err)
		}
	})
	defer func() {
		if !stopLeave() {
			<-leaving
		}
	}()
	if n.cfg.MetricsAddr != "" || n.cfg.controlAddr() != "" {
		_ = n.reg.Register(collectors.NewGoCollector()) // a second Run on the same registry: already there
	}
	ctl, cerr := n.startControl()
	if cerr != nil {
		return cerr
	}
	if ctl != nil {
		defer n.stopControl(ctl)
	}
	wg.Go(func() { n.updates.run(ctx, n.ready, n.health, func() { restart(ErrRestart) }) })
	if n.cfg.MetricsAddr != "" {
		ln, err := net.Listen("tcp", n.cfg.MetricsAddr)
		if err != nil {
			return fmt.Errorf("node: metrics listener: %w", err)
		}
		reg := n.reg
		srv := &http.Server{Handler: MetricsHandler(reg), ReadHeaderTimeout: 5 * time.Second}
		wg.Go(func() { _ = srv.Serve(ln) })
		defer srv.Close()
		n.log.Info("metrics", "url", "http://"+ln.Addr().String()+"/metrics")
	}
	if len(n.cfg.Overlay.Bootstrap) > 0 {
		// publishing this crawler's subnet, like any decision, needs the
		// DHT: an empty routing table would fail it
		if err := n.waitFirstMember(ctx, 2*n.cfg.Overlay.FailureTimeout); err != nil {
			return nil // ctx ended
		}
	}
	if n.cfg.Crawler && n.cfg.Overlay.CrawlerAddr.IsValid() {
		if d, err := n.peer.Join(ctx); err != nil {
			n.log.Warn("join: own subnet not published; it is delegated lazily like any other", "err", err)
		} else {
			n.log.Info("joined", "decision", d.String())
		}
	}
	if ctx.Err() != nil {
		return nil
	}
	close(n.ready)
	n.log.Info("ready", "addrs", n.peer.Host().Addrs(), "members", n.peer.Members().Count())
	if n.eng == nil {
		<-ctx.Done()
		return nil
	}
	rctx, stop := context.WithCancel(ctx)
	defer stop()
	wg.Go(func() { n.rerouteLoop(rctx, n.dead) })
	wg.Go(func() { n.reportLoad(rctx) })
	if len(n.cfg.Seeds) > 0 {
		if err := n.waitFormed(ctx); err != nil {
			return nil // ctx ended
		}
		if err := n.routeSeeds(ctx, n.cfg.Seeds); err != nil {
			return err
		}
	}
	err = n.eng.Run(ctx)
	stop()
	if ctx.Err() != nil && errors.Is(err, ctx.Err()) {
		err = nil
	}
	return err
}

// waitFirstMember waits until another member has been heard and the DHT
// routing table holds a peer, at most limit (then the node goes on alone,
// with a warning). It returns ctx's error if ctx ends first.
func (n *Node) waitFirstMember(ctx context.Context, limit time.Duration) error {
	start := time.Now()
	tick := time.NewTicker(n.cfg.Overlay.HeartbeatInterval / 4)
	defer tick.Stop()
	for n.peer.Members().Count() < 2 || n.peer.DHT().RoutingTable().Size() == 0 {
		if time.Since(start) >= limit {
			n.log.Warn("no member heard from the bootstrap peers; going on alone", "waited", limit, "bootstrap", n.cfg.Overlay.Bootstrap)
			return nil
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
	return nil
}

// Close stops the overlay — announcing the leave, so peers re-route what
// this node owned at once (overlay.Peer.Close) and no more hand-offs
// arrive, unless Run stopped to restart on a release — then releases the
// engine and the store. Run must have returned.
func (n *Node) Close() error {
	n.runMu.Lock()
	if n.closed {
		n.runMu.Unlock()
		return nil // closed already
	}
	n.closed = true
	n.runMu.Unlock()
	var errs []error
	if n.updates != nil {
		errs = append(errs, n.updates.close()) // its channel before the overlay
	}
	if n.peer != nil && n.restarting.Load() {
		errs = append(errs, n.peer.Kill()) // no leave: see Run
	} else if n.peer != nil {
		errs = append(errs, n.peer.Close())
	}
	if n.eng != nil {
		errs = append(errs, n.eng.Close())
	}
	if n.db != nil {
		errs = append(errs, n.db.Close())
	}
	return errors.Join(errs...)
}

// routeSeeds routes the configured seeds (RouteSeeds).
func (n *Node) routeSeeds(ctx context.Context, seeds []string) error {
	_, err := n.RouteSeeds(ctx, seeds)
	return err
}

// MetricsHandler serves reg's metrics on GET /metrics and answers 404
// elsewhere (a scraper or a person pointed at the wrong path learns so,
// rather than getting metrics at every path).
func MetricsHandler(reg prometheus.Gatherer) http.Handler {
	mux := http.NewServeMux()
	mux.Handle("GET /metrics", promhttp.HandlerFor(reg, promhttp.HandlerOpts{}))
	return mux
}
