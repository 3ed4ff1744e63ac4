package sink

import (
	"bytes"
	"errors"
	"fmt"
	"net/netip"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/crawl/pack"
)

// The sink indexes pages by the address their crawler placed their host at
// (pack.Record.Addr), so that the crawler that owns a subnet now can
// recover the subnet's page history from the sink when its previous owner
// is dead (UbiCrawler's page recovery, with the sink as the one place that
// outlives a crawler): the query reads a range of the index, never the
// whole log.
//
// Key layout (beside store.go's):
//
//	sa/<addr16><id16>   page id under the address its record placed it at (no value)
//
// A record whose address is already the index's (most revisits) rewrites
// the same key. A page whose address changed keeps its older key: a query
// reads the page's latest record and passes over keys it no longer
// matches.
var pPlaced = []byte("sa/")

const placedKeyLen = 3 + 16 + 16

// MaxPlacedLimit bounds the pages one PlacedPages call returns.
const MaxPlacedLimit = 1000

// BadQueryError is a PlacedQuery that cannot be answered as asked.
type BadQueryError struct{ Reason string }

func (e *BadQueryError) Error() string { return "sink: bad page query: " + e.Reason }

// placedScanFactor bounds the index keys one call examines, in multiples
// of its limit: keys of pages that moved, or whose records the retention
// dropped, cost a look each and are passed over.
const placedScanFactor = 4

func placedKey(a netip.Addr, id pageID) []byte {
	k := make([]byte, 0, placedKeyLen)
	k = append(k, pPlaced...)
	a16 := a.As16()
	k = append(k, a16[:]...)
	return append(k, id[:]...)
}

// PlacedQuery selects the pages placed in an address range: a subnet's
// (hierarchy node's) range, or a block's within it.
type PlacedQuery struct {
	First, Last netip.Addr // inclusive, one family
	// After is the cursor of the previous answer (PlacedAnswer.Next);
	// empty: from First.
	After []byte
	Limit int // 1 … MaxPlacedLimit
}

// check validates q and returns the index keys of its range's bounds and
// where to start.
func (q PlacedQuery) check() (from, to []byte, err error) {
	switch {
	case !q.First.IsValid() || !q.Last.IsValid():
		return nil, nil, errors.New("range: first and last addresses are required")
	case q.First.Unmap().Is4() != q.Last.Unmap().Is4():
		return nil, nil, fmt.Errorf("range %v … %v: the two ends are of different families", q.First, q.Last)
	case q.Last.Unmap().Less(q.First.Unmap()):
		return nil, nil, fmt.Errorf("range %v … %v: last before first", q.First, q.Last)
	case q.Limit < 1 || q.Limit > MaxPlacedLimit:
		return nil, nil, fmt.Errorf("limit %d: want 1 to %d", q.Limit, MaxPlacedLimit)
	}
	from = placedKey(q.First.Unmap(), pageID{})
	to = placedKey(q.Last.Unmap(), pageID{0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff})
	if len(q.After) > 0 {
		if len(q.After) != placedKeyLen-len(pPlaced) {
			return nil, nil, fmt.Errorf("cursor of %d bytes: want %d (an answer's next, as it came)", len(q.After), placedKeyLen-len(pPlaced))
		}
		after := append(append([]byte(nil), pPlaced...), q.After...)
		if bytes.Compare(after, from) < 0 || bytes.Compare(after, to) > 0 {
			return nil, nil, errors.New("cursor outside the range")
		}
		// the key just after the cursor's
		from = append(after, 0)
	}
	return from, to, nil
}

// PlacedPage is a page's latest record, found under the address its host
// was placed at.
type PlacedPage struct {
	Seq    uint64
	Record pack.Record
	cursor []byte // its index key's, for PlacedQuery.After
}

// PlacedAnswer is one page of a PlacedQuery.
type PlacedAnswer struct {
	Pages []PlacedPage
	// Next is the cursor to continue from (PlacedQuery.After); Done: the
	// range holds nothing past it.
	Next []byte
	Done bool
}

// PlacedPages returns the latest records of the pages placed in q's range,
// in address order, up to q.Limit of them, from the address index (the
// keys of the range only). A page whose latest record places it elsewhere
// now, or which the retention dropped, is passed over.
func (s *Store) PlacedPages(q PlacedQuery) (PlacedAnswer, error) {
	from, to, err := q.check()
	if err != nil {
		return PlacedAnswer{}, &BadQueryError{Reason: err.Error()}
	}
	type hit struct {
		key []byte
		id  pageID
	}
	var hits []hit
	more := false
	err = s.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pPlaced})
		defer it.Close()
		for it.Seek(from); it.Valid(); it.Next() {
			k := it.Item().Key()
			if bytes.Compare(k, to) > 0 {
				break
			}
			if len(hits) == q.Limit*placedScanFactor {
				more = true
				break
			}
			h := hit{key: it.Item().KeyCopy(nil)}
			copy(h.id[:], k[len(pPlaced)+16:])
			hits = append(hits, h)
		}
		return nil
	})
	if err != nil {
		return PlacedAnswer{}, err
	}
	// (a commit applies its pages to the table under s.mu: every key seen
	// above has its page's latest record there, and the log entries are
	// read in a transaction that begins after)
	latest := make([]uint64, len(hits))
	s.mu.Lock()
	for i, h := range hits {
		latest[i] = s.pages.m[h.id].latest
	}
	s.mu.Unlock()
	var ans PlacedAnswer
	err = s.db.View(func(txn *badger.Txn) error {
		for i, h := range hits {
			if len(ans.Pages) == q.Limit {
				more = true
				break
			}
			ans.Next = h.key[len(pPlaced):]
			if latest[i] == 0 {
				continue // (an index key without a page: cannot happen)
			}
			item, err := txn.Get(logKey(latest[i]))
			if errors.Is(err, badger.ErrKeyNotFound) {
				continue // dropped by the retention
			}
			if err != nil {
				return fmt.Errorf("sink: log entry %d: %w", latest[i], err)
			}
			var e Entry
			if err := item.Value(e.decode); err != nil {
				return fmt.Errorf("sink: log entry %d: %w", latest[i], err)
			}
			if a := e.Record.Addr.Unmap().As16(); !bytes.Equal(a[:], h.key[len(pPlaced):len(pPlaced)+16]) {
				continue // placed elsewhere since
			}
			ans.Pages = append(ans.Pages, PlacedPage{Seq: latest[i], Record: e.Record, cursor: ans.Next})
		}
		return nil
	})
	if err != nil {
		return PlacedAnswer{}, err
	}
	ans.Done = !more
	if ans.Next == nil {
		ans.Next = q.After
	}
	return ans, nil
}
