package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
)

// Bundle is a repository's metadata as it travels to nodes (a published
// directory, a gossip announcement): every root version from the first,
// so a node that trusts any of them can follow the rotations to the newest,
// and the current targets, snapshot and timestamp. It holds no binary.
type Bundle struct {
	Roots     [][]byte `json:"roots"`
	Targets   []byte   `json:"targets"`
	Snapshot  []byte   `json:"snapshot"`
	Timestamp []byte   `json:"timestamp"`
}

// Limits on what a bundle may hold: a node reads bundles from peers it does
// not trust, so a huge one is refused before anything is parsed.
const (
	MaxMetadataBytes = 64 << 10
	MaxRoots         = 64
	MaxBundleBytes   = 1 << 20
)

// ReadBundle reads the published repository in dir (as Publish writes it).
func ReadBundle(dir string) (Bundle, error) {
	var b Bundle
	md := filepath.Join(dir, metaDir)
	for v := 1; ; v++ {
		data, err := readLimited(filepath.Join(md, fmt.Sprintf("%d.%s", v, rootFile)))
		if errors.Is(err, fs.ErrNotExist) {
			if v == 1 {
				return b, fmt.Errorf("%s: no 1.root.json: not a published micra release repository (micra release publish --out %s)", dir, dir)
			}
			break
		}
		if err != nil {
			return b, err
		}
		if v > MaxRoots {
			return b, fmt.Errorf("%s: more than %d root versions", md, MaxRoots)
		}
		b.Roots = append(b.Roots, data)
	}
	var err error
	if b.Targets, err = readLimited(filepath.Join(md, targetsFile)); err != nil {
		return b, err
	}
	if b.Snapshot, err = readLimited(filepath.Join(md, snapFile)); err != nil {
		return b, err
	}
	if b.Timestamp, err = readLimited(filepath.Join(md, tsFile)); err != nil {
		return b, err
	}
	return b, nil
}

// TargetPath is where the published repository in dir keeps the binary
// whose SHA-256 is sum (hex).
func TargetPath(dir, sum string) string { return filepath.Join(dir, targetsDir, sum) }

func readLimited(path string) ([]byte, error) {
	st, err := os.Stat(path)
	if err != nil {
		return nil, err
	}
	if st.Size() > MaxMetadataBytes {
		return nil, fmt.Errorf("%s: %d bytes, more than the %d a metadata file may have", path, st.Size(), MaxMetadataBytes)
	}
	return os.ReadFile(path)
}

// Encode is the bundle as JSON (the gossip announcement's payload).
func (b Bundle) Encode() ([]byte, error) { return json.Marshal(b) }

// DecodeBundle parses an encoded bundle, refusing one over the limits.
func DecodeBundle(data []byte) (Bundle, error) {
	var b Bundle
	if len(data) > MaxBundleBytes {
		return b, fmt.Errorf("release bundle: %d bytes, more than %d", len(data), MaxBundleBytes)
	}
	if err := json.Unmarshal(data, &b); err != nil {
		return b, fmt.Errorf("release bundle: %w", err)
	}
	if len(b.Roots) == 0 || len(b.Roots) > MaxRoots {
		return b, fmt.Errorf("release bundle: %d root versions, want 1 to %d", len(b.Roots), MaxRoots)
	}
	for _, m := range append(append([][]byte(nil), b.Roots...), b.Targets, b.Snapshot, b.Timestamp) {
		if len(m) == 0 || len(m) > MaxMetadataBytes {
			return b, fmt.Errorf("release bundle: a metadata file of %d bytes, want 1 to %d", len(m), MaxMetadataBytes)
		}
	}
	return b, nil
}
