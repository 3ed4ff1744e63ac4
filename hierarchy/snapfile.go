package hierarchy

import (
	"bytes"
	"fmt"
	"io"
	"os"
	"path/filepath"

	"github.com/klauspost/compress/zstd"
)

// zstdMagic starts every zstd frame. Snapshot files may be stored
// zstd-compressed; the snapshot id is always that of the canonical
// (uncompressed) bytes, so compression settings never change it.
var zstdMagic = []byte{0x28, 0xb5, 0x2f, 0xfd}

// DecodeFile decodes snapshot bytes that may be zstd-compressed.
func DecodeFile(b []byte) (*Tree, error) {
	if !bytes.HasPrefix(b, zstdMagic) {
		return Decode(b)
	}
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxSnapshotBytes))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(b, nil)
	if err != nil {
		return nil, fmt.Errorf("%w: zstd: %v", ErrSnapshot, err)
	}
	return Decode(raw)
}

// ReadSnapshotFile reads and decodes a snapshot file (plain or zstd).
func ReadSnapshotFile(path string) (*Tree, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	b, err := io.ReadAll(io.LimitReader(f, MaxSnapshotBytes+1))
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	t, err := DecodeFile(b)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return t, nil
}

// CompressSnapshot returns the zstd form of canonical snapshot bytes.
func CompressSnapshot(canonical []byte) ([]byte, error) {
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(canonical, nil), nil
}

// WriteSnapshotFile writes t to path atomically (temp file + rename),
// zstd-compressed when compress is set.
func WriteSnapshotFile(path string, t *Tree, compress bool) error {
	b := t.Encode()
	if compress {
		var err error
		if b, err = CompressSnapshot(b); err != nil {
			return err
		}
	}
	// a temp file of its own (two builds to one output do not share it),
	// synced before the rename and removed on any failure
	f, err := os.CreateTemp(filepath.Dir(path), filepath.Base(path)+".tmp*")
	if err != nil {
		return err
	}
	tmp := f.Name()
	_, err = f.Write(b)
	if err == nil {
		err = f.Sync()
	}
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Chmod(tmp, 0o644)
	}
	if err == nil {
		err = os.Rename(tmp, path)
	}
	if err != nil {
		os.Remove(tmp)
	}
	return err
}
