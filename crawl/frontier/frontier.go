// Package frontier owns a crawler's durable crawl state in Badger (v4): the
// per-host breadth-first queues (UbiCrawler: a host, once started, is visited
// breadth-first; hosts run in parallel up to the caller's concurrency), the
// seen-set (Badger-backed behind a bounded in-memory front, so memory does
// not grow with the number of URLs), the per-page fetch history (timings,
// validators, content hash, change count), the revisit schedule used by
// monitoring, and a durable robots.txt cache.
//
// Crash safety: a queued URL is deleted only when Done records its fetch, in
// the same transaction; a crawler killed with SIGKILL restarts with every URL
// not yet Done still queued and every Done URL remembered, so it refetches at
// most the URLs that were in flight.
package frontier

import (
	"errors"
	"log/slog"
	"sync"
	"sync/atomic"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Options configure a Frontier.
type Options struct {
	// SeenCacheSize bounds the in-memory front of the seen-set in entries
	// (8 bytes each plus map overhead). Default 1 Mi.
	SeenCacheSize int
	// MaxPagesPerHost bounds the URLs admitted per host (0: no bound). The
	// count is durable, so a restarted crawler keeps its budget.
	MaxPagesPerHost int
	// BatchSize is how many queued items of an active host are read from
	// Badger at once. Default 64.
	BatchSize  int
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

// Item is one URL in a host queue.
type Item struct {
	URL     string
	Host    string // politeness key (urlnorm.HostKey)
	Depth   int
	Revisit bool // queued by the revisit schedule, not by discovery
	key     []byte
	readmit bool // a refused URL queued again (Readmit): seen and counted already
}

// bypass reports whether Add queues the item past the seen-set and the
// host's budget: it was admitted before.
func (it Item) bypass() bool { return it.Revisit || it.readmit }

// Stats is a snapshot of the frontier's counters.
type Stats struct {
	Queued      int64 // URLs waiting in host queues (including in flight)
	ReadyHosts  int64 // hosts waiting for a worker
	ActiveHosts int   // hosts held by workers
	Seen        int64 // URLs ever admitted (approximate after restart: counted since Open plus reloaded queue)
	Done        int64 // URLs completed since Open
	Rejected    int64 // URLs refused by the per-host budget since Open
	Scheduled   int64 // revisits waiting in the schedule
	// Refused counts URLs held back because the fetcher may not reach
	// their address (Refuse), until a run that may reach them (Readmit).
	Refused int64
	// Buffered counts queued items read ahead into memory for the hosts
	// held by workers (at most BatchSize per host).
	Buffered int64
}

// Frontier is the durable crawl state. It is safe for concurrent use; writes
// are serialised by one mutex (Badger transactions on shared host metadata
// would otherwise conflict), reads of the seen front are sharded.
type Frontier struct {
	db  *badger.DB
	opt Options
	log *slog.Logger
	seq *badger.Sequence

	seen *seenFront

	// mu serialises write transactions (they share host metadata). smu guards
	// the counters and the active-host map, so readers (Next, Stats) never
	// wait for a commit; writers of either hold mu and then smu.
	mu      sync.Mutex
	smu     sync.Mutex
	active  map[string]*activeHost
	stats   Stats
	readyCh chan struct{} // signalled when a host becomes ready
	// unreleased holds hosts, neither active nor ready, whose ReleaseHost
	// failed to put them back on the ready list (under mu); AcquireHost
	// retries them, so a storage error delays their queue but never strands
	// it. The value says whether a failed retry was logged.
	unreleased map[string]bool
	// buffered counts items in the active hosts' read-ahead buffers.
	buffered atomic.Int64
	// failCommit, set only by tests (before use), is asked before each
	// commit of update; an error from it fails the transaction as a storage
	// error would: Badger discards its writes.
	failCommit func() error

	mAdded, mDone, mRejected, mSeenHits prometheus.Counter
}

type activeHost struct {
	buf    []Item
	cursor []byte // last queue key read
}

// New opens the frontier stored in db. Hosts that were being crawled when
// the previous process stopped are put back on the ready list.
func New(db *badger.DB, opt Options) (*Frontier, error) {
	if opt.SeenCacheSize <= 0 {
		opt.SeenCacheSize = 1 << 20
	}
	if opt.BatchSize <= 0 {
		opt.BatchSize = 64
	}
	if opt.Logger == nil {
		opt.Logger = slog.Default()
	}
	seq, err := db.GetSequence(kSeq, 4096)
	if err != nil {
		return nil, err
	}
	f := &Frontier{
		db: db, opt: opt, log: opt.Logger.With("component", "frontier"), seq: seq,
		seen:       newSeenFront(opt.SeenCacheSize),
		active:     make(map[string]*activeHost),
		readyCh:    make(chan struct{}, 1),
		unreleased: make(map[string]bool),
	}
	if err := f.recover(); err != nil {
		seq.Release()
		return nil, err
	}
	f.registerMetrics(opt.Registerer)
	return f, nil
}

// Close releases the sequence lease; the DB stays open (the caller owns it).
func (f *Frontier) Close() error { return f.seq.Release() }

func (f *Frontier) registerMetrics(reg prometheus.Registerer) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "frontier", Name: name, Help: help})
	}
	f.mAdded = c("urls_added_total", "URLs admitted to the frontier.")
	f.mDone = c("urls_done_total", "URLs completed.")
	f.mRejected = c("urls_rejected_total", "URLs refused by the per-host page budget.")
	f.mSeenHits = c("seen_hits_total", "Discovered URLs already seen.")
	queued := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "frontier", Name: "queued_urls",
		Help: "URLs waiting in host queues."}, func() float64 { return float64(f.Stats().Queued) })
	if reg != nil {
		for _, m := range []prometheus.Collector{f.mAdded, f.mDone, f.mRejected, f.mSeenHits, queued} {
			if err := reg.Register(m); err != nil {
				f.log.Warn("metric not registered", "err", err)
			}
		}
	}
}

// recover rebuilds the ready list and the counters from the host metadata.
func (f *Frontier) recover() error {
	var hosts []string
	var metas []hostMeta
	var repaired []string // damaged metadata of hosts with an empty queue
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pHostMeta, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			m, err := decodeHostMeta(v)
			if err != nil {
				// one damaged value must not keep every other host's
				// queue from opening: rebuild it from the host's queue
				host := string(it.Item().Key()[len(pHostMeta):])
				m = hostMeta{Pending: countPrefix(txn, queuePrefix(host))}
				m.Admitted = m.Pending // (the budget spent before is unknown)
				f.log.Error("corrupt host metadata rebuilt from its queue", "host", host, "pending", m.Pending, "err", err)
				if m.Pending == 0 {
					repaired = append(repaired, host)
				}
			}
			f.stats.Queued += m.Pending
			f.stats.Seen += m.Admitted
			if m.Pending > 0 && !m.Ready {
				hosts = append(hosts, string(it.Item().Key()[len(pHostMeta):]))
				metas = append(metas, m)
			} else if m.Ready {
				f.stats.ReadyHosts++
			}
		}
		f.stats.Scheduled = countPrefix(txn, pRevisit)
		f.stats.Refused = countPrefix(txn, pRefused)
		return nil
	})
	if err != nil {
		return err
	}
	if len(repaired) > 0 {
		if err := f.update(func(txn *badger.Txn) error {
			for _, h := range repaired {
				if err := txn.Set(cat(pHostMeta, []byte(h)), hostMeta{}.encode()); err != nil {
					return err
				}
			}
			return nil
		}); err != nil {
			return err
		}
	}
	// Hosts with pending URLs that are not on the ready list were active when
	// the process stopped.
	for i, h := range hosts {
		wb := f.db.NewWriteBatch()
		if err := f.pushReady(wb, h, metas[i]); err != nil {
			wb.Cancel()
			return err
		}
		if err := wb.Flush(); err != nil {
			return err
		}
		f.stats.ReadyHosts++
	}
	if f.stats.Queued > 0 {
		f.log.Info("frontier recovered", "queued", f.stats.Queued, "ready_hosts", f.stats.ReadyHosts, "resumed_hosts", len(hosts), "scheduled_revisits", f.stats.Scheduled)
	}
	return nil
}

// update runs fn in a read-write transaction, retrying on conflicts (Done
// runs beside the serialised writers and may meet them on a host's metadata).
func (f *Frontier) update(fn func(txn *badger.Txn) error) error {
	if fail := f.failCommit; fail != nil {
		inner := fn
		fn = func(txn *badger.Txn) error {
			if err := inner(txn); err != nil {
				return err
			}
			return fail()
		}
	}
	for attempt := 0; ; attempt++ {
		err := f.db.Update(fn)
		if errors.Is(err, badger.ErrConflict) && attempt < 100 {
			continue
		}
		return err
	}
}

// Stats returns a snapshot of the counters.
func (f *Frontier) Stats() Stats {
	f.smu.Lock()
	defer f.smu.Unlock()
	s := f.stats
	s.ActiveHosts = len(f.active)
	s.Buffered = f.buffered.Load()
	return s
}

// PutRobots stores a robots.txt cache entry (opaque bytes) for an origin.
func (f *Frontier) PutRobots(origin string, v []byte) error {
	return f.db.Update(func(txn *badger.Txn) error { return txn.Set(cat(pRobots, []byte(origin)), v) })
}

// GetRobots returns the stored robots.txt cache entry for an origin.
func (f *Frontier) GetRobots(origin string) ([]byte, bool, error) {
	var v []byte
	err := f.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(cat(pRobots, []byte(origin)))
		if err != nil {
			return err
		}
		v, err = it.ValueCopy(nil)
		return err
	})
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil, false, nil
	}
	return v, err == nil, err
}
