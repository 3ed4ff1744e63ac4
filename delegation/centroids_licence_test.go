package delegation

import (
	"os"
	"testing"
)

// The embedded licence of the centroid table is DSPL-LICENSE and
// CENTROIDS-SOURCES byte for byte, so the binary can never carry a stale
// copy.
func TestCentroidsLicenceIsTheFile(t *testing.T) {
	dspl, err := os.ReadFile("DSPL-LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	extra, err := os.ReadFile("CENTROIDS-SOURCES")
	if err != nil {
		t.Fatal(err)
	}
	want := string(dspl) + "\n" + string(extra)
	if CentroidsLicence() != want {
		t.Errorf("embedded DSPL-LICENSE (%d bytes) differs from the file (%d bytes)", len(CentroidsLicence()), len(want))
	}
}
