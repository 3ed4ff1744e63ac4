package frontier

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/dgraph-io/badger/v4/options"
)

// TestOpenDBReadsSnappyTables: a store whose tables an older release wrote
// with Snappy (and a block cache) opens with OpenDB, which compresses
// nothing and caches no blocks, reads every value back, and still does
// after a compaction rewrote the tables.
func TestOpenDBReadsSnappyTables(t *testing.T) {
	dir := t.TempDir()
	old := badger.DefaultOptions(dir).WithMemTableSize(memTableSize).WithBaseTableSize(2 << 20).
		WithValueThreshold(1 << 10).WithCompression(options.Snappy).WithBlockCacheSize(1 << 20).WithLogger(nil)
	db, err := badger.Open(old)
	if err != nil {
		t.Fatal(err)
	}
	const n = 60000 // ≈ 4.5 MB of keys and values: more than a memtable, so tables are written
	key := func(i int) []byte { return fmt.Appendf(nil, "k/%08d", i) }
	val := func(i int) []byte {
		return fmt.Appendf(nil, "value of %d, repeated so snappy has work: %d %d %d", i, i, i, i)
	}
	wb := db.NewWriteBatch()
	for i := range n {
		if err := wb.Set(key(i), val(i)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}

	db, err = OpenDB(dir, DBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if len(db.Tables()) == 0 {
		t.Fatal("no tables on disk: the test writes too little")
	}
	check := func(when string) {
		t.Helper()
		err := db.View(func(txn *badger.Txn) error {
			for i := 0; i < n; i += 7 {
				it, err := txn.Get(key(i))
				if err != nil {
					return fmt.Errorf("%s: key %d: %w", when, i, err)
				}
				want := val(i)
				if i%2 == 0 && when != "snappy tables" {
					want = val(i + n)
				}
				if v, _ := it.ValueCopy(nil); string(v) != string(want) {
					return fmt.Errorf("%s: key %d: %q", when, i, v)
				}
			}
			return nil
		})
		if err != nil {
			t.Fatal(err)
		}
	}
	check("snappy tables")
	// new values for every other key go to uncompressed tables; both kinds
	// are read side by side, then merged by a compaction
	wb = db.NewWriteBatch()
	for i := 0; i < n; i += 2 {
		if err := wb.Set(key(i), val(i+n)); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
	if err := db.Close(); err != nil {
		t.Fatal(err)
	}
	if db, err = OpenDB(dir, DBOptions{}); err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	if len(db.Tables()) < 2 {
		t.Fatalf("%d tables: want the old one and new ones", len(db.Tables()))
	}
	check("both kinds")
	if err := db.Flatten(1); err != nil {
		t.Fatal(err)
	}
	check("after compaction")
}
