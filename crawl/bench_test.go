package crawl

import (
	"context"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// BenchmarkEngineSynthweb crawls the bench-sized synthetic web (200 hosts,
// 100 pages of ~10 KB each) with full processing and carriers and reports
// pages/s. The comparison with Colly in the same run is `micra bench crawl`.
func BenchmarkEngineSynthweb(b *testing.B) {
	web, err := synthweb.Start(synthweb.Config{Hosts: 200, HostsPerIP: 4, PagesPerHost: 100})
	if err != nil {
		b.Fatal(err)
	}
	defer web.Close()
	for i := 0; i < b.N; i++ {
		web.ResetStats()
		eng, err := New(Config{
			CrawlerID: "bench", StateDir: b.TempDir(), Seeds: web.Seeds(), Fetch: synthFetchConfig(web),
			Concurrency: 64, Receiver: pack.FileSink{Dir: b.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: quiet,
		})
		if err != nil {
			b.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
		err = eng.Run(ctx)
		cancel()
		st := eng.Stats()
		eng.Close()
		if err != nil {
			b.Fatal(err)
		}
		ws := web.Stats()
		b.ReportMetric(st.PagesPerSec, "pages/s")
		b.ReportMetric(float64(ws.DuplicateFetches), "dup-fetches")
		b.ReportMetric(st.CarrierRatio(), "carrier/html")
	}
}
