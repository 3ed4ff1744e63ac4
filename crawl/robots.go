package crawl

import (
	"encoding/json"
	"log/slog"

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
