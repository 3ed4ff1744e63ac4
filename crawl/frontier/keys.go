package frontier

import (
	"encoding/binary"
	"errors"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// Key layout (all under the "f" namespace of a shared DB):
//
//	fq/<host>\x00<seq8>   queued item                       → item
//	fm/<host>             host meta (pending, admitted…)     → hostMeta
//	fh/<seq8>             ready-host list, FIFO              → host
//	fs/<hash16>           seen-set                           → empty
//	fp/<hash16>           page history                       → History
//	fr/<unixnano8><hash16> revisit schedule                  → item
//	fb/<origin>           robots.txt cache                   → caller's bytes
//	fo/<hash16>           URLs handed off to other crawlers  → empty
//	fx/seq                sequence lease
//	fz/<queue key>        corrupt queue entries, moved aside → their bytes
//	fg/<hash16>           URLs refused by the address guard  → item
var (
	pQueue     = []byte("fq/")
	pHostMeta  = []byte("fm/")
	pReady     = []byte("fh/")
	pSeen      = []byte("fs/")
	pPage      = []byte("fp/")
	pRevisit   = []byte("fr/")
	pRobots    = []byte("fb/")
	pHandedOff = []byte("fo/")
	pBadQueue  = []byte("fz/")
	pRefused   = []byte("fg/")
	kSeq       = []byte("fx/seq")
)

type hostMeta struct {
	Pending  int64 // queued and not Done
	Admitted int64 // ever admitted (per-host budget)
	Ready    bool  // on the ready list
	ReadySeq uint64
}

func (m hostMeta) encode() []byte {
	b := binary.AppendVarint(nil, m.Pending)
	b = binary.AppendVarint(b, m.Admitted)
	r := byte(0)
	if m.Ready {
		r = 1
	}
	b = append(b, r)
	return binary.AppendUvarint(b, m.ReadySeq)
}

func decodeHostMeta(b []byte) (hostMeta, error) {
	var m hostMeta
	var n int
	if m.Pending, n = binary.Varint(b); n <= 0 {
		return m, errors.New("frontier: bad host meta")
	}
	b = b[n:]
	if m.Admitted, n = binary.Varint(b); n <= 0 || len(b) < n+1 {
		return m, errors.New("frontier: bad host meta")
	}
	m.Ready = b[n] == 1
	b = b[n+1:]
	if m.ReadySeq, n = binary.Uvarint(b); n <= 0 {
		return m, errors.New("frontier: bad host meta")
	}
	return m, nil
}

func encodeItem(it Item) []byte {
	b := binary.AppendUvarint(nil, uint64(len(it.URL)))
	b = append(b, it.URL...)
	b = binary.AppendUvarint(b, uint64(len(it.Host)))
	b = append(b, it.Host...)
	b = binary.AppendUvarint(b, uint64(it.Depth))
	if it.Revisit {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	return b
}

func decodeItem(b []byte) (Item, error) {
	var it Item
	str := func() (string, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || uint64(len(b)-k) < n {
			return "", false
		}
		s := string(b[k : k+int(n)])
		b = b[k+int(n):]
		return s, true
	}
	var ok bool
	if it.URL, ok = str(); !ok {
		return it, errors.New("frontier: bad item")
	}
	if it.Host, ok = str(); !ok {
		return it, errors.New("frontier: bad item")
	}
	d, k := binary.Uvarint(b)
	if k <= 0 || len(b) < k+1 {
		return it, errors.New("frontier: bad item")
	}
	it.Depth = int(d)
	it.Revisit = b[k] == 1
	return it, nil
}

func cat(parts ...[]byte) []byte {
	n := 0
	for _, p := range parts {
		n += len(p)
	}
	out := make([]byte, 0, n)
	for _, p := range parts {
		out = append(out, p...)
	}
	return out
}

func u64(v uint64) []byte { return binary.BigEndian.AppendUint64(nil, v) }

func queuePrefix(host string) []byte { return cat(pQueue, []byte(host), []byte{0}) }

func getHostMeta(txn *badger.Txn, host string) (hostMeta, error) {
	it, err := txn.Get(cat(pHostMeta, []byte(host)))
	if errors.Is(err, badger.ErrKeyNotFound) {
		return hostMeta{}, nil
	}
	if err != nil {
		return hostMeta{}, err
	}
	var m hostMeta
	err = it.Value(func(v []byte) error {
		var err error
		m, err = decodeHostMeta(v)
		return err
	})
	return m, err
}

// countPrefix counts the keys under prefix.
func countPrefix(txn *badger.Txn, prefix []byte) int64 {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: prefix})
	defer it.Close()
	n := int64(0)
	for it.Rewind(); it.Valid(); it.Next() {
		n++
	}
	return n
}

func hasQueued(txn *badger.Txn, host string) bool {
	it := txn.NewIterator(badger.IteratorOptions{Prefix: queuePrefix(host), PrefetchValues: false})
	defer it.Close()
	it.Rewind()
	return it.Valid()
}

func revisitKey(t time.Time, h Hash) []byte {
	return cat(pRevisit, u64(uint64(t.UnixNano())), h[:])
}
