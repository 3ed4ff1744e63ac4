package hierarchydata

import (
	"os"
	"testing"
)

// The embedded attribution and licence are the files beside the snapshot,
// byte for byte, so the binary can never carry a stale copy.
func TestAttributionIsTheFile(t *testing.T) {
	for _, c := range []struct {
		file string
		got  string
	}{{"ATTRIBUTION.md", Attribution()}, {"LICENCE-CC-BY-4.0.txt", Licence()}} {
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if len(DefaultSnapshot) == 0 {
			want = nil // -tags nodefaultsnapshot: no data, nothing to attribute
		}
		if c.got != string(want) {
			t.Errorf("embedded %s (%d bytes) differs from the file (%d bytes)", c.file, len(c.got), len(want))
		}
	}
}
