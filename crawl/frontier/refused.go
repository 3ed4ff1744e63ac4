package frontier

import (
	"errors"

	"github.com/dgraph-io/badger/v4"
)

// Refuse takes a queued item out of its host's queue without consuming it:
// the crawler may not reach its address (the address guard refused it), a
// matter of this run's settings, not of the URL. It keeps its seen mark, so
// the run does not queue it again for every page that links to it, and is
// kept apart until Readmit queues it again (a later run allowed to reach
// it), which a URL marked Done never would be.
func (f *Frontier) Refuse(it Item) error {
	if it.key == nil {
		return errors.New("frontier: Refuse for an item not returned by Next")
	}
	h := HashURL(it.URL)
	added := false
	err := f.update(func(txn *badger.Txn) error {
		added = false
		if err := txn.Delete(it.key); err != nil {
			return err
		}
		m, err := getHostMeta(txn, it.Host)
		if err != nil {
			return err
		}
		m.Pending = max(m.Pending-1, 0)
		if err := txn.Set(cat(pHostMeta, []byte(it.Host)), m.encode()); err != nil {
			return err
		}
		k := cat(pRefused, h[:])
		if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
			added = true
		} else if err != nil {
			return err
		}
		return txn.Set(k, encodeItem(Item{URL: it.URL, Host: it.Host, Depth: it.Depth}))
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued--
	if added {
		f.stats.Refused++
	}
	f.smu.Unlock()
	return nil
}

// EachRefused calls fn for every refused item (Refuse), in hash order.
func (f *Frontier) EachRefused(fn func(Item) error) error {
	return f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pRefused, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			qi, err := decodeItem(v)
			if err != nil {
				f.log.Error("corrupt refused entry skipped", "key", it.Item().Key(), "err", err)
				continue
			}
			if err := fn(qi); err != nil {
				return err
			}
		}
		return nil
	})
}

// Readmit queues refused items again (they are seen and counted in their
// hosts' budgets already) and forgets their refusal. It returns how many
// were queued. A crash between the two steps queues an item twice on the
// next Readmit, never zero times.
func (f *Frontier) Readmit(items []Item) (int, error) {
	if len(items) == 0 {
		return 0, nil
	}
	again := make([]Item, len(items))
	hashes := make([]Hash, len(items))
	for i, it := range items {
		again[i] = Item{URL: it.URL, Host: it.Host, Depth: it.Depth, readmit: true}
		hashes[i] = HashURL(it.URL)
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	n := 0
	for i := 0; i < len(again); i += addChunk { // (Badger's transaction size)
		j := min(i+addChunk, len(again))
		k, err := f.addLocked(again[i:j], hashes[i:j])
		n += k
		if err != nil {
			return n, err
		}
		removed := 0
		err = f.update(func(txn *badger.Txn) error {
			removed = 0
			for _, h := range hashes[i:j] {
				k := cat(pRefused, h[:])
				if _, err := txn.Get(k); errors.Is(err, badger.ErrKeyNotFound) {
					continue
				} else if err != nil {
					return err
				}
				if err := txn.Delete(k); err != nil {
					return err
				}
				removed++
			}
			return nil
		})
		if err != nil {
			return n, err
		}
		f.smu.Lock()
		f.stats.Refused -= int64(removed)
		f.smu.Unlock()
	}
	return n, nil
}
