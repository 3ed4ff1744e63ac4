package pack

import (
	"testing"
	"time"
)

// FuzzDecodeWithin: a carrier as the sink receives it from a crawler it
// does not trust (hostile inputs). It must be refused with an
// error or decoded within its limits, never panic; what is accepted holds
// at most the records its header claims. `make fuzz` runs it briefly; the
// seeds are the committed corpus.
func FuzzDecodeWithin(f *testing.F) {
	recs := []Record{
		{URL: "http://192.0.2.1/", Status: 200, FetchedAt: time.Unix(1_790_000_000, 0), Title: "home",
			Keywords: []Keyword{{Term: "micra", Weight: 3}}},
		{URL: "http://192.0.2.1/a", Status: 404, FetchedAt: time.Unix(1_790_000_001, 0)},
	}
	f.Add(EncodeCarrier("crawler-1", 1, time.Unix(1_790_000_002, 0), recs).Data)
	f.Add(EncodeCarrier("c", 2, time.Unix(1_790_000_002, 0), nil).Data)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		const maxRaw = 1 << 20
		h, got, err := DecodeWithin(data, maxRaw, nil)
		if err != nil {
			return
		}
		if len(got) != h.Records || h.RawBytes > maxRaw {
			t.Fatalf("accepted %d records, header claims %d (raw %d)", len(got), h.Records, h.RawBytes)
		}
	})
}
