package release

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
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

// The wire form of a bundle (a gossip announcement's payload): "MRB1", then
// zstd of the metadata files, each a kind byte (root, targets, snapshot,
// timestamp) and a uvarint length before its bytes. The files are kept
// byte for byte (the snapshot and the timestamp sign the hashes of the exact
// bytes), and successive root versions, which share most of their keys,
// compress to a fraction: one root and the three others are about 2 KB.
const wireMagic = "MRB1"

const (
	kindRoot byte = iota
	kindTargets
	kindSnapshot
	kindTimestamp
)

// Encode is the bundle's wire form.
func (b Bundle) Encode() ([]byte, error) {
	var raw []byte
	add := func(kind byte, data []byte) {
		raw = append(raw, kind)
		raw = binary.AppendUvarint(raw, uint64(len(data)))
		raw = append(raw, data...)
	}
	for _, r := range b.Roots {
		add(kindRoot, r)
	}
	add(kindTargets, b.Targets)
	add(kindSnapshot, b.Snapshot)
	add(kindTimestamp, b.Timestamp)
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(raw, []byte(wireMagic)), nil
}

// DecodeBundle parses a bundle's wire form, refusing one over the limits
// (MaxBundleBytes decompressed, MaxRoots roots, MaxMetadataBytes a file)
// before anything is parsed as metadata.
func DecodeBundle(data []byte) (Bundle, error) {
	var b Bundle
	rest, ok := bytes.CutPrefix(data, []byte(wireMagic))
	if !ok {
		return b, errors.New("release bundle: not a bundle (no MRB1 header)")
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderMaxMemory(MaxBundleBytes), zstd.WithDecoderConcurrency(1))
	if err != nil {
		return b, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(rest, nil)
	if err != nil {
		return b, fmt.Errorf("release bundle: %w", err)
	}
	if len(raw) > MaxBundleBytes {
		return b, fmt.Errorf("release bundle: %d bytes, more than %d", len(raw), MaxBundleBytes)
	}
	seen := map[byte]bool{}
	for len(raw) > 0 {
		kind := raw[0]
		n, w := binary.Uvarint(raw[1:])
		if w <= 0 || n == 0 || n > MaxMetadataBytes || uint64(len(raw)-1-w) < n {
			return b, errors.New("release bundle: a metadata file's length is missing, zero, too large or past the end")
		}
		file := raw[1+w : 1+w+int(n)]
		raw = raw[1+w+int(n):]
		if kind != kindRoot && seen[kind] {
			return b, fmt.Errorf("release bundle: metadata kind %d twice", kind)
		}
		seen[kind] = true
		switch kind {
		case kindRoot:
			if len(b.Roots) == MaxRoots {
				return b, fmt.Errorf("release bundle: more than %d root versions", MaxRoots)
			}
			b.Roots = append(b.Roots, file)
		case kindTargets:
			b.Targets = file
		case kindSnapshot:
			b.Snapshot = file
		case kindTimestamp:
			b.Timestamp = file
		default:
			return b, fmt.Errorf("release bundle: unknown metadata kind %d", kind)
		}
	}
	if len(b.Roots) == 0 || b.Targets == nil || b.Snapshot == nil || b.Timestamp == nil {
		return b, errors.New("release bundle: wants at least one root, and targets, snapshot and timestamp")
	}
	return b, nil
}
