package sink

import (
	"cmp"
	"slices"
	"sync"
	"time"
)

// MaxReaders bounds the subscription readers the sink lists at once
// (Store.Readers): past it a new reader is served as usual but only
// counted (ReadersUntracked), so many readers cannot grow the sink's
// memory through the list.
const MaxReaders = 256

// ReaderInfo is one subscription reader as the sink sees it: an HTTP
// NDJSON or SSE stream (GET /v1/records, /v1/events) or a libp2p one
// (/micra/subscribe/1), while it is open.
type ReaderInfo struct {
	ID     uint64 `json:"id"`     // in the order the readers came
	Kind   string `json:"kind"`   // ndjson, sse or libp2p
	Remote string `json:"remote"` // the HTTP client's address, or the subscriber's peer id
	Follow bool   `json:"follow"` // it stays open for new records
	Filter string `json:"filter,omitempty"`
	// Since is when the stream opened; From the cursor it asked for.
	Since time.Time `json:"since"`
	From  uint64    `json:"from"`
	// Cursor is the last sequence the stream passed (records sent, or
	// passed over by its filter): where the reader would resume. The
	// head minus it is the reader's lag.
	Cursor   uint64     `json:"cursor"`
	Sent     int64      `json:"sent"` // records sent
	LastSent *time.Time `json:"last_sent,omitempty"`
}

// readerSet is the open streams, bounded by max (MaxReaders when 0).
type readerSet struct {
	mu        sync.Mutex
	next      uint64
	m         map[uint64]*ReaderInfo
	max       int
	untracked int64 // open streams past the bound
}

// streamReader is one stream's handle on the set; a nil reader (past the bound)
// only counts.
type streamReader struct {
	set  *readerSet
	info *ReaderInfo
}

// add registers a stream; done must be called when it ends.
func (rs *readerSet) add(kind, remote string, follow bool, f Filter, from uint64) *streamReader {
	rs.mu.Lock()
	defer rs.mu.Unlock()
	limit := rs.max
	if limit <= 0 {
		limit = MaxReaders
	}
	if len(rs.m) >= limit {
		rs.untracked++
		return &streamReader{set: rs}
	}
	if rs.m == nil {
		rs.m = map[uint64]*ReaderInfo{}
	}
	rs.next++
	ri := &ReaderInfo{ID: rs.next, Kind: kind, Remote: remote, Follow: follow, Filter: f.String(),
		Since: time.Now().UTC(), From: from, Cursor: from}
	rs.m[ri.ID] = ri
	return &streamReader{set: rs, info: ri}
}

// advance records that the stream passed cursor, sending n records.
func (r *streamReader) advance(cursor uint64, n int) {
	if r.info == nil {
		return
	}
	r.set.mu.Lock()
	defer r.set.mu.Unlock()
	r.info.Cursor = cursor
	if n > 0 {
		r.info.Sent += int64(n)
		t := time.Now().UTC()
		r.info.LastSent = &t
	}
}

func (r *streamReader) done() {
	r.set.mu.Lock()
	defer r.set.mu.Unlock()
	if r.info == nil {
		r.set.untracked--
		return
	}
	delete(r.set.m, r.info.ID)
}

// Readers lists the open subscription streams (at most MaxReaders), in
// the order they came, and how many more are open unlisted.
func (s *Store) Readers() ([]ReaderInfo, int64) {
	rs := &s.readers
	rs.mu.Lock()
	defer rs.mu.Unlock()
	out := make([]ReaderInfo, 0, len(rs.m))
	for _, ri := range rs.m {
		c := *ri
		if ri.LastSent != nil {
			t := *ri.LastSent
			c.LastSent = &t
		}
		out = append(out, c)
	}
	slices.SortFunc(out, func(a, b ReaderInfo) int { return cmp.Compare(a.ID, b.ID) })
	return out, rs.untracked
}

// String describes a filter as its query parameters ("" for none).
func (f Filter) String() string {
	var b []byte
	add := func(k, v string) {
		if v == "" {
			return
		}
		if len(b) > 0 {
			b = append(b, '&')
		}
		b = append(b, k...)
		b = append(b, '=')
		b = append(b, v...)
	}
	add("host", f.Host)
	add("suffix", f.Suffix)
	add("keyword", f.Keyword)
	add("lang", f.Lang)
	if f.Changed {
		add("changed", "true")
	}
	return string(b)
}
