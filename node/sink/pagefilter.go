package sink

import (
	"encoding/binary"

	"github.com/dgraph-io/badger/v4"
)

// pageFilter is a Bloom filter of the page keys the store holds: a new
// page (the common case of a crawl) is known to be new without a Badger
// read, which was half of a commit's work. A false positive costs only
// that read; there are no false negatives, since every key written is
// added (a key added by a transaction that failed is a false positive).
// It grows by doubling, rebuilt from the stored keys.
type pageFilter struct {
	bits  []uint64
	n, k  int // keys added; hashes per key
	limit int // keys before it grows
}

// bitsPerKey at 16 with 8 hashes: about 0.05 % false positives.
const (
	bitsPerKey   = 16
	filterHashes = 8
	minFilterKey = 1 << 20
)

func newPageFilter(keys int) *pageFilter {
	capacity := max(minFilterKey, 2*keys)
	return &pageFilter{bits: make([]uint64, capacity*bitsPerKey/64), k: filterHashes, limit: capacity}
}

// the page key's 16 hash bytes give the two halves of double hashing
func (f *pageFilter) positions(key []byte, fn func(bit uint64)) {
	h := key[len(key)-16:]
	a, b := binary.LittleEndian.Uint64(h), binary.LittleEndian.Uint64(h[8:])|1
	m := uint64(len(f.bits) * 64)
	for i := range uint64(f.k) {
		fn((a + i*b) % m)
	}
}

func (f *pageFilter) add(key []byte) {
	f.positions(key, func(bit uint64) { f.bits[bit/64] |= 1 << (bit % 64) })
	f.n++
}

func (f *pageFilter) mayContain(key []byte) bool {
	in := true
	f.positions(key, func(bit uint64) { in = in && f.bits[bit/64]&(1<<(bit%64)) != 0 })
	return in
}

// full reports whether the filter holds as many keys as it was sized for.
func (f *pageFilter) full() bool { return f.n >= f.limit }

// loadPageFilter builds the filter from the stored page keys (keys only).
func loadPageFilter(db *badger.DB, atLeast int) (*pageFilter, error) {
	var keys [][]byte
	err := db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pPage})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			keys = append(keys, it.Item().KeyCopy(nil))
		}
		return nil
	})
	if err != nil {
		return nil, err
	}
	f := newPageFilter(max(len(keys), atLeast))
	for _, k := range keys {
		f.add(k)
	}
	return f, nil
}
