package geo

import (
	"os"
	"testing"
)

// The embedded attribution and licence notice are the files beside the
// table, byte for byte, so the binary can never carry a stale copy.
func TestAttributionIsTheFile(t *testing.T) {
	for _, c := range []struct {
		file string
		got  string
	}{{"ATTRIBUTION.md", Attribution()}, {"DBIP-LICENSE", Licence()}} {
		want, err := os.ReadFile(c.file)
		if err != nil {
			t.Fatal(err)
		}
		if c.got != string(want) {
			t.Errorf("embedded %s (%d bytes) differs from the file (%d bytes)", c.file, len(c.got), len(want))
		}
	}
}
