package frontier

import (
	"log/slog"

	"github.com/dgraph-io/badger/v4"
)

// DBOptions tune the Badger store shared by the frontier and the outbox.
type DBOptions struct {
	// SyncWrites makes every commit fsync: survives power loss, not only a
	// killed process (which Badger's memory-mapped write-ahead log survives
	// without it). Default false.
	SyncWrites bool
	// CacheMB bounds Badger's block and index caches together (default 64).
	CacheMB int
	Logger  *slog.Logger
}

// OpenDB opens (creating if needed) a Badger store in dir, sized so that its
// memory stays bounded however many URLs it holds: two small memtables,
// bounded block and index caches (bloom filters and table indexes live in
// the bounded index cache, not on the heap for every table) and tables of
// one size at every level.
func OpenDB(dir string, o DBOptions) (*badger.DB, error) {
	if o.CacheMB <= 0 {
		o.CacheMB = 64
	}
	opts := badger.DefaultOptions(dir).
		WithSyncWrites(o.SyncWrites).
		WithMemTableSize(16 << 20).
		WithNumMemtables(2).
		WithValueLogFileSize(128 << 20).
		// Tables of one size at every level: compaction builds a bounded
		// number of them at once, so its buffers do not grow with the depth
		// of the tree (the default doubles the table size per level).
		WithBaseTableSize(2 << 20).
		WithNumLevelZeroTables(4).
		WithNumLevelZeroTablesStall(12).
		WithValueThreshold(1 << 10).
		WithBlockCacheSize(int64(o.CacheMB) << 20 * 3 / 4).
		WithIndexCacheSize(int64(o.CacheMB) << 20 / 4).
		WithNumCompactors(2).
		WithLogger(badgerLogger{o.Logger})
	opts.TableSizeMultiplier = 1
	return badger.Open(opts)
}

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
