package node

import (
	"context"
	"errors"
	"fmt"

	"golang.org/x/sync/errgroup"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// SeedResult is what became of one seed (RouteSeeds, POST /v1/seeds).
type SeedResult struct {
	URL string `json:"url"` // as given
	// Normalized is the URL as the crawl knows it (empty when it does not
	// parse).
	Normalized string `json:"normalized,omitempty"`
	// Status is queued (in this crawler's frontier), known (this crawler
	// has seen it already: nothing to do), handed_off (in the durable
	// hand-off spool, for Owner) or rejected (Reason says why).
	Status string `json:"status"`
	Owner  string `json:"owner,omitempty"`
	Reason string `json:"reason,omitempty"`
}

// seedRouters bounds the seeds routed at once (RouteSeeds); seedAttempts
// bounds the routings of one seed whose lookups time out.
const (
	seedRouters  = 32
	seedAttempts = 3
)

// Seed statuses.
const (
	SeedQueued    = "queued"
	SeedKnown     = "known"
	SeedHandedOff = "handed_off"
	SeedRejected  = "rejected"
)

// RouteSeeds queues the seeds this crawler owns and hands the others to
// their owners, like discovered links: a node fetches only what it owns. A
// bad seed is reported (and logged) and the others are still routed; the
// error is the hand-off's, when the seeds for other owners could not be
// spooled (they are then rejected). It needs the crawler role.
//
// Seeds are routed side by side, seedRouters at a time, and each such batch
// is queued and handed off before the next is routed: pages flow while the
// later seeds' subnets are still being delegated.
func (n *Node) RouteSeeds(ctx context.Context, seeds []string) ([]SeedResult, error) {
	if n.eng == nil {
		return nil, fmt.Errorf("node: seeds need the crawler role")
	}
	opts := urlnorm.DefaultOptions()
	if n.cfg.Crawl.Normalize != nil {
		opts = *n.cfg.Crawl.Normalize
	}
	norm := urlnorm.New(opts)
	res := make([]SeedResult, 0, len(seeds))
	var errs []error
	queued, handed := 0, 0
	for len(seeds) > 0 {
		batch := seeds[:min(seedRouters, len(seeds))]
		seeds = seeds[len(batch):]
		r, q, h, err := n.routeSeedBatch(ctx, norm, batch)
		res = append(res, r...)
		queued, handed = queued+q, handed+h
		if err != nil {
			errs = append(errs, err)
		}
	}
	n.log.Info("seeds routed", "queued", queued, "handed_off", handed)
	return res, errors.Join(errs...)
}

// routeSeedBatch routes seeds side by side, then queues this crawler's and
// hands off the others; it returns the seeds' results and how many were
// queued and handed off.
func (n *Node) routeSeedBatch(ctx context.Context, norm *urlnorm.Normalizer, seeds []string) ([]SeedResult, int, int, error) {
	res := make([]SeedResult, len(seeds))
	var own []string
	ownAt := map[string][]int{} // normalised URL → its results
	var foreign []crawl.Routed
	var foreignAt []int
	reject := func(i int, err error) {
		res[i].Status, res[i].Reason = SeedRejected, err.Error()
		n.log.Warn("seed rejected", "seed", seeds[i], "err", err)
	}
	// Routing a seed may delegate its subnet (probes that each take a
	// round trip): route them side by side, as the engine's workers route
	// links, then queue and hand off in seed order.
	routes := make([]crawl.Route, len(seeds))
	errs := make([]error, len(seeds))
	var g errgroup.Group
	g.SetLimit(seedRouters)
	for i, s := range seeds {
		res[i].URL = s
		u, err := norm.Parse(s)
		if err != nil {
			errs[i] = err
			continue
		}
		res[i].Normalized = u.String()
		g.Go(func() error {
			// a host lookup that timed out (a slow resolver) is tried
			// again: a seed is rejected for what it is, not for the
			// network's weather (an owner that cannot be decided now is
			// no error: the seed waits in the hand-off spool)
			for attempt := 1; ; attempt++ {
				a, err := n.router.lookup(ctx, u.Hostname())
				if err == nil {
					routes[i], err = n.router.Route(ctx, u, a)
				}
				errs[i] = err
				if err == nil || attempt == seedAttempts || ctx.Err() != nil || !crawl.TransientRouteError(err) {
					return nil
				}
				n.log.Debug("seed routing timed out; trying again", "seed", s, "attempt", attempt, "err", err)
			}
		})
	}
	_ = g.Wait()
	for i := range seeds {
		if errs[i] != nil {
			reject(i, errs[i])
			continue
		}
		rt, k := routes[i], res[i].Normalized
		res[i].Owner = string(rt.Owner)
		if !rt.Mine {
			foreign = append(foreign, crawl.Routed{URL: k, Route: rt})
			foreignAt = append(foreignAt, i)
			continue
		}
		if len(ownAt[k]) == 0 {
			if seen, err := n.eng.Frontier().Seen(k); err == nil && seen {
				res[i].Status = SeedKnown
				continue
			}
			own = append(own, k)
		}
		ownAt[k] = append(ownAt[k], i)
	}
	for _, is := range ownAt {
		for _, i := range is {
			res[i].Status = SeedQueued
		}
	}
	added, bad := n.eng.AddSeeds(ctx, own)
	for _, b := range bad {
		is, ok := ownAt[b.Seed]
		if !ok { // the whole batch ("(all)"): every own seed failed
			for _, is := range ownAt {
				for _, i := range is {
					reject(i, b.Err)
				}
			}
			added = 0
			continue
		}
		for _, i := range is {
			reject(i, b.Err)
		}
	}
	var err error
	if len(foreign) > 0 {
		if err = n.router.Handoff(ctx, foreign); err != nil {
			err = fmt.Errorf("node: hand-off of seeds: %w", err)
			for _, i := range foreignAt {
				reject(i, err)
			}
		} else {
			for _, i := range foreignAt {
				res[i].Status = SeedHandedOff
			}
		}
	}
	handed := 0
	if err == nil {
		handed = len(foreign)
	}
	return res, added, handed, err
}
