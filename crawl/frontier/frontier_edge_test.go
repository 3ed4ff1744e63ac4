package frontier

import (
	"fmt"
	"testing"

	"github.com/dgraph-io/badger/v4"
)

// Add admits a whole batch in one Badger transaction (queue entry + seen mark
// per URL). A batch past Badger's transaction limit (~13k new URLs with the
// OpenDB options) fails as a whole with ErrTxnTooBig: Engine.AddSeeds passes
// the entire seed list in one Add, so a 20 000-line seed file queues nothing
// ("seed (all): Txn is too big to fit into one request").
func TestLargeAddIsAdmittedInChunks(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	var batch []Item
	for i := range 20000 {
		host := fmt.Sprintf("h%d.example", i%500)
		batch = append(batch, Item{URL: fmt.Sprintf("http://%s/some/seed/page/%d", host, i), Host: host})
	}
	n, err := f.Add(batch)
	if err != nil {
		t.Fatalf("Add of %d seeds failed as a whole: %v (admitted %d)", len(batch), err, n)
	}
	if n != len(batch) {
		t.Fatalf("admitted %d of %d", n, len(batch))
	}
}

// One undecodable host-meta value (bit rot; Badger does not verify value
// checksums by default) makes New fail, so the crawler cannot start at all
// and every other host's queue is unreachable, instead of the one host being
// reported and the rest recovered.
func TestDamagedHostMetaRebuiltOnRecovery(t *testing.T) {
	dir := t.TempDir()
	db, f := open(t, dir, Options{})
	if _, err := f.Add(items("a.example", "/1", "/2")); err != nil {
		t.Fatal(err)
	}
	if _, err := f.Add(items("b.example", "/1")); err != nil {
		t.Fatal(err)
	}
	f.Close()
	if err := db.Update(func(txn *badger.Txn) error {
		return txn.Set(cat(pHostMeta, []byte("b.example")), []byte{0x80}) // truncated varint
	}); err != nil {
		t.Fatal(err)
	}
	db.Close()

	db, err := OpenDB(dir, DBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	f, err = New(db, Options{})
	if err != nil {
		t.Fatalf("one damaged host meta makes the whole frontier unopenable: %v", err)
	}
	defer f.Close()
	if q := f.Stats().Queued; q < 2 {
		t.Fatalf("a.example's 2 URLs not recovered: queued %d", q)
	}
}

// A queue entry that cannot be decoded is skipped by fill but never removed
// nor subtracted from the host's pending count, so ReleaseHost puts the host
// straight back on the ready list: workers acquire and release it forever
// (a hot loop) and Queued never reaches 0, so a one-pass crawl never ends.
func TestCorruptQueueEntryMovedAside(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, err := f.Add(items("a.example", "/1", "/2")); err != nil {
		t.Fatal(err)
	}
	// Damage the second URL's queue entry.
	var bad []byte
	if err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix("a.example")})
		defer it.Close()
		n := 0
		for it.Rewind(); it.Valid(); it.Next() {
			if n++; n == 2 {
				bad = it.Item().KeyCopy(nil)
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(bad, []byte{0xff}) }); err != nil {
		t.Fatal(err)
	}
	rounds := 0
	for ; rounds < 10; rounds++ {
		host, ok, err := f.AcquireHost()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		drainHost(t, f, host, true)
		if err := f.ReleaseHost(host); err != nil {
			t.Fatal(err)
		}
	}
	if rounds >= 10 || f.Stats().Queued != 0 {
		t.Fatalf("host re-acquired %d times with nothing to fetch; Queued stays %d", rounds, f.Stats().Queued)
	}
}
