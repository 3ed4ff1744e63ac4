package sink

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// IngestedSince returns how many records of the log were committed at or
// after t: the ingest over a recent window, read from the log's own commit
// times (a binary search over the sequences, about log₂(head) entry reads)
// rather than sampled, so it needs no work while nobody asks. Records the
// retention dropped are not counted.
func (s *Store) IngestedSince(t time.Time) (uint64, error) {
	s.mu.Lock()
	lo, head := s.start, s.next-1
	s.mu.Unlock()
	if lo == 0 {
		lo = 1
	}
	if head < lo {
		return 0, nil
	}
	hi := head + 1 // the first sequence committed at or after t is in [lo, hi]
	err := s.db.View(func(txn *badger.Txn) error {
		for lo < hi {
			mid := lo + (hi-lo)/2
			it, err := txn.Get(logKey(mid))
			if errors.Is(err, badger.ErrKeyNotFound) {
				lo = mid + 1 // dropped by a trim under way
				continue
			}
			if err != nil {
				return err
			}
			var at time.Time
			if err := it.Value(func(v []byte) (err error) { at, err = entryIngestedAt(v); return err }); err != nil {
				return fmt.Errorf("log entry %d: %w", mid, err)
			}
			if at.Before(t) {
				lo = mid + 1
			} else {
				hi = mid
			}
		}
		return nil
	})
	if err != nil {
		return 0, fmt.Errorf("sink: ingest rate: %w", err)
	}
	return head + 1 - lo, nil
}
