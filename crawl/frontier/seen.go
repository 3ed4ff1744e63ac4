package frontier

import (
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"sync"

	"github.com/dgraph-io/badger/v4"
)

// Hash is the seen-set and history key of a URL: a truncated SHA-256.
type Hash [16]byte

// HashURL hashes a normalised URL.
func HashURL(u string) Hash {
	s := sha256.Sum256([]byte(u))
	var h Hash
	copy(h[:], s[:16])
	return h
}

// Seen reports whether the URL was ever admitted.
func (f *Frontier) Seen(u string) (bool, error) {
	h := HashURL(u)
	if f.seen.has(h) {
		return true, nil
	}
	return f.hasKey(cat(pSeen, h[:]))
}

// hasKey reports whether key is in the store.
func (f *Frontier) hasKey(key []byte) (bool, error) {
	var found bool
	err := f.db.View(func(txn *badger.Txn) error {
		_, err := txn.Get(key)
		if err == nil {
			found = true
			return nil
		}
		if errors.Is(err, badger.ErrKeyNotFound) {
			return nil
		}
		return err
	})
	return found, err
}

// A seen mark's value says whether its URL counts in the host's budget
// (hostMeta.Admitted, Stats.Seen): the marks of Add and AdmitFetched do
// (an empty value); the marks of pages recovered from another crawler
// (ImportHistory), and of redirect targets marked by older versions, do
// not (seenUncounted), so a withdrawal gives back only what was taken.
var seenUncounted = []byte{1}

// markSeenUncounted gives h a seen mark that does not count, unless it
// has one already.
func markSeenUncounted(txn *badger.Txn, h Hash) error {
	k := cat(pSeen, h[:])
	if _, err := txn.Get(k); err == nil {
		return nil
	} else if !errors.Is(err, badger.ErrKeyNotFound) {
		return err
	}
	return txn.Set(k, seenUncounted)
}

// seenFront is the bounded in-memory front of the seen-set: two generations
// of hash sets; when the young one is full the old one is dropped. A hit is
// certain (only admitted URLs enter); a miss falls through to Badger, whose
// per-table bloom filters make the negative answer cheap.
type seenFront struct {
	mu       sync.RWMutex
	young    map[uint64]struct{}
	old      map[uint64]struct{}
	genLimit int
}

func newSeenFront(size int) *seenFront {
	g := max(size/2, 1)
	// the maps grow as URLs arrive: a small crawl never pays for a large
	// front (preallocating 64 Ki entries cost 2 MB on every testnet node)
	return &seenFront{young: map[uint64]struct{}{}, old: map[uint64]struct{}{}, genLimit: g}
}

func (s *seenFront) has(h Hash) bool {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.RLock()
	_, ok := s.young[k]
	if !ok {
		_, ok = s.old[k]
	}
	s.mu.RUnlock()
	return ok
}

// remove forgets h (Withdraw). Keys are the hash's first 8 bytes: a URL
// sharing them loses its certain hit and falls through to Badger, which
// holds the full hash.
func (s *seenFront) remove(h Hash) {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.Lock()
	delete(s.young, k)
	delete(s.old, k)
	s.mu.Unlock()
}

func (s *seenFront) add(h Hash) {
	k := binary.LittleEndian.Uint64(h[:8])
	s.mu.Lock()
	if len(s.young) >= s.genLimit {
		s.old, s.young = s.young, make(map[uint64]struct{}, min(s.genLimit, 1<<16)) // a full generation: the next one will fill too
	}
	s.young[k] = struct{}{}
	s.mu.Unlock()
}
