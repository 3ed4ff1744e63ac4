package sim

import (
	"context"
	"fmt"
	"io"
	"math"
	"slices"

	"github.com/micra-crawler/micra/data/geo"
)

// NearestRow is one line of the nearest-crawlers reference: choosing the
// lowest mean RTT among the K crawlers nearest each evaluation host by
// exact great-circle distance, the excess over the host's optimal crawler
// (mean and 95th percentile, ms) and how often it is the optimal one.
type NearestRow struct {
	K             int
	MeanMs, P95Ms float64
	OptimalPct    float64
}

// NearestBound measures, on w's evaluation hosts (from train on), what
// knowing where each host is buys: the best of its k nearest crawlers by
// position, for k = 1 … kMax. It is no policy — a policy knows the host's
// registry country and its answers, not its position — but the distance a
// policy must locate a host to before a probe or two find a crawler within
// a few ms of the optimal one. Capacity is ignored (the optimal crawler,
// full or not). It returns ctx.Err() when ctx ends first.
func NearestBound(ctx context.Context, w *World, train, kMax int) ([]NearestRow, error) {
	if kMax < 1 || train < 0 || train >= len(w.Hosts) {
		return nil, fmt.Errorf("sim: nearest bound: k %d, train %d of %d hosts", kMax, train, len(w.Hosts))
	}
	kMax = min(kMax, len(w.CrawlerE))
	excess := make([][]float64, kMax)
	type near struct {
		c int
		d float64
	}
	cs := make([]near, len(w.CrawlerE))
	for i := train; i < len(w.Hosts); i++ {
		if (i-train)&255 == 0 {
			if err := ctx.Err(); err != nil {
				return nil, err
			}
		}
		h := &w.Hosts[i]
		for c := range w.CrawlerE {
			cs[c] = near{c, geo.DistanceKm(h.Loc, w.CrawlerE[c].Loc)}
		}
		slices.SortFunc(cs, func(a, b near) int {
			if a.d != b.d {
				if a.d < b.d {
					return -1
				}
				return 1
			}
			return a.c - b.c
		})
		best := math.Inf(1)
		for k := range kMax {
			best = min(best, w.Model.MeanRTT(&w.CrawlerE[cs[k].c], h))
			excess[k] = append(excess[k], best-w.OptimalRTT[i])
		}
	}
	rows := make([]NearestRow, kMax)
	for k, xs := range excess {
		slices.Sort(xs)
		sum, exact := 0.0, 0
		for _, x := range xs {
			sum += x
			if x <= 0 {
				exact++
			}
		}
		rows[k] = NearestRow{K: k + 1, MeanMs: sum / float64(len(xs)), P95Ms: xs[len(xs)*95/100],
			OptimalPct: 100 * float64(exact) / float64(len(xs))}
	}
	return rows, nil
}

// WriteNearestBound places cfg's world and prints NearestBound's rows for
// k = 1 … kMax.
func WriteNearestBound(ctx context.Context, cfg Config, out io.Writer, kMax int) error {
	cfg = cfg.withDefaults()
	if cfg.Matrix != nil {
		return fmt.Errorf("sim: the nearest-crawlers reference needs positions: formula latency only, not --sites/--rtt")
	}
	w, err := NewWorldContext(ctx, cfg)
	if err != nil {
		return err
	}
	rows, err := NearestBound(ctx, w, cfg.Train, kMax)
	if err != nil {
		return err
	}
	fmt.Fprintf(out, "NEAREST CRAWLERS BY EXACT POSITION (%d crawlers, evaluation hosts %d–%d, seed %d; no policy: the best of the k nearest, capacity ignored)\n",
		len(w.CrawlerE), cfg.Train, len(w.Hosts)-1, cfg.Seed)
	fmt.Fprintf(out, "%4s %16s %16s %10s\n", "k", "excess mean ms", "excess p95 ms", "% optimal")
	for _, r := range rows {
		fmt.Fprintf(out, "%4d %16.2f %16.2f %10.1f\n", r.K, r.MeanMs, r.P95Ms, r.OptimalPct)
	}
	return nil
}
