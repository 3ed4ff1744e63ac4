package world

import (
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/data/geo"
)

// TestHubMatrix: the synthetic matrix is a pure function of its seed, goes
// through the measured-matrix loader, leaves out about the share of pairs it
// is asked to, and is not geography: pairs inside Africa, which mostly
// trombone through the Marseille hub, have a higher median stretch (RTT
// over fibre time) than pairs inside Europe, and Vladivostok is nearer to
// Moscow than to Tokyo.
func TestHubMatrix(t *testing.T) {
	s1, r1 := HubMatrixCSV(1, 0.08)
	s2, r2 := HubMatrixCSV(1, 0.08)
	if s1 != s2 || r1 != r2 {
		t.Fatal("same seed, different matrices")
	}
	if _, r3 := HubMatrixCSV(2, 0.08); r3 == r1 {
		t.Fatal("different seeds, same matrix")
	}
	mx, err := HubMatrix(1, 0.08)
	if err != nil {
		t.Fatal(err)
	}
	n := len(mx.Sites)
	if n != len(hubSites) || !strings.Contains(mx.Label, "hub") {
		t.Fatalf("%d sites, label %q", n, mx.Label)
	}
	all := n * (n - 1)
	if kept := float64(mx.Pairs()) / float64(all); kept < 0.89 || kept > 0.95 {
		t.Fatalf("kept %.3f of the directed pairs, want ≈ 0.92", kept)
	}
	full, err := HubMatrix(1, 0)
	if err != nil {
		t.Fatal(err)
	}
	if full.Pairs() != all {
		t.Fatalf("missing 0: %d pairs, want %d", full.Pairs(), all)
	}
	// median RTT over fibre time (200 km/ms, both ways) of the pairs
	// inside one region
	medianStretch := func(region string) float64 {
		var r []float64
		for a, sa := range hubSites {
			for b, sb := range hubSites {
				if a == b || sa.region != region || sb.region != region {
					continue
				}
				ms, ok := full.RTT(a, b)
				if !ok {
					t.Fatalf("%s→%s missing", sa.id, sb.id)
				}
				r = append(r, ms/(geo.DistanceKm(full.Sites[a].Loc, full.Sites[b].Loc)/100))
			}
		}
		slices.Sort(r)
		return r[len(r)/2]
	}
	af, eu := medianStretch("af"), medianStretch("eu")
	if af < 1.15*eu {
		t.Errorf("median stretch inside Africa %.2f, inside Europe %.2f: want Africa's tromboning to show (≥ 1.15×)", af, eu)
	}
	// near on the map, far on the network: Vladivostok reaches Tokyo
	// (1,000 km) through Moscow, and Moscow (6,400 km) directly
	vvo, _ := full.Site("vvo")
	nrt, _ := full.Site("nrt")
	mow, _ := full.Site("mow")
	toTokyo, _ := full.RTT(vvo, nrt)
	toMoscow, _ := full.RTT(vvo, mow)
	if toTokyo <= toMoscow {
		t.Errorf("Vladivostok→Tokyo %.1f ms, →Moscow %.1f ms: want Tokyo slower (routed via Moscow)", toTokyo, toMoscow)
	}
	t.Logf("median stretch inside Africa %.2f, Europe %.2f", af, eu)
}
