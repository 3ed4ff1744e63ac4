package main

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/testnet/sim"
)

// TestPeerIDBand: the overlay's reference band must be computed with the
// overlay's crawler names, because micra's tie-breaks follow ID order.
// Renaming the crawlers with IDs that sort like the simulator's reproduces
// the simulator's band exactly (only names change), and on seed 1 the
// reversed order moves micra's % optimal well outside that band's noise —
// the gap the overlay showed against a band drawn with the simulator's
// names.
func TestPeerIDBand(t *testing.T) {
	scfg, _ := sim.Preset("paper")
	scfg.Seed, scfg.Crawlers, scfg.Hosts, scfg.Threshold = 1, 20, 300, 50*time.Millisecond
	scfg.Train = scfg.Hosts * 65 / 100
	w, err := sim.NewWorld(scfg)
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := sim.LookupPolicy("micra")
	if !ok {
		t.Fatal("no micra policy")
	}
	ctx := context.Background()
	band := func(w *sim.World) spread {
		sp, err := simSpread(ctx, w, spec, scfg.Threshold, scfg.Train, 6, scfg.Seed, true, true)
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	orig := band(w)
	old := w.Crawlers[0].ID
	same := make([]delegation.CrawlerID, len(w.Crawlers))
	rev := make([]delegation.CrawlerID, len(w.Crawlers))
	for i := range w.Crawlers {
		same[i] = delegation.CrawlerID(fmt.Sprintf("peer-%02d", i))
		rev[i] = delegation.CrawlerID(fmt.Sprintf("peer-%02d", len(w.Crawlers)-1-i))
	}
	renamed := withCrawlerIDs(w, same)
	if w.Crawlers[0].ID != old || renamed.Crawlers[0].ID != same[0] {
		t.Fatalf("withCrawlerIDs: original %s (want %s), copy %s (want %s)", w.Crawlers[0].ID, old, renamed.Crawlers[0].ID, same[0])
	}
	if got := band(renamed); got.OptimalPctMean != orig.OptimalPctMean || got.ProbesPerURLMean != orig.ProbesPerURLMean {
		t.Fatalf("same-order names changed the band: %.1f %% / %.2f probes vs %.1f %% / %.2f", got.OptimalPctMean, got.ProbesPerURLMean, orig.OptimalPctMean, orig.ProbesPerURLMean)
	}
	r := band(withCrawlerIDs(w, rev))
	t.Logf("seed 1, micra per crawler, shared: simulator names %.1f ± %.1f %%, reversed names %.1f ± %.1f %%", orig.OptimalPctMean, orig.OptimalPctSD, r.OptimalPctMean, r.OptimalPctSD)
	if orig.OptimalPctMean-r.OptimalPctMean < 2*max(orig.OptimalPctSD, r.OptimalPctSD) {
		t.Fatalf("expected crawler naming to matter on seed 1 (the cause of the overlay's gap): %.1f vs %.1f %%", orig.OptimalPctMean, r.OptimalPctMean)
	}
}
