package sim

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// TestPeerIDBand: micra breaks prediction ties by a hash of crawler name and
// subnet, so renaming the crawlers (as the overlay's random peer IDs do)
// moves its % optimal on a per-crawler, records-shared run by less than one
// spread (a tie-break by name, with names sorted against placement order,
// would move it by more than two spreads on seed 1).
func TestPeerIDBand(t *testing.T) {
	cfg, _ := Preset("paper")
	cfg.Seed, cfg.Crawlers, cfg.Hosts, cfg.Threshold = 1, 20, 300, 50*time.Millisecond
	cfg.Train = cfg.Hosts * 65 / 100
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec, ok := LookupPolicy("micra")
	if !ok {
		t.Fatal("no micra policy")
	}
	band := func(w *World) Spread {
		sp, err := w.Spread(context.Background(), spec, SpreadConfig{Threshold: cfg.Threshold, Train: cfg.Train, Replicas: 6,
			Seed: cfg.Seed, PerCrawler: true, ShareRecords: true})
		if err != nil {
			t.Fatal(err)
		}
		return sp
	}
	orig := band(w)
	rev := make([]delegation.CrawlerID, len(w.Crawlers))
	for i := range w.Crawlers {
		rev[i] = delegation.CrawlerID(fmt.Sprintf("peer-%02d", len(w.Crawlers)-1-i))
	}
	renamed, err := w.WithCrawlerIDs(rev)
	if err != nil {
		t.Fatal(err)
	}
	r := band(renamed)
	t.Logf("seed 1, micra per crawler, shared: simulator names %.1f ± %.1f %%, reversed names %.1f ± %.1f %%", orig.OptimalPctMean, orig.OptimalPctSD, r.OptimalPctMean, r.OptimalPctSD)
	if d := math.Abs(orig.OptimalPctMean - r.OptimalPctMean); d > max(orig.OptimalPctSD, r.OptimalPctSD) {
		t.Fatalf("crawler naming moved micra's band by %.1f points (more than one spread): %.1f vs %.1f %%", d, orig.OptimalPctMean, r.OptimalPctMean)
	}
}

// WithCrawlerIDs renames a copy: the original keeps its names, the copy
// resolves the new ones (the prober answers for them), and bad name lists
// are refused.
func TestWithCrawlerIDs(t *testing.T) {
	w, err := NewWorld(Config{Seed: 2, Crawlers: 4, Hosts: 40})
	if err != nil {
		t.Fatal(err)
	}
	old := w.Crawlers[0].ID
	ids := []delegation.CrawlerID{"d", "c", "b", "a"}
	cp, err := w.WithCrawlerIDs(ids)
	if err != nil {
		t.Fatal(err)
	}
	if w.Crawlers[0].ID != old {
		t.Fatalf("original renamed: %s, want %s", w.Crawlers[0].ID, old)
	}
	for i, id := range ids {
		if ci, ok := cp.crawler(id); !ok || int(ci) != i || cp.Crawlers[i].ID != id {
			t.Fatalf("copy: %s resolves to %d, %v; crawler %d is %s", id, ci, ok, i, cp.Crawlers[i].ID)
		}
	}
	if _, ok := cp.crawler(old); ok {
		t.Fatalf("copy still resolves the old name %s", old)
	}
	if _, err := w.WithCrawlerIDs(ids[:3]); err == nil {
		t.Fatal("3 names for 4 crawlers accepted")
	}
	if _, err := w.WithCrawlerIDs([]delegation.CrawlerID{"a", "b", "a", "c"}); err == nil {
		t.Fatal("a name given twice accepted")
	}
}

// One engine per crawler that shares nothing probes more than engines that
// learn each other's records; a single engine needs no sharing. A spread of
// no replica is refused.
func TestSpreadModes(t *testing.T) {
	w, err := NewWorld(Config{Seed: 3, Crawlers: 6, Hosts: 120})
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := LookupPolicy("micra")
	ctx := context.Background()
	run := func(perCrawler, share bool) Spread {
		sp, err := w.Spread(ctx, spec, SpreadConfig{Threshold: 50 * time.Millisecond, Train: 80, Replicas: 3, Seed: 3, PerCrawler: perCrawler, ShareRecords: share})
		if err != nil {
			t.Fatal(err)
		}
		if sp.Replicas != 3 || sp.OptimalPctMin > sp.OptimalPctMean || sp.OptimalPctMean > sp.OptimalPctMax {
			t.Fatalf("spread %+v", sp)
		}
		return sp
	}
	alone, shared := run(true, false), run(true, true)
	if shared.ProbesPerURLMean >= alone.ProbesPerURLMean {
		t.Fatalf("sharing records did not save probes: %.2f shared, %.2f alone", shared.ProbesPerURLMean, alone.ProbesPerURLMean)
	}
	if one, oneShared := run(false, false), run(false, true); one != oneShared {
		t.Fatalf("one engine: sharing changed the figures: %+v vs %+v", one, oneShared)
	}
	if _, err := w.Spread(ctx, spec, SpreadConfig{Replicas: 0}); err == nil {
		t.Fatal("0 replicas accepted")
	}
}
