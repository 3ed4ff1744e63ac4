// Package sink owns micra's index sink, the one central piece the design
// allows (UCYMicra's coordinator database): it receives the crawlers'
// carriers over the libp2p protocol /micra/carrier/1 (or from .mcar files),
// commits their records durably and idempotently into a change log,
// serves that log to indexers as resumable streams, and answers crawlers'
// page-recovery queries from its index of pages by address (placed.go,
// /micra/pages/1).
//
// The store is a Badger database. Every committed record gets the next
// sequence number of the change log; a carrier is committed in one
// transaction with its marker (crawler id, carrier sequence), so a
// redelivery after any crash adds nothing, and the acknowledgement is sent
// only after the commit (fsync'd by default).
package sink

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/prometheus/client_golang/prometheus"
)

// Key layout:
//
//	sl/<seq8>                 change log                → Entry
//	sc/<crawler>\x00<seq8>    carriers committed        → first seq (8), records (4), sha256 of the carrier
//	sp/<sha256(url)[:16]>     per page (stores before the page table, read only) → pageState
//	sm/pagesnap…              the page table's snapshot (pages.go)
//	sk/<crawler>              per crawler               → CrawlerCounts
//	sm/next                   next log sequence         → uint64
//	sm/counts                 totals                    → Counts
//	sa/<addr16><id16>         pages by placed address (placed.go)
var (
	pLog     = []byte("sl/")
	pCarrier = []byte("sc/")
	pPage    = []byte("sp/")
	pCrawler = []byte("sk/")
	kNext    = []byte("sm/next")
	kCounts  = []byte("sm/counts")
)

// valueThreshold: values of this many bytes or more go to Badger's value
// log (every log entry), smaller ones into its tree.
const valueThreshold = 128

// Options configure a Store. Zero values take the defaults noted.
type Options struct {
	// Dir holds the Badger database (created if needed). Required.
	Dir string
	// NoSync turns off the fsync of every commit: an acknowledged carrier
	// then survives a killed process but not a power loss. Default: sync.
	NoSync bool
	// MaxCarrierBytes bounds an encoded carrier (default 8 MiB) and
	// MaxRawBytes its decompressed records (default 4 MiB, four times a
	// crawler's default carrier).
	MaxCarrierBytes int
	MaxRawBytes     int
	// History is how many recent changes Page returns (default 16).
	History int
	// Retain bounds the log by age or size (Trim; zero: keep everything).
	Retain     Retention
	Logger     *slog.Logger
	Registerer prometheus.Registerer

	snapshotEvery uint64 // records between page-table snapshots (default snapshotEvery; tests)
}

func (o *Options) defaults() {
	if o.MaxCarrierBytes <= 0 {
		o.MaxCarrierBytes = 8 << 20
	}
	if o.MaxRawBytes <= 0 {
		o.MaxRawBytes = 4 << 20
	}
	if o.History <= 0 {
		o.History = 16
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
	if o.snapshotEvery == 0 {
		o.snapshotEvery = snapshotEvery
	}
}

// Counts are the store's totals.
type Counts struct {
	Records    int64 `json:"records"`    // committed to the change log (it holds those from Start on)
	Pages      int64 `json:"pages"`      // distinct URLs
	Carriers   int64 `json:"carriers"`   // committed
	Duplicates int64 `json:"duplicates"` // carriers delivered again, acknowledged without a change
	// Overlap counts records of a page delivered before by another
	// crawler: two crawlers crawled it (UbiCrawler's overlap, measured end
	// to end).
	Overlap  int64 `json:"overlap"`
	Rejected int64 `json:"rejected"` // carriers refused (NACKed), since the sink started
}

// CrawlerCounts is one crawler's contribution.
type CrawlerCounts struct {
	Crawler  string    `json:"crawler"`
	Carriers int64     `json:"carriers"`
	Records  int64     `json:"records"`
	Overlap  int64     `json:"overlap"` // its records of pages another crawler delivered before
	LastSeen time.Time `json:"last_seen"`
}

// Entry is one record in the change log.
type Entry struct {
	Seq        uint64
	Carrier    string // pack.Carrier.ID of the carrier it came in
	IngestedAt time.Time
	// Overlap: the page was delivered before by another crawler.
	Overlap bool
	// Prev is the page's previous entry in the log (0: its first, or an
	// entry committed before the log linked them).
	Prev   uint64
	Record pack.Record
}

// Ack is the outcome of a committed carrier.
type Ack struct {
	First     uint64 // change-log sequence of its first record
	Records   int
	Duplicate bool // committed before: nothing was added
}

// RefusedError is a carrier the sink will not commit, with the status the
// protocol answers and a reason the sender logs.
type RefusedError struct {
	Status pb.Status
	Reason string
}

func (e *RefusedError) Error() string {
	return fmt.Sprintf("sink: carrier refused (%s): %s", e.Status, e.Reason)
}

// Permanent reports whether resending the same carrier cannot help.
func (e *RefusedError) Permanent() bool {
	return e.Status != pb.Status_UNAVAILABLE && e.Status != pb.Status_INTERNAL && e.Status != pb.Status_NOT_MEMBER
}

func refused(st pb.Status, format string, a ...any) error {
	return &RefusedError{Status: st, Reason: fmt.Sprintf(format, a...)}
}

// Store is the sink's durable change log. Safe for concurrent use.
type Store struct {
	opt Options
	db  *badger.DB
	log *slog.Logger
	m   *metrics

	pmu     sync.Mutex  // guards pending
	pending []*prepared // verified carriers waiting for a group commit

	rejected atomic.Int64 // NACKs since the store opened (Counts.Rejected)

	mu       sync.Mutex // serialises commits: one sequence, one writer
	next     uint64     // next log sequence (the first record is 1)
	counts   Counts
	crawlers map[string]*CrawlerCounts
	pages    *pageTable // every page's state, under mu (pages.go)
	snapAt   uint64     // the log sequence of the page table's last snapshot
	// the log's start, its entries' bytes and the first entry not
	// deleted yet (retain.go), under mu
	start, deletedTo uint64
	logBytes         int64
	trimMu           sync.Mutex // one Trim at a time

	readers readerSet // the open subscription streams (readers.go)

	// committed is closed and replaced at every commit: readers waiting
	// for records past the head (Wait) wake up.
	nmu       sync.Mutex
	committed chan struct{}
	closed    bool
}

// Open opens (creating) the store in opt.Dir.
func Open(opt Options) (*Store, error) {
	opt.defaults()
	if opt.Dir == "" {
		return nil, errors.New("sink: Options.Dir is required")
	}
	if err := os.MkdirAll(opt.Dir, 0o755); err != nil {
		return nil, err
	}
	bo := badger.DefaultOptions(opt.Dir).
		WithSyncWrites(!opt.NoSync).
		// The log entries (hundreds of bytes) go to the value log, an
		// append-only file written in commit order, as a log's are; the
		// LSM tree holds their keys and pointers only. With entries in the
		// tree, each 64 MiB memtable took 83 MiB of arena and its flush a
		// table builder of up to 224 MiB: a sink at 400,000 records held
		// 1 GB of anonymous memory, 385 MB since, and a commit took ~10 %
		// less CPU. A carrier is one transaction: its entries count ~25
		// bytes each against the 2.4 MiB a 16 MiB memtable allows
		// (maxBatchSize, 15 %), so 10,000 records take 250 KiB.
		WithValueThreshold(valueThreshold).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		// the tree's blocks hold keys and value pointers only
		WithBlockCacheSize(16 << 20).
		WithIndexCacheSize(8 << 20).
		WithNumCompactors(2).
		// commits are serialised by Store.mu: no transaction can conflict
		WithDetectConflicts(false).
		WithLogger(nil)
	db, err := badger.Open(bo)
	if err != nil {
		return nil, fmt.Errorf("sink: open %s: %w", opt.Dir, err)
	}
	s := &Store{opt: opt, db: db, log: opt.Logger.With("component", "sink"), crawlers: map[string]*CrawlerCounts{},
		committed: make(chan struct{})}
	if err := s.load(); err != nil {
		db.Close()
		return nil, err
	}
	if err := s.loadRetain(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sink: open %s: %w", opt.Dir, err)
	}
	if err := s.loadPages(); err != nil {
		db.Close()
		return nil, fmt.Errorf("sink: open %s: %w", opt.Dir, err)
	}
	s.m = newMetrics(opt.Registerer, s)
	return s, nil
}

// Close closes the database once a commit under way is done; waiting
// readers are woken first. The page table is saved, so the next open
// does not replay the log.
func (s *Store) Close() error {
	s.Stop()
	s.mu.Lock() // (a commit under way finishes first)
	defer s.mu.Unlock()
	if head := s.next - 1; head != s.snapAt {
		if err := s.pages.snapshot(s.db, head); err != nil {
			s.log.Warn("sink: page table not saved; the next start replays the log", "err", err)
		}
	}
	return s.db.Close()
}

// loadPages builds the page table: the last snapshot, else the per-page
// states of a store written before the table, else nothing; then the log
// entries past it. It saves a snapshot if it replayed any.
func (s *Store) loadPages() error {
	head := s.next - 1
	t, cursor, found, err := loadPageSnapshot(s.db)
	if err != nil {
		return err
	}
	if !found {
		// before the table, every commit wrote its pages' states: they
		// hold the whole log (the snapshot below is written before any
		// commit of this open)
		var legacy bool
		if t, legacy, err = loadLegacyPages(s.db); err != nil {
			return err
		}
		if legacy {
			cursor = head
		}
	}
	if cursor > head {
		return fmt.Errorf("page snapshot at %d, past the log's head %d", cursor, head)
	}
	replayed := 0
	if cursor < head {
		pending := map[pageID]*pageUpdate{}
		err := s.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pLog, PrefetchValues: true, PrefetchSize: 256})
			defer it.Close()
			for it.Seek(logKey(cursor + 1)); it.Valid(); it.Next() {
				seq := binary.BigEndian.Uint64(it.Item().Key()[len(pLog):])
				if seq > head {
					break
				}
				var url, crawler string
				if err := it.Item().Value(func(v []byte) (err error) {
					url, crawler, err = entryPage(v)
					return err
				}); err != nil {
					return fmt.Errorf("log entry %d: %w", seq, err)
				}
				t.record(pending, pageIDOf(url), t.intern(crawler), seq)
				if replayed++; len(pending) >= 1<<16 {
					t.apply(pending)
					clear(pending)
				}
			}
			return nil
		})
		if err != nil {
			return fmt.Errorf("page table: %w", err)
		}
		t.apply(pending)
	}
	s.pages, s.snapAt = t, cursor
	if !found || cursor != head {
		if replayed > 0 {
			s.log.Info("sink: page table rebuilt from the log", "from", cursor, "to", head, "records", replayed)
		}
		if err := t.snapshot(s.db, head); err != nil {
			return err
		}
		s.snapAt = head
	}
	return nil
}

// Stop wakes every reader waiting for new records (Wait returns false),
// so streams end before the store closes; commits still run.
func (s *Store) Stop() {
	s.nmu.Lock()
	if !s.closed {
		s.closed = true
		close(s.committed)
	}
	s.nmu.Unlock()
}

func (s *Store) load() error {
	s.next = 1
	return s.db.View(func(txn *badger.Txn) error {
		if it, err := txn.Get(kNext); err == nil {
			if err := it.Value(func(v []byte) error {
				if len(v) != 8 {
					return errors.New("sink: damaged sequence")
				}
				s.next = binary.BigEndian.Uint64(v)
				return nil
			}); err != nil {
				return err
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		if it, err := txn.Get(kCounts); err == nil {
			if err := it.Value(func(v []byte) error { return decodeCounts(v, &s.counts) }); err != nil {
				return err
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pCrawler, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			c := &CrawlerCounts{Crawler: string(it.Item().Key()[len(pCrawler):])}
			if err := it.Item().Value(func(v []byte) error { return decodeCrawler(v, c) }); err != nil {
				return err
			}
			s.crawlers[c.Crawler] = c
		}
		return nil
	})
}

// Commit verifies a carrier and commits its records. sender is the
// authenticated identity that delivered it (its libp2p peer ID); it must
// be the carrier's crawler id. An empty sender (an import of files the
// operator trusts) skips that check. A carrier committed before is
// acknowledged again without a change. Errors are *RefusedError.
func (s *Store) Commit(sender string, data []byte) (Ack, error) {
	ack, err := s.commit(sender, data)
	var re *RefusedError
	if errors.As(err, &re) {
		s.countRefusal(re.Status)
	}
	return ack, err
}

// countRefusal counts a NACK (Counts.Rejected, the metric by status).
func (s *Store) countRefusal(st pb.Status) {
	s.rejected.Add(1) // (not under mu: a busy sink answers UNAVAILABLE at once)
	s.m.rejected.WithLabelValues(strings.ToLower(st.String())).Inc()
}

// prepared is a verified carrier waiting for its commit.
type prepared struct {
	h    pack.Header
	recs []pack.Record
	id   string
	sum  [32]byte
	// set by the commit that took it (under Store.mu)
	done bool
	ack  Ack
	err  error
}

// maxGroupRaw bounds the records one group commit takes (raw bytes; and
// at most pack.MaxCarrierRecords records unless one carrier alone): the
// group must fit one Badger transaction.
const maxGroupRaw = 6 << 20

// commit verifies a carrier and commits it. Commits are grouped: the
// caller that gets the commit lock commits every carrier waiting for it in
// one transaction and one fsync (up to maxGroupRaw), so crawlers pushing
// at once share the disk's flushes.
func (s *Store) commit(sender string, data []byte) (Ack, error) {
	p, err := s.prepare(sender, data)
	if err != nil {
		return Ack{}, err
	}
	s.pmu.Lock()
	s.pending = append(s.pending, p)
	s.pmu.Unlock()
	s.mu.Lock()
	defer s.mu.Unlock()
	// commit the waiting carriers, oldest first, a group at a time, until
	// ours is done (by this call or by the group of another caller)
	for !p.done {
		group := s.takeGroup()
		if err := s.commitGroup(group); errors.Is(err, badger.ErrTxnTooBig) && len(group) > 1 {
			for _, q := range group {
				if !q.done {
					_ = s.commitGroup([]*prepared{q})
				}
			}
		}
	}
	return p.ack, p.err
}

// takeGroup takes the oldest waiting carriers, within maxGroupRaw bytes
// and pack.MaxCarrierRecords records (at least one). Under s.mu.
func (s *Store) takeGroup() []*prepared {
	s.pmu.Lock()
	defer s.pmu.Unlock()
	n, raw, recs := 0, 0, 0
	for n < len(s.pending) && (n == 0 || (raw+s.pending[n].h.RawBytes <= maxGroupRaw && recs+s.pending[n].h.Records <= pack.MaxCarrierRecords)) {
		raw += s.pending[n].h.RawBytes
		recs += s.pending[n].h.Records
		n++
	}
	group := s.pending[:n:n]
	s.pending = append([]*prepared(nil), s.pending[n:]...)
	return group
}

// prepare verifies a carrier (outside the commit lock).
func (s *Store) prepare(sender string, data []byte) (*prepared, error) {
	if len(data) > s.opt.MaxCarrierBytes {
		return nil, refused(pb.Status_TOO_LARGE, "carrier of %d bytes, limit %d", len(data), s.opt.MaxCarrierBytes)
	}
	// the sender is checked on the header, before any decompression
	h, recs, err := pack.DecodeWithin(data, s.opt.MaxRawBytes, func(h pack.Header) error {
		switch {
		case h.CrawlerID == "":
			return refused(pb.Status_MALFORMED, "carrier without a crawler id")
		case sender != "" && h.CrawlerID != sender:
			return refused(pb.Status_WRONG_SENDER, "carrier of crawler %q sent by %q", h.CrawlerID, sender)
		}
		return nil
	})
	var re *RefusedError
	switch {
	case errors.As(err, &re):
		return nil, err
	case errors.Is(err, pack.ErrTooLarge):
		return nil, refused(pb.Status_TOO_LARGE, "%v", err)
	case err != nil:
		return nil, refused(pb.Status_MALFORMED, "%v", err)
	}
	for i := range recs {
		if recs[i].URL == "" {
			return nil, refused(pb.Status_MALFORMED, "record %d has no URL", i)
		}
		if recs[i].CrawlerID != "" && recs[i].CrawlerID != h.CrawlerID {
			return nil, refused(pb.Status_MALFORMED, "record %d names crawler %q in a carrier of %q", i, recs[i].CrawlerID, h.CrawlerID)
		}
		if recs[i].CrawlerID == "" {
			recs[i].CrawlerID = h.CrawlerID
		}
	}
	// the sum tells a redelivery from another carrier under the same name
	return &prepared{h: h, recs: recs, id: pack.Carrier{CrawlerID: h.CrawlerID, Seq: h.Seq}.ID(), sum: sha256.Sum256(data)}, nil
}

// commitGroup commits carriers in one transaction, under s.mu, and marks
// each done with its outcome. It returns the transaction's error (the
// carriers are then done with an INTERNAL refusal, unless it is
// ErrTxnTooBig for a group the caller splits).
func (s *Store) commitGroup(group []*prepared) error {
	now := time.Now().UTC()
	type outcome struct {
		ack Ack
		err error
	}
	var results []outcome
	var counts Counts
	var crawlers map[string]CrawlerCounts
	var pages map[pageID]*pageUpdate // the group's page states, the table's once durable
	var addBytes int64               // the group's entries' bytes
	next := s.next
	err := s.db.Update(func(txn *badger.Txn) error {
		results, counts, crawlers, next = make([]outcome, len(group)), s.counts, map[string]CrawlerCounts{}, s.next
		pages, addBytes = map[pageID]*pageUpdate{}, 0
		for gi, p := range group {
			ck := carrierKey(p.h.CrawlerID, p.h.Seq)
			if it, err := txn.Get(ck); err == nil {
				err := it.Value(func(v []byte) error {
					if len(v) != 12+len(p.sum) {
						return errors.New("damaged carrier marker")
					}
					if string(v[12:]) != string(p.sum[:]) {
						// the same name, other records: two crawls under
						// one crawler id (its carrier sequence restarts
						// with its state); acknowledging would drop these
						results[gi].err = refused(pb.Status_REFUSED, "carrier %s was committed before with other records: "+
							"two crawls share the crawler id %q (give each crawl its own id)", p.id, p.h.CrawlerID)
						return nil
					}
					results[gi].ack = Ack{First: binary.BigEndian.Uint64(v), Records: int(binary.BigEndian.Uint32(v[8:])), Duplicate: true}
					counts.Duplicates++
					return nil
				})
				if err != nil {
					return err
				}
				continue
			} else if !errors.Is(err, badger.ErrKeyNotFound) {
				return err
			}
			cc, ok := crawlers[p.h.CrawlerID]
			if !ok {
				cc = CrawlerCounts{Crawler: p.h.CrawlerID}
				if c := s.crawlers[p.h.CrawlerID]; c != nil {
					cc = *c
				}
			}
			results[gi].ack = Ack{First: next, Records: len(p.recs)}
			c := s.pages.intern(p.h.CrawlerID)
			for i := range p.recs {
				r := &p.recs[i]
				id := pageIDOf(r.URL)
				prev, overlap := s.pages.record(pages, id, c, next)
				if prev == 0 {
					counts.Pages++
				}
				if overlap {
					counts.Overlap++
					cc.Overlap++
				}
				e := Entry{Seq: next, Carrier: p.id, IngestedAt: now, Overlap: overlap, Prev: prev, Record: *r}
				v := e.encodeCarrier(p.h.Seq, r.CrawlerID == p.h.CrawlerID) // (prepare made it so)
				addBytes += int64(len(v))
				if err := txn.Set(logKey(next), v); err != nil {
					return err
				}
				if r.Addr.IsValid() {
					if err := txn.Set(placedKey(r.Addr.Unmap(), id), nil); err != nil {
						return err
					}
				}
				next++
			}
			counts.Records += int64(len(p.recs))
			counts.Carriers++
			cc.Carriers++
			cc.Records += int64(len(p.recs))
			cc.LastSeen = now
			crawlers[p.h.CrawlerID] = cc
			marker := binary.BigEndian.AppendUint64(nil, results[gi].ack.First)
			marker = binary.BigEndian.AppendUint32(marker, uint32(len(p.recs)))
			if err := txn.Set(ck, append(marker, p.sum[:]...)); err != nil {
				return err
			}
		}
		for id, cc := range crawlers {
			if err := txn.Set(append(append([]byte(nil), pCrawler...), id...), cc.encode()); err != nil {
				return err
			}
		}
		if err := txn.Set(kNext, binary.BigEndian.AppendUint64(nil, next)); err != nil {
			return err
		}
		if err := txn.Set(kRetain, encodeRetain(s.start, s.logBytes+addBytes, s.deletedTo)); err != nil {
			return err
		}
		return txn.Set(kCounts, counts.encode())
	})
	if errors.Is(err, badger.ErrTxnTooBig) && len(group) > 1 {
		return err
	}
	for gi, p := range group {
		p.done = true
		switch {
		case errors.Is(err, badger.ErrTxnTooBig):
			p.err = refused(pb.Status_TOO_LARGE, "carrier %s of %d records does not fit one transaction", p.id, len(p.recs))
		case err != nil:
			p.err = refused(pb.Status_INTERNAL, "commit carrier %s: %v", p.id, err)
		default:
			p.ack, p.err = results[gi].ack, results[gi].err
		}
		if err == nil && p.err == nil && p.ack.Duplicate {
			s.m.duplicates.Inc()
		}
	}
	if err != nil {
		return err
	}
	s.next, s.counts, s.logBytes = next, counts, s.logBytes+addBytes
	s.pages.apply(pages)
	if head := next - 1; head-s.snapAt >= s.opt.snapshotEvery {
		// (under the commit lock: ~50 ms per million pages, once per
		// million records, so that a crash replays at most that many)
		if err := s.pages.snapshot(s.db, head); err != nil {
			s.log.Warn("sink: page table not saved; a restart after a crash replays more of the log", "err", err)
		} else {
			s.snapAt = head
		}
	}
	for id, cc := range crawlers {
		s.crawlers[id] = &cc
	}
	added := 0
	for _, p := range group {
		if p.err == nil && !p.ack.Duplicate {
			added += p.ack.Records
			s.m.carriers.Inc()
		}
	}
	if added > 0 {
		s.m.records.Add(float64(added))
		s.wake()
	}
	return nil
}

func (s *Store) wake() {
	s.nmu.Lock()
	if !s.closed {
		close(s.committed)
		s.committed = make(chan struct{})
	}
	s.nmu.Unlock()
}

// Head returns the sequence of the last committed record (0: none).
func (s *Store) Head() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.next - 1
}

// Counts returns the totals and each crawler's contribution.
func (s *Store) Counts() (Counts, []CrawlerCounts) {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := make([]CrawlerCounts, 0, len(s.crawlers))
	for _, c := range s.crawlers {
		out = append(out, *c)
	}
	c := s.counts
	c.Rejected = s.rejected.Load()
	return c, out
}

// Filter selects records of the change log; the zero Filter selects all.
type Filter struct {
	Host    string // the URL's host, exactly
	Suffix  string // the URL's host is this domain or under it ("example.org")
	Keyword string // the record carries this keyword (stemmed, as shipped)
	Lang    string
	Changed bool // new and changed pages only (no gone, no failures)
}

// scanLimit bounds the log entries one Read looks at, so a selective
// filter cannot hold a reader (and Badger's read transaction) for long.
const scanLimit = 10_000

// Read returns up to limit entries after the sequence after that pass f,
// in order, and the last sequence it looked at (the cursor to continue
// from: entries f refused are passed over, not returned again). A cursor
// whose next record the retention dropped is a *BeforeStartError.
func (s *Store) Read(after uint64, limit int, f Filter) ([]Entry, uint64, error) {
	s.mu.Lock()
	head, start := s.next-1, s.start
	s.mu.Unlock()
	if after+1 < start {
		return nil, after, &BeforeStartError{Cursor: after, Start: start}
	}
	var out []Entry
	last := after
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pLog, PrefetchValues: true, PrefetchSize: 256})
		defer it.Close()
		scanned := 0
		for it.Seek(logKey(after + 1)); it.Valid() && len(out) < limit && scanned < scanLimit; it.Next() {
			seq := binary.BigEndian.Uint64(it.Item().Key()[len(pLog):])
			if seq > head {
				break // written by a commit not acknowledged yet
			}
			scanned++
			var e Entry
			if err := it.Item().Value(func(v []byte) error { return e.decode(v) }); err != nil {
				return fmt.Errorf("sink: log entry %d: %w", seq, err)
			}
			e.Seq, last = seq, seq
			if f.match(&e.Record) {
				out = append(out, e)
			}
		}
		return nil
	})
	return out, last, err
}

// Wait blocks until a record past after is committed, ctx ends or the
// store closes; it reports whether one is.
func (s *Store) Wait(ctx context.Context, after uint64) bool {
	for {
		s.nmu.Lock()
		ch, closed := s.committed, s.closed
		s.nmu.Unlock()
		if s.Head() > after {
			return true
		}
		if closed {
			return false
		}
		select {
		case <-ctx.Done():
			return false
		case <-ch:
		}
	}
}

func logKey(seq uint64) []byte {
	return binary.BigEndian.AppendUint64(append([]byte(nil), pLog...), seq)
}

func carrierKey(crawler string, seq uint64) []byte {
	k := append(append([]byte(nil), pCarrier...), crawler...)
	k = append(k, 0)
	return binary.BigEndian.AppendUint64(k, seq)
}

func pageKey(url string) []byte {
	sum := sha256.Sum256([]byte(url))
	return append(append([]byte(nil), pPage...), sum[:16]...)
}
