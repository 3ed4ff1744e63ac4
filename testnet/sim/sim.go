// Package sim owns micra's delegation simulator: a deterministic, seeded run
// (no sockets) that places crawlers and web hosts at real addresses of the
// embedded IP hierarchy, gives them positions and latencies from the world
// model (testnet/world), feeds every host to each delegation policy through
// the engine's own interfaces (Prober, Membership, Clock, MemDirectory) and
// scores the outcome against the optimal crawler (lowest modelled mean RTT):
// the paper's table (% optimal, probes per URL, excess latency, crawl cost
// relative to random, load imbalance) and the curve of probes per URL as the
// hierarchy trains.
//
// The policies see only what a real deployment sees: probe answers (with
// jitter) and the hierarchy; the world model stays on this side.
package sim

import (
	"cmp"
	"context"
	"fmt"
	"hash/fnv"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"sync"
	"time"

	"github.com/micra-crawler/micra/data/geo"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// Constructor builds a policy.
type Constructor func(delegation.Deps, delegation.Config) delegation.Policy

// PolicySpec names a policy of the simulator and how to build it.
type PolicySpec struct {
	Name string
	New  Constructor
	// Tweak adjusts the engine configuration for this variant (may be nil).
	Tweak func(*delegation.Config)
	// Brute marks policies that probe every crawler (skipped by default when
	// there are too many crawlers for that to finish).
	Brute bool
	// Reference, when set, computes the row from the world instead of
	// running a policy (New is unused): a reference, not a policy.
	Reference func(w *World, ctx context.Context, cfg Config) (*run, error)
}

// Policies lists every policy the simulator knows, in report order.
var Policies = []PolicySpec{
	{Name: "ipmicra", New: delegation.NewIPMicra},
	{Name: "ipmicra-parallel", New: delegation.NewIPMicra, Tweak: func(c *delegation.Config) { c.ParallelLevels = true }},
	{Name: "micra", New: delegation.NewMicra},
	{Name: "optimal", New: delegation.NewOptimal, Brute: true},
	{Name: "hash", New: delegation.NewConsistentHash},
	// the crawl-cost baseline: delegation without locality, never balanced
	// (it spreads load evenly anyway, and balancing would make it probe)
	{Name: "random", New: delegation.NewRandom, Tweak: func(c *delegation.Config) { c.Balance = delegation.BalanceOff }},
}

// References lists the reference rows Run reports beside the policies when
// named in Config.Policies: computed from the world, not run through the
// engine, so nothing else (benches, traces, spreads) takes them.
var References = []PolicySpec{
	// knows every RTT: one owner per subnet, the nearest with room
	// (capacity.go, subnetOracle)
	{Name: "subnet-oracle", Reference: (*World).subnetOracle},
}

// DefaultPolicies are run when Config.Policies is empty.
var DefaultPolicies = []string{"ipmicra", "micra", "optimal", "hash", "random"}

// BruteForceLimit: with more crawlers than this, brute-force policies are
// left out of the defaults (one probe per crawler per host).
const BruteForceLimit = 1000

// LookupRow returns the policy or reference row named name (Run's rows).
func LookupRow(name string) (PolicySpec, bool) {
	if p, ok := LookupPolicy(name); ok {
		return p, true
	}
	for _, p := range References {
		if p.Name == name {
			return p, true
		}
	}
	return PolicySpec{}, false
}

// LookupPolicy returns the spec named name.
func LookupPolicy(name string) (PolicySpec, bool) {
	for _, p := range Policies {
		if p.Name == name {
			return p, true
		}
	}
	return PolicySpec{}, false
}

// Config describes one simulation.
type Config struct {
	Seed      uint64
	Crawlers  int
	Hosts     int
	Train     int           // the first Train delegations train; the rest evaluate
	Threshold time.Duration // IPMicra's probing threshold
	Policies  []string      // names from Policies; empty: DefaultPolicies
	// Engine is the base delegation configuration (Threshold is set from
	// the field above).
	Engine delegation.Config
	// World configures the latency model (its Seed defaults to Seed).
	World world.Config
	// Matrix, when set, replaces the formula between its sites.
	Matrix *world.Matrix
	// Tree is the hierarchy (nil: hierarchy.Default()).
	Tree *hierarchy.Tree
	// Geo is the geolocation table (nil: geo.Default()).
	Geo *geo.Table
	// HostDist is how hosts are spread over the hierarchy's leaf ranges:
	// HostsUniform (default) or HostsZipf.
	HostDist string
	// NoReview withholds from policies that review delegations
	// (delegation.Reviewer: micra) the owner's crawl timing of each further
	// host of a subnet, so they cannot re-examine it.
	NoReview bool
	// IPv6Share is the fraction of hosts placed at IPv6 addresses (0..1).
	IPv6Share float64
	// CrawlerNames is how crawlers are named: NamesRandom (default; names
	// in no relation to placement, as libp2p peer IDs are) or NamesOrdered
	// (c00, c01, … in placement order, which is spread-first, so a policy
	// that breaks ties by name would favour the most spread-out crawlers).
	CrawlerNames string
	// CapacityFactor sets every crawler's capacity (pages per day, used by
	// load balancing and hash replicas) to this multiple of hosts/crawlers.
	// Default 2.
	CapacityFactor float64
	// CapacitySigma, when positive, draws capacities log-normal with this
	// σ (of ln capacity) around the same mean, as volunteers' machines
	// differ; zero: every crawler has the mean.
	CapacitySigma float64
	// CurvePoints is the number of windows of the probes/URL curve.
	// Default 20.
	CurvePoints int
	// Trace, when set, receives the explanation of the first TraceN
	// decisions of policy TracePolicy, each beside the host's optimal
	// crawler (debugging and tuning a policy).
	Trace       io.Writer
	TracePolicy string
	TraceN      int
	// Workers bounds how many policies run at once. Default GOMAXPROCS.
	Workers int
	// Logger receives progress (nil: slog.Default()).
	Logger *slog.Logger
}

// Crawler naming (Config.CrawlerNames).
const (
	NamesRandom  = "random"
	NamesOrdered = "ordered"
)

// Preset returns a named configuration: "paper" (12 crawlers, 1000 hosts,
// 650 train, 50 ms), "paper4" (4 crawlers) and "scale" (10,000 crawlers,
// 1,000,000 hosts, log-normal capacities with 1.5× room, balancing on).
func Preset(name string) (Config, error) {
	c := Config{Seed: 1, Crawlers: 12, Hosts: 1000, Train: 650, Threshold: 50 * time.Millisecond}
	switch name {
	case "paper", "":
	case "paper4":
		c.Crawlers = 4
	case "scale":
		// volunteers' machines differ, and at this size hosts pile up on
		// the crawlers of dense regions: capacities are heterogeneous and
		// enforced, with half again as much room in all as there are pages
		c.Crawlers, c.Hosts, c.Train = 10000, 1000000, 650000
		c.CapacityFactor, c.CapacitySigma = 1.5, 0.5
		// a full owner moves whichever of its subnets costs least to move
		// (docs/experiments/2026-11-scale-excess.md)
		c.Engine.Balance = delegation.BalanceLeastCost
		// pairs learned from each record's three lowest answers only: the
		// pairwise model is most of micra's memory among 10,000 crawlers
		c.Engine.Micra.PairFromLowest = 3
		// among thousands of crawlers many sit within a few ms of the
		// nearest: gains under 3 ms are not worth a probe, and eight
		// learned candidates (the walk towards where the answers place the
		// host, MicraConfig.Locate, finds the rest) probe less for the same
		// excess (docs/experiments/2026-11-scale-probes.md)
		c.Engine.Micra.Margin = 3 * time.Millisecond
		c.Engine.Micra.MinCandidates = 8
		// the hosts that find an owner slow each find a different faster
		// crawler among thousands: their votes are pooled
		// (docs/experiments/2026-11-scale-excess.md)
		c.Engine.Micra.ReviewPool = 0.1
	default:
		return c, fmt.Errorf("sim: unknown preset %q (want paper, paper4 or scale)", name)
	}
	return c, nil
}

// PaperThresholds are the probing thresholds of the paper's experiments.
var PaperThresholds = []time.Duration{25 * time.Millisecond, 50 * time.Millisecond, 75 * time.Millisecond, 100 * time.Millisecond, 125 * time.Millisecond}

func (c Config) withDefaults() Config {
	if c.Crawlers <= 0 {
		c.Crawlers = 12
	}
	if c.Hosts <= 0 {
		c.Hosts = 1000
	}
	if c.Train < 0 || c.Train >= c.Hosts {
		c.Train = c.Hosts * 65 / 100
	}
	if c.Threshold <= 0 {
		c.Threshold = 50 * time.Millisecond
	}
	if c.World.Seed == 0 {
		c.World.Seed = c.Seed
	}
	if c.CapacityFactor <= 0 {
		c.CapacityFactor = 2
	}
	if c.CurvePoints <= 0 {
		c.CurvePoints = 20
	}
	if c.Workers <= 0 {
		c.Workers = runtime.GOMAXPROCS(0)
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if len(c.Policies) == 0 {
		for _, n := range DefaultPolicies {
			if spec, _ := LookupPolicy(n); spec.Brute && c.Crawlers > BruteForceLimit {
				continue
			}
			c.Policies = append(c.Policies, n)
		}
	}
	return c
}

// World is the placed population of one simulation: crawlers and hosts at
// real addresses, and each host's optimal crawler. It is built once and
// shared (read-only) by every policy and threshold.
type World struct {
	Model    *world.Model
	Tree     *hierarchy.Tree
	Crawlers []delegation.Crawler
	CrawlerE []world.Endpoint
	Hosts    []world.Endpoint
	// Optimal[i] is the index of host i's optimal crawler; OptimalRTT[i]
	// its mean RTT in ms.
	Optimal    []int32
	OptimalRTT []float64

	crawlerIdx  map[delegation.CrawlerID]int32
	crawlerAddr map[netip.Addr]int32
	hostIdx     map[netip.Addr]int32

	// floor[h·len(CrawlerE)+c] is Model.FloorRTT of host h and crawler c,
	// computed once for every policy and threshold run on this world (nil
	// above maxFloors pairs); valid only for the model and endpoints it was
	// computed from (a copied World with another model falls back)
	floor      []float64
	floorModel *world.Model
	floorHosts *world.Endpoint
	floorCrawl *world.Endpoint
}

// maxFloors bounds the precomputed floor RTTs (16 MB).
const maxFloors = 1 << 21

// computeFloors fills w.floor when the world is small enough (none when ctx
// ends first: it returns ctx.Err()).
func (w *World) computeFloors(ctx context.Context, workers int) error {
	nc := len(w.CrawlerE)
	if len(w.Hosts) == 0 || nc == 0 || len(w.Hosts)*nc > maxFloors {
		return nil
	}
	floor := make([]float64, len(w.Hosts)*nc)
	if err := parallelCtx(ctx, workers, len(w.Hosts), max(1, ctxEvery/nc), func(h int) {
		for c := range w.CrawlerE {
			floor[h*nc+c] = w.Model.FloorRTT(&w.CrawlerE[c], &w.Hosts[h])
		}
	}); err != nil {
		return err
	}
	w.floor = floor
	w.floorModel, w.floorHosts, w.floorCrawl = w.Model, &w.Hosts[0], &w.CrawlerE[0]
	return nil
}

// floorOf returns the precomputed FloorRTT of host h and crawler c, if any.
func (w *World) floorOf(h int, c int32) (float64, bool) {
	if w.floor == nil || w.floorModel != w.Model || len(w.Hosts) == 0 || &w.Hosts[0] != w.floorHosts ||
		len(w.CrawlerE) == 0 || &w.CrawlerE[0] != w.floorCrawl || h < 0 || h >= len(w.Hosts) {
		return 0, false
	}
	return w.floor[h*len(w.CrawlerE)+int(c)], true
}

// NewModel returns the latency model of cfg's world: world.New over cfg.Geo
// with cfg.World (its seed defaulting to cfg.Seed), over cfg.Matrix when
// set. NewWorld places its crawlers and hosts with it.
func NewModel(cfg Config) (*world.Model, error) {
	cfg = cfg.withDefaults()
	model, err := world.New(cfg.Geo, cfg.World)
	if err != nil {
		return nil, err
	}
	if cfg.Matrix != nil {
		model = model.WithMatrix(cfg.Matrix)
	}
	return model, nil
}

// NewWorld places crawlers and hosts for cfg and computes the optimal
// crawler of every host.
func NewWorld(cfg Config) (*World, error) { return NewWorldContext(context.Background(), cfg) }

// NewWorldContext is NewWorld, cut short when ctx ends: placing a large
// world (the scale preset's million hosts) takes seconds, and it returns
// ctx.Err() within milliseconds of the end instead of finishing first. A
// world that is not cut short is the same as NewWorld's.
func NewWorldContext(ctx context.Context, cfg Config) (*World, error) {
	cfg = cfg.withDefaults()
	if err := ctx.Err(); err != nil {
		return nil, err
	}
	tree := cfg.Tree
	if tree == nil {
		t, err := hierarchy.Default()
		if err != nil {
			return nil, err
		}
		tree = t
	}
	model, err := NewModel(cfg)
	if err != nil {
		return nil, err
	}
	pl, err := newPlacer(tree, model)
	if err != nil {
		return nil, err
	}
	w := &World{Model: model, Tree: tree}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x6372617720))
	if w.CrawlerE, err = pl.placeCrawlers(ctx, rng, cfg.Crawlers); err != nil {
		return nil, err
	}
	rng = rand.New(rand.NewPCG(cfg.Seed, 0x686f737473))
	if w.Hosts, err = pl.placeHosts(ctx, rng, cfg.Hosts, cfg.HostDist, cfg.IPv6Share); err != nil {
		return nil, err
	}
	width := len(fmt.Sprint(cfg.Crawlers - 1))
	name := func(i int) delegation.CrawlerID { return delegation.CrawlerID(fmt.Sprintf("c%0*d", width, i)) }
	switch cfg.CrawlerNames {
	case NamesRandom, "":
		// 16 hex digits of a seeded hash: unique in practice, sorted in
		// no relation to where the crawler is (a collision is an error)
		name = func(i int) delegation.CrawlerID {
			return delegation.CrawlerID(fmt.Sprintf("p%016x", mix64(cfg.Seed^mix64(uint64(i)+0x6e616d6573))))
		}
	case NamesOrdered:
	default:
		return nil, fmt.Errorf("sim: unknown crawler naming %q (want %s or %s)", cfg.CrawlerNames, NamesRandom, NamesOrdered)
	}
	w.crawlerIdx = make(map[delegation.CrawlerID]int32, cfg.Crawlers)
	w.crawlerAddr = make(map[netip.Addr]int32, cfg.Crawlers)
	caps := capacities(cfg.Seed, cfg.Crawlers, cfg.Hosts, cfg.CapacityFactor, cfg.CapacitySigma)
	for i, e := range w.CrawlerE {
		id := name(i)
		if _, dup := w.crawlerIdx[id]; dup {
			return nil, fmt.Errorf("sim: crawler name %s drawn twice", id)
		}
		// A crawler states where it runs, as a volunteer would: its
		// position rounded to half a degree (≈ 50 km). Hosts state nothing.
		w.Crawlers = append(w.Crawlers, delegation.Crawler{ID: id, Addr: e.Addr, Capacity: caps[i],
			Lat: math.Round(float64(e.Loc.Lat)*2) / 2, Lon: math.Round(float64(e.Loc.Lon)*2) / 2, HasPos: true})
		w.crawlerIdx[id] = int32(i)
		w.crawlerAddr[e.Addr] = int32(i)
	}
	w.hostIdx = make(map[netip.Addr]int32, len(w.Hosts))
	for i, h := range w.Hosts {
		if i%ctxEvery == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		w.hostIdx[h.Addr] = int32(i)
	}
	if err := w.computeOptimal(ctx, cfg.Workers); err != nil {
		return nil, err
	}
	if err := w.computeFloors(ctx, cfg.Workers); err != nil {
		return nil, err
	}
	return w, nil
}

// endpoint returns the endpoint of a host address (resolving addresses the
// simulator did not place, should a policy probe one).
func (w *World) endpoint(a netip.Addr) (*world.Endpoint, bool) {
	if i, ok := w.hostIdx[a]; ok {
		return &w.Hosts[i], true
	}
	if i, ok := w.crawlerAddr[a]; ok {
		return &w.CrawlerE[i], true
	}
	e, ok := w.Model.Endpoint(a, "")
	return &e, ok
}

// prober implements delegation.Prober from the world model: one jittered
// RTT sample per crawler asked, counted.
type prober struct {
	w        *World
	rng      *rand.Rand
	probes   int64
	crawlRng *rand.Rand // crawlTime's stream
	// perCrawler, when set, replaces rng by one jitter stream per crawler
	// (by index), as each overlay peer measures on its own
	perCrawler []*rand.Rand
	// the engine probes one target several times per decision
	lastAddr netip.Addr
	lastHost *world.Endpoint
	lastOK   bool
	// host is the index of the host being delegated (-1: unknown): its
	// endpoint without a map lookup (host addresses are distinct)
	host int
	// out is reused by every call: the engine copies the answers (into the
	// decision's steps and its ranking) before it probes again
	out []delegation.ProbeResult
}

// crawler resolves an ID without hashing it: IDs are "c" + index.
func (w *World) crawler(id delegation.CrawlerID) (int32, bool) {
	if len(id) > 1 && id[0] == 'c' {
		n := 0
		for _, ch := range []byte(id[1:]) {
			if ch < '0' || ch > '9' {
				n = -1
				break
			}
			n = n*10 + int(ch-'0')
		}
		if n >= 0 && n < len(w.Crawlers) && w.Crawlers[n].ID == id {
			return int32(n), true
		}
	}
	i, ok := w.crawlerIdx[id]
	return i, ok
}

// crawlTime is the owner's timing of its first fetch from host h: a sample
// of the same RTT distribution as a probe, but no probe (the crawler fetches
// the host anyway). It draws from its own stream, so reviews do not shift
// the probe samples.
func (p *prober) crawlTime(h int, ci int32) time.Duration {
	if f, ok := p.w.floorOf(h, ci); ok {
		return world.Duration(p.w.Model.SampleAbove(f, p.crawlRng))
	}
	return world.Duration(p.w.Model.SampleRTT(&p.w.CrawlerE[ci], &p.w.Hosts[h], p.crawlRng))
}

func (p *prober) Probe(_ context.Context, target netip.Addr, crawlers []delegation.CrawlerID) []delegation.ProbeResult {
	out := slices.Grow(p.out[:0], len(crawlers))[:len(crawlers)]
	clear(out)
	p.out = out
	if target != p.lastAddr || p.lastHost == nil {
		p.lastAddr = target
		if p.host >= 0 && p.host < len(p.w.Hosts) && p.w.Hosts[p.host].Addr == target {
			p.lastHost, p.lastOK = &p.w.Hosts[p.host], true
		} else {
			p.lastHost, p.lastOK = p.w.endpoint(target)
		}
	}
	h, ok := p.lastHost, p.lastOK
	for i, c := range crawlers {
		p.probes++
		out[i].Crawler = c
		ci, known := p.w.crawler(c)
		if !ok || !known {
			continue // no answer: the engine falls back
		}
		rng := p.rng
		if p.perCrawler != nil {
			rng = p.perCrawler[ci]
		}
		if f, ok := p.w.floorOf(p.host, ci); ok && h == &p.w.Hosts[p.host] {
			out[i].RTT = world.Duration(p.w.Model.SampleAbove(f, rng))
		} else {
			out[i].RTT = world.Duration(p.w.Model.SampleRTT(&p.w.CrawlerE[ci], h, rng))
		}
		out[i].OK = true
	}
	return out
}

// Clock is the simulated clock: it advances by one step per decision.
type Clock struct{ t time.Time }

// Now implements delegation.Clock.
func (c *Clock) Now() time.Time { return c.t }

// Advance moves the clock forward.
func (c *Clock) Advance(d time.Duration) { c.t = c.t.Add(d) }

// simEpoch is the simulated start time (fixed, so records are reproducible).
var simEpoch = time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)

// run is the raw outcome of one policy over the host stream.
type run struct {
	spec    PolicySpec
	owner   []int32            // per host: who crawls it at the end of the run
	probes  []uint32           // per host
	reason  []string           // per host: why its decision stopped (the review's, when reviewed)
	subnet  []hierarchy.NodeID // per host: the subnet its decision delegated
	reasons map[string]int
	total   int64
	elapsed time.Duration
}

func seedOf(s string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(s))
	return h.Sum64()
}

// runPolicy feeds every host, in order, to a fresh instance of spec.
func (w *World) runPolicy(ctx context.Context, cfg Config, spec PolicySpec) (*run, error) {
	members := delegation.NewMemMembership(w.Crawlers...)
	dir := delegation.NewMemDirectory(w.Tree, members)
	pr := &prober{w: w, rng: rand.New(rand.NewPCG(cfg.Seed, seedOf("probe/"+spec.Name))), host: -1,
		crawlRng: rand.New(rand.NewPCG(cfg.Seed, seedOf("crawl-time")))}
	clock := &Clock{t: simEpoch}
	ec := cfg.Engine
	ec.Threshold = cfg.Threshold
	if ec.HashCapacityUnit == 0 {
		// capacity-weighted consistent hashing (UbiCrawler): replicas in
		// proportion to capacity, the mean capacity earning the standard count
		ec.HashCapacityUnit = meanCapacity(w.Crawlers)
	}
	if spec.Tweak != nil {
		spec.Tweak(&ec)
	}
	pol := spec.New(delegation.Deps{
		Tree: w.Tree, Dir: dir, Prober: pr, Members: members, Clock: clock,
		Rand: rand.New(rand.NewPCG(cfg.Seed, seedOf("policy/"+spec.Name))),
	}, ec)
	for _, c := range w.Crawlers {
		if _, err := pol.Join(ctx, c); err != nil {
			return nil, fmt.Errorf("sim: %s: join %s: %w", spec.Name, c.ID, err)
		}
	}
	r := &run{spec: spec, owner: make([]int32, len(w.Hosts)), probes: make([]uint32, len(w.Hosts)), reason: make([]string, len(w.Hosts)), reasons: map[string]int{}}
	subnets := make([]hierarchy.NodeID, len(w.Hosts))
	r.subnet = subnets
	start := time.Now()
	for i := range w.Hosts {
		// often: a decision of micra among 10,000 crawlers can take
		// milliseconds, and 1024 of them once delayed an interrupt by seconds
		if i&15 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		clock.Advance(time.Second)
		before := pr.probes
		pr.host = i
		d, err := pol.Delegate(ctx, w.Hosts[i].Addr)
		if err != nil {
			return nil, fmt.Errorf("sim: %s: host %v: %w", spec.Name, w.Hosts[i].Addr, err)
		}
		ci, ok := w.crawler(d.Owner)
		if !ok {
			return nil, fmt.Errorf("sim: %s: host %v delegated to unknown crawler %q (%v)", spec.Name, w.Hosts[i].Addr, d.Owner, d)
		}
		if rv, ok := pol.(delegation.Reviewer); ok && !cfg.NoReview && d.Cached && d.Reason == delegation.ReasonCached {
			// the owner crawls the host: its fetch is timed (free), and
			// the policy may re-examine the subnet
			if d, err = rv.Review(ctx, w.Hosts[i].Addr, d.Owner, pr.crawlTime(i, ci)); err != nil {
				return nil, fmt.Errorf("sim: %s: review host %v: %w", spec.Name, w.Hosts[i].Addr, err)
			}
			if ci, ok = w.crawler(d.Owner); !ok {
				return nil, fmt.Errorf("sim: %s: host %v handed over to unknown crawler %q (%v)", spec.Name, w.Hosts[i].Addr, d.Owner, d)
			}
		}
		r.owner[i] = ci
		subnets[i] = d.Subnet
		if cfg.Trace != nil && spec.Name == cfg.TracePolicy && i < cfg.TraceN {
			opt := w.Optimal[i]
			mark := "≠"
			if opt == ci {
				mark = "="
			}
			fmt.Fprintf(cfg.Trace, "%s #%d %s | chosen %s %.1f ms %s optimal %s %.1f ms\n", spec.Name, i, d,
				d.Owner, w.Model.MeanRTT(&w.CrawlerE[ci], &w.Hosts[i]), mark, w.Crawlers[opt].ID, w.OptimalRTT[i])
		}
		r.probes[i] = uint32(pr.probes - before)
		r.reason[i] = d.Reason.String()
		r.reasons[r.reason[i]]++
	}
	r.elapsed = time.Since(start)
	r.total = pr.probes
	// Load balancing may move subnets after their hosts were delegated:
	// score who crawls each host in the end.
	// Block delegations (Record.Blocks) are lower ones: they win for their
	// hosts.
	for i, sn := range subnets {
		if rec, ok := dir.Get(sn); ok && sn != hierarchy.None {
			if ci, ok := w.crawler(rec.OwnerOf(w.Hosts[i].Addr, nil)); ok {
				r.owner[i] = ci
			}
		}
	}
	return r, nil
}

// Run simulates cfg: it builds the world (or reuses w when not nil) and runs
// every policy, in parallel up to cfg.Workers. The report is a pure function
// of cfg (and w).
// RunPolicies lists the policies Run runs for cfg: Config.Policies (or the
// defaults, brute force only up to BruteForceLimit crawlers), and random,
// the crawl-cost baseline, always.
func (c Config) RunPolicies() []string {
	ps := slices.Clone(c.withDefaults().Policies)
	if !slices.Contains(ps, "random") {
		ps = append(ps, "random")
	}
	return ps
}

func Run(ctx context.Context, cfg Config, w *World) (*Report, *World, error) {
	cfg = cfg.withDefaults()
	var specs []PolicySpec
	for _, n := range cfg.Policies {
		spec, ok := LookupRow(n)
		if !ok {
			return nil, nil, fmt.Errorf("sim: unknown policy %q", n)
		}
		specs = append(specs, spec)
	}
	if !slices.Contains(cfg.Policies, "random") {
		spec, _ := LookupPolicy("random") // the crawl-cost baseline
		specs = append(specs, spec)
	}
	if w == nil {
		t0 := time.Now()
		var err error
		if w, err = NewWorldContext(ctx, cfg); err != nil {
			return nil, nil, err
		}
		cfg.Logger.Debug("world placed", "crawlers", len(w.Crawlers), "hosts", len(w.Hosts), "took", time.Since(t0))
		if len(w.Crawlers) <= 50 {
			for i, c := range w.Crawlers {
				cfg.Logger.Debug("crawler", "id", c.ID, "addr", c.Addr, "lat", w.CrawlerE[i].Loc.Lat, "lon", w.CrawlerE[i].Loc.Lon, "access_ms", w.CrawlerE[i].AccessMs)
			}
		}
	}
	runs := make([]*run, len(specs))
	errs := make([]error, len(specs))
	sem := make(chan struct{}, cfg.Workers)
	var wg sync.WaitGroup
	for i, spec := range specs {
		wg.Add(1)
		sem <- struct{}{}
		go func() {
			defer wg.Done()
			defer func() { <-sem }()
			if spec.Reference != nil {
				runs[i], errs[i] = spec.Reference(w, ctx, cfg)
			} else {
				runs[i], errs[i] = w.runPolicy(ctx, cfg, spec)
			}
			if errs[i] == nil {
				cfg.Logger.Debug("policy done", "policy", spec.Name, "threshold", cfg.Threshold, "took", runs[i].elapsed,
					"decisions_per_s", float64(len(w.Hosts))/runs[i].elapsed.Seconds())
			}
		}()
	}
	wg.Wait()
	for _, err := range errs {
		if err != nil {
			return nil, nil, err
		}
	}
	return w.score(cfg, runs), w, nil
}

// WriteWorldStats prints the latency model's calibration figures over the
// placed hosts (formula) and, with a measured matrix, the same figures of
// the matrix, so the two can be compared before trusting either. It returns
// ctx.Err() when ctx ends before the hosts are placed.
func WriteWorldStats(ctx context.Context, cfg Config, out io.Writer) error {
	cfg = cfg.withDefaults()
	mx := cfg.Matrix
	cfg.Matrix = nil
	w, err := NewWorldContext(ctx, cfg)
	if err != nil {
		return err
	}
	st := w.Model.SampleStats(w.Hosts)
	st.WriteText(out, fmt.Sprintf("formula over %d placed hosts (seed %d)", min(len(w.Hosts), 2000), cfg.Seed))
	if mx != nil {
		mx.Stats(w.Model.Config().FibreKmPerMs).WriteText(out, fmt.Sprintf("%s (%d sites)", cmp.Or(mx.Label, "measured matrix"), len(mx.Sites)))
	}
	return nil
}
