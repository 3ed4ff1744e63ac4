// Package crawl owns one crawler: the engine that ties the durable per-host
// frontier (crawl/frontier), polite fetching (crawl/fetch) or file-system
// reads (crawl/fsys), on-site processing (crawl/extract) and carriers in a
// durable outbox (crawl/pack), plus change monitoring with conditional GETs,
// time windows, the Router through which the overlay later claims URLs, and
// the crawler's Prometheus metrics and slog progress.
//
// Run it in-process: New(Config) → Run(ctx) → Stats(). With StopWhenIdle it
// returns after the first pass (every queued URL done and every carrier
// acknowledged); otherwise it keeps monitoring until ctx ends.
package crawl

import (
	"container/heap"
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/fsys"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/prometheus/client_golang/prometheus"
)

// Monitor configures revisits after the first pass.
type Monitor struct {
	// Enabled schedules every fetched page for revisits.
	Enabled bool
	// Sleep is the first revisit interval (UCYMicra's "sleep time"). Default 24 h.
	Sleep time.Duration
	// MinInterval and MaxInterval bound the adaptive interval: a page found
	// changed is revisited after half its interval, an unchanged one after
	// twice it. Defaults Sleep/16 and Sleep×16.
	MinInterval, MaxInterval time.Duration
	// DuringFirstPass lets revisits start before the first pass is over
	// (default: only once no discovered URL is waiting).
	DuringFirstPass bool
}

// Config configures an Engine. Zero values take the defaults noted.
type Config struct {
	// CrawlerID names this crawler in records and carriers (default "micra").
	CrawlerID string
	// StateDir holds the Badger store (frontier, history, outbox). Required
	// unless DB is set.
	StateDir string
	// DB, if set, is used instead of opening StateDir; the caller closes it.
	DB *badger.DB
	// SyncWrites fsyncs every commit (power-loss durability).
	SyncWrites bool

	// Seeds are queued at Run (already-seen seeds are ignored, so a restart
	// with the same seeds resumes rather than restarts).
	Seeds []string

	Fetch fetch.Config
	// Normalize sets the query-parameter rules (nil: urlnorm.DefaultOptions()).
	Normalize *urlnorm.Options
	Scope     urlnorm.Scope // zero value: urlnorm.DefaultScope()
	// SameHostsAsSeeds restricts the crawl to the seeds' hosts.
	SameHostsAsSeeds bool
	Extract          extract.Options
	// ShipLinks puts each page's out-links, normalised and de-duplicated,
	// in its record (pack.Record.Links), for indexers that build the link
	// graph; they count in the carrier bytes.
	ShipLinks bool

	// Concurrency is the number of hosts crawled in parallel (default 64).
	Concurrency int
	// Router decides ownership of discovered URLs (default LocalRouter).
	Router Router

	// Receiver takes sealed carriers (required unless OnRecord is set).
	Receiver pack.Receiver
	// OnRecord, when set, is given every record the crawl makes: after the
	// outbox took it when there is a Receiver (its error is logged), or
	// instead of carriers when there is none — an embedder consuming
	// records directly, whose error keeps the page queued to be fetched
	// again, as a full outbox would.
	OnRecord func(context.Context, *pack.Record) error
	// MaxCarrierBytes and MaxCarrierHold bound carriers (defaults 1 MiB, 30 s).
	MaxCarrierBytes int
	MaxCarrierHold  time.Duration

	Monitor Monitor
	Windows Windows

	// FileRoots are document roots crawled from the file system.
	FileRoots []fsys.Root
	// FileOnly disables HTTP: only URLs under FileRoots are crawled.
	FileOnly bool

	// StopWhenIdle makes Run return once nothing is queued and the outbox is
	// drained: one pass. With Monitor enabled the pages are still scheduled,
	// and a later Run without StopWhenIdle revisits them.
	StopWhenIdle bool
	// Progress is the interval of slog progress lines (default 10 s; negative: none).
	Progress time.Duration
	// MaxRetries is how often a new URL whose fetch failed transiently (5xx
	// other than 503, network trouble, timeout, DNS) is tried again before it
	// is given up (default 2; negative: never). RetryDelay is the host's rest
	// before the first retry, doubled for each further one (default 30 s).
	MaxRetries int
	RetryDelay time.Duration
	// ShutdownDrain bounds how long Run, when stopped, waits for the receiver
	// to acknowledge the last carriers (default 5 s); the rest stay in the
	// outbox for the next Run.
	ShutdownDrain time.Duration

	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Engine is one crawler. Create it with New, run it with Run.
type Engine struct {
	cfg     Config
	log     *slog.Logger
	db      *badger.DB
	ownDB   bool
	front   *frontier.Frontier
	fetcher *fetch.Fetcher
	outbox  *pack.Outbox
	files   *fsys.Source
	norm    *urlnorm.Normalizer
	scope   urlnorm.Scope
	router  Router
	dns     *dnsCache
	langs   langHints // the language of pages that do not tell theirs (lang.go)

	st      counters
	started atomic.Int64 // unix nanos of Run's start
	m       *metrics

	parkMu sync.Mutex
	parked parkHeap // hosts resting (delay, 429/503 back-off), held until then

	idleWorkers atomic.Int32
	pause       pauseGate // Pause, Resume (pause.go)

	robotsRetry retryCounter // per host: refusals for an unreachable robots.txt
	robotsDown  sync.Map     // host → time.Time: its URLs are given up at once until then (robots.txt still down)
	handoffFail retryCounter // per URL: failed hand-offs of its links (not fetch failures)
	retries     retryCounter // per URL: transient fetch failures
	// retryAt holds, per URL put back after a transient failure, when it
	// may be tried again (time.Time); hostFails counts a host's
	// consecutive transient failures: hostSlowAfter of them and the host
	// itself rests rather than its URLs one by one.
	retryAt   sync.Map
	hostFails retryCounter
	backoffs  retryCounter // per URL: consecutive 429/503 answers
	// routeClaims holds the URLs being routed (and queued or handed off)
	// right now: a URL several pages being processed link to is routed
	// once (enqueueLinks).
	routeClaims sync.Map
	// busy counts the workers visiting each host (WaitHostsIdle).
	busy *busyHosts
	// finishBound bounds each step that finishes even while the crawl
	// stops: routing a fetched page's links (or its redirect target), then
	// handing them off; a withdrawal's hand-off (tests shorten it)
	finishBound time.Duration
}

// New validates cfg, opens the state and builds the crawler.
func New(cfg Config) (*Engine, error) {
	if cfg.Receiver == nil && cfg.OnRecord == nil {
		return nil, errors.New("crawl: Config.Receiver (carriers) or Config.OnRecord (records) is required")
	}
	if cfg.DB == nil && cfg.StateDir == "" {
		return nil, errors.New("crawl: Config.StateDir is required")
	}
	if cfg.CrawlerID == "" {
		cfg.CrawlerID = "micra"
	}
	if cfg.Concurrency <= 0 {
		cfg.Concurrency = 64
	}
	if cfg.Router == nil {
		cfg.Router = LocalRouter{}
	}
	if cfg.Logger == nil {
		cfg.Logger = slog.Default()
	}
	if cfg.Progress == 0 {
		cfg.Progress = 10 * time.Second
	}
	switch {
	case cfg.MaxRetries == 0:
		cfg.MaxRetries = defaultMaxRetries
	case cfg.MaxRetries < 0:
		cfg.MaxRetries = 0
	}
	if cfg.RetryDelay <= 0 {
		cfg.RetryDelay = 30 * time.Second
	}
	if cfg.ShutdownDrain <= 0 {
		cfg.ShutdownDrain = 5 * time.Second
	}
	if cfg.Monitor.Sleep <= 0 {
		cfg.Monitor.Sleep = 24 * time.Hour
	}
	if cfg.Monitor.MinInterval <= 0 {
		cfg.Monitor.MinInterval = cfg.Monitor.Sleep / 16
	}
	if cfg.Monitor.MaxInterval <= 0 {
		cfg.Monitor.MaxInterval = cfg.Monitor.Sleep * 16
	}
	if sc := cfg.Scope; sc.MaxDepth == 0 && sc.MaxPagesPerHost == 0 && sc.MaxURLLength == 0 && sc.MaxPathRepeat == 0 &&
		sc.MaxPathSegments == 0 && sc.MaxQueryParams == 0 && len(sc.Hosts) == 0 {
		cfg.Scope = urlnorm.DefaultScope()
	}
	normOpts := urlnorm.DefaultOptions()
	if cfg.Normalize != nil {
		normOpts = *cfg.Normalize
	}
	e := &Engine{busy: newBusyHosts(), cfg: cfg, log: cfg.Logger.With("crawler", cfg.CrawlerID), router: cfg.Router,
		norm: urlnorm.New(normOpts), scope: cfg.Scope, finishBound: 30 * time.Second}
	ok := false
	defer func() {
		if !ok {
			e.Close()
		}
	}()
	e.db = cfg.DB
	if e.db == nil {
		if err := os.MkdirAll(cfg.StateDir, 0o755); err != nil {
			return nil, err
		}
		db, err := frontier.OpenDB(cfg.StateDir, frontier.DBOptions{SyncWrites: cfg.SyncWrites, Logger: cfg.Logger})
		if err != nil {
			return nil, fmt.Errorf("crawl: open state %s: %w", cfg.StateDir, err)
		}
		e.db, e.ownDB = db, true
	}
	var err error
	e.front, err = frontier.New(e.db, frontier.Options{MaxPagesPerHost: cfg.Scope.MaxPagesPerHost,
		Logger: e.log, Registerer: cfg.Registerer})
	if err != nil {
		return nil, err
	}
	if cfg.Receiver == nil {
		e.outbox = nil // records go to OnRecord only
	} else if e.outbox, err = pack.NewOutbox(e.db, cfg.Receiver, pack.Options{CrawlerID: cfg.CrawlerID,
		MaxBytes: cfg.MaxCarrierBytes, MaxHold: cfg.MaxCarrierHold, Logger: e.log, Registerer: cfg.Registerer}); err != nil {
		return nil, err
	}
	if len(cfg.FileRoots) > 0 {
		if e.files, err = fsys.Open(cfg.FileRoots); err != nil {
			return nil, err
		}
	}
	if !cfg.FileOnly {
		fc := cfg.Fetch
		if fc.Logger == nil {
			fc.Logger = e.log
		}
		if fc.Registerer == nil {
			fc.Registerer = cfg.Registerer
		}
		if fc.RobotsCache == nil {
			size := fc.RobotsCacheSize
			if size <= 0 {
				size = 100_000
			}
			fc.RobotsCache = &durableRobots{mem: fetch.NewMemoryRobotsCache(size), f: e.front, log: e.log}
		}
		if e.fetcher, err = fetch.New(fc); err != nil {
			return nil, err
		}
	}
	if e.router.NeedsIP() && e.fetcher == nil {
		var r fetch.Resolver = net.DefaultResolver
		if cfg.Fetch.Resolver != nil {
			r = cfg.Fetch.Resolver
		}
		e.dns = newDNSCache(r, 100_000)
	}
	e.m = newMetrics(cfg.Registerer, e)
	ok = true
	return e, nil
}

// Close releases the state. Run must have returned.
func (e *Engine) Close() error {
	var errs []error
	if e.fetcher != nil {
		e.fetcher.Close()
	}
	if e.files != nil {
		e.files.Close()
	}
	if e.front != nil {
		errs = append(errs, e.front.Close())
	}
	if e.ownDB && e.db != nil {
		errs = append(errs, e.db.Close())
	}
	return errors.Join(errs...)
}

// SeedError is one seed that could not be queued.
type SeedError struct {
	Seed string
	Err  error
}

func (s SeedError) Error() string { return fmt.Sprintf("seed %q: %v", s.Seed, s.Err) }

// AddSeeds normalises and queues URLs at depth 0; it returns how many were
// new and one error per rejected seed (the others are queued regardless).
func (e *Engine) AddSeeds(ctx context.Context, seeds []string) (int, []SeedError) {
	var items []frontier.Item
	var bad []SeedError
	for _, s := range seeds {
		u, err := e.parseURL(s)
		if err != nil {
			bad = append(bad, SeedError{s, err})
			continue
		}
		if err := e.scope.CheckURL(u, 0); err != nil {
			bad = append(bad, SeedError{s, err})
			continue
		}
		if e.cfg.FileOnly {
			if _, _, ok := e.files.Match(u); !ok {
				bad = append(bad, SeedError{s, errors.New("not under a file root and HTTP is off")})
				continue
			}
		}
		items = append(items, frontier.Item{URL: u.String(), Host: urlnorm.HostKey(u)})
	}
	n, err := e.front.Add(items)
	if err != nil {
		bad = append(bad, SeedError{"(all)", err})
	}
	return n, bad
}

// Run crawls until ctx ends or, with StopWhenIdle, until the first pass is
// done and every carrier acknowledged. State is durable throughout: a Run
// interrupted at any point (even by SIGKILL) resumes on the next Run.
func (e *Engine) Run(ctx context.Context) error {
	e.started.Store(time.Now().UnixNano())
	if e.cfg.SameHostsAsSeeds {
		e.scope.Hosts = map[string]bool{}
		for _, s := range e.cfg.Seeds {
			if u, err := e.parseURL(s); err == nil {
				e.scope.Hosts[urlnorm.HostKey(u)] = true
			}
		}
		for _, r := range e.cfg.FileRoots {
			if u, err := e.norm.Parse(r.Prefix); err == nil {
				e.scope.Hosts[urlnorm.HostKey(u)] = true
			}
		}
	}
	if _, bad := e.AddSeeds(ctx, e.cfg.Seeds); len(bad) > 0 {
		for _, b := range bad {
			e.log.Warn("seed rejected", "seed", b.Seed, "err", b.Err)
		}
	}
	if e.files != nil {
		if err := e.seedFiles(ctx); err != nil {
			return err
		}
	}
	if err := e.readmitRefused(ctx); err != nil {
		return err
	}
	if err := e.startMonitoring(); err != nil {
		return err
	}
	runCtx, cancel := context.WithCancel(ctx)
	defer cancel()

	var wg sync.WaitGroup
	outboxDone := make(chan struct{})
	outboxCtx, stopOutbox := context.WithCancel(context.Background())
	defer stopOutbox()
	go func() {
		defer close(outboxDone)
		if e.outbox != nil {
			e.outbox.Run(outboxCtx)
		}
	}()

	for range e.cfg.Concurrency {
		wg.Go(func() { e.worker(runCtx) })
	}
	if !e.cfg.StopWhenIdle {
		wg.Go(func() { e.monitorLoop(runCtx) })
	}
	if e.cfg.Progress > 0 {
		wg.Go(func() { e.progressLoop(runCtx) })
	}

	stopWhenIdle := e.cfg.StopWhenIdle
	var runErr error
	if stopWhenIdle {
		tick := time.NewTicker(20 * time.Millisecond)
	wait:
		for {
			select {
			case <-ctx.Done():
				break wait
			case <-tick.C:
				if e.idle() {
					break wait
				}
			}
		}
		tick.Stop()
	} else {
		e.shipWhenIdle(ctx)
	}
	cancel()
	wg.Wait()
	// Seal what is pending and give the receiver a bounded chance to take it;
	// anything unacknowledged stays in the outbox for the next Run.
	// (without a Receiver, records went to OnRecord as they were made)
	if e.outbox != nil {
		if err := e.outbox.Flush(); err != nil {
			runErr = err
		}
		if stopWhenIdle && ctx.Err() == nil {
			if err := e.outbox.Drain(ctx); err != nil {
				runErr = errors.Join(runErr, err)
			}
		} else {
			dctx, dcancel := context.WithTimeout(context.Background(), e.cfg.ShutdownDrain)
			if err := e.outbox.Drain(dctx); err != nil {
				e.log.Warn("carriers left in the outbox for the next run", "err", err)
			}
			dcancel()
		}
	}
	stopOutbox()
	<-outboxDone
	e.logSummary(ctx)
	return runErr
}

// readmitRefused queues again the URLs an earlier run's address guard
// refused (Frontier.Refuse) that this run may reach: a crawl restarted
// with AllowPrivate crawls the loopback seeds the first run refused.
func (e *Engine) readmitRefused(ctx context.Context) error {
	if e.fetcher == nil || e.front.Stats().Refused == 0 {
		return nil
	}
	// read first, resolve after: no Badger transaction open across DNS
	var refused []frontier.Item
	if err := e.front.EachRefused(func(it frontier.Item) error {
		refused = append(refused, it)
		return nil
	}); err != nil {
		return err
	}
	allowed := map[string]bool{} // per host key: one check each
	var again []frontier.Item
	still := 0
	for _, it := range refused {
		ok, checked := allowed[it.Host]
		if !checked {
			// only the guard keeps a URL back: a resolution failure now
			// is the fetch's to meet and report
			u, err := url.Parse(it.URL)
			ok = err == nil && !errors.Is(e.fetcher.CheckURL(ctx, u), fetch.ErrGuard)
			allowed[it.Host] = ok
		}
		if err := ctx.Err(); err != nil {
			return err
		}
		if !ok {
			still++
			continue
		}
		again = append(again, it)
	}
	n, err := e.front.Readmit(again)
	if err != nil {
		return fmt.Errorf("crawl: queue URLs refused before: %w", err)
	}
	if n > 0 {
		e.log.Info("URLs the address guard refused before are queued again", "urls", n)
	}
	if still > 0 {
		e.log.Warn("URLs kept back: the address guard refuses them (private, loopback or reserved addresses)",
			"urls", still, "hint", "crawl them with --allow-private, on testnets only")
	}
	return nil
}

// startMonitoring schedules, when monitoring is turned on for a crawl
// state last run without it, the pages fetched meanwhile (they have no
// revisit date), and says when the first revisit is due: a monitored crawl
// with nothing to fetch yet is waiting, not stuck.
func (e *Engine) startMonitoring() error {
	was, err := e.front.Monitoring()
	if err != nil {
		return fmt.Errorf("crawl: read the monitoring state: %w", err)
	}
	on := e.cfg.Monitor.Enabled
	if on && !was {
		n, err := e.front.ScheduleUnscheduled(e.cfg.Monitor.Sleep)
		if err != nil {
			return fmt.Errorf("crawl: schedule the pages fetched without monitoring: %w", err)
		}
		if n > 0 {
			e.log.Info("monitoring turned on: pages fetched without it scheduled for revisits", "pages", n, "sleep", e.cfg.Monitor.Sleep)
		}
	}
	if on != was {
		if err := e.front.SetMonitoring(on); err != nil {
			return fmt.Errorf("crawl: store the monitoring state: %w", err)
		}
	}
	if on {
		if next, ok, err := e.front.NextRevisit(); err == nil && ok {
			e.log.Info("monitoring", "scheduled", e.front.Stats().Scheduled, "next_revisit", next.Format(time.RFC3339))
		}
	}
	return nil
}

// shipWhenIdle runs until ctx ends, sealing the outbox's pending records
// whenever the crawler has nothing left to fetch: a crawler that waits for
// hand-offs or revisits ships what it holds at once, not MaxCarrierHold
// later (the hold bounds the wait while pages keep coming).
func (e *Engine) shipWhenIdle(ctx context.Context) {
	if e.outbox == nil {
		<-ctx.Done()
		return
	}
	tick := time.NewTicker(200 * time.Millisecond)
	defer tick.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
			if e.outbox.Stats().PendingRecords > 0 && e.idle() {
				if err := e.outbox.Flush(); err != nil {
					e.log.Warn("sealing the outbox of an idle crawler", "err", err)
				}
			}
		}
	}
}

// idle reports whether the first pass is complete: nothing queued, no host
// held by a worker, nothing parked.
func (e *Engine) idle() bool {
	fs := e.front.Stats()
	e.parkMu.Lock()
	parked := len(e.parked)
	e.parkMu.Unlock()
	return fs.Queued == 0 && fs.ActiveHosts == 0 && parked == 0 && int(e.idleWorkers.Load()) == e.cfg.Concurrency
}

func (e *Engine) seedFiles(ctx context.Context) error {
	var batch []frontier.Item
	flush := func() error {
		_, err := e.front.Add(batch)
		batch = batch[:0]
		return err
	}
	err := e.files.Walk(ctx, func(raw string, _ time.Time) error {
		u, err := e.parseURL(raw)
		if err != nil {
			e.log.Warn("file URL rejected", "url", raw, "err", err)
			return nil
		}
		batch = append(batch, frontier.Item{URL: u.String(), Host: urlnorm.HostKey(u)})
		if len(batch) >= 1000 {
			return flush()
		}
		return nil
	})
	if err != nil {
		return err
	}
	return flush()
}

// worker takes one host at a time and crawls it breadth-first until its
// queue is empty (UbiCrawler), then takes the next.
func (e *Engine) worker(ctx context.Context) {
	for ctx.Err() == nil && e.waitResumed(ctx) {
		host, ok := e.takeParked()
		if ok {
			// Read the queue from its head again: the item that was refused is still there.
			e.front.Rewind(host)
		} else {
			var err error
			host, ok, err = e.front.AcquireHost()
			if err != nil {
				e.log.Error("frontier: acquire host", "err", err)
				sleepCtx(ctx, time.Second)
				continue
			}
		}
		if !ok {
			e.idleWorkers.Add(1)
			select {
			case <-ctx.Done():
			case <-e.front.Ready():
			case <-time.After(50 * time.Millisecond):
			}
			e.idleWorkers.Add(-1)
			continue
		}
		e.busy.enter(host)
		parkUntil, backoff := e.crawlHost(ctx, host)
		e.busy.leave(host)
		if !parkUntil.IsZero() {
			e.park(host, parkUntil, backoff)
			continue
		}
		if err := e.front.ReleaseHost(host); err != nil {
			e.log.Error("frontier: release host", "host", host, "err", err)
		}
	}
}

// maxBackoffs is how many consecutive 429/503 answers (each honoured with
// its Retry-After or an exponential back-off, 1 s … MaxBackoff) a URL gets
// before it is given up: with exponential back-off, about 17 minutes.
const maxBackoffs = 10

// defaultMaxRetries is Config.MaxRetries' default.
const defaultMaxRetries = 2

// hostSlowAfter is how many consecutive transient failures of a host's
// URLs make the host itself rest (it is down or overloaded) instead of
// each failed URL waiting alone at the back of the queue.
const hostSlowAfter = 3

// restParkThreshold: a host that must rest longer than this before its next
// request is parked and the worker takes another host, instead of sleeping
// in Fetch (with a 1 s politeness delay, sleeping workers would bound the
// crawl to Concurrency pages per second).
const restParkThreshold = 20 * time.Millisecond

// crawlHost visits the queued URLs of host in order. It returns a non-zero
// time when the host must rest before the rest of its queue, and whether
// the rest is a back-off the server asked for (429/503).
func (e *Engine) crawlHost(ctx context.Context, host string) (time.Time, bool) {
	recheck := true // until a withdrawal fails for this host
	// URLs waiting to be retried are put back at the tail of the queue; the
	// first met twice without a visit in between means every URL left is
	// waiting, and the host rests until the earliest is due.
	var firstWaiting string
	var due time.Time
	for ctx.Err() == nil {
		if !e.waitWindow(ctx) {
			return time.Time{}, false
		}
		it, ok, err := e.front.Next(host)
		if err != nil {
			e.log.Error("frontier: next", "host", host, "err", err)
			return time.Time{}, false
		}
		if !ok {
			e.hostFails.forget(host)
			return time.Time{}, false
		}
		if v, waiting := e.retryAt.Load(it.URL); waiting {
			at := v.(time.Time)
			if time.Now().Before(at) {
				if it.URL == firstWaiting {
					return due, false
				}
				if firstWaiting == "" || at.Before(due) {
					due = at
				}
				if firstWaiting == "" {
					firstWaiting = it.URL
				}
				if err := e.front.Defer(it); err != nil {
					e.log.Error("frontier: defer", "url", it.URL, "err", err)
					return at, false
				}
				continue
			}
			e.retryAt.Delete(it.URL)
		}
		firstWaiting, due = "", time.Time{}
		rt := Route{Mine: true}
		if recheck {
			var gone bool
			rt, gone, err = e.withdrawForeign(ctx, host, it)
			if err != nil {
				// crawled here as before: overlap, never a loss
				e.log.Warn("queued URLs of a host now another crawler's not withdrawn", "host", host, "err", err)
				e.countEvent("withdraw")
				recheck = false
				e.front.Rewind(host)
				continue
			}
			if gone {
				continue
			}
			if !rt.Wait.IsZero() && time.Now().Before(rt.Wait) {
				return rt.Wait, false // the host rests; parked, its queue is read again from the head
			}
		}
		if e.fetcher != nil {
			if ready := e.fetcher.HostReadyAt(it.URL); time.Until(ready) > restParkThreshold {
				if _, _, file := e.files.Match(mustParse(it.URL)); !file {
					return ready, false
				}
			}
		}
		if retry := e.visit(ctx, it, rt); !retry.IsZero() {
			return retry, true
		}
	}
	return time.Time{}, false
}

// withdrawBatch bounds the URLs of one withdrawal (one hand-off, one
// frontier transaction).
const withdrawBatch = 512

// withdrawForeign asks the router (a Rechecker) whether it, the next queued
// URL of host, is still this crawler's, and returns its route. If not, it
// hands it and up to withdrawBatch−1 further queued URLs of the host (same
// host, same address, same route) to their owner and withdraws them from
// the frontier (Frontier.Withdraw), and returns gone. An ownership it
// cannot tell (no Rechecker, a resolution error) leaves the URL to be
// crawled here, resolved by the fetch. On an error the items taken from
// the queue are still queued: the caller rewinds.
func (e *Engine) withdrawForeign(ctx context.Context, host string, it frontier.Item) (rt Route, gone bool, err error) {
	rt = Route{Mine: true}
	rc, ok := e.router.(Rechecker)
	if !ok {
		return rt, false, nil
	}
	u, err := url.Parse(it.URL)
	if err != nil {
		return rt, false, nil
	}
	if _, _, file := e.files.Match(u); file {
		return rt, false, nil
	}
	var ip netip.Addr
	if e.router.NeedsIP() {
		if ip, err = e.resolve(ctx, u.Hostname()); err != nil {
			return rt, false, nil // the fetch meets the same error and reports it
		}
	}
	r, err := rc.Recheck(ctx, u, ip)
	if err != nil {
		return rt, false, nil
	}
	if r.Mine {
		return r, false, nil
	}
	batch := []frontier.Item{it}
	skipped := false // items of a file root: read here, not handed off
	for len(batch) < withdrawBatch {
		next, ok, err := e.front.Next(host)
		if err != nil {
			return rt, false, err
		}
		if !ok {
			break
		}
		if _, _, file := e.files.Match(mustParse(next.URL)); file {
			skipped = true
			continue
		}
		batch = append(batch, next)
	}
	err = e.front.Withdraw(batch, func(urls []string) error {
		// As for links: finish the hand-off even if the crawl is being
		// stopped, within a bound.
		hctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishBound)
		defer cancel()
		routed := make([]Routed, len(urls))
		for i, s := range urls {
			routed[i] = Routed{URL: s, Route: r} // one host, one address: one route
		}
		return e.router.Handoff(hctx, routed)
	})
	if err != nil {
		return rt, false, fmt.Errorf("withdraw %d URLs: %w", len(batch), err)
	}
	if skipped {
		e.front.Rewind(host) // serve the file-root items taken meanwhile
	}
	for _, it := range batch {
		e.retryAt.Delete(it.URL) // (waiting to be retried here: not any more)
	}
	e.st.withdrawn.Add(int64(len(batch)))
	e.log.Debug("queued URLs withdrawn: their host is another crawler's now", "host", host, "urls", len(batch))
	return rt, true, nil
}

func mustParse(s string) *url.URL {
	u, err := url.Parse(s)
	if err != nil {
		return &url.URL{}
	}
	return u
}

// park holds an acquired host until it may be asked again; the frontier
// keeps it acquired, so no other worker takes it meanwhile.
func (e *Engine) park(host string, until time.Time, backoff bool) {
	// The resume reads the queue from its head again: drop the read-ahead
	// now, so resting hosts (pages/s × delay of them) hold no items in memory.
	e.front.Rewind(host)
	e.parkMu.Lock()
	heap.Push(&e.parked, parkEntry{host, until})
	e.parkMu.Unlock()
	if backoff {
		e.log.Info("host backed off", "host", host, "until", until.Format(time.RFC3339))
	}
}

// takeParked returns the parked host whose rest ended first, if any has.
func (e *Engine) takeParked() (string, bool) {
	e.parkMu.Lock()
	defer e.parkMu.Unlock()
	if len(e.parked) == 0 || time.Now().Before(e.parked[0].until) {
		return "", false
	}
	return heap.Pop(&e.parked).(parkEntry).host, true
}

type parkEntry struct {
	host  string
	until time.Time
}

type parkHeap []parkEntry

func (h parkHeap) Len() int           { return len(h) }
func (h parkHeap) Less(i, j int) bool { return h[i].until.Before(h[j].until) }
func (h parkHeap) Swap(i, j int)      { h[i], h[j] = h[j], h[i] }
func (h *parkHeap) Push(x any)        { *h = append(*h, x.(parkEntry)) }
func (h *parkHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}

// waitWindow blocks while the crawl is paused or outside its time
// windows; it reports false when ctx ended.
func (e *Engine) waitWindow(ctx context.Context) bool {
	if !e.waitResumed(ctx) { // (pause.go)
		return false
	}
	for {
		now := time.Now()
		next := e.cfg.Windows.NextOpen(now)
		if !next.After(now) {
			return true
		}
		e.st.windowWaits.Add(1)
		if !sleepCtx(ctx, min(next.Sub(now), time.Minute)) {
			return false
		}
	}
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}

// monitorLoop moves due revisits into the frontier once the first pass is
// over (or at once with DuringFirstPass).
func (e *Engine) monitorLoop(ctx context.Context) {
	if !e.cfg.Monitor.Enabled {
		return
	}
	tick := time.NewTicker(max(min(e.cfg.Monitor.MinInterval/4, time.Second), 10*time.Millisecond))
	defer tick.Stop()
	firstPassDone := false
	for {
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
		// revisits wait for the first pass only: once it is over, a host
		// parked with its revisit queued must not stop every other host's
		firstPassDone = firstPassDone || e.cfg.Monitor.DuringFirstPass || e.front.Stats().Queued == 0
		if !firstPassDone {
			continue
		}
		if !e.cfg.Windows.Open(time.Now()) {
			continue
		}
		for {
			n, err := e.front.DueRevisits(time.Now(), 1000)
			if err != nil {
				e.log.Error("frontier: due revisits", "err", err)
				break
			}
			e.st.revisitsQueued.Add(int64(n))
			if n < 1000 {
				break
			}
		}
	}
}

// route is the routing step of a URL: its host resolved (when the router
// needs the address) and the router's answer.
func (e *Engine) route(ctx context.Context, u *url.URL) (Route, error) {
	var ip netip.Addr
	if e.router.NeedsIP() {
		a, err := e.resolve(ctx, u.Hostname())
		if err != nil {
			return Route{}, err
		}
		ip = a
	}
	return e.router.Route(ctx, u, ip)
}

// resolve returns the address a fetch of host dials: the fetcher's first
// guard-approved address, through its DNS cache (one resolver for routing
// and fetching), or the engine's own cache when it does not fetch.
func (e *Engine) resolve(ctx context.Context, host string) (netip.Addr, error) {
	if e.fetcher != nil {
		addrs, err := e.fetcher.ResolveAllowed(ctx, host)
		if err != nil {
			return netip.Addr{}, err
		}
		return addrs[0], nil
	}
	return e.dns.lookup(ctx, host)
}

// parseURL normalises a URL entering the crawl (seed, link, hand-off,
// redirect target, file walk); a file under a file root gets its one
// canonical form (fsys.Source.Canonical).
func (e *Engine) parseURL(s string) (*url.URL, error) {
	u, err := e.norm.Parse(s)
	if err != nil || e.files == nil {
		return u, err
	}
	return e.files.Canonical(u), nil
}

func isHTML(ct string) bool {
	return ct == "text/html" || ct == "application/xhtml+xml" || strings.HasSuffix(ct, "+html")
}
