package frontier

import (
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// ImportHistory stores page histories recovered from another crawler (the
// previous owner of a subnet) for URLs this frontier knows nothing about:
// each joins the seen-set and keeps its validators, hashes and timings, so
// the next visit is a conditional GET and nothing is fetched again for
// nothing. A page with NextVisit set is put on the revisit schedule. Pages
// this crawler already has a history for are left alone (its own knowledge
// is at least as fresh), unless that history is off the schedule and the
// import is on it: a page this crawler handed off or kept for another
// owner (Withdraw, KeepHistory) comes back with its subnet and goes back
// on the schedule, from the fresher of the two fetches (its own depth and
// first fetch kept; a page gone at its fresher fetch here stays off). It
// returns how many were imported.
func (f *Frontier) ImportHistory(hs []History) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.importLocked(hs, true)
}

// KeepHistory stores page histories of pages another crawler owns now, for
// this crawler's answers to page recovery: a subnet can move on before its
// recovered history arrives here, and its next owner asks this crawler. A
// kept page is in the state Withdraw leaves a handed-off page in: neither
// seen (a link to it is still handed to its owner) nor scheduled (NextVisit
// is ignored). Pages this crawler has a history for are left alone. It
// returns how many were kept.
func (f *Frontier) KeepHistory(hs []History) (int, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	return f.importLocked(hs, false)
}

// importLocked is ImportHistory (own: seen and scheduled) or KeepHistory
// under f.mu: one transaction, or halves of hs when that is too big for
// Badger's (each page stays in one).
func (f *Frontier) importLocked(hs []History, own bool) (int, error) {
	imported, scheduled := 0, 0
	var added []Hash
	err := f.update(func(txn *badger.Txn) error {
		imported, scheduled, added = 0, 0, added[:0]
		for i := range hs {
			h := hs[i] // (a copy: a replaced history is rebuilt in it)
			if h.URL == "" {
				continue
			}
			if !own {
				h.NextVisit = time.Time{}
			}
			k := HashURL(h.URL)
			old, found, err := getHistory(txn, k)
			if err != nil {
				return err
			}
			if found {
				if !own || !old.NextVisit.IsZero() || h.NextVisit.IsZero() {
					continue
				}
				if old.LastFetch.After(h.LastFetch) {
					// this crawler's own fetch is the fresher
					if isGone(old) {
						continue
					}
					interval := h.Interval
					h = old
					h.Interval, h.NextVisit = interval, old.LastFetch.Add(interval)
				} else {
					// the other crawler's, with what only this one knows
					h.Depth = old.Depth
					if !old.FirstFetch.IsZero() && old.FirstFetch.Before(h.FirstFetch) {
						h.FirstFetch = old.FirstFetch
					}
					h.Fetches, h.Changes = max(h.Fetches, old.Fetches), max(h.Changes, old.Changes)
				}
			}
			if own {
				if err := markSeenUncounted(txn, k); err != nil {
					return err
				}
				added = append(added, k)
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
		}
		return nil
	})
	if errors.Is(err, badger.ErrTxnTooBig) && len(hs) > 1 {
		a, err := f.importLocked(hs[:len(hs)/2], own)
		if err != nil {
			return a, err
		}
		b, err := f.importLocked(hs[len(hs)/2:], own)
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
