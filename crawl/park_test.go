package crawl

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A parked host keeps no queued items in memory: with a politeness delay
// nearly every host a worker touched is parked between two requests (their
// number grows with pages/s × delay), and each held up to a batch of 64
// read-ahead items that the resume re-reads from Badger anyway.
func TestParkedHostHoldsNoBuffer(t *testing.T) {
	eng, err := New(Config{StateDir: t.TempDir(), Fetch: fetch.Config{AllowPrivate: true, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	var seeds []string
	for i := range 10 {
		seeds = append(seeds, fmt.Sprintf("http://parked.test/p%d", i))
	}
	if n, bad := eng.AddSeeds(context.Background(), seeds); n != 10 || len(bad) > 0 {
		t.Fatalf("seeds: %d queued, %v", n, bad)
	}
	host, ok, err := eng.front.AcquireHost()
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	first, ok, err := eng.front.Next(host)
	if err != nil || !ok {
		t.Fatalf("next: %v %v", ok, err)
	}
	if b := eng.front.Stats().Buffered; b != 9 {
		t.Fatalf("buffered %d before parking, want 9", b)
	}
	eng.park(host, time.Now().Add(-time.Second), false)
	if b := eng.front.Stats().Buffered; b != 0 {
		t.Errorf("parked host still buffers %d items", b)
	}
	// Resumed, it starts again with the URL it was refused.
	h, ok := eng.takeParked()
	if !ok || h != host {
		t.Fatalf("takeParked: %q %v", h, ok)
	}
	eng.front.Rewind(h)
	again, ok, err := eng.front.Next(h)
	if err != nil || !ok || again.URL != first.URL {
		t.Fatalf("after resume got %q (%v, %v), want %q", again.URL, ok, err, first.URL)
	}
}
