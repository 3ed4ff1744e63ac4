package pack

import (
	"bytes"
	"testing"
	"time"

	"github.com/klauspost/compress/zstd"
)

// Carriers of the default payload bound compress to the bytes zstd's
// default 8 MiB window gives (the small window only saves the encoder's
// memory), and larger ones still round-trip.
func TestCarrierWindow(t *testing.T) {
	wide, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		t.Fatal(err)
	}
	defer wide.Close()
	dec, err := zstd.NewReader(nil)
	if err != nil {
		t.Fatal(err)
	}
	defer dec.Close()
	var recs []Record
	raw := 0
	for _, size := range []int{100 << 10, 1<<20 - 4<<10, 3 << 20} {
		for raw < size {
			r := sampleRecord(len(recs))
			raw += len(r.AppendBinary(nil)) + 3
			recs = append(recs, r)
		}
		c := EncodeCarrier("c1", 1, time.Now(), recs)
		if _, got, err := Decode(c.Data); err != nil || len(got) != len(recs) {
			t.Fatalf("%d raw bytes: decoded %d records, %v", c.RawBytes, len(got), err)
		}
		if c.RawBytes > 1<<20 {
			continue
		}
		_, compressed, err := DecodeHeader(c.Data)
		if err != nil {
			t.Fatal(err)
		}
		payload, err := dec.DecodeAll(compressed, nil)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(wide.EncodeAll(payload, nil), compressed) {
			t.Fatalf("%d raw bytes: carrier compression differs from the 8 MiB window's", c.RawBytes)
		}
	}
}
