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

// robotsRetries counts, per host, the consecutive refusals for an
// unreachable robots.txt. Entries go once the host answers; the map is
// cleared if it ever holds maxRobotsHosts hosts (counts then restart, which
// only delays giving up).
type robotsRetries struct {
	mu sync.Mutex
	n  map[string]int
}

const maxRobotsHosts = 100_000

// again reports whether another try is allowed for host after a refusal.
// Once a host has used its retries, further URLs of it are given up at once
// while robots.txt stays unreachable.
func (r *robotsRetries) again(host string) bool {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.n == nil || len(r.n) >= maxRobotsHosts {
		r.n = map[string]int{}
	}
	r.n[host]++
	return r.n[host] <= maxRobotsRetries
}

// reachable forgets host's refusals: its robots.txt answered.
func (r *robotsRetries) reachable(host string) {
	r.mu.Lock()
	delete(r.n, host)
	r.mu.Unlock()
}
