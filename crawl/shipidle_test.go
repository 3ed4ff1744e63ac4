package crawl

import (
	"context"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// A crawler that runs on (a node: no StopWhenIdle) ships its records once
// it has nothing left to fetch, not after MaxCarrierHold: here the hold is
// an hour, and every record reaches the receiver while Run still runs.
func TestIdleCrawlerShipsAtOnce(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 4, HostsPerIP: 4, PagesPerHost: 5})
	out := t.TempDir()
	eng, err := New(Config{
		CrawlerID: "t1", StateDir: t.TempDir(), Seeds: web.Seeds(), Fetch: synthFetchConfig(web),
		Concurrency: 4, Receiver: pack.FileSink{Dir: out}, MaxCarrierHold: time.Hour,
		Progress: -1, Logger: testLogger(t), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	want := web.TotalPages()
	deadline := time.After(time.Minute) // a bound for a broken build, not a measurement
	for got := 0; got < want; {
		select {
		case err := <-done:
			t.Fatalf("Run returned early: %v", err)
		case <-deadline:
			t.Fatalf("%d of %d records shipped while the crawler idled; the hour's hold still held them", got, want)
		case <-time.After(50 * time.Millisecond):
		}
		got = len(readCarriers(t, out))
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
}
