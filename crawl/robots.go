package crawl

import (
	"encoding/json"
	"log/slog"
	"sync"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
)

// durableRobots keeps robots.txt outcomes in the frontier's Badger store,
// behind the fetcher's bounded in-memory cache, so a restarted crawler does
// not refetch every robots.txt.
type durableRobots struct {
	mem *fetch.MemoryRobotsCache
	f   *frontier.Frontier
	log *slog.Logger
}

func (d *durableRobots) Get(origin string) (fetch.RobotsEntry, bool) {
	if e, ok := d.mem.Get(origin); ok {
		return e, true
	}
	v, ok, err := d.f.GetRobots(origin)
	if err != nil || !ok {
		return fetch.RobotsEntry{}, false
	}
	var e fetch.RobotsEntry
	if err := json.Unmarshal(v, &e); err != nil {
		d.log.Warn("stored robots entry unreadable, refetching", "origin", origin, "err", err)
		return fetch.RobotsEntry{}, false
	}
	d.mem.Put(origin, e)
	return e, true
}

func (d *durableRobots) Put(origin string, e fetch.RobotsEntry) {
	d.mem.Put(origin, e)
	v, err := json.Marshal(e)
	if err == nil {
		err = d.f.PutRobots(origin, v)
	}
	if err != nil {
		d.log.Warn("robots entry not stored", "origin", origin, "err", err)
	}
}

// maxRobotsRetries bounds how often a URL refused because its host's
// robots.txt was unreachable is tried again (each after the fetcher's
// RobotsErrorTTL) before it is given up — as Heritrix retries a failed
// robots.txt prerequisite a bounded number of times.
const maxRobotsRetries = 3

// retryCounter counts consecutive failures per key (a host, a URL). Entries
// go once the key succeeds or is given up; the map is cleared if it ever
// holds maxRetryKeys keys (counts then restart, which only delays giving up).
type retryCounter struct {
	mu sync.Mutex
	n  map[string]int
}

const maxRetryKeys = 100_000

// again counts a failure of key and reports which attempt failed (1 for the
// first) and whether another is allowed within limit retries.
func (r *retryCounter) again(key string, limit int) (int, bool) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil || len(r.n) >= maxRetryKeys {
		r.n = map[string]int{}
	}
	r.n[key]++
	return r.n[key], r.n[key] <= limit
}

// forget drops key's count.
func (r *retryCounter) forget(key string) {
	r.mu.Lock()
	delete(r.n, key)
	r.mu.Unlock()
}

// count returns key's current failure count (0 if none).
func (r *retryCounter) count(key string) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.n[key]
}
