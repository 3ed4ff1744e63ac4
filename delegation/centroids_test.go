package delegation

import (
	"sort"
	"testing"

	"github.com/micra-crawler/micra/hierarchy"
)

// noCentroid are the registry codes deliberately left without a centroid
// (centroids.go says why): a subnet of one gets no distance prior.
var noCentroid = map[string]bool{"AP": true}

// TestCentroidsCoverDefaultHierarchy: every country code of the embedded
// default hierarchy has a centroid, and so do the codes current RIR
// delegation files use that an older table lacked (South Sudan, the former
// Netherlands Antilles, the French Caribbean collectivities, Åland, RIPE's
// pan-European EU); AP (APNIC's region-wide code) is the one deliberate
// exception. The defect caught: SS, CW, SX, BQ, BL, MF, AX and UM occur in
// the snapshot (on 279 nodes together, CW alone on 127) but were missing
// from the DSPL table, so those subnets silently got no distance prior.
func TestCentroidsCoverDefaultHierarchy(t *testing.T) {
	tr, err := hierarchy.Default()
	if err != nil {
		t.Skip(err) // built with -tags nodefaultsnapshot
	}
	nodes := map[string]int{} // code → nodes carrying it
	for id := range tr.Len() {
		if cc := tr.Node(hierarchy.NodeID(id)).Country; cc != "" {
			nodes[cc]++
		}
	}
	if len(nodes) < 240 {
		t.Fatalf("only %d country codes in the default hierarchy", len(nodes))
	}
	var missing []string
	for cc := range nodes {
		if _, ok := countryCentroids[cc]; !ok && !noCentroid[cc] {
			missing = append(missing, cc)
		}
	}
	sort.Strings(missing)
	for _, cc := range missing {
		t.Errorf("country %s (%d nodes of the default hierarchy) has no centroid", cc, nodes[cc])
	}
	for _, cc := range []string{"SS", "CW", "SX", "BQ", "BL", "MF", "AX", "UM", "EU"} {
		if _, ok := countryCentroids[cc]; !ok {
			t.Errorf("registry code %s has no centroid", cc)
		}
	}
	for cc := range noCentroid {
		if _, ok := countryCentroids[cc]; ok {
			t.Errorf("%s has a centroid but is listed as deliberately without one", cc)
		}
	}
}
