package frontier

import (
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

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
//  3. the items leave their queue and the revisit schedule, and are
//     marked handed off, so links to them are not handed off again —
//     should they come back, Add admits them afresh. A page fetched
//     before (here, or by the crawler before this one, imported) keeps its
//     history, off the schedule: the new owner recovers its subnet's
//     histories from this crawler, and without it would fetch the page
//     again as new.
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
				if old.Fetches > 0 {
					old.NextVisit = time.Time{}
					if err := txn.Set(cat(pPage, h[:]), old.encode()); err != nil {
						return err
					}
				} else if err := txn.Delete(cat(pPage, h[:])); err != nil {
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
