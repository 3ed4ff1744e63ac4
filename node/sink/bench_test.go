package sink

import (
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// BenchmarkCommit commits carriers of 1,000 records (fsync'd), reporting
// records/s; `micra bench sink` sets the whole path beside its reference.
// placed: the records carry their host's address, which the sink also
// indexes (placed.go), beside plain, the same records without.
func BenchmarkCommit(b *testing.B) {
	b.Run("plain", func(b *testing.B) { benchCommit(b, false) })
	b.Run("placed", func(b *testing.B) { benchCommit(b, true) })
}

func benchCommit(b *testing.B, placed bool) {
	s, err := Open(Options{Dir: b.TempDir()})
	if err != nil {
		b.Fatal(err)
	}
	defer s.Close()
	const per = 1000
	cars := make([][]byte, b.N)
	for c := range cars {
		recs := make([]pack.Record, per)
		for j := range recs {
			kw := make([]pack.Keyword, 24)
			for k := range kw {
				kw[k] = pack.Keyword{Term: fmt.Sprintf("term%d", (j*7+k*13)%5000), Weight: uint32(40 - k)}
			}
			recs[j] = pack.Record{URL: fmt.Sprintf("http://h%d.example/%d/%d", j%97, c, j), Status: 200, Change: pack.ChangeNew,
				FetchedAt: time.Now(), CrawlerID: "c", Title: "a page title", Keywords: kw}
			if placed {
				recs[j].Addr = netip.AddrFrom4([4]byte{192, 0, byte(j % 97), 1})
			}
		}
		cars[c] = pack.EncodeCarrier("c", uint64(c), time.Now(), recs).Data
	}
	b.ResetTimer()
	start := time.Now()
	for i := range b.N {
		if _, err := s.Commit("c", cars[i]); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(b.N*per)/time.Since(start).Seconds(), "records/s")
}
