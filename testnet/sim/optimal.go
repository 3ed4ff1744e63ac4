package sim

import (
	"context"
	"github.com/micra-crawler/micra/hierarchy"
	"math"
	"sync"

	"github.com/micra-crawler/micra/data/geo"
	"github.com/micra-crawler/micra/testnet/world"
)

// computeOptimal finds every host's optimal crawler: the lowest modelled
// mean RTT (no jitter; the mean is monotonic in the floor RTT, so the floor
// ranks). It is exact without scanning every crawler per host:
//
//   - formula mode: the nearest crawler by distance gives an upper bound U;
//     since stretch ≥ 1, a crawler d km away has RTT ≥ d/100 ms + both access
//     delays, so only crawlers within (U − access) × 100 km can beat it —
//     a near-first search on a spherical k-d tree whose radius shrinks as
//     better crawlers turn up;
//   - matrix mode: the RTT depends on the host only through its site and its
//     own access delay, so the best crawler is computed once per site.
//
// It returns ctx.Err() when ctx ends first (a million hosts are seconds of
// work), leaving Optimal incomplete.
func (w *World) computeOptimal(ctx context.Context, workers int) error {
	n := len(w.Hosts)
	w.Optimal = make([]int32, n)
	w.OptimalRTT = make([]float64, n)
	m := w.Model
	if m.Matrix() != nil {
		perSite := map[int]int32{}
		var sites []int
		for i := range w.Hosts {
			if i%ctxEvery == 0 {
				if err := ctx.Err(); err != nil {
					return err
				}
			}
			if _, ok := perSite[w.Hosts[i].Site]; !ok {
				perSite[w.Hosts[i].Site] = -1
				sites = append(sites, w.Hosts[i].Site)
			}
		}
		best := make([]int32, len(sites))
		// one scan of every crawler per site
		if err := parallelCtx(ctx, workers, len(sites), max(1, ctxEvery/max(1, len(w.CrawlerE))), func(k int) {
			var rep *world.Endpoint
			for i := range w.Hosts {
				if w.Hosts[i].Site == sites[k] {
					rep = &w.Hosts[i]
					break
				}
			}
			best[k] = w.scanAll(rep)
		}); err != nil {
			return err
		}
		for k, s := range sites {
			perSite[s] = best[k]
		}
		return parallelCtx(ctx, workers, n, ctxEvery, func(i int) {
			c := perSite[w.Hosts[i].Site]
			w.Optimal[i] = c
			w.OptimalRTT[i] = m.MeanRTT(&w.CrawlerE[c], &w.Hosts[i])
		})
	}
	pts := make([]geo.Point, len(w.CrawlerE))
	minAcc := math.Inf(1)
	for i := range w.CrawlerE {
		pts[i] = w.CrawlerE[i].Loc
		minAcc = math.Min(minAcc, w.CrawlerE[i].AccessMs)
	}
	ix := world.NewIndex(pts)
	fibre := m.Config().FibreKmPerMs
	// a k-d tree search per host: microseconds each
	return parallelCtx(ctx, workers, n, 1024, func(i int) {
		h := &w.Hosts[i]
		c0, _ := ix.Nearest(h.Loc)
		best, bestRTT := int32(c0), m.FloorRTT(&w.CrawlerE[c0], h)
		// only crawlers with d/100 + access + host access < best can win
		radiusFor := func(best float64) float64 { return math.Max(0, (best-h.AccessMs-minAcc)*fibre/2)*(1+1e-9) + 1e-6 }
		ix.Search(h.Loc, radiusFor(bestRTT), func(c int, dist float64) float64 {
			ce := &w.CrawlerE[c]
			if m.LowerBoundMs(h, dist, ce.AccessMs) <= bestRTT {
				r := m.FloorRTT(ce, h)
				if r < bestRTT || (r == bestRTT && int32(c) < best) {
					best, bestRTT = int32(c), r
				}
			}
			return radiusFor(bestRTT)
		})
		w.Optimal[i] = best
		w.OptimalRTT[i] = m.MeanRTT(&w.CrawlerE[best], h)
	})
}

// scanAll is the brute-force optimal for one host.
func (w *World) scanAll(h *world.Endpoint) int32 {
	best, bestRTT := int32(-1), math.Inf(1)
	for c := range w.CrawlerE {
		if r := w.Model.FloorRTT(&w.CrawlerE[c], h); r < bestRTT {
			best, bestRTT = int32(c), r
		}
	}
	return best
}

// parallelCtx runs fn(0..n-1) on up to workers goroutines, in contiguous
// chunks, cut short when ctx ends: each goroutine looks at ctx before every
// every-th item of its chunk (every ≥ 1; fn itself is not interrupted) and
// stops there. It returns ctx.Err() once every goroutine
// has stopped; nil means fn ran on every item.
func parallelCtx(ctx context.Context, workers, n, every int, fn func(i int)) error {
	workers = max(1, min(workers, n))
	every = max(1, every)
	var wg sync.WaitGroup
	chunk := (n + workers - 1) / workers
	for lo := 0; lo < n; lo += chunk {
		hi := min(n, lo+chunk)
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := lo; i < hi; i++ {
				if (i-lo)%every == 0 && ctx.Err() != nil {
					return
				}
				fn(i)
			}
		}()
	}
	wg.Wait()
	return ctx.Err()
}

// SubnetCeiling is the share (%) of hosts from index from on that any
// policy can at best delegate to their optimal crawler when every subnet
// keeps one owner: hosts are delegated by their smallest non-unary subnet,
// so the hosts of one subnet share an owner, and a subnet whose hosts have
// different optimal crawlers loses all but its largest group. Hosts outside
// the hierarchy (smallest non-unary subnet None or Root: the engine hashes
// each by its address) count as their own subnets. Policies that move
// subnets between decisions (--balance) are not bound by it.
func (w *World) SubnetCeiling(from int) float64 {
	if from >= len(w.Hosts) {
		return 0
	}
	type key struct {
		s   hierarchy.NodeID
		opt int32
	}
	groups := make(map[key]int)
	best := make(map[hierarchy.NodeID]int)
	alone := 0
	for i := from; i < len(w.Hosts); i++ {
		s := w.Tree.SmallestNonUnary(w.Hosts[i].Addr)
		if s == hierarchy.None || s == hierarchy.Root {
			alone++
			continue
		}
		k := key{s, w.Optimal[i]}
		groups[k]++
		best[s] = max(best[s], groups[k])
	}
	hit := alone
	for _, n := range best {
		hit += n
	}
	return pct(hit, len(w.Hosts)-from)
}
