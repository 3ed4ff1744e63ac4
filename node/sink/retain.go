package sink

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Retention bounds the change log: the records committed longer than Age
// ago, and the oldest ones past the newest Bytes of entries, are dropped
// from its start by Trim (zero: no bound). Carrier markers are kept, so a
// carrier delivered again after its records were dropped is still
// acknowledged as a duplicate, not committed twice.
type Retention struct {
	Age   time.Duration
	Bytes int64
}

func (r Retention) active() bool { return r.Age > 0 || r.Bytes > 0 }

// kRetain: the log's start (its first sequence kept), its entries' bytes
// and the first sequence whose entry is not deleted yet (below the start
// while a trim deletes).
var kRetain = []byte("sm/retain")

// BeforeStartError is a read from a cursor whose next record the
// retention dropped.
type BeforeStartError struct {
	Cursor uint64 // the reader's cursor: it wanted Cursor+1
	Start  uint64 // the first sequence the log holds
}

func (e *BeforeStartError) Error() string {
	return fmt.Sprintf("cursor %d is before the log's start %d: records %d to %d were dropped by the sink's retention; resume from cursor %d",
		e.Cursor, e.Start, e.Cursor+1, e.Start-1, e.Start-1)
}

// ParseBeforeStart reads a BeforeStartError back from its message (as a
// client hears it over HTTP or /micra/subscribe/1).
func ParseBeforeStart(msg string) (*BeforeStartError, bool) {
	for i := 0; i < len(msg); i++ {
		var e BeforeStartError
		if n, _ := fmt.Sscanf(msg[i:], "cursor %d is before the log's start %d", &e.Cursor, &e.Start); n == 2 {
			return &e, true
		}
	}
	return nil, false
}

// Start returns the first sequence the log holds (1 until the retention
// dropped records; head+1 if it dropped them all).
func (s *Store) Start() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.start
}

func encodeRetain(start uint64, bytes int64, deletedTo uint64) []byte {
	b := binary.AppendUvarint(nil, start)
	b = binary.AppendVarint(b, bytes)
	return binary.AppendUvarint(b, deletedTo)
}

// loadRetain reads the log's start and size; a store written before them
// starts at 1 and has its entries' bytes counted once (keys and sizes
// only).
func (s *Store) loadRetain() error {
	s.start, s.deletedTo = 1, 1
	return s.db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(kRetain)
		if err == nil {
			return it.Value(func(v []byte) error {
				d := reader{b: v}
				s.start, s.logBytes, s.deletedTo = d.uvarint(), d.varint(), d.uvarint()
				if d.err == nil && (s.start < 1 || s.deletedTo > s.start) {
					return errDamaged
				}
				return d.err
			})
		}
		if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		iter := txn.NewIterator(badger.IteratorOptions{Prefix: pLog})
		defer iter.Close()
		for iter.Rewind(); iter.Valid(); iter.Next() {
			s.logBytes += iter.Item().ValueSize()
		}
		return nil
	})
}

// Trim drops from the log's start the records the retention no longer
// keeps, as of now, and returns how many. Readers behind the new start are
// told so (*BeforeStartError); the value log's space is reclaimed after.
// It is safe beside commits and reads; one trim runs at a time.
func (s *Store) Trim(now time.Time) (int, error) {
	r := s.opt.Retain
	if !r.active() {
		return 0, nil
	}
	s.trimMu.Lock()
	defer s.trimMu.Unlock()
	s.mu.Lock()
	start, head, logBytes := s.start, s.next-1, s.logBytes
	s.mu.Unlock()

	newStart, dropBytes := start, int64(0)
	cutoff := now.Add(-r.Age)
	err := s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pLog, PrefetchValues: true, PrefetchSize: 64})
		defer it.Close()
		for it.Seek(logKey(start)); it.Valid(); it.Next() {
			seq := binary.BigEndian.Uint64(it.Item().Key()[len(pLog):])
			if seq > head {
				break
			}
			var size int64
			var at time.Time
			if err := it.Item().Value(func(v []byte) (err error) {
				size = int64(len(v))
				at, err = entryIngestedAt(v)
				return err
			}); err != nil {
				return fmt.Errorf("log entry %d: %w", seq, err)
			}
			old := r.Age > 0 && at.Before(cutoff)
			over := r.Bytes > 0 && logBytes-dropBytes > r.Bytes
			if !old && !over {
				break
			}
			newStart, dropBytes = seq+1, dropBytes+size
		}
		return nil
	})
	if err != nil || newStart == start {
		return 0, s.deleteBelowStart(err)
	}

	s.mu.Lock()
	if newStart-1 > s.snapAt {
		// a restart after a crash replays the log past the page table's
		// snapshot: it must not need the entries about to go
		if err := s.pages.snapshot(s.db, s.next-1); err != nil {
			s.mu.Unlock()
			return 0, fmt.Errorf("sink: trim: %w", err)
		}
		s.snapAt = s.next - 1
	}
	// the start moves first, so readers behind it are told rather than
	// handed a log with a hole
	err = s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(kRetain, encodeRetain(newStart, s.logBytes-dropBytes, s.deletedTo))
	})
	if err == nil {
		s.start, s.logBytes = newStart, s.logBytes-dropBytes
	}
	s.mu.Unlock()
	if err != nil {
		return 0, fmt.Errorf("sink: trim: %w", err)
	}
	s.m.trimmed.Add(float64(newStart - start))
	return int(newStart - start), s.deleteBelowStart(nil)
}

// deleteBelowStart deletes the entries below the start not deleted yet
// (a trim interrupted by a crash left some), then has Badger reclaim the
// value log files they leave mostly empty.
func (s *Store) deleteBelowStart(err error) error {
	if err != nil {
		return fmt.Errorf("sink: trim: %w", err)
	}
	s.mu.Lock()
	from, to := s.deletedTo, s.start
	s.mu.Unlock()
	if from >= to {
		return nil
	}
	wb := s.db.NewWriteBatch()
	for seq := from; seq < to; seq++ {
		if err := wb.Delete(logKey(seq)); err != nil {
			wb.Cancel()
			return fmt.Errorf("sink: trim: %w", err)
		}
	}
	if err := wb.Flush(); err != nil {
		return fmt.Errorf("sink: trim: %w", err)
	}
	s.mu.Lock()
	err = s.db.Update(func(txn *badger.Txn) error {
		return txn.Set(kRetain, encodeRetain(s.start, s.logBytes, to))
	})
	if err == nil {
		s.deletedTo = to
	}
	s.mu.Unlock()
	if err != nil {
		return fmt.Errorf("sink: trim: %w", err)
	}
	for s.db.RunValueLogGC(0.5) == nil {
	}
	return nil
}

// entryIngestedAt reads an entry's commit time without its record.
func entryIngestedAt(b []byte) (time.Time, error) {
	d := reader{b: b}
	v := d.uvarint()
	if v != entryVersion && v != entryVersion1 {
		return time.Time{}, errDamaged
	}
	if v == entryVersion1 || d.uvarint() == 0 {
		d.string()
	}
	at := d.varint()
	return time.UnixMicro(at).UTC(), d.err
}
