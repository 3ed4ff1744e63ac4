package main

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/testnet/sim"
)

// TestPeerIDBand: the overlay's reference band is computed with the
// overlay's crawler names. micra once broke ties by name, and on seed 1 names
// sorted against placement order moved its % optimal by more than two
// spreads of the band; it now breaks ties by a hash of name and subnet, so
// reversing the order must stay within one spread.
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
	rev := make([]delegation.CrawlerID, len(w.Crawlers))
	for i := range w.Crawlers {
		rev[i] = delegation.CrawlerID(fmt.Sprintf("peer-%02d", len(w.Crawlers)-1-i))
	}
	renamed := withCrawlerIDs(w, rev)
	if w.Crawlers[0].ID != old || renamed.Crawlers[0].ID != rev[0] {
		t.Fatalf("withCrawlerIDs: original %s (want %s), copy %s (want %s)", w.Crawlers[0].ID, old, renamed.Crawlers[0].ID, rev[0])
	}
	// micra breaks ties by a hash of name and subnet, so names sorted
	// against placement order no longer cost it accuracy (they cost 2+
	// spreads when it broke ties by name).
	r := band(renamed)
	t.Logf("seed 1, micra per crawler, shared: simulator names %.1f ± %.1f %%, reversed names %.1f ± %.1f %%", orig.OptimalPctMean, orig.OptimalPctSD, r.OptimalPctMean, r.OptimalPctSD)
	if d := math.Abs(orig.OptimalPctMean - r.OptimalPctMean); d > max(orig.OptimalPctSD, r.OptimalPctSD) {
		t.Fatalf("crawler naming moved micra's band by %.1f points (more than one spread): %.1f vs %.1f %%", d, orig.OptimalPctMean, r.OptimalPctMean)
	}
}
