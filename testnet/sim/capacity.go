package sim

import (
	"context"
	"errors"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/micra-crawler/micra/data/geo"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// Crawler capacities and the measures of a run against them: who is above
// capacity, how far each host's crawler is beyond the nearest crawler that
// still has room, and the exact min-cost assignment within the capacities.

// capacities draws every crawler's capacity (pages per day): their mean is
// factor × hosts / crawlers; with sigma > 0 they are log-normal around it
// (volunteers' machines differ), from a stream of their own so placement
// and names do not move with sigma.
func capacities(seed uint64, n, hosts int, factor, sigma float64) []int {
	mean := factor * float64(hosts) / float64(n)
	out := make([]int, n)
	if sigma <= 0 {
		c := max(1, int(mean))
		for i := range out {
			out[i] = c
		}
		return out
	}
	rng := rand.New(rand.NewPCG(seed, 0x6361706163697479))
	for i := range out {
		// E[exp(σz − σ²/2)] = 1: the mean stays factor × hosts / crawlers
		out[i] = max(1, int(math.Round(mean*math.Exp(sigma*rng.NormFloat64()-sigma*sigma/2))))
	}
	return out
}

// meanCapacity is the capacity that earns a crawler the ring's standard
// replica count: capacity-weighted consistent hashing (UbiCrawler) gives
// each crawler replicas in proportion to its capacity over this mean.
func meanCapacity(cs []delegation.Crawler) int {
	s := 0
	for _, c := range cs {
		s += c.Capacity
	}
	return max(1, s/max(1, len(cs)))
}

// roomRef finds, for hosts whose optimal crawler is full at the end of a
// run, the nearest crawler that still has room (or the host's own crawler
// when that is nearer): the reference of the excess over the nearest
// crawler with room. Formula worlds search a k-d tree of crawler
// positions; matrix worlds order crawlers once per site.
type roomRef struct {
	w       *World
	ix      *world.Index
	minAcc  float64
	bySite  map[int][]int32 // matrix: crawlers by floor RTT from the site
	hasRoom func(c int32) bool
}

func newRoomRef(w *World, hasRoom func(c int32) bool) *roomRef {
	r := &roomRef{w: w, hasRoom: hasRoom, minAcc: math.Inf(1)}
	if w.Model.Matrix() != nil {
		r.bySite = map[int][]int32{}
		return r
	}
	pts := make([]geo.Point, len(w.CrawlerE))
	for i := range w.CrawlerE {
		pts[i] = w.CrawlerE[i].Loc
		r.minAcc = math.Min(r.minAcc, w.CrawlerE[i].AccessMs)
	}
	r.ix = world.NewIndex(pts)
	return r
}

// nearestWith returns the crawler with the lowest floor RTT to host h
// among those ok accepts (formula worlds); false when ok accepts none.
func (r *roomRef) nearestWith(h int, ok func(c int32) bool) (int32, bool) {
	w, m := r.w, r.w.Model
	he := &w.Hosts[h]
	best, bestC := math.Inf(1), int32(-1)
	fibre := m.Config().FibreKmPerMs
	radiusFor := func(b float64) float64 {
		if math.IsInf(b, 1) {
			return math.Inf(1)
		}
		return math.Max(0, (b-he.AccessMs-r.minAcc)*fibre/2)*(1+1e-9) + 1e-6
	}
	r.ix.Search(he.Loc, radiusFor(best), func(c int, dist float64) float64 {
		ce := &w.CrawlerE[c]
		if m.LowerBoundMs(he, dist, ce.AccessMs) < best && ok(int32(c)) {
			if f := m.FloorRTT(ce, he); f < best {
				best, bestC = f, int32(c)
			}
		}
		return radiusFor(best)
	})
	return bestC, bestC >= 0
}

// floor returns the floor RTT (ms) of host h from the nearest crawler with
// room, or from owner when none with room is nearer.
func (r *roomRef) floor(h int, owner int32) float64 {
	w, m := r.w, r.w.Model
	he := &w.Hosts[h]
	best := m.FloorRTT(&w.CrawlerE[owner], he)
	if r.bySite != nil {
		order, ok := r.bySite[he.Site]
		if !ok {
			order = make([]int32, len(w.CrawlerE))
			fl := make([]float64, len(w.CrawlerE))
			for c := range order {
				order[c] = int32(c)
				fl[c] = m.FloorRTT(&w.CrawlerE[c], he) - he.AccessMs // the host's own delay is common to all
			}
			slices.SortStableFunc(order, func(a, b int32) int {
				switch {
				case fl[a] < fl[b]:
					return -1
				case fl[a] > fl[b]:
					return 1
				}
				return 0
			})
			r.bySite[he.Site] = order
		}
		for _, c := range order {
			f := m.FloorRTT(&w.CrawlerE[c], he)
			if f >= best {
				break
			}
			if r.hasRoom(c) {
				return f
			}
		}
		return best
	}
	fibre := m.Config().FibreKmPerMs
	radiusFor := func(b float64) float64 { return math.Max(0, (b-he.AccessMs-r.minAcc)*fibre/2)*(1+1e-9) + 1e-6 }
	r.ix.Search(he.Loc, radiusFor(best), func(c int, dist float64) float64 {
		ce := &w.CrawlerE[c]
		if r.hasRoom(int32(c)) && m.LowerBoundMs(he, dist, ce.AccessMs) < best {
			if f := m.FloorRTT(ce, he); f < best {
				best = f
			}
		}
		return radiusFor(best)
	})
	return best
}

// meanOfFloor is MeanRTT for a pair whose FloorRTT is f.
func (w *World) meanOfFloor(f float64) float64 {
	c := w.Model.Config()
	return f + f*c.JitterFrac + c.JitterMinMs
}

// MinCostLimit bounds the worlds on which the exact min-cost reference is
// computed: hosts × crawlers × hosts (successive shortest paths, one path
// per page, each a search over every host–crawler edge).
const MinCostLimit = 5e8

// minCost is Σ mean RTT of the exact min-cost assignment of every host (one
// page each) to crawlers within their capacities
// (delegation.MinCostAssign), or false when the world is beyond
// MinCostLimit or the capacities cannot hold the pages.
func (w *World) minCost() (float64, bool) {
	n, m := len(w.Hosts), len(w.Crawlers)
	if n == 0 || float64(n)*float64(n)*float64(m) > MinCostLimit {
		return 0, false
	}
	pages := make([]int, n)
	cost := make([][]float64, n)
	flat := make([]float64, n*m)
	for i := range n {
		pages[i] = 1
		cost[i] = flat[i*m : (i+1)*m]
		for c := range m {
			cost[i][c] = w.Model.MeanRTT(&w.CrawlerE[c], &w.Hosts[i])
		}
	}
	caps := make([]int, m)
	for c := range m {
		caps[c] = max(1, w.Crawlers[c].Capacity)
	}
	a, err := delegation.MinCostAssign(pages, caps, cost)
	if err != nil {
		return 0, false
	}
	return a.Cost, true
}

// excessOverRoom returns the mean and p95 excess (ms) of the evaluation
// hosts' crawlers (owner, by host) over the nearest crawler with room at
// the end of the run (load by crawler, in pages).
func (w *World) excessOverRoom(from int, owner []int32, load []float64) (mean, p95 float64) {
	hasRoom := func(c int32) bool { return load[c] < float64(max(1, w.Crawlers[c].Capacity)) }
	var ref *roomRef
	var ex []float64
	for i := from; i < len(w.Hosts); i++ {
		o, opt := owner[i], w.Optimal[i]
		if o == opt {
			ex = append(ex, 0)
			continue
		}
		got := w.Model.MeanRTT(&w.CrawlerE[o], &w.Hosts[i])
		best := w.OptimalRTT[i]
		if !hasRoom(opt) {
			if ref == nil {
				ref = newRoomRef(w, hasRoom)
			}
			best = w.meanOfFloor(ref.floor(i, o))
		}
		ex = append(ex, max(0, got-best))
	}
	return meanP95(ex)
}

// meanP95 returns the mean and the 95th percentile of xs (sorted in place).
func meanP95(xs []float64) (mean, p95 float64) {
	if len(xs) == 0 {
		return 0, 0
	}
	var s float64
	for _, x := range xs {
		s += x
	}
	slices.Sort(xs)
	return s / float64(len(xs)), xs[int(math.Ceil(0.95*float64(len(xs))))-1]
}

// capacityText describes the crawlers' capacities for the report.
func (w *World) capacityText(cfg Config) string {
	if len(w.Crawlers) == 0 {
		return ""
	}
	caps := make([]int, len(w.Crawlers))
	for i, c := range w.Crawlers {
		caps[i] = c.Capacity
	}
	slices.Sort(caps)
	dist := "equal"
	if cfg.CapacitySigma > 0 {
		dist = fmt.Sprintf("log-normal σ %g", cfg.CapacitySigma)
	}
	return fmt.Sprintf("%s, mean %d pages (%g × hosts/crawlers), min %d, median %d, max %d",
		dist, meanCapacity(w.Crawlers), cfg.CapacityFactor, caps[0], caps[len(caps)/2], caps[len(caps)-1])
}

// subnetOracle is the "subnet-oracle" row: what delegating whole subnets
// online can do within the capacities when every RTT is known. Hosts come
// in the run's order; a subnet (the smallest non-unary node, as the
// engine delegates) goes on its first host to the crawler with the lowest
// RTT to it among those with room for a page; a further host stays with
// the subnet's owner while it has room, else the subnet, its pages and
// this one, moves to the crawler with the lowest RTT to this host among
// those with room for them all (when none has, the owner takes the page
// over capacity). A host outside the hierarchy goes alone to its nearest
// crawler with room. No probes: a reference, not a policy
// (formula latency only: it searches crawler positions).
func (w *World) subnetOracle(ctx context.Context, cfg Config) (*run, error) {
	if w.Model.Matrix() != nil {
		return nil, errors.New("sim: subnet-oracle needs the formula latency (no --sites/--rtt, --latency formula)")
	}
	start := time.Now()
	n := len(w.Hosts)
	r := &run{spec: PolicySpec{Name: "subnet-oracle"}, owner: make([]int32, n), probes: make([]uint32, n),
		reason: make([]string, n), subnet: make([]hierarchy.NodeID, n), reasons: map[string]int{"oracle": n}}
	ref := newRoomRef(w, nil)
	load := make([]int, len(w.Crawlers))
	capOf := func(c int32) int { return max(1, w.Crawlers[c].Capacity) }
	type sub struct {
		owner int32
		pages int
	}
	subs := map[hierarchy.NodeID]*sub{}
	for i := range w.Hosts {
		if i&1023 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		s := w.Tree.SmallestNonUnary(w.Hosts[i].Addr)
		r.subnet[i], r.reason[i] = s, "oracle"
		if s == hierarchy.None || s == hierarchy.Root {
			r.subnet[i] = hierarchy.None // as the engine records it
			c, ok := ref.nearestWith(i, func(c int32) bool { return load[c]+1 <= capOf(c) })
			if !ok {
				c = w.Optimal[i] // nobody has room: over capacity
			}
			load[c]++
			r.owner[i] = c
			continue
		}
		sb := subs[s]
		if sb != nil && load[sb.owner]+1 <= capOf(sb.owner) {
			load[sb.owner]++
			sb.pages++
			continue
		}
		need := 1
		if sb != nil {
			need += sb.pages
		}
		c, ok := ref.nearestWith(i, func(c int32) bool { return load[c]+need <= capOf(c) })
		switch {
		case !ok && sb != nil:
			// nobody has room for the whole subnet: its owner takes the
			// page over capacity, as the engine's balancing does
			load[sb.owner]++
			sb.pages++
			continue
		case !ok:
			c = w.Optimal[i]
		}
		if sb == nil {
			sb = &sub{}
			subs[s] = sb
		} else {
			load[sb.owner] -= sb.pages
		}
		load[c] += need
		sb.owner, sb.pages = c, need
	}
	for i := range w.Hosts {
		if sb := subs[r.subnet[i]]; sb != nil {
			r.owner[i] = sb.owner
		}
	}
	r.elapsed = time.Since(start)
	return r, nil
}
