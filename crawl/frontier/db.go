package frontier

import (
	"log/slog"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// DBOptions tune the Badger store shared by the frontier and the outbox.
type DBOptions struct {
	// SyncWrites makes every commit fsync: survives power loss, not only a
	// killed process (which Badger's memory-mapped write-ahead log survives
	// without it). Default false.
	SyncWrites bool
	Logger     *slog.Logger
}

// OpenDB opens (creating if needed) a Badger store in dir, sized so that its
// memory stays bounded however many URLs it holds: two small memtables,
// uncompressed tables read in place, and tables of one size at every level.
//
// Tables are not compressed and there is no block or index cache: Badger
// memory-maps its tables, so an uncompressed block is read where it lies
// (page cache the kernel may reclaim, shared with nothing on the Go heap),
// and a table's index and bloom filter are read in place too (without
// encryption the index cache is never consulted). With Snappy every table
// built by a compaction held its blocks twice in Badger's allocators and
// every block read was decompressed into a fresh buffer: the frontier bench
// (micra crawl --bench-frontier 3000000, 100,000 hosts) held 323 MiB of
// anonymous memory at 3 M queued URLs, 85 MiB without compression (and
// admitted 23 k URLs/s instead of 21 k), for 643 MiB of disk instead of 427
// MiB. Tables written compressed by an older release stay readable (the
// manifest records each table's compression) until compaction rewrites
// them.
//
// Memtables of 4 MiB: Badger allocates each one's arena whole (1.3 × its
// size: room for one more maximal transaction), on the heap, where the
// garbage collector's headroom doubles it. A crawler writes ≈ 1.6 KB of
// write-ahead log per page fetched (history, queued links, seen and
// hand-off marks, outbox record; measured on a testnet node: 362 KB for
// 230 pages; carriers above the 1 KiB value threshold go to the value
// log), so at a volunteer's 20–50 pages/s one memtable holds about a minute
// of crawling before it is flushed to a level-0 table. Badger's bound that matters is the transaction: 15 % of the
// memtable (600 KiB, 6,553 entries): the frontier's batch writes (Add,
// Readmit, DueRevisits, ImportHistory, ScheduleUnscheduled) halve a batch
// Badger refuses (ErrTxnTooBig) instead of failing it.
func OpenDB(dir string, o DBOptions) (*badger.DB, error) {
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(o.SyncWrites).
		WithMemTableSize(memTableSize).
		WithNumMemtables(2).
		WithValueLogFileSize(128 << 20).
		// Tables of one size at every level: compaction builds a bounded
		// number of them at once, so its buffers do not grow with the depth
		// of the tree (the default doubles the table size per level).
		WithBaseTableSize(2 << 20).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithValueThreshold(1 << 10).
		WithCompression(options.None).
		WithBlockCacheSize(0).
		WithIndexCacheSize(0).
		WithNumCompactors(2).
		WithLogger(badgerLogger{o.Logger})
	opts.TableSizeMultiplier = 1
	return badger.Open(opts)
}

// memTableSize is the size of the store's memtables (see OpenDB).
const memTableSize = 4 << 20

// badgerLogger routes Badger's chatter to slog: warnings and errors only.
type badgerLogger struct{ l *slog.Logger }

func (b badgerLogger) log() *slog.Logger {
	if b.l == nil {
		return slog.Default()
	}
	return b.l
}
func (b badgerLogger) Errorf(f string, a ...any)   { b.log().Error("badger: "+trim(f), "args", a) }
func (b badgerLogger) Warningf(f string, a ...any) { b.log().Warn("badger: "+trim(f), "args", a) }
func (b badgerLogger) Infof(string, ...any)        {}
func (b badgerLogger) Debugf(string, ...any)       {}

func trim(s string) string {
	for len(s) > 0 && s[len(s)-1] == '\n' {
		s = s[:len(s)-1]
	}
	return s
}
