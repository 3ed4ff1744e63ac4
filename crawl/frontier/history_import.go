package frontier

import (
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// ImportHistory stores page histories recovered from another crawler (the
// previous owner of a subnet) for URLs this frontier knows nothing about:
// each joins the seen-set and keeps its validators, hashes and timings, so
// the next visit is a conditional GET and nothing is fetched again for
// nothing. A page with NextVisit set is put on the revisit schedule. Pages
// this crawler already has a history for are left alone (its own knowledge
// is at least as fresh), unless that history is off the schedule and the
// import is on it: a page this crawler handed off (Withdraw keeps its
// history) comes back with its subnet, and goes back on the schedule,
// from the fresher of the two fetches. It returns how many were imported.
func (f *Frontier) ImportHistory(hs []History) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.importLocked(hs)
}

// importLocked is ImportHistory under f.mu: one transaction, or halves of
// hs when that is too big for Badger's (each page stays in one).
func (f *Frontier) importLocked(hs []History) (int, error) {
	imported, scheduled := 0, 0
	var added []Hash
	err := f.update(func(txn *badger.Txn) error {
		imported, scheduled, added = 0, 0, added[:0]
		for i := range hs {
			h := hs[i] // (a copy: a replaced history is rebuilt in it)
			if h.URL == "" {
				continue
			}
			k := HashURL(h.URL)
			old, found, err := getHistory(txn, k)
			if err != nil {
				return err
			}
			if found {
				if !old.NextVisit.IsZero() || h.NextVisit.IsZero() {
					continue
				}
				if old.LastFetch.After(h.LastFetch) {
					// this crawler's own fetch is the fresher
					interval := h.Interval
					h = old
					h.Interval, h.NextVisit = interval, old.LastFetch.Add(interval)
				}
			}
			if err := markSeenUncounted(txn, k); err != nil {
				return err
			}
			if err := txn.Set(cat(pPage, k[:]), h.encode()); err != nil {
				return err
			}
			if !h.NextVisit.IsZero() {
				if err := txn.Set(revisitKey(h.NextVisit, k), encodeItem(Item{URL: h.URL, Host: h.Host, Depth: h.Depth, Revisit: true})); err != nil {
					return err
				}
				scheduled++
			}
			imported++
			added = append(added, k)
		}
		return nil
	})
	if errors.Is(err, badger.ErrTxnTooBig) && len(hs) > 1 {
		a, err := f.importLocked(hs[:len(hs)/2])
		if err != nil {
			return a, err
		}
		b, err := f.importLocked(hs[len(hs)/2:])
		return a + b, err
	}
	if err != nil {
		return 0, err
	}
	for _, k := range added {
		f.seen.add(k)
	}
	f.smu.Lock()
	f.stats.Scheduled += int64(scheduled)
	f.smu.Unlock()
	return imported, nil
}
