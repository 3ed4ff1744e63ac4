package sink

import (
	"encoding/binary"
	"errors"
	"fmt"

	"github.com/dgraph-io/badger/v4"
)

// The sink's per-page state (the crawlers that delivered a page, its
// latest record) is kept in memory, not written beside every record: the
// second, randomly keyed write per record was half of a commit's work.
// It is derived data, a function of the change log: every log entry
// names its page, its crawler, and the page's previous record (Entry.Prev,
// so a page's history is a chain through the log). The table is saved in
// the store as a snapshot with the log sequence it reflects, at every
// open, at a clean close and every snapshotEvery records; after a crash
// it is the last snapshot plus the log entries past it.
//
// Key layout (beside store.go's):
//
//	sm/pagesnap              snapshot header: version, cursor, pages, chunks, crawler names
//	sm/pagesnap/<chunk4>     snapshot pages: id (16), latest (uvarint), crawlers (count, uvarint indexes)
//	sp/<id>                  pageState of stores before the table (read only: their pages' older history)
var (
	kPageSnap = []byte("sm/pagesnap")
	pPageSnap = []byte("sm/pagesnap/")
)

const (
	pageSnapVersion = 1
	// pageSnapChunk bounds a snapshot value's bytes.
	pageSnapChunk = 4 << 20
	// snapshotEvery is how many records may be committed past the last
	// snapshot: the most a restart after a crash replays (a few seconds).
	snapshotEvery = 1 << 20
)

// pageID is a page's key: the first 16 bytes of the SHA-256 of its URL.
type pageID [16]byte

func pageIDOf(url string) pageID {
	var id pageID
	copy(id[:], pageKey(url)[len(pPage):])
	return id
}

// pageSlot is a page's state: its latest record and the first two
// crawlers that delivered it (index+1 into pageTable.names; 0: none).
type pageSlot struct {
	latest uint64
	c      [2]uint32
}

// pageTable is every page's state, under Store.mu. 32 bytes of key and
// value per page, in a map without pointers (the collector skips it).
type pageTable struct {
	m map[pageID]pageSlot
	// more holds the crawlers of the few pages delivered by more than
	// two, up to maxPageCrawlers in all (the oldest forgotten first).
	more  map[pageID][]uint32
	names []string          // crawler ids by index
	index map[string]uint32 // crawler id → index+1
}

func newPageTable(pages int) *pageTable {
	return &pageTable{m: make(map[pageID]pageSlot, pages), more: map[pageID][]uint32{}, index: map[string]uint32{}}
}

// intern returns the crawler's index+1.
func (t *pageTable) intern(crawler string) uint32 {
	if i, ok := t.index[crawler]; ok {
		return i
	}
	t.names = append(t.names, crawler)
	i := uint32(len(t.names))
	t.index[crawler] = i
	return i
}

// crawlers returns the page's crawlers (indexes+1), oldest first.
func (t *pageTable) crawlers(id pageID, s pageSlot) []uint32 {
	var out []uint32
	for _, c := range s.c {
		if c != 0 {
			out = append(out, c)
		}
	}
	return append(out, t.more[id]...)
}

// pageUpdate is a page's state as a group commit changes it, applied to
// the table only once the commit is durable.
type pageUpdate struct {
	slot     pageSlot
	crawlers []uint32 // all of them, when more than two
}

// record notes that crawler c (index+1) delivered page id as record seq:
// it returns the page's previous record (0: the page is new) and whether
// another crawler delivered the page before (overlap). pending holds the
// group's updates, read before the table.
func (t *pageTable) record(pending map[pageID]*pageUpdate, id pageID, c uint32, seq uint64) (prev uint64, overlap bool) {
	u, ok := pending[id]
	if !ok {
		s, known := t.m[id]
		if !known {
			pending[id] = &pageUpdate{slot: pageSlot{latest: seq, c: [2]uint32{c, 0}}}
			return 0, false
		}
		u = &pageUpdate{slot: s}
		if _, many := t.more[id]; many {
			u.crawlers = t.crawlers(id, s)
		}
		pending[id] = u
	}
	prev = u.slot.latest
	u.slot.latest = seq
	all := u.crawlers
	if all == nil {
		all = t.crawlers(id, u.slot)
	}
	for _, x := range all {
		if x == c {
			return prev, false
		}
	}
	all = append(all, c)
	if len(all) > maxPageCrawlers {
		all = all[len(all)-maxPageCrawlers:]
	}
	u.slot.c = [2]uint32{all[0], 0}
	if len(all) > 1 {
		u.slot.c[1] = all[1]
	}
	if len(all) > 2 {
		u.crawlers = all
	} else {
		u.crawlers = nil
	}
	return prev, true
}

// apply makes a durable group's updates the table's.
func (t *pageTable) apply(pending map[pageID]*pageUpdate) {
	for id, u := range pending {
		t.m[id] = u.slot
		if len(u.crawlers) > 2 { // (a page's crawlers never drop to two again)
			t.more[id] = append([]uint32(nil), u.crawlers[2:]...)
		}
	}
}

// snapshot writes the table as the state of the log up to cursor, in
// one transaction that replaces the snapshot before it.
func (t *pageTable) snapshot(db *badger.DB, cursor uint64) error {
	var chunks [][]byte
	cur := make([]byte, 0, 64<<10)
	for id, s := range t.m {
		cur = append(cur, id[:]...)
		cur = binary.AppendUvarint(cur, s.latest)
		more := t.more[id]
		n := len(more)
		for _, c := range s.c {
			if c != 0 {
				n++
			}
		}
		cur = append(cur, byte(n))
		for _, c := range s.c {
			if c != 0 {
				cur = binary.AppendUvarint(cur, uint64(c))
			}
		}
		for _, c := range more {
			cur = binary.AppendUvarint(cur, uint64(c))
		}
		if len(cur) >= pageSnapChunk {
			chunks = append(chunks, cur)
			cur = make([]byte, 0, 64<<10)
		}
	}
	if len(cur) > 0 {
		chunks = append(chunks, cur)
	}
	h := binary.AppendUvarint(nil, pageSnapVersion)
	h = binary.AppendUvarint(h, cursor)
	h = binary.AppendUvarint(h, uint64(len(t.m)))
	h = binary.AppendUvarint(h, uint64(len(chunks)))
	h = binary.AppendUvarint(h, uint64(len(t.names)))
	for _, n := range t.names {
		h = appendString(h, n)
	}
	return db.Update(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pPageSnap})
		var stale [][]byte
		for it.Rewind(); it.Valid(); it.Next() {
			if binary.BigEndian.Uint32(it.Item().Key()[len(pPageSnap):]) >= uint32(len(chunks)) {
				stale = append(stale, it.Item().KeyCopy(nil))
			}
		}
		it.Close()
		for _, k := range stale {
			if err := txn.Delete(k); err != nil {
				return err
			}
		}
		for i, c := range chunks {
			if err := txn.Set(binary.BigEndian.AppendUint32(append([]byte(nil), pPageSnap...), uint32(i)), c); err != nil {
				return err
			}
		}
		return txn.Set(kPageSnap, h)
	})
}

// loadPageSnapshot reads the last snapshot: the table and the log
// sequence it reflects (found false: there is none).
func loadPageSnapshot(db *badger.DB) (t *pageTable, cursor uint64, found bool, err error) {
	err = db.View(func(txn *badger.Txn) error {
		it, err := txn.Get(kPageSnap)
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		if err != nil {
			return err
		}
		var chunks uint64
		if err := it.Value(func(v []byte) error {
			d := reader{b: v}
			if d.uvarint() != pageSnapVersion {
				return errors.New("page snapshot of an unknown version")
			}
			cursor = d.uvarint()
			pages := d.uvarint()
			chunks = d.uvarint()
			n := d.uvarint()
			if d.err != nil || pages > 1<<40 || n > 1<<24 {
				return errDamaged
			}
			t = newPageTable(int(pages))
			for range n {
				t.intern(d.string())
			}
			return d.err
		}); err != nil {
			return err
		}
		for i := range uint32(chunks) {
			it, err := txn.Get(binary.BigEndian.AppendUint32(append([]byte(nil), pPageSnap...), i))
			if err != nil {
				return fmt.Errorf("chunk %d: %w", i, err)
			}
			if err := it.Value(func(v []byte) error { return t.decodeChunk(v) }); err != nil {
				return fmt.Errorf("chunk %d: %w", i, err)
			}
		}
		found = true
		return nil
	})
	if err != nil {
		return nil, 0, false, fmt.Errorf("page snapshot: %w", err)
	}
	return t, cursor, found, nil
}

func (t *pageTable) decodeChunk(v []byte) error {
	d := reader{b: v}
	for len(d.b) > 0 && d.err == nil {
		if len(d.b) < len(pageID{}) {
			return errDamaged
		}
		var id pageID
		copy(id[:], d.b)
		d.b = d.b[len(id):]
		s := pageSlot{latest: d.uvarint()}
		n := int(d.byte())
		if n > maxPageCrawlers {
			return errDamaged
		}
		cs := make([]uint32, n)
		for i := range cs {
			c := d.uvarint()
			if c == 0 || c > uint64(len(t.names)) {
				return errDamaged
			}
			cs[i] = uint32(c)
		}
		copy(s.c[:], cs)
		t.m[id] = s
		if n > 2 {
			t.more[id] = cs[2:]
		}
	}
	return d.err
}

// loadLegacyPages builds the table from the per-page states of a store
// written before the table (sp/ keys, kept beside every record until
// then): the state of the whole log.
func loadLegacyPages(db *badger.DB) (t *pageTable, found bool, err error) {
	t = newPageTable(0)
	err = db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pPage, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			var id pageID
			copy(id[:], it.Item().Key()[len(pPage):])
			var ps pageState
			if err := it.Item().Value(ps.decode); err != nil {
				return err
			}
			if len(ps.history) == 0 {
				continue
			}
			found = true
			s := pageSlot{latest: ps.history[len(ps.history)-1]}
			var cs []uint32
			for _, c := range ps.crawlers {
				cs = append(cs, t.intern(c))
			}
			copy(s.c[:], cs)
			t.m[id] = s
			if len(cs) > 2 {
				t.more[id] = cs[2:]
			}
		}
		return nil
	})
	return t, found, err
}

// PageInfo is what the sink keeps of a page.
type PageInfo struct {
	URL    string
	Latest uint64 // the sequence of its latest record
	// History is the sequences of its latest records, newest first, up
	// to Options.History of them.
	History []uint64
	// Crawlers delivered it, first first (up to eight, the oldest
	// forgotten first).
	Crawlers []string
}

// Page returns what the sink keeps of the page at url (found false: no
// record of it was committed).
func (s *Store) Page(url string) (PageInfo, bool, error) {
	id := pageIDOf(url)
	s.mu.Lock()
	slot, ok := s.pages.m[id]
	var crawlers []string
	for _, c := range s.pages.crawlers(id, slot) {
		crawlers = append(crawlers, s.pages.names[c-1])
	}
	s.mu.Unlock()
	if !ok {
		return PageInfo{}, false, nil
	}
	p := PageInfo{URL: url, Latest: slot.latest, Crawlers: crawlers}
	err := s.db.View(func(txn *badger.Txn) error {
		for seq := slot.latest; seq > 0 && len(p.History) < s.opt.History; {
			it, err := txn.Get(logKey(seq))
			if errors.Is(err, badger.ErrKeyNotFound) && seq < s.Start() {
				return nil // (dropped by the retention: the history ends there)
			}
			if err != nil {
				return fmt.Errorf("log entry %d: %w", seq, err)
			}
			p.History = append(p.History, seq)
			var linked bool
			if err := it.Value(func(v []byte) (err error) {
				seq, linked, err = entryPrev(v)
				return err
			}); err != nil {
				return fmt.Errorf("log entry %d: %w", seq, err)
			}
			if !linked {
				// an entry of a store before the table: the rest of the
				// page's history is in its sp/ state
				return s.legacyHistory(txn, id, p.History[len(p.History)-1], &p.History)
			}
		}
		return nil
	})
	return p, true, err
}

// legacyHistory appends, newest first, the sequences before seq that the
// page's sp/ state holds.
func (s *Store) legacyHistory(txn *badger.Txn, id pageID, before uint64, hist *[]uint64) error {
	it, err := txn.Get(append(append([]byte(nil), pPage...), id[:]...))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return nil
	}
	if err != nil {
		return err
	}
	var ps pageState
	if err := it.Value(ps.decode); err != nil {
		return err
	}
	for i := len(ps.history) - 1; i >= 0 && len(*hist) < s.opt.History; i-- {
		if ps.history[i] < before {
			*hist = append(*hist, ps.history[i])
		}
	}
	return nil
}
