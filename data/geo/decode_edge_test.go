package geo

import (
	"encoding/binary"
	"math"
	"net/netip"
	"testing"

	"github.com/klauspost/compress/zstd"
)

// rawTable builds an uncompressed table body by hand (the layout of Encode)
// with the given IPv4 (delta, location) pairs, and compresses it.
func rawTable(t *testing.T, v4 [][2]uint64, tail []byte) []byte {
	t.Helper()
	b := []byte(magic)
	b = binary.AppendUvarint(b, 1)
	b = append(b, 'x')
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(1))
	b = binary.AppendUvarint(b, 8)  // V4Bits
	b = binary.AppendUvarint(b, 16) // V6Bits
	b = binary.AppendUvarint(b, 2)  // two locations
	b = binary.AppendVarint(b, 10)
	b = binary.AppendVarint(b, 20)
	b = binary.AppendVarint(b, -30)
	b = binary.AppendVarint(b, -40)
	b = binary.AppendUvarint(b, 0) // no countries
	b = binary.AppendUvarint(b, uint64(len(v4)))
	for _, r := range v4 {
		b = binary.AppendUvarint(b, r[0])
		b = binary.AppendUvarint(b, r[1])
	}
	b = binary.AppendUvarint(b, 1) // one IPv6 run
	b = binary.AppendUvarint(b, 0)
	b = binary.AppendUvarint(b, 0)
	b = append(b, tail...)
	enc, err := zstd.NewWriter(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil)
}

// Decode documents runs "sorted by Start, first Start is 0" (Encode refuses
// anything else) but accepts any deltas: a zero delta or one that wraps the
// uint64 yields unsorted runs, on which Locate's binary search answers wrongly.
func TestDecodeRejectsUnsortedRuns(t *testing.T) {
	// Starts 0, 10, then 10+(2^64-5) = 5 (wrapped).
	wrapped := rawTable(t, [][2]uint64{{0, 0}, {10, 1}, {math.MaxUint64 - 4, 2}}, nil)
	tab, err := Decode(wrapped)
	if err == nil {
		p, ok := tab.Locate(netip.MustParseAddr("7.0.0.1"))
		t.Errorf("wrapped run starts %v accepted; Locate(7.0.0.1) = %v,%v (the run at 5 says %v)",
			[]uint64{tab.V4[0].Start, tab.V4[1].Start, tab.V4[2].Start}, p, ok, tab.point(tab.V4[2].Loc))
	}
	dup := rawTable(t, [][2]uint64{{0, 0}, {10, 1}, {0, 2}}, nil)
	if _, err := Decode(dup); err == nil {
		t.Error("duplicate run start (zero delta) accepted")
	}
	first := rawTable(t, [][2]uint64{{3, 1}}, nil)
	if _, err := Decode(first); err == nil {
		t.Error("first run not starting at 0 accepted")
	}
}
