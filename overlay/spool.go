package overlay

import (
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// spool is the durable store of hand-offs not yet acknowledged by their
// owner (DESIGN: "hand-offs and carriers live in Badger until
// acknowledged"). One entry per accepted chunk of URLs, keyed by subnet and
// a sequence number so a restart reloads them in order; an entry is deleted
// only after the owner acknowledged every URL in it.
type spool struct {
	db  *badger.DB
	seq uint64 // past the largest stored sequence number, set by load
}

// spoolEntry is one stored chunk of URLs for one subnet.
type spoolEntry struct {
	key  []byte
	urls []string
}

const spoolPrefix = 'h'

// spoolMetaKey holds the hierarchy snapshot id the entries' subnets refer to.
var spoolMetaKey = []byte("meta/snapshot")

func spoolKey(s hierarchy.NodeID, seq uint64) []byte {
	k := make([]byte, 13)
	k[0] = spoolPrefix
	binary.BigEndian.PutUint32(k[1:], uint32(s))
	binary.BigEndian.PutUint64(k[5:], seq)
	return k
}

// openSpool opens the hand-off spool in dir, or in memory when inMemory
// (tests and benches only: a crash loses it).
func openSpool(dir string, inMemory, syncWrites bool, log *slog.Logger) (*spool, error) {
	var opts badger.Options
	// Every value stays in the LSM tree, on disk too: values in the value
	// log were never reclaimed (nothing runs its GC, and a small spool
	// rarely compacts), so an acknowledged hand-off kept its disk space for
	// good; in the tree, compaction drops what was removed. A chunk is at
	// most maxSpoolChunkBytes of URLs plus ≤ 2 framing bytes per URL and a
	// header (HandoffAll chunks so; in memory there is no value log at all).
	valueThreshold := int64(maxSpoolChunkBytes + 16<<10)
	if inMemory {
		opts = badger.DefaultOptions("").WithInMemory(true)
	} else {
		opts = badger.DefaultOptions(dir).WithSyncWrites(syncWrites)
	}
	// A spool holds seconds of hand-offs: small tables and caches keep a
	// hundred in-process peers affordable. The memtable is the smallest
	// Badger accepts with this value threshold (which must stay within a
	// transaction's bound, 15 % of the memtable: 2 MiB allows 307 KiB);
	// its arena (1.3 × 2 MiB) is allocated whole, on the heap.
	opts = opts.WithMemTableSize(spoolMemTableSize).
		WithNumMemtables(2).
		WithValueLogFileSize(16 << 20).
		WithBaseTableSize(2 << 20).
		WithValueThreshold(valueThreshold).
		WithBlockCacheSize(1 << 20).
		WithIndexCacheSize(1 << 20).
		WithNumCompactors(2).
		WithLogger(badgerLog{log})
	db, err := badger.Open(opts)
	if err != nil {
		return nil, fmt.Errorf("overlay: hand-off spool %q: %w", dir, err)
	}
	return &spool{db: db}, nil
}

// spoolMemTableSize is the spool's memtable size (see openSpool).
const spoolMemTableSize = 2 << 20

// maxSpoolChunkBytes bounds the URL bytes of one spool entry (one chunk):
// small enough for Badger's in-memory mode, which has no value log and
// refuses values above its value threshold (at most 1 MiB).
const maxSpoolChunkBytes = 256 << 10

// spoolPut is one subnet's chunks for put; chunk i gets sequence number first+i.
type spoolPut struct {
	s      hierarchy.NodeID
	ip     netip.Addr
	first  uint64
	chunks [][]string
}

// put stores every chunk of puts durably in one commit and returns their
// entries, per put. It returns only after Badger committed them (fsynced
// when the spool syncs writes).
func (sp *spool) put(puts []spoolPut) ([][]spoolEntry, error) {
	wb := sp.db.NewWriteBatch()
	defer wb.Cancel()
	out := make([][]spoolEntry, len(puts))
	for i, p := range puts {
		out[i] = make([]spoolEntry, len(p.chunks))
		for j, urls := range p.chunks {
			k := spoolKey(p.s, p.first+uint64(j))
			if err := wb.Set(k, encodeSpoolValue(p.ip, urls)); err != nil {
				return nil, fmt.Errorf("overlay: hand-off spool: %w", err)
			}
			out[i][j] = spoolEntry{key: k, urls: urls}
		}
	}
	if err := wb.Flush(); err != nil {
		return nil, fmt.Errorf("overlay: hand-off spool: %w", err)
	}
	return out, nil
}

// remove deletes acknowledged entries.
func (sp *spool) remove(keys [][]byte) error {
	wb := sp.db.NewWriteBatch()
	defer wb.Cancel()
	for _, k := range keys {
		if err := wb.Delete(k); err != nil {
			return err
		}
	}
	return wb.Flush()
}

// load returns every stored entry grouped by subnet and block of its
// address (handoffKey), in spool order, with the address last stored for
// each, and sets the next sequence
// number past the largest stored one.
//
// Subnet ids are only meaningful within one hierarchy snapshot: when the
// spool was written under another one, each entry is re-addressed to the
// subnet of its stored address in tree (entries without an address keep
// their id if tree has it).
func (sp *spool) load(tree delegation.Tree, log *slog.Logger) (map[handoffKey]*pending, int, error) {
	out := map[handoffKey]*pending{}
	n := 0
	var bad [][]byte
	snap := tree.ID()
	remap := false
	err := sp.db.Update(func(txn *badger.Txn) error {
		it, err := txn.Get(spoolMetaKey)
		switch {
		case errors.Is(err, badger.ErrKeyNotFound):
		case err != nil:
			return err
		default:
			old, err := it.ValueCopy(nil)
			if err != nil {
				return err
			}
			remap = string(old) != string(snap[:])
		}
		return txn.Set(spoolMetaKey, snap[:])
	})
	if err != nil {
		return nil, 0, fmt.Errorf("overlay: hand-off spool: %w", err)
	}
	if remap {
		log.Warn("overlay: hand-off spool written under another hierarchy snapshot; re-addressing its entries by their addresses")
	}
	err = sp.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{PrefetchValues: true, PrefetchSize: 64, Prefix: []byte{spoolPrefix}})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			k := item.KeyCopy(nil)
			if len(k) != 13 {
				bad = append(bad, k)
				continue
			}
			s := hierarchy.NodeID(binary.BigEndian.Uint32(k[1:]))
			seq := binary.BigEndian.Uint64(k[5:])
			sp.seq = max(sp.seq, seq+1)
			var ip netip.Addr
			var urls []string
			err := item.Value(func(v []byte) error {
				var err error
				ip, urls, err = decodeSpoolValue(v)
				return err
			})
			if err != nil {
				log.Error("overlay: dropping corrupt hand-off spool entry", "subnet", s, "seq", seq, "err", err)
				bad = append(bad, k)
				continue
			}
			if remap && ip.IsValid() {
				s = tree.SmallestNonUnary(ip)
			}
			if int(s) >= tree.Len() || s == hierarchy.None {
				log.Error("overlay: dropping hand-off spool entry of a subnet not in the hierarchy", "subnet", s, "urls", len(urls))
				bad = append(bad, k)
				continue
			}
			hk := keyOf(s, ip)
			e := out[hk]
			if e == nil {
				e = &pending{}
				out[hk] = e
			}
			if ip.IsValid() {
				e.ip = ip
			}
			e.ents = append(e.ents, spoolEntry{key: k, urls: urls})
			e.n += len(urls)
			n += len(urls)
		}
		return nil
	})
	if err != nil {
		return nil, 0, fmt.Errorf("overlay: hand-off spool: %w", err)
	}
	if len(bad) > 0 {
		if err := sp.remove(bad); err != nil {
			return nil, 0, fmt.Errorf("overlay: hand-off spool: %w", err)
		}
	}
	return out, n, nil
}

func (sp *spool) close() error { return sp.db.Close() }

// Value: address (length-prefixed, 0 for none), URL count, then each URL
// length-prefixed; all lengths uvarints.
func encodeSpoolValue(ip netip.Addr, urls []string) []byte {
	size := 1 + 16 + binary.MaxVarintLen32
	for _, u := range urls {
		size += binary.MaxVarintLen32 + len(u)
	}
	b := make([]byte, 0, size)
	ab, _ := ip.MarshalBinary()
	b = binary.AppendUvarint(b, uint64(len(ab)))
	b = append(b, ab...)
	b = binary.AppendUvarint(b, uint64(len(urls)))
	for _, u := range urls {
		b = binary.AppendUvarint(b, uint64(len(u)))
		b = append(b, u...)
	}
	return b
}

var errSpoolValue = errors.New("malformed spool value")

func decodeSpoolValue(b []byte) (netip.Addr, []string, error) {
	next := func() ([]byte, bool) {
		n, k := binary.Uvarint(b)
		if k <= 0 || n > uint64(len(b)-k) {
			return nil, false
		}
		v := b[k : k+int(n)]
		b = b[k+int(n):]
		return v, true
	}
	ab, ok := next()
	if !ok {
		return netip.Addr{}, nil, errSpoolValue
	}
	var ip netip.Addr
	if len(ab) > 0 {
		if err := ip.UnmarshalBinary(ab); err != nil {
			return netip.Addr{}, nil, err
		}
	}
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt == 0 || cnt > maxHandoffURLs {
		return netip.Addr{}, nil, errSpoolValue
	}
	b = b[k:]
	urls := make([]string, 0, cnt)
	for range cnt {
		u, ok := next()
		if !ok || len(u) == 0 {
			return netip.Addr{}, nil, errSpoolValue
		}
		urls = append(urls, string(u))
	}
	if len(b) != 0 {
		return netip.Addr{}, nil, errSpoolValue
	}
	return ip, urls, nil
}

// badgerLog routes Badger's warnings and errors to slog.
type badgerLog struct{ l *slog.Logger }

func (b badgerLog) Errorf(f string, a ...any)   { b.l.Error("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLog) Warningf(f string, a ...any) { b.l.Warn("badger: " + fmt.Sprintf(f, a...)) }
func (b badgerLog) Infof(string, ...any)        {}
func (b badgerLog) Debugf(string, ...any)       {}
