package frontier

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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
