package frontier

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// History is what the crawler remembers about one page between fetches:
// enough for a conditional GET, change detection, adaptive revisits and
// latency calibration.
type History struct {
	URL, Host string
	Depth     int

	FirstFetch time.Time
	LastFetch  time.Time
	LastChange time.Time
	Status     int

	ETag, LastModified string
	ModTime            time.Time // file-system crawls: the file's modification time
	ContentHash        [16]byte
	SimHash            uint64

	Fetches uint32 // fetches of this URL, including unchanged revisits
	Changes uint32 // fetches that found new content

	// Timing of the last fetch and an exponentially weighted mean of the
	// total time, the history against which slow fetches are judged.
	DNS, Connect, FirstByte, Total time.Duration
	MeanTotal                      time.Duration

	Interval  time.Duration // current revisit interval (adaptive)
	NextVisit time.Time     // zero: not scheduled
}

const historyVersion = 1

func appendTime(b []byte, t time.Time) []byte {
	if t.IsZero() {
		return binary.AppendVarint(b, 0)
	}
	return binary.AppendVarint(b, t.UnixNano())
}

func (h *History) encode() []byte {
	b := []byte{historyVersion}
	s := func(v string) { b = binary.AppendUvarint(b, uint64(len(v))); b = append(b, v...) }
	s(h.URL)
	s(h.Host)
	b = binary.AppendUvarint(b, uint64(h.Depth))
	for _, t := range []time.Time{h.FirstFetch, h.LastFetch, h.LastChange, h.ModTime, h.NextVisit} {
		b = appendTime(b, t)
	}
	b = binary.AppendUvarint(b, uint64(h.Status))
	s(h.ETag)
	s(h.LastModified)
	b = append(b, h.ContentHash[:]...)
	b = binary.LittleEndian.AppendUint64(b, h.SimHash)
	b = binary.AppendUvarint(b, uint64(h.Fetches))
	b = binary.AppendUvarint(b, uint64(h.Changes))
	for _, d := range []time.Duration{h.DNS, h.Connect, h.FirstByte, h.Total, h.MeanTotal, h.Interval} {
		b = binary.AppendVarint(b, int64(d))
	}
	return b
}

func decodeHistory(b []byte) (History, error) {
	var h History
	if len(b) == 0 || b[0] != historyVersion {
		return h, errors.New("frontier: unknown history version")
	}
	b = b[1:]
	bad := false
	uv := func() uint64 {
		v, n := binary.Uvarint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	sv := func() int64 {
		v, n := binary.Varint(b)
		if n <= 0 {
			bad = true
			return 0
		}
		b = b[n:]
		return v
	}
	str := func() string {
		n := uv()
		if bad || uint64(len(b)) < n {
			bad = true
			return ""
		}
		s := string(b[:n])
		b = b[n:]
		return s
	}
	tm := func() time.Time {
		v := sv()
		if v == 0 {
			return time.Time{}
		}
		return time.Unix(0, v).UTC()
	}
	h.URL = str()
	h.Host = str()
	h.Depth = int(uv())
	h.FirstFetch, h.LastFetch, h.LastChange, h.ModTime, h.NextVisit = tm(), tm(), tm(), tm(), tm()
	h.Status = int(uv())
	h.ETag = str()
	h.LastModified = str()
	if bad || len(b) < 24 {
		return h, errors.New("frontier: truncated history")
	}
	copy(h.ContentHash[:], b[:16])
	h.SimHash = binary.LittleEndian.Uint64(b[16:24])
	b = b[24:]
	h.Fetches = uint32(uv())
	h.Changes = uint32(uv())
	for _, d := range []*time.Duration{&h.DNS, &h.Connect, &h.FirstByte, &h.Total, &h.MeanTotal, &h.Interval} {
		*d = time.Duration(sv())
	}
	if bad {
		return h, errors.New("frontier: truncated history")
	}
	return h, nil
}

func getHistory(txn *badger.Txn, h Hash) (History, bool, error) {
	it, err := txn.Get(cat(pPage, h[:]))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return History{}, false, nil
	}
	if err != nil {
		return History{}, false, err
	}
	var hist History
	err = it.Value(func(v []byte) error {
		var err error
		hist, err = decodeHistory(v)
		return err
	})
	if err != nil {
		return History{}, false, fmt.Errorf("history of %x: %w", h, err)
	}
	return hist, true, nil
}

// History returns the fetch history of a URL.
func (f *Frontier) History(u string) (History, bool, error) {
	var h History
	var ok bool
	err := f.db.View(func(txn *badger.Txn) error {
		var err error
		h, ok, err = getHistory(txn, HashURL(u))
		return err
	})
	return h, ok, err
}

// AdmitFetched admits a page that was fetched without being queued — the
// target of another URL's redirect, whose content the source's record
// carries — as if it had been queued and Done: it joins the seen-set,
// counts in its host's budget (MaxPagesPerHost) like any admitted URL,
// and h becomes its history; when h.NextVisit is set it goes on the
// revisit schedule, so the page is monitored on its own, conditionally,
// even once no source redirects to it. h must carry the URL, its Host and
// Depth. A discovered copy of the URL — queued already, as siblings on one
// page are, or found later — is then known to be fetched (the engine skips
// it).
//
// A URL with a history already keeps it, and its schedule: one page, one
// schedule, however many sources lead to it and whether it was also
// fetched directly. The exception is a history without content and
// schedule (isRedirectMark): the one-fetch mark older versions stored for
// a redirect target; it is replaced (and keeps its seen mark, which does
// not count in the budget). A URL already seen — queued and not yet
// fetched — is not counted twice.
//
// It reports whether h was stored: false for a URL with a history, or when
// its host's budget is spent (counted as rejected, nothing stored).
func (f *Frontier) AdmitFetched(h History) (bool, error) { return f.admitFetched(h, true) }

// AdmitFetchedQuiet is AdmitFetched for a target offered before (its
// source revisited unchanged): a refusal over the host's budget is not
// counted again.
func (f *Frontier) AdmitFetchedQuiet(h History) (bool, error) { return f.admitFetched(h, false) }

func (f *Frontier) admitFetched(h History, countRejected bool) (bool, error) {
	if h.URL == "" || h.Host == "" {
		return false, errors.New("frontier: AdmitFetched needs the URL and its host")
	}
	k := HashURL(h.URL)
	// Most calls find the page known (a source revisited, a second source):
	// answer those without the write lock.
	var known bool
	if err := f.db.View(func(txn *badger.Txn) error {
		old, found, err := getHistory(txn, k)
		known = found && !replaceable(old, h)
		return err
	}); err != nil || known {
		return false, err
	}
	f.mu.Lock()
	defer f.mu.Unlock()
	var stored, counted, rejected, scheduled bool
	err := f.update(func(txn *badger.Txn) error {
		stored, counted, rejected, scheduled = false, false, false, false
		old, found, err := getHistory(txn, k)
		if err != nil {
			return err
		}
		if found && !replaceable(old, h) {
			return nil
		}
		if found && isGone(old) {
			// the page is back: its record goes on (it already holds its
			// seen mark and its place in the budget)
			h.FirstFetch = old.FirstFetch
			h.Fetches += old.Fetches
			h.Changes += old.Changes
		}
		sk := cat(pSeen, k[:])
		if _, err := txn.Get(sk); errors.Is(err, badger.ErrKeyNotFound) {
			m, err := getHostMeta(txn, h.Host)
			if err != nil {
				return err
			}
			if f.opt.MaxPagesPerHost > 0 && m.Admitted >= int64(f.opt.MaxPagesPerHost) {
				rejected = countRejected
				return nil
			}
			m.Admitted++
			if err := txn.Set(cat(pHostMeta, []byte(h.Host)), m.encode()); err != nil {
				return err
			}
			if err := txn.Set(sk, nil); err != nil { // counted, as Add's marks
				return err
			}
			counted = true
		} else if err != nil {
			return err
		}
		if err := txn.Set(cat(pPage, k[:]), h.encode()); err != nil {
			return err
		}
		if !h.NextVisit.IsZero() {
			if err := txn.Set(revisitKey(h.NextVisit, k), encodeItem(Item{URL: h.URL, Host: h.Host, Depth: h.Depth, Revisit: true})); err != nil {
				return err
			}
			scheduled = true
		}
		stored = true
		return nil
	})
	if err != nil {
		return false, err
	}
	if stored {
		f.seen.add(k)
	}
	f.smu.Lock()
	if counted {
		f.stats.Seen++
	}
	if rejected {
		f.stats.Rejected++
	}
	if scheduled {
		f.stats.Scheduled++
	}
	f.smu.Unlock()
	if rejected {
		f.mRejected.Inc()
	}
	return stored, nil
}

// Revisitable reports whether monitoring revisits a page with history h
// once it is off the schedule: fetched, not gone (404, 410), not an older
// version's redirect mark.
func (h History) Revisitable() bool { return h.Fetches > 0 && !isGone(h) && !isRedirectMark(h) }

// isRedirectMark reports whether h is the one-fetch mark older versions
// stored for a redirect target: no content (no change seen, no content
// hash — every page fetched with a body has both, an imported one its
// hash) and no schedule.
func isRedirectMark(h History) bool {
	return h.Changes == 0 && h.ContentHash == [16]byte{} && h.NextVisit.IsZero()
}

// isGone reports a page whose last fetch said it went away (404, 410) and
// that is no longer scheduled.
func isGone(h History) bool {
	return h.NextVisit.IsZero() && (h.Status == 404 || h.Status == 410)
}

// replaceable reports whether AdmitFetched replaces old by h: an old
// redirect mark, or a page gone that a redirect now reaches alive and
// scheduled (else, once the source went too, the live page would never be
// fetched again).
func replaceable(old, h History) bool {
	return isRedirectMark(old) || (isGone(old) && !h.NextVisit.IsZero())
}

// MarkHandedOff remembers URLs another crawler durably took (a hand-off),
// so they are not offered again. The mark is apart from the seen-set: if
// ownership later changes and the URL comes back (Add), it is admitted.
func (f *Frontier) MarkHandedOff(urls []string) error {
	wb := f.db.NewWriteBatch()
	for _, u := range urls {
		h := HashURL(u)
		if err := wb.Set(cat(pHandedOff, h[:]), nil); err != nil {
			wb.Cancel()
			return err
		}
	}
	return wb.Flush()
}

// HandedOff reports whether the URL was handed off before (MarkHandedOff).
func (f *Frontier) HandedOff(u string) (bool, error) {
	h := HashURL(u)
	return f.hasKey(cat(pHandedOff, h[:]))
}

// EachHistory calls fn for every page history (monitoring reports, tests).
func (f *Frontier) EachHistory(fn func(*History) error) error {
	return f.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pPage, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var h History
			err := it.Item().Value(func(v []byte) error {
				var err error
				h, err = decodeHistory(v)
				return err
			})
			if err != nil {
				return err
			}
			if err := fn(&h); err != nil {
				return err
			}
		}
		return nil
	})
}
