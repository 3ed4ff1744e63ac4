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
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Key layout (all under the "f" namespace of a shared DB):
//
//	fq/<host>\x00<seq8>   queued item                       → item
//	fm/<host>             host meta (pending, admitted…)     → hostMeta
//	fh/<seq8>             ready-host list, FIFO              → host
//	fs/<hash16>           seen-set                           → empty
//	fp/<hash16>           page history                       → History
//	fr/<unixnano8><hash16> revisit schedule                  → item
//	fb/<origin>           robots.txt cache                   → caller's bytes
//	fo/<hash16>           URLs handed off to other crawlers  → empty
//	fx/seq                sequence lease
//	fz/<queue key>        corrupt queue entries, moved aside → their bytes
var (
	pQueue     = []byte("fq/")
	pHostMeta  = []byte("fm/")
	pReady     = []byte("fh/")
	pSeen      = []byte("fs/")
	pPage      = []byte("fp/")
	pRevisit   = []byte("fr/")
	pRobots    = []byte("fb/")
	pHandedOff = []byte("fo/")
	pBadQueue  = []byte("fz/")
	kSeq       = []byte("fx/seq")
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
}

// Hash is the seen-set and history key of a URL: a truncated SHA-256.
type Hash [16]byte

// HashURL hashes a normalised URL.
func HashURL(u string) Hash {
	s := sha256.Sum256([]byte(u))
	var h Hash
	copy(h[:], s[:16])
	return h
}

// Stats is a snapshot of the frontier's counters.
type Stats struct {
	Queued      int64 // URLs waiting in host queues (including in flight)
	ReadyHosts  int64 // hosts waiting for a worker
	ActiveHosts int   // hosts held by workers
	Seen        int64 // URLs ever admitted (approximate after restart: counted since Open plus reloaded queue)
	Done        int64 // URLs completed since Open
	Rejected    int64 // URLs refused by the per-host budget since Open
	Scheduled   int64 // revisits waiting in the schedule
	// Buffered counts queued items read ahead into memory for the hosts
	// held by workers (at most BatchSize per host).
	Buffered int64
}

type hostMeta struct {
	Pending  int64 // queued and not Done
	Admitted int64 // ever admitted (per-host budget)
	Ready    bool  // on the ready list
	ReadySeq uint64
}

func (m hostMeta) encode() []byte {
	b := binary.AppendVarint(nil, m.Pending)
	b = binary.AppendVarint(b, m.Admitted)
	r := byte(0)
	if m.Ready {
		r = 1
	}
	b = append(b, r)
	return binary.AppendUvarint(b, m.ReadySeq)
}

func decodeHostMeta(b []byte) (hostMeta, error) {
	var m hostMeta
	var n int
	if m.Pending, n = binary.Varint(b); n <= 0 {
		return m, errors.New("frontier: bad host meta")
	}
	b = b[n:]
	if m.Admitted, n = binary.Varint(b); n <= 0 || len(b) < n+1 {
		return m, errors.New("frontier: bad host meta")
	}
	m.Ready = b[n] == 1
	b = b[n+1:]
	if m.ReadySeq, n = binary.Uvarint(b); n <= 0 {
		return m, errors.New("frontier: bad host meta")
	}
	return m, nil
}

func encodeItem(it Item) []byte {
	b := binary.AppendUvarint(nil, uint64(len(it.URL)))
	b = append(b, it.URL...)
	b = binary.AppendUvarint(b, uint64(len(it.Host)))
	b = append(b, it.Host...)
	b = binary.AppendUvarint(b, uint64(it.Depth))
	if it.Revisit {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

func decodeItem(b []byte) (Item, error) {
	var it Item
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	var ok bool
	if it.URL, ok = str(); !ok {
		return it, errors.New("frontier: bad item")
	}
	if it.Host, ok = str(); !ok {
		return it, errors.New("frontier: bad item")
	}
	d, k := binary.Uvarint(b)
	if k <= 0 || len(b) < k+1 {
		return it, errors.New("frontier: bad item")
	}
	it.Depth = int(d)
	it.Revisit = b[k] == 1
	return it, nil
}

func cat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func queuePrefix(host string) []byte { return cat(pQueue, []byte(host), []byte{0}) }

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
		it = txn.NewIterator(badger.IteratorOptions{Prefix: pRevisit})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			f.stats.Scheduled++
		}
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

type setter interface {
	Set(k, v []byte) error
	Delete(k []byte) error
}

func (f *Frontier) pushReady(w setter, host string, m hostMeta) error {
	s, err := f.seq.Next()
	if err != nil {
		return err
	}
	m.Ready, m.ReadySeq = true, s
	if err := w.Set(cat(pReady, u64(s)), []byte(host)); err != nil {
		return err
	}
	return w.Set(cat(pHostMeta, []byte(host)), m.encode())
}

func getHostMeta(txn *badger.Txn, host string) (hostMeta, error) {
	it, err := txn.Get(cat(pHostMeta, []byte(host)))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return hostMeta{}, nil
	}
	if err != nil {
		return hostMeta{}, err
	}
	var m hostMeta
	err = it.Value(func(v []byte) error {
		var err error
		m, err = decodeHostMeta(v)
		return err
	})
	return m, err
}

// Add admits the URLs not seen before into their hosts' queues and returns
// how many were admitted. Items must carry a normalised URL and its Host.
// Revisit items bypass the seen-set and the host budget.
func (f *Frontier) Add(items []Item) (int, error) {
	// Cheap rejection of already-seen URLs before taking the write lock.
	cand := make([]Item, 0, len(items))
	hashes := make([]Hash, 0, len(items))
	for _, it := range items {
		h := HashURL(it.URL)
		if !it.Revisit && f.seen.has(h) {
			f.mSeenHits.Inc()
			continue
		}
		cand = append(cand, it)
		hashes = append(hashes, h)
	}
	if len(cand) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// in chunks: one transaction for a whole seed file or a large hand-off
	// would exceed Badger's transaction size and admit nothing
	total := 0
	for len(cand) > 0 {
		k := min(len(cand), addChunk)
		n, err := f.addLocked(cand[:k], hashes[:k])
		total += n
		if err != nil {
			return total, err
		}
		cand, hashes = cand[k:], hashes[k:]
	}
	return total, nil
}

// addChunk is how many candidates one admission transaction takes.
const addChunk = 1024

// addLocked is Add's admission under f.mu, for candidates past the
// in-memory seen check.
func (f *Frontier) addLocked(cand []Item, hashes []Hash) (int, error) {
	added, admitted, rejected, readied := 0, 0, 0, 0
	var newlySeen []Hash
	err := f.update(func(txn *badger.Txn) error {
		added, admitted, rejected, readied, newlySeen = 0, 0, 0, 0, newlySeen[:0]
		metas := map[string]*hostMeta{}
		var hostOrder []string // hosts become ready in discovery order
		batch := map[Hash]bool{}
		for i, it := range cand {
			h := hashes[i]
			if !it.Revisit {
				if batch[h] {
					continue
				}
				batch[h] = true
				_, err := txn.Get(cat(pSeen, h[:]))
				if err == nil {
					newlySeen = append(newlySeen, h) // seen on disk: remember in the front
					continue
				}
				if !errors.Is(err, badger.ErrKeyNotFound) {
					return err
				}
			}
			m := metas[it.Host]
			if m == nil {
				mm, err := getHostMeta(txn, it.Host)
				if err != nil {
					return err
				}
				m = &mm
				metas[it.Host] = m
				hostOrder = append(hostOrder, it.Host)
			}
			if !it.Revisit && f.opt.MaxPagesPerHost > 0 && m.Admitted >= int64(f.opt.MaxPagesPerHost) {
				rejected++
				continue
			}
			s, err := f.seq.Next()
			if err != nil {
				return err
			}
			if err := txn.Set(cat(queuePrefix(it.Host), u64(s)), encodeItem(it)); err != nil {
				return err
			}
			if !it.Revisit {
				if err := txn.Set(cat(pSeen, h[:]), nil); err != nil {
					return err
				}
				m.Admitted++
				admitted++
				newlySeen = append(newlySeen, h)
			}
			m.Pending++
			added++
		}
		for _, host := range hostOrder {
			m := metas[host]
			if _, isActive := f.active[host]; !isActive && !m.Ready && m.Pending > 0 {
				if err := f.pushReady(txn, host, *m); err != nil {
					return err
				}
				readied++
				continue
			}
			if err := txn.Set(cat(pHostMeta, []byte(host)), m.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, h := range newlySeen {
		f.seen.add(h)
	}
	f.smu.Lock()
	f.stats.Queued += int64(added)
	f.stats.Rejected += int64(rejected)
	f.stats.ReadyHosts += int64(readied)
	f.stats.Seen += int64(admitted)
	f.smu.Unlock()
	f.mAdded.Add(float64(added))
	f.mRejected.Add(float64(rejected))
	if readied > 0 {
		select {
		case f.readyCh <- struct{}{}:
		default:
		}
	}
	return added, nil
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

// Seen reports whether the URL was ever admitted.
func (f *Frontier) Seen(u string) (bool, error) {
	h := HashURL(u)
	if f.seen.has(h) {
		return true, nil
	}
	return f.hasKey(cat(pSeen, h[:]))
}

// hasKey reports whether key is in the store.
func (f *Frontier) hasKey(key []byte) (bool, error) {
	var found bool
	err := f.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		if err == nil {
			found = true
			return nil
		}
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	return found, err
}

// Ready returns a channel signalled when a host becomes ready; workers idle
// on it instead of polling.
func (f *Frontier) Ready() <-chan struct{} { return f.readyCh }

// AcquireHost takes the host that has waited longest on the ready list; the
// caller then owns it (Next, Done) until ReleaseHost. It reports false when no
// host is ready.
func (f *Frontier) AcquireHost() (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryReleasesLocked()
	var host string
	err := f.update(func(txn *badger.Txn) error {
		host = ""
		for {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pReady, PrefetchValues: false})
			it.Rewind()
			if !it.Valid() {
				it.Close()
				return nil
			}
			key := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			it.Close()
			if err != nil {
				return err
			}
			if err := txn.Delete(key); err != nil {
				return err
			}
			m, err := getHostMeta(txn, string(v))
			if err != nil {
				return err
			}
			if !m.Ready || m.ReadySeq != binary.BigEndian.Uint64(key[len(pReady):]) {
				continue // stale entry
			}
			m.Ready = false
			host = string(v)
			return txn.Set(cat(pHostMeta, v), m.encode())
		}
	})
	if err != nil || host == "" {
		return "", false, err
	}
	// re-readied by Add since its release failed: its retry, should it
	// still be pending, would put it on the ready list while held
	delete(f.unreleased, host)
	f.smu.Lock()
	f.active[host] = &activeHost{}
	f.stats.ReadyHosts--
	f.smu.Unlock()
	return host, true, nil
}

// Next returns the next queued URL of an acquired host in breadth-first
// (queue) order, or false when the host's queue is exhausted for now.
func (f *Frontier) Next(host string) (Item, bool, error) {
	f.smu.Lock()
	a := f.active[host]
	f.smu.Unlock()
	if a == nil {
		return Item{}, false, fmt.Errorf("frontier: host %q not acquired", host)
	}
	if len(a.buf) == 0 {
		if err := f.fill(host, a); err != nil {
			return Item{}, false, err
		}
	}
	if len(a.buf) == 0 {
		return Item{}, false, nil
	}
	it := a.buf[0]
	a.buf = a.buf[1:]
	f.buffered.Add(-1)
	return it, true, nil
}

func (f *Frontier) fill(host string, a *activeHost) error {
	prefix := queuePrefix(host)
	var bad [][]byte // corrupt entries: moved aside below
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: f.opt.BatchSize})
		defer it.Close()
		if a.cursor == nil {
			it.Rewind()
		} else {
			it.Seek(append(append([]byte(nil), a.cursor...), 0)) // just past the cursor
		}
		for ; it.Valid() && len(a.buf) < f.opt.BatchSize; it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			qi, err := decodeItem(v)
			if err != nil {
				f.log.Error("corrupt queue entry moved aside", "key", item.Key(), "err", err)
				a.cursor = item.KeyCopy(nil)
				bad = append(bad, a.cursor)
				continue
			}
			qi.key = item.KeyCopy(nil)
			a.cursor = qi.key
			a.buf = append(a.buf, qi)
			f.buffered.Add(1)
		}
		return nil
	})
	if err != nil || len(bad) == 0 {
		return err
	}
	// left in the queue, an entry nobody can fetch would keep its host's
	// pending count above zero for ever: the host cycles through the
	// workers with nothing to fetch and a one-pass crawl never ends
	moved := 0
	err = f.update(func(txn *badger.Txn) error {
		moved = 0 // (a conflicting commit runs this again)
		m, err := getHostMeta(txn, host)
		if err != nil {
			return err
		}
		for _, k := range bad {
			item, err := txn.Get(k)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := txn.Set(cat(pBadQueue, k), v); err != nil {
				return err
			}
			if err := txn.Delete(k); err != nil {
				return err
			}
			m.Pending = max(m.Pending-1, 0)
			moved++
		}
		return txn.Set(cat(pHostMeta, []byte(host)), m.encode())
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued -= int64(moved)
	f.smu.Unlock()
	return nil
}

// countPrefix counts the keys under prefix.
func countPrefix(txn *badger.Txn, prefix []byte) int64 {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	n := int64(0)
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n
}

// Rewind makes the next Next of an acquired host start again at the head of
// its queue, returning items that were handed out but not Done (a host that
// was backed off resumes with the URL it was refused). It also drops the
// host's read-ahead buffer, so a host put aside holds no queued items in
// memory.
func (f *Frontier) Rewind(host string) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if a := f.active[host]; a != nil {
		f.buffered.Add(-int64(len(a.buf)))
		a.buf, a.cursor = nil, nil
	}
}

// Done records the fetch of an item and removes it from its queue in one
// transaction. hist may be nil (the URL failed without a page history).
func (f *Frontier) Done(it Item, hist *History) error {
	if it.key == nil {
		return errors.New("frontier: Done for an item not returned by Next")
	}
	// Done runs without the write lock: only the worker holding the host
	// calls it, and the one key it shares with others (the host's metadata,
	// also written by Add for links to this host) is protected by Badger's
	// conflict detection — a conflicting commit is retried.
	h := HashURL(it.URL)
	scheduled := 0
	err := f.update(func(txn *badger.Txn) error {
		scheduled = 0
		if err := txn.Delete(it.key); err != nil {
			return err
		}
		m, err := getHostMeta(txn, it.Host)
		if err != nil {
			return err
		}
		if m.Pending > 0 {
			m.Pending--
		}
		if err := txn.Set(cat(pHostMeta, []byte(it.Host)), m.encode()); err != nil {
			return err
		}
		if hist == nil {
			return nil
		}
		old, found, err := getHistory(txn, h)
		if err != nil {
			return err
		}
		if found && !old.NextVisit.IsZero() {
			// The old entry is gone already when DueRevisits queued this visit.
			rk := revisitKey(old.NextVisit, h)
			if _, err := txn.Get(rk); err == nil {
				if err := txn.Delete(rk); err != nil {
					return err
				}
				scheduled--
			}
		}
		hist.URL, hist.Host, hist.Depth = it.URL, it.Host, it.Depth
		if err := txn.Set(cat(pPage, h[:]), hist.encode()); err != nil {
			return err
		}
		if !hist.NextVisit.IsZero() {
			if err := txn.Set(revisitKey(hist.NextVisit, h), encodeItem(Item{URL: it.URL, Host: it.Host, Depth: it.Depth, Revisit: true})); err != nil {
				return err
			}
			scheduled++
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued--
	f.stats.Done++
	f.stats.Scheduled += int64(scheduled)
	f.smu.Unlock()
	f.mDone.Inc()
	return nil
}

// Withdraw gives items returned by Next for an acquired host to the
// crawler that owns them now: handoff must hand their URLs over durably
// (nil only once accepted). It runs in three steps:
//
//  1. the URLs leave the seen-set and the host's budget, so that a
//     hand-off delivered back to this crawler (ownership flipped back, or
//     the overlay's owner is this crawler after all) queues them again
//     instead of dropping them as seen;
//  2. handoff, without the frontier's lock (a delivery back calls Add);
//     on an error step 1 is undone and the items stay queued here;
//  3. the items leave their queue, their page histories and the revisit
//     schedule, and are marked handed off, so links to them are not
//     handed off again — should they come back, Add admits them afresh.
//
// A crash between the steps leaves the items queued (step 1 only: a URL
// fetched here then lacks its seen mark, and a later link to it may fetch
// it once more) — overlap, never a loss.
func (f *Frontier) Withdraw(items []Item, handoff func([]string) error) error {
	for _, it := range items {
		if it.key == nil {
			return errors.New("frontier: Withdraw of an item not returned by Next")
		}
	}
	hashes := make([]Hash, len(items))
	urls := make([]string, len(items))
	for i, it := range items {
		hashes[i], urls[i] = HashURL(it.URL), it.URL
	}
	marks, err := f.unsee(items, hashes)
	if err != nil {
		return err
	}
	if err := handoff(urls); err != nil {
		if rerr := f.resee(items, hashes, marks); rerr != nil {
			return fmt.Errorf("%w (and restoring the seen marks: %v)", err, rerr)
		}
		return err
	}
	return f.forget(items, hashes)
}

// A seen mark's value says whether its URL counts in the host's budget
// (hostMeta.Admitted, Stats.Seen): the marks of Add and AdmitFetched do
// (an empty value); the marks of pages recovered from another crawler
// (ImportHistory), and of redirect targets marked by older versions, do
// not (seenUncounted), so a withdrawal gives back only what was taken.
var seenUncounted = []byte{1}

// markSeenUncounted gives h a seen mark that does not count, unless it
// has one already.
func markSeenUncounted(txn *badger.Txn, h Hash) error {
	k := cat(pSeen, h[:])
	if _, err := txn.Get(k); err == nil {
		return nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	return txn.Set(k, seenUncounted)
}

// seenMark is what unsee found for an item.
type seenMark uint8

const (
	markNone seenMark = iota
	markCounted
	markUncounted
)

// unsee is Withdraw's first step; it returns the marks it removed.
func (f *Frontier) unsee(items []Item, hashes []Hash) ([]seenMark, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	marks := make([]seenMark, len(items))
	n := 0
	err := f.update(func(txn *badger.Txn) error {
		n = 0
		admitted := map[string]int64{}
		for i, it := range items {
			marks[i] = markNone
			k := cat(pSeen, hashes[i][:])
			item, err := txn.Get(k)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			} else if err != nil {
				return err
			}
			marks[i] = markUncounted
			if item.ValueSize() == 0 {
				marks[i] = markCounted
				admitted[it.Host]++
				n++
			}
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return adjustAdmitted(txn, admitted, -1)
	})
	if err != nil {
		return nil, err
	}
	for i, h := range hashes {
		if marks[i] != markNone {
			f.seen.remove(h)
		}
	}
	f.smu.Lock()
	f.stats.Seen = max(f.stats.Seen-int64(n), 0) // (a store from before seenUncounted counted every mark)
	f.smu.Unlock()
	return marks, nil
}

// resee undoes unsee after a failed hand-off. A URL admitted again
// meanwhile (the hand-off delivered back before it failed) keeps its new
// mark; its old queue entry, still queued, is then found already fetched
// when its turn comes (the engine skips a queued URL with a history).
func (f *Frontier) resee(items []Item, hashes []Hash, marks []seenMark) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	err := f.update(func(txn *badger.Txn) error {
		n = 0
		admitted := map[string]int64{}
		for i, it := range items {
			if marks[i] == markNone {
				continue
			}
			k := cat(pSeen, hashes[i][:])
			if _, err := txn.Get(k); err == nil {
				continue // admitted again meanwhile
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			var v []byte
			if marks[i] == markUncounted {
				v = seenUncounted
			} else {
				admitted[it.Host]++
				n++
			}
			if err := txn.Set(k, v); err != nil {
				return err
			}
		}
		return adjustAdmitted(txn, admitted, +1)
	})
	if err != nil {
		return err
	}
	for i, h := range hashes {
		if marks[i] != markNone {
			f.seen.add(h)
		}
	}
	f.smu.Lock()
	f.stats.Seen += int64(n)
	f.smu.Unlock()
	return nil
}

// adjustAdmitted moves hosts' budget counts by sign × n.
func adjustAdmitted(txn *badger.Txn, n map[string]int64, sign int64) error {
	for host, k := range n {
		m, err := getHostMeta(txn, host)
		if err != nil {
			return err
		}
		m.Admitted = max(m.Admitted+sign*k, 0)
		if err := txn.Set(cat(pHostMeta, []byte(host)), m.encode()); err != nil {
			return err
		}
	}
	return nil
}

// forget is Withdraw's last step.
func (f *Frontier) forget(items []Item, hashes []Hash) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	unscheduled := 0
	err := f.update(func(txn *badger.Txn) error {
		unscheduled = 0
		pending := map[string]int64{}
		for i, it := range items {
			h := hashes[i]
			if err := txn.Delete(it.key); err != nil {
				return err
			}
			pending[it.Host]++
			// admitted again while the hand-off was under way (it came
			// back, or a redirect led here): unsee took its old mark, so a
			// mark now is new, and its history and schedule are its own —
			// only the old queue entry goes, as resee would keep it
			if _, err := txn.Get(cat(pSeen, h[:])); err == nil {
				continue
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			old, found, err := getHistory(txn, h)
			if err != nil {
				return err
			}
			if found {
				if !old.NextVisit.IsZero() {
					rk := revisitKey(old.NextVisit, h)
					if _, err := txn.Get(rk); err == nil {
						if err := txn.Delete(rk); err != nil {
							return err
						}
						unscheduled++
					}
				}
				if err := txn.Delete(cat(pPage, h[:])); err != nil {
					return err
				}
			}
			if err := txn.Set(cat(pHandedOff, h[:]), nil); err != nil {
				return err
			}
		}
		for host, n := range pending {
			m, err := getHostMeta(txn, host)
			if err != nil {
				return err
			}
			m.Pending = max(m.Pending-n, 0)
			if err := txn.Set(cat(pHostMeta, []byte(host)), m.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued -= int64(len(items))
	f.stats.Scheduled -= int64(unscheduled)
	f.smu.Unlock()
	return nil
}

// ReleaseHost gives an acquired host back. Items returned by Next and not
// Done stay queued and are returned again when the host is next acquired; a
// host with queued items goes back on the ready list. When that fails the
// host is remembered and the next AcquireHost tries again.
func (f *Frontier) ReleaseHost(host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.smu.Lock()
	a, ok := f.active[host]
	if ok {
		f.buffered.Add(-int64(len(a.buf)))
	}
	delete(f.active, host)
	f.smu.Unlock()
	if !ok {
		return fmt.Errorf("frontier: host %q not acquired", host)
	}
	if err := f.readyLocked(host); err != nil {
		// neither active nor ready now: nothing else would ready it but a
		// chance link to it (Add) or a restart (recover)
		f.unreleased[host] = false
		return err
	}
	return nil
}

// retryReleasesLocked puts the hosts whose release failed back on the ready
// list; a host that fails again stays for the next call. Under f.mu.
func (f *Frontier) retryReleasesLocked() {
	for host, logged := range f.unreleased {
		if err := f.readyLocked(host); err != nil {
			if !logged { // (AcquireHost is polled: once is enough)
				f.log.Warn("host still not back on the ready list after a failed release, will retry", "host", host, "err", err)
				f.unreleased[host] = true
			}
			continue
		}
		delete(f.unreleased, host)
		f.log.Info("host back on the ready list after a failed release", "host", host)
	}
}

// readyLocked puts a host that is not active back on the ready list if it
// has queued items and is not there already (Add may have put it there).
// Under f.mu.
func (f *Frontier) readyLocked(host string) error {
	readied := false
	err := f.update(func(txn *badger.Txn) error {
		readied = false
		m, err := getHostMeta(txn, host)
		if err != nil {
			return err
		}
		if m.Pending <= 0 && hasQueued(txn, host) {
			// The count says empty but the queue is not: trust the queue, so a
			// host can never be stranded with work off the ready list.
			f.log.Warn("host pending count out of step with its queue, repaired", "host", host)
			m.Pending = 1
		}
		if m.Pending > 0 && !m.Ready {
			readied = true
			return f.pushReady(txn, host, m)
		}
		return nil
	})
	if readied && err == nil {
		f.smu.Lock()
		f.stats.ReadyHosts++
		f.smu.Unlock()
		select {
		case f.readyCh <- struct{}{}:
		default:
		}
	}
	return err
}

func hasQueued(txn *badger.Txn, host string) bool {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(host), PrefetchValues: false})
	defer it.Close()
	it.Rewind()
	return it.Valid()
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

// seenFront is the bounded in-memory front of the seen-set: two generations
// of hash sets; when the young one is full the old one is dropped. A hit is
// certain (only admitted URLs enter); a miss falls through to Badger, whose
// per-table bloom filters make the negative answer cheap.
type seenFront struct {
	mu       sync.RWMutex
	young    map[uint64]struct{}
	old      map[uint64]struct{}
	genLimit int
}

func newSeenFront(size int) *seenFront {
	g := max(size/2, 1)
	return &seenFront{young: make(map[uint64]struct{}, min(g, 1<<16)), old: map[uint64]struct{}{}, genLimit: g}
}

func (s *seenFront) has(h Hash) bool {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.RLock()
	_, ok := s.young[k]
	if !ok {
		_, ok = s.old[k]
	}
	s.mu.RUnlock()
	return ok
}

// remove forgets h (Withdraw). Keys are the hash's first 8 bytes: a URL
// sharing them loses its certain hit and falls through to Badger, which
// holds the full hash.
func (s *seenFront) remove(h Hash) {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.Lock()
	delete(s.young, k)
	delete(s.old, k)
	s.mu.Unlock()
}

func (s *seenFront) add(h Hash) {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.Lock()
	if len(s.young) >= s.genLimit {
		s.old, s.young = s.young, make(map[uint64]struct{}, min(s.genLimit, 1<<16))
	}
	s.young[k] = struct{}{}
	s.mu.Unlock()
}

// DueRevisits moves up to limit revisits due at or before now from the
// schedule into their hosts' queues and returns how many were queued.
func (f *Frontier) DueRevisits(now time.Time, limit int) (int, error) {
	var due []Item
	var keys [][]byte
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pRevisit, PrefetchValues: true})
		defer it.Close()
		end := uint64(now.UnixNano())
		for it.Rewind(); it.Valid() && len(due) < limit; it.Next() {
			k := it.Item().Key()
			if binary.BigEndian.Uint64(k[len(pRevisit):]) > end {
				break
			}
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			qi, err := decodeItem(v)
			if err != nil {
				continue
			}
			due = append(due, qi)
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	// Under f.mu, keep only the entries still scheduled (a withdrawal may
	// have taken a page away since the scan), queue them, then unschedule
	// them: a crash in between revisits twice, never zero times.
	f.mu.Lock()
	defer f.mu.Unlock()
	err = f.db.View(func(txn *badger.Txn) error {
		kept := 0
		for i, k := range keys {
			if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
				continue
			} else if err != nil {
				return err
			}
			due[kept], keys[kept] = due[i], k
			kept++
		}
		due, keys = due[:kept], keys[:kept]
		return nil
	})
	if err != nil || len(due) == 0 {
		return 0, err
	}
	hashes := make([]Hash, len(due))
	for i, it := range due {
		hashes[i] = HashURL(it.URL)
	}
	n, err := f.addLocked(due, hashes)
	if err != nil {
		return 0, err
	}
	err = f.update(func(txn *badger.Txn) error {
		for _, k := range keys {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		return nil
	})
	if err == nil {
		f.smu.Lock()
		f.stats.Scheduled -= int64(len(keys))
		f.smu.Unlock()
	}
	return n, err
}

// NextRevisit returns the time of the earliest scheduled revisit.
func (f *Frontier) NextRevisit() (time.Time, bool, error) {
	var t time.Time
	var ok bool
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pRevisit, PrefetchValues: false})
		defer it.Close()
		it.Rewind()
		if it.Valid() {
			t = time.Unix(0, int64(binary.BigEndian.Uint64(it.Item().Key()[len(pRevisit):])))
			ok = true
		}
		return nil
	})
	return t, ok, err
}

func revisitKey(t time.Time, h Hash) []byte {
	return cat(pRevisit, u64(uint64(t.UnixNano())), h[:])
}
