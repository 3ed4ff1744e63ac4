package frontier

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

type setter interface {
	Set(k, v []byte) error
	Delete(k []byte) error
}

func (f *Frontier) pushReady(w setter, host string, m hostMeta) error {
	s, err := f.seq.Next()
	if err != nil {
		return err
	}
	m.Ready, m.ReadySeq = true, s
	if err := w.Set(cat(pReady, u64(s)), []byte(host)); err != nil {
		return err
	}
	return w.Set(cat(pHostMeta, []byte(host)), m.encode())
}

// Add admits the URLs not seen before into their hosts' queues and returns
// how many were admitted. Items must carry a normalised URL and its Host.
// Revisit items bypass the seen-set and the host budget.
func (f *Frontier) Add(items []Item) (int, error) {
	// Cheap rejection of already-seen URLs before taking the write lock.
	cand := make([]Item, 0, len(items))
	hashes := make([]Hash, 0, len(items))
	for _, it := range items {
		h := HashURL(it.URL)
		if !it.bypass() && f.seen.has(h) {
			f.mSeenHits.Inc()
			continue
		}
		cand = append(cand, it)
		hashes = append(hashes, h)
	}
	if len(cand) == 0 {
		return 0, nil
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	// in chunks: one transaction for a whole seed file or a large hand-off
	// would exceed Badger's transaction size and admit nothing
	total := 0
	for len(cand) > 0 {
		k := min(len(cand), addChunk)
		n, err := f.addLocked(cand[:k], hashes[:k])
		total += n
		if err != nil {
			return total, err
		}
		cand, hashes = cand[k:], hashes[k:]
	}
	return total, nil
}

// addChunk is how many candidates one admission transaction takes at most.
const addChunk = 1024

// addLocked is Add's admission under f.mu, for candidates past the
// in-memory seen check: in one transaction, or in halves when Badger
// refuses it as too big (long URLs: with OpenDB's 4 MiB memtables a
// transaction holds 600 KiB, 1024 URLs of ~ 280 bytes).
func (f *Frontier) addLocked(cand []Item, hashes []Hash) (int, error) {
	n, err := f.addTxn(cand, hashes)
	if errors.Is(err, badger.ErrTxnTooBig) && len(cand) > 1 {
		h := len(cand) / 2
		if n, err = f.addLocked(cand[:h], hashes[:h]); err != nil {
			return n, err
		}
		m, err := f.addLocked(cand[h:], hashes[h:])
		return n + m, err
	}
	return n, err
}

// addTxn is addLocked's one transaction.
func (f *Frontier) addTxn(cand []Item, hashes []Hash) (int, error) {
	added, admitted, rejected, readied := 0, 0, 0, 0
	var newlySeen []Hash
	err := f.update(func(txn *badger.Txn) error {
		added, admitted, rejected, readied, newlySeen = 0, 0, 0, 0, newlySeen[:0]
		metas := map[string]*hostMeta{}
		var hostOrder []string // hosts become ready in discovery order
		batch := map[Hash]bool{}
		for i, it := range cand {
			h := hashes[i]
			if !it.bypass() {
				if batch[h] {
					continue
				}
				batch[h] = true
				_, err := txn.Get(cat(pSeen, h[:]))
				if err == nil {
					newlySeen = append(newlySeen, h) // seen on disk: remember in the front
					continue
				}
				if !errors.Is(err, badger.ErrKeyNotFound) {
					return err
				}
			}
			m := metas[it.Host]
			if m == nil {
				mm, err := getHostMeta(txn, it.Host)
				if err != nil {
					return err
				}
				m = &mm
				metas[it.Host] = m
				hostOrder = append(hostOrder, it.Host)
			}
			if !it.bypass() && f.opt.MaxPagesPerHost > 0 && m.Admitted >= int64(f.opt.MaxPagesPerHost) {
				rejected++
				continue
			}
			s, err := f.seq.Next()
			if err != nil {
				return err
			}
			if err := txn.Set(cat(queuePrefix(it.Host), u64(s)), encodeItem(it)); err != nil {
				return err
			}
			if !it.bypass() {
				if err := txn.Set(cat(pSeen, h[:]), nil); err != nil {
					return err
				}
				m.Admitted++
				admitted++
				newlySeen = append(newlySeen, h)
			}
			m.Pending++
			added++
		}
		for _, host := range hostOrder {
			m := metas[host]
			if _, isActive := f.active[host]; !isActive && !m.Ready && m.Pending > 0 {
				if err := f.pushReady(txn, host, *m); err != nil {
					return err
				}
				readied++
				continue
			}
			if err := txn.Set(cat(pHostMeta, []byte(host)), m.encode()); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		return 0, err
	}
	for _, h := range newlySeen {
		f.seen.add(h)
	}
	f.smu.Lock()
	f.stats.Queued += int64(added)
	f.stats.Rejected += int64(rejected)
	f.stats.ReadyHosts += int64(readied)
	f.stats.Seen += int64(admitted)
	f.smu.Unlock()
	f.mAdded.Add(float64(added))
	f.mRejected.Add(float64(rejected))
	if readied > 0 {
		select {
		case f.readyCh <- struct{}{}:
		default:
		}
	}
	return added, nil
}

// Ready returns a channel signalled when a host becomes ready; workers idle
// on it instead of polling.
func (f *Frontier) Ready() <-chan struct{} { return f.readyCh }

// AcquireHost takes the host that has waited longest on the ready list; the
// caller then owns it (Next, Done) until ReleaseHost. It reports false when no
// host is ready.
func (f *Frontier) AcquireHost() (string, bool, error) {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.retryReleasesLocked()
	var host string
	err := f.update(func(txn *badger.Txn) error {
		host = ""
		for {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pReady, PrefetchValues: false})
			it.Rewind()
			if !it.Valid() {
				it.Close()
				return nil
			}
			key := it.Item().KeyCopy(nil)
			v, err := it.Item().ValueCopy(nil)
			it.Close()
			if err != nil {
				return err
			}
			if err := txn.Delete(key); err != nil {
				return err
			}
			m, err := getHostMeta(txn, string(v))
			if err != nil {
				return err
			}
			if !m.Ready || m.ReadySeq != binary.BigEndian.Uint64(key[len(pReady):]) {
				continue // stale entry
			}
			m.Ready = false
			host = string(v)
			return txn.Set(cat(pHostMeta, v), m.encode())
		}
	})
	if err != nil || host == "" {
		return "", false, err
	}
	// re-readied by Add since its release failed: its retry, should it
	// still be pending, would put it on the ready list while held
	delete(f.unreleased, host)
	f.smu.Lock()
	f.active[host] = &activeHost{}
	f.stats.ReadyHosts--
	f.smu.Unlock()
	return host, true, nil
}

// Next returns the next queued URL of an acquired host in breadth-first
// (queue) order, or false when the host's queue is exhausted for now.
func (f *Frontier) Next(host string) (Item, bool, error) {
	f.smu.Lock()
	a := f.active[host]
	f.smu.Unlock()
	if a == nil {
		return Item{}, false, fmt.Errorf("frontier: host %q not acquired", host)
	}
	if len(a.buf) == 0 {
		if err := f.fill(host, a); err != nil {
			return Item{}, false, err
		}
	}
	if len(a.buf) == 0 {
		return Item{}, false, nil
	}
	it := a.buf[0]
	a.buf = a.buf[1:]
	f.buffered.Add(-1)
	return it, true, nil
}

func (f *Frontier) fill(host string, a *activeHost) error {
	prefix := queuePrefix(host)
	var bad [][]byte // corrupt entries: moved aside below
	err := f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix, PrefetchValues: true, PrefetchSize: f.opt.BatchSize})
		defer it.Close()
		if a.cursor == nil {
			it.Rewind()
		} else {
			it.Seek(append(append([]byte(nil), a.cursor...), 0)) // just past the cursor
		}
		for ; it.Valid() && len(a.buf) < f.opt.BatchSize; it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			qi, err := decodeItem(v)
			if err != nil {
				f.log.Error("corrupt queue entry moved aside", "key", item.Key(), "err", err)
				a.cursor = item.KeyCopy(nil)
				bad = append(bad, a.cursor)
				continue
			}
			qi.key = item.KeyCopy(nil)
			a.cursor = qi.key
			a.buf = append(a.buf, qi)
			f.buffered.Add(1)
		}
		return nil
	})
	if err != nil || len(bad) == 0 {
		return err
	}
	// left in the queue, an entry nobody can fetch would keep its host's
	// pending count above zero for ever: the host cycles through the
	// workers with nothing to fetch and a one-pass crawl never ends
	moved := 0
	err = f.update(func(txn *badger.Txn) error {
		moved = 0 // (a conflicting commit runs this again)
		m, err := getHostMeta(txn, host)
		if err != nil {
			return err
		}
		for _, k := range bad {
			item, err := txn.Get(k)
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue
			}
			if err != nil {
				return err
			}
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			if err := txn.Set(cat(pBadQueue, k), v); err != nil {
				return err
			}
			if err := txn.Delete(k); err != nil {
				return err
			}
			m.Pending = max(m.Pending-1, 0)
			moved++
		}
		return txn.Set(cat(pHostMeta, []byte(host)), m.encode())
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued -= int64(moved)
	f.smu.Unlock()
	return nil
}

// Rewind makes the next Next of an acquired host start again at the head of
// its queue, returning items that were handed out but not Done (a host that
// was backed off resumes with the URL it was refused). It also drops the
// host's read-ahead buffer, so a host put aside holds no queued items in
// memory.
func (f *Frontier) Rewind(host string) {
	f.smu.Lock()
	defer f.smu.Unlock()
	if a := f.active[host]; a != nil {
		f.buffered.Add(-int64(len(a.buf)))
		a.buf, a.cursor = nil, nil
	}
}

// Done records the fetch of an item and removes it from its queue in one
// transaction. hist may be nil (the URL failed without a page history).
func (f *Frontier) Done(it Item, hist *History) error {
	if it.key == nil {
		return errors.New("frontier: Done for an item not returned by Next")
	}
	// Done runs without the write lock: only the worker holding the host
	// calls it, and the one key it shares with others (the host's metadata,
	// also written by Add for links to this host) is protected by Badger's
	// conflict detection — a conflicting commit is retried.
	h := HashURL(it.URL)
	scheduled := 0
	err := f.update(func(txn *badger.Txn) error {
		scheduled = 0
		if err := txn.Delete(it.key); err != nil {
			return err
		}
		m, err := getHostMeta(txn, it.Host)
		if err != nil {
			return err
		}
		if m.Pending > 0 {
			m.Pending--
		}
		if err := txn.Set(cat(pHostMeta, []byte(it.Host)), m.encode()); err != nil {
			return err
		}
		if hist == nil {
			return nil
		}
		old, found, err := getHistory(txn, h)
		if err != nil {
			return err
		}
		if found && !old.NextVisit.IsZero() {
			// The old entry is gone already when DueRevisits queued this visit.
			rk := revisitKey(old.NextVisit, h)
			if _, err := txn.Get(rk); err == nil {
				if err := txn.Delete(rk); err != nil {
					return err
				}
				scheduled--
			}
		}
		hist.URL, hist.Host, hist.Depth = it.URL, it.Host, it.Depth
		if err := txn.Set(cat(pPage, h[:]), hist.encode()); err != nil {
			return err
		}
		if !hist.NextVisit.IsZero() {
			if err := txn.Set(revisitKey(hist.NextVisit, h), encodeItem(Item{URL: it.URL, Host: it.Host, Depth: it.Depth, Revisit: true})); err != nil {
				return err
			}
			scheduled++
		}
		return nil
	})
	if err != nil {
		return err
	}
	f.smu.Lock()
	f.stats.Queued--
	f.stats.Done++
	f.stats.Scheduled += int64(scheduled)
	f.smu.Unlock()
	f.mDone.Inc()
	return nil
}

// ReleaseHost gives an acquired host back. Items returned by Next and not
// Done stay queued and are returned again when the host is next acquired; a
// host with queued items goes back on the ready list. When that fails the
// host is remembered and the next AcquireHost tries again.
func (f *Frontier) ReleaseHost(host string) error {
	f.mu.Lock()
	defer f.mu.Unlock()
	f.smu.Lock()
	a, ok := f.active[host]
	if ok {
		f.buffered.Add(-int64(len(a.buf)))
	}
	delete(f.active, host)
	f.smu.Unlock()
	if !ok {
		return fmt.Errorf("frontier: host %q not acquired", host)
	}
	if err := f.readyLocked(host); err != nil {
		// neither active nor ready now: nothing else would ready it but a
		// chance link to it (Add) or a restart (recover)
		f.unreleased[host] = false
		return err
	}
	return nil
}

// retryReleasesLocked puts the hosts whose release failed back on the ready
// list; a host that fails again stays for the next call. Under f.mu.
func (f *Frontier) retryReleasesLocked() {
	for host, logged := range f.unreleased {
		if err := f.readyLocked(host); err != nil {
			if !logged { // (AcquireHost is polled: once is enough)
				f.log.Warn("host still not back on the ready list after a failed release, will retry", "host", host, "err", err)
				f.unreleased[host] = true
			}
			continue
		}
		delete(f.unreleased, host)
		f.log.Info("host back on the ready list after a failed release", "host", host)
	}
}

// readyLocked puts a host that is not active back on the ready list if it
// has queued items and is not there already (Add may have put it there).
// Under f.mu.
func (f *Frontier) readyLocked(host string) error {
	readied := false
	err := f.update(func(txn *badger.Txn) error {
		readied = false
		m, err := getHostMeta(txn, host)
		if err != nil {
			return err
		}
		if m.Pending <= 0 && hasQueued(txn, host) {
			// The count says empty but the queue is not: trust the queue, so a
			// host can never be stranded with work off the ready list.
			f.log.Warn("host pending count out of step with its queue, repaired", "host", host)
			m.Pending = 1
		}
		if m.Pending > 0 && !m.Ready {
			readied = true
			return f.pushReady(txn, host, m)
		}
		return nil
	})
	if readied && err == nil {
		f.smu.Lock()
		f.stats.ReadyHosts++
		f.smu.Unlock()
		select {
		case f.readyCh <- struct{}{}:
		default:
		}
	}
	return err
}

// Defer moves an item handed out by Next to the tail of its host's queue,
// in one transaction: the host's other URLs come first (a URL to retry
// later must not hold them). It stays queued, so a crash loses nothing.
// The host's read-ahead reaches it again after the rest of the queue.
func (f *Frontier) Defer(it Item) error {
	if it.key == nil {
		return errors.New("frontier: Defer for an item not returned by Next")
	}
	s, err := f.seq.Next()
	if err != nil {
		return err
	}
	stored := it
	stored.key = nil
	return f.update(func(txn *badger.Txn) error {
		if _, err := txn.Get(it.key); err != nil {
			return err // (gone: not ours to move)
		}
		if err := txn.Delete(it.key); err != nil {
			return err
		}
		return txn.Set(cat(queuePrefix(it.Host), u64(s)), encodeItem(stored))
	})
}
