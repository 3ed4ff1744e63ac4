package delegation

import (
	"os"
	"testing"
)

// The embedded licence of the centroid table is DSPL-LICENSE byte for byte,
// so the binary can never carry a stale copy.
func TestCentroidsLicenceIsTheFile(t *testing.T) {
	want, err := os.ReadFile("DSPL-LICENSE")
	if err != nil {
		t.Fatal(err)
	}
	if CentroidsLicence() != string(want) {
		t.Errorf("embedded DSPL-LICENSE (%d bytes) differs from the file (%d bytes)", len(CentroidsLicence()), len(want))
	}
}
