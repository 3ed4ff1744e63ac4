package hierarchy

import (
	"errors"
	"math/rand/v2"
	"os"
	"path/filepath"
	"testing"
)

func TestSnapshotFiles(t *testing.T) {
	tr, _ := build(t, randomRanges(rand.New(rand.NewPCG(21, 22)), 120))
	dir := t.TempDir()
	for _, compress := range []bool{false, true} {
		p := filepath.Join(dir, "s.bin")
		if err := WriteSnapshotFile(p, tr, compress); err != nil {
			t.Fatal(err)
		}
		raw, _ := os.ReadFile(p)
		if compress == (len(raw) == len(tr.Encode())) {
			t.Errorf("compress=%v wrote %d bytes (canonical %d)", compress, len(raw), len(tr.Encode()))
		}
		got, err := ReadSnapshotFile(p)
		if err != nil {
			t.Fatal(err)
		}
		if got.ID() != tr.ID() {
			t.Errorf("compress=%v: id changed", compress)
		}
		if _, err := os.Stat(p + ".tmp"); !errors.Is(err, os.ErrNotExist) {
			t.Errorf("temp file left behind: %v", err)
		}
		// Corruption is reported, never decoded.
		raw[len(raw)/2] ^= 0x55
		if _, err := DecodeFile(raw); !errors.Is(err, ErrSnapshot) {
			t.Errorf("compress=%v: corrupted file: %v", compress, err)
		}
	}
	if _, err := ReadSnapshotFile(filepath.Join(dir, "missing")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	if tr.ID().String() == "" || len(tr.ID().String()) != 64 {
		t.Errorf("id string %q", tr.ID().String())
	}
}
