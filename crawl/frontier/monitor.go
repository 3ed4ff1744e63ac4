package frontier

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// kMonitoring records whether the last run monitored (scheduled revisits).
var kMonitoring = []byte("fx/monitoring")

// Monitoring reports whether the crawl state was last run with monitoring
// on (SetMonitoring).
func (f *Frontier) Monitoring() (bool, error) {
	on := false
	err := f.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(kMonitoring)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		on = err == nil
		return err
	})
	return on, err
}

// SetMonitoring records whether this run monitors.
func (f *Frontier) SetMonitoring(on bool) error {
	return f.db.Update(func(txn *badger.Txn) error {
		if on {
			return txn.Set(kMonitoring, nil)
		}
		return txn.Delete(kMonitoring)
	})
}

// scheduleBatch bounds the pages one ScheduleUnscheduled transaction writes.
const scheduleBatch = 512

// ScheduleUnscheduled puts every page fetched without a revisit date on the
// revisit schedule, as if monitoring had been on when it was fetched: its
// first revisit is interval after its last fetch (due at once if that has
// passed). Pages gone (404/410) and redirect marks stay off the schedule.
// It returns how many pages it scheduled. Turning monitoring on for a crawl
// fetched without it needs this; nothing else gives those pages a date.
func (f *Frontier) ScheduleUnscheduled(interval time.Duration) (int, error) {
	total := 0
	var after []byte // last page key looked at
	for {
		var hashes []Hash
		more := false
		err := f.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pPage, PrefetchValues: true})
			defer it.Close()
			if after == nil {
				it.Rewind()
			} else {
				it.Seek(append(append([]byte(nil), after...), 0))
			}
			for ; it.Valid(); it.Next() {
				if len(hashes) == scheduleBatch {
					more = true
					return nil
				}
				after = it.Item().KeyCopy(nil)
				var h History
				if err := it.Item().Value(func(v []byte) error {
					var err error
					h, err = decodeHistory(v)
					return err
				}); err != nil {
					f.log.Error("corrupt page history skipped", "key", after, "err", err)
					continue
				}
				if !h.NextVisit.IsZero() || !h.Revisitable() {
					continue
				}
				var k Hash
				copy(k[:], after[len(pPage):])
				hashes = append(hashes, k)
			}
			return nil
		})
		if err != nil {
			return total, err
		}
		n, err := f.schedule(hashes, interval)
		total += n
		if err != nil || !more {
			return total, err
		}
	}
}

// schedule gives the pages of one batch their first revisit date, unless a
// fetch scheduled them meanwhile.
func (f *Frontier) schedule(hashes []Hash, interval time.Duration) (int, error) {
	if len(hashes) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.scheduleLocked(hashes, interval)
}

// scheduleLocked is schedule under f.mu: one transaction, or halves of the
// batch when Badger refuses it as too big (long URLs).
func (f *Frontier) scheduleLocked(hashes []Hash, interval time.Duration) (int, error) {
	n, err := f.scheduleTxn(hashes, interval)
	if errors.Is(err, badger.ErrTxnTooBig) && len(hashes) > 1 {
		h := len(hashes) / 2
		if n, err = f.scheduleLocked(hashes[:h], interval); err != nil {
			return n, err
		}
		m, err := f.scheduleLocked(hashes[h:], interval)
		return n + m, err
	}
	return n, err
}

// scheduleTxn is scheduleLocked's one transaction.
func (f *Frontier) scheduleTxn(hashes []Hash, interval time.Duration) (int, error) {
	n := 0
	err := f.update(func(txn *badger.Txn) error {
		n = 0
		for _, k := range hashes {
			cur, found, err := getHistory(txn, k)
			if err != nil {
				return err
			}
			if !found || !cur.NextVisit.IsZero() {
				continue
			}
			cur.Interval = interval
			cur.NextVisit = cur.LastFetch.Add(interval)
			if err := txn.Set(cat(pPage, k[:]), cur.encode()); err != nil {
				return err
			}
			if err := txn.Set(revisitKey(cur.NextVisit, k), encodeItem(Item{URL: cur.URL, Host: cur.Host, Depth: cur.Depth, Revisit: true})); err != nil {
				return err
			}
			n++
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	f.smu.Lock()
	f.stats.Scheduled += int64(n)
	f.smu.Unlock()
	return n, nil
}
