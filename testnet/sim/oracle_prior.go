package sim

import (
	"context"
	"math/rand/v2"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// countryPrior is where the hosts of one country are: positions with
// weights, their fibre distances to every crawler, and the first probe.
type countryPrior struct {
	pi    []float64
	d     [][]float64
	prior *oraclePrior
}

// oracleCountry is the registry country of s or of its nearest ancestor
// that has one (what micra reads from the hierarchy).
func oracleCountry(w *World, s hierarchy.NodeID) string {
	for id := s; id != hierarchy.None && id != hierarchy.Root; id = w.Tree.Parent(id) {
		if c := w.Tree.Node(id).Country; c != "" {
			return c
		}
	}
	return ""
}

// countryPriors gives every host the prior of its registry country: up to
// per positions of addresses drawn like uniform hosts in that country (IPv4
// addresses only: with --ipv6 the IPv6 hosts get their country's IPv4
// positions). It returns ctx.Err() when ctx ends first.
func (w *World) countryPriors(ctx context.Context, cfg Config, o *oracleModel, per, draws int) ([]*countryPrior, int, error) {
	pl, err := newPlacer(w.Tree, w.Model)
	if err != nil {
		return nil, 0, err
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, seedOf("oracle/positions")))
	pool := map[string][]world.Endpoint{}
	var global []world.Endpoint
	for i := range draws {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		ep, s, err := pl.draw(rng, nil, nil)
		if err != nil {
			return nil, 0, err
		}
		if cc := oracleCountry(w, s); cc != "" && len(pool[cc]) < per {
			pool[cc] = append(pool[cc], ep)
		}
		if len(global) < per {
			global = append(global, ep)
		}
	}
	made := map[string]*countryPrior{}
	var keys []string
	// a prior's distances are positions × crawlers: with 10,000 crawlers,
	// ctx is looked at every few positions
	prior := func(key string, pos []world.Endpoint) (*countryPrior, error) {
		if cp, ok := made[key]; ok {
			return cp, nil
		}
		cp := &countryPrior{pi: make([]float64, len(pos)), d: make([][]float64, len(pos))}
		for m := range pos {
			if m%oracleCtxEvery == 0 {
				if err := ctx.Err(); err != nil {
					return nil, err
				}
			}
			cp.pi[m] = 1 / float64(len(pos))
			cp.d[m] = o.distances(&pos[m])
		}
		made[key] = cp
		keys = append(keys, key)
		return cp, nil
	}
	out := make([]*countryPrior, len(w.Hosts))
	fallbacks := 0
	for i := range w.Hosts {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, 0, err
			}
		}
		h := &w.Hosts[i]
		cc := oracleCountry(w, w.Tree.SmallestNonUnary(h.Addr))
		if pos, ok := pool[cc]; ok {
			if out[i], err = prior(cc, pos); err != nil {
				return nil, 0, err
			}
			continue
		}
		fallbacks++
		if p, ok := w.Model.Geo().CountryCentroid(cc); ok && cc != "" {
			out[i], err = prior("centroid "+cc, []world.Endpoint{w.Model.EndpointAt(h.Addr, p)})
		} else {
			out[i], err = prior("", global)
		}
		if err != nil {
			return nil, 0, err
		}
	}
	// the prior's choice depends on the country only (the host's own access
	// delay shifts every floor alike)
	// seconds per country with a large prior: ctx is looked at before each
	// country and, in priorChoiceCtx, every few positions
	if err := parallelCtx(ctx, cfg.Workers, len(keys), 1, func(k int) {
		cp := made[keys[k]]
		v := o.mixView(0, cp.pi, cp.d, nil)
		cp.prior, _ = o.priorChoiceCtx(ctx, &v) // nil when cut short: not returned
	}); err != nil {
		return nil, 0, err
	}
	return out, fallbacks, nil
}
