package sim

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// SpreadConfig describes a reseeded run of one policy over a world: the
// noise band a deployment's figures for the same world should fall in.
type SpreadConfig struct {
	Threshold time.Duration
	Train     int // the first Train hosts train; the rest are scored
	Replicas  int // runs, each with its own probe-jitter and policy seeds
	Seed      uint64
	// PerCrawler runs one engine per crawler (host i decided by engine
	// i mod N, probe jitter drawn per crawler), as the overlay does, instead
	// of one engine deciding every host.
	PerCrawler bool
	// ShareRecords makes every engine learn every record another engine
	// publishes (delegation.Learner), as overlay peers do from gossip and
	// DHT reads. Only meaningful with PerCrawler.
	ShareRecords bool
}

// Spread is the distribution of % optimal (evaluation hosts) and probes per
// URL over the replicas of a SpreadConfig.
type Spread struct {
	Replicas         int     `json:"replicas"`
	OptimalPctMean   float64 `json:"optimal_pct_mean"`
	OptimalPctSD     float64 `json:"optimal_pct_sd"`
	OptimalPctMin    float64 `json:"optimal_pct_min"`
	OptimalPctMax    float64 `json:"optimal_pct_max"`
	ProbesPerURLMean float64 `json:"probes_per_url_mean"`
	ProbesPerURLSD   float64 `json:"probes_per_url_sd"`
	ProbesPerURLMin  float64 `json:"probes_per_url_min"`
	ProbesPerURLMax  float64 `json:"probes_per_url_max"`
}

// Spread runs spec over w cfg.Replicas times and returns the spread of its
// figures. Unlike Run, a host is scored by the owner decided for it (not the
// owner at the end of the run) and nothing is reviewed: a deployment's
// delegation figures are read at decision time, before any crawl.
func (w *World) Spread(ctx context.Context, spec PolicySpec, cfg SpreadConfig) (Spread, error) {
	if cfg.Replicas < 1 {
		return Spread{}, fmt.Errorf("sim: spread of %d replicas: want at least 1", cfg.Replicas)
	}
	var optimal, probesPerURL []float64
	for r := range cfg.Replicas {
		pct, ppu, err := w.spreadReplica(ctx, spec, cfg, uint64(r))
		if err != nil {
			return Spread{}, err
		}
		optimal, probesPerURL = append(optimal, pct), append(probesPerURL, ppu)
	}
	sp := Spread{Replicas: cfg.Replicas}
	sp.OptimalPctMean, sp.OptimalPctSD = meanSD(optimal)
	sp.ProbesPerURLMean, sp.ProbesPerURLSD = meanSD(probesPerURL)
	sp.OptimalPctMin, sp.OptimalPctMax = slices.Min(optimal), slices.Max(optimal)
	sp.ProbesPerURLMin, sp.ProbesPerURLMax = slices.Min(probesPerURL), slices.Max(probesPerURL)
	return sp, nil
}

// spreadReplica is replica r of Spread: its % optimal over the evaluation
// hosts and its probes per URL (joins included).
func (w *World) spreadReplica(ctx context.Context, spec PolicySpec, cfg SpreadConfig, r uint64) (float64, float64, error) {
	members := delegation.NewMemMembership(w.Crawlers...)
	dir := delegation.NewMemDirectory(w.Tree, members)
	pr := &prober{w: w, host: -1}
	engines := 1
	if cfg.PerCrawler {
		engines = len(w.Crawlers)
		pr.perCrawler = make([]*rand.Rand, len(w.Crawlers))
		for i := range pr.perCrawler {
			pr.perCrawler[i] = rand.New(rand.NewPCG(cfg.Seed^0x5350+r, uint64(i)))
		}
	} else {
		pr.rng = rand.New(rand.NewPCG(cfg.Seed, 0x5350+r))
	}
	clock := &Clock{t: simEpoch}
	pols := make([]delegation.Policy, engines)
	for k := range pols {
		ec := delegation.Config{Threshold: cfg.Threshold, Self: w.Crawlers[k].ID}
		if spec.Tweak != nil {
			spec.Tweak(&ec)
		}
		pols[k] = spec.New(delegation.Deps{Tree: w.Tree, Dir: dir, Prober: pr, Members: members, Clock: clock,
			Rand: rand.New(rand.NewPCG(cfg.Seed, 0x504f4c+r*1000+uint64(k)))}, ec)
	}
	// tell hands a fresh record to every other engine, as gossip would.
	tell := func(from int, d delegation.Decision) {
		if !cfg.ShareRecords || d.Cached || d.Record.Owner == "" {
			return
		}
		for j, p := range pols {
			if l, ok := p.(delegation.Learner); ok && j != from {
				l.Learn(d.Record)
			}
		}
	}
	for k, c := range w.Crawlers {
		d, err := pols[k%engines].Join(ctx, c)
		if err != nil {
			return 0, 0, fmt.Errorf("sim: %s: join %s: %w", spec.Name, c.ID, err)
		}
		tell(k%engines, d)
	}
	hit := 0
	for i, h := range w.Hosts {
		clock.Advance(time.Second)
		pr.host = i
		d, err := pols[i%engines].Delegate(ctx, h.Addr)
		if err != nil {
			return 0, 0, fmt.Errorf("sim: %s: host %v: %w", spec.Name, h.Addr, err)
		}
		tell(i%engines, d)
		if ci, ok := w.crawler(d.Owner); ok && i >= cfg.Train && ci == w.Optimal[i] {
			hit++
		}
	}
	return pct(hit, len(w.Hosts)-cfg.Train), float64(pr.probes) / float64(len(w.Hosts)), nil
}

// WithCrawlerIDs returns a copy of w whose crawler i is named ids[i]; w is
// left untouched. Only the names change: positions, hosts and optimal
// owners (by index) stay, so a policy that breaks ties by name can be run on
// the same world under other names.
func (w *World) WithCrawlerIDs(ids []delegation.CrawlerID) (*World, error) {
	if len(ids) != len(w.Crawlers) {
		return nil, fmt.Errorf("sim: %d crawler names for %d crawlers", len(ids), len(w.Crawlers))
	}
	cp := *w
	cp.Crawlers = slices.Clone(w.Crawlers)
	cp.crawlerIdx = make(map[delegation.CrawlerID]int32, len(ids))
	for i, id := range ids {
		if _, dup := cp.crawlerIdx[id]; dup {
			return nil, fmt.Errorf("sim: crawler name %s given twice", id)
		}
		cp.Crawlers[i].ID = id
		cp.crawlerIdx[id] = int32(i)
	}
	return &cp, nil
}

// meanSD returns the mean and the sample standard deviation of xs.
func meanSD(xs []float64) (float64, float64) {
	var s, sq float64
	for _, x := range xs {
		s += x
	}
	m := s / float64(len(xs))
	for _, x := range xs {
		sq += (x - m) * (x - m)
	}
	return m, math.Sqrt(sq / float64(max(1, len(xs)-1)))
}
