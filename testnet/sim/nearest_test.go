package sim

import (
	"context"
	"strings"
	"testing"
)

// TestNearestBound: the best of more nearest crawlers is never worse, the
// nearest alone is the optimal crawler for most hosts but not all (paths
// differ in stretch and access), and the best of every crawler is the
// optimal one for every host; bad arguments are refused.
func TestNearestBound(t *testing.T) {
	cfg := Config{Seed: 2, Crawlers: 12, Hosts: 300, Train: 100, Logger: quiet()}.withDefaults()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	rows, err := NearestBound(context.Background(), w, cfg.Train, 20)
	if err != nil {
		t.Fatal(err)
	}
	if len(rows) != 12 {
		t.Fatalf("%d rows for 12 crawlers, want 12 (k capped at the crawlers)", len(rows))
	}
	for i := 1; i < len(rows); i++ {
		if rows[i].MeanMs > rows[i-1].MeanMs || rows[i].OptimalPct < rows[i-1].OptimalPct {
			t.Fatalf("k=%d worse than k=%d: %+v vs %+v", rows[i].K, rows[i-1].K, rows[i], rows[i-1])
		}
	}
	if r := rows[0]; !(r.OptimalPct > 50 && r.OptimalPct < 100 && r.MeanMs > 0) {
		t.Fatalf("the nearest crawler alone: %+v", r)
	}
	if r := rows[len(rows)-1]; r.MeanMs != 0 || r.P95Ms != 0 || r.OptimalPct != 100 {
		t.Fatalf("the best of every crawler is not the optimal one: %+v", r)
	}
	if _, err := NearestBound(context.Background(), w, 300, 3); err == nil {
		t.Fatal("no evaluation hosts accepted")
	}
	var out strings.Builder
	if err := WriteNearestBound(context.Background(), cfg, &out, 2); err != nil || !strings.Contains(out.String(), "NEAREST CRAWLERS") || strings.Count(out.String(), "\n") != 4 {
		t.Fatalf("WriteNearestBound: %v\n%s", err, out.String())
	}
}
