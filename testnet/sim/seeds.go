package sim

import (
	"context"
	"runtime"

	"golang.org/x/sync/errgroup"
)

// RunSeeds runs cfg on seeds cfg.Seed, cfg.Seed+1, … — one per worlds
// entry, placing the worlds still nil — and returns their reports in seed
// order. Worlds are independent, so with parallel set up to GOMAXPROCS of
// them run at once, except beyond 100,000 hosts, where each world holds
// gigabytes.
// Each report is a pure function of its seed: the output is the same
// either way. Hooks that every world would call at once — a Trace writer,
// micra's OnRound — keep the worlds one at a time.
func RunSeeds(ctx context.Context, cfg Config, worlds []*World, parallel bool) ([]*Report, error) {
	workers := 1
	if parallel && cfg.Hosts <= 100_000 && cfg.Trace == nil && cfg.Engine.Micra.OnRound == nil {
		workers = min(len(worlds), runtime.GOMAXPROCS(0))
	}
	runs := make([]*Report, len(worlds))
	g, ctx := errgroup.WithContext(ctx)
	g.SetLimit(max(workers, 1))
	for k := range worlds {
		c := cfg
		c.Seed = cfg.Seed + uint64(k)
		g.Go(func() (err error) {
			runs[k], worlds[k], err = Run(ctx, c, worlds[k])
			return err
		})
	}
	return runs, g.Wait()
}
