package crawl

import (
	"context"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// RetryDelay is "the host's rest before the first retry, doubled for each
// further one" (`micra crawl --retry-delay`, docs/crawl.md "Failures"); a
// value above an hour is silently cut to an hour.
func TestRetryDelayAboveAnHourKept(t *testing.T) {
	srv, _ := flakyServer(t, -1)
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/a"}, Concurrency: 1,
		Fetch:      fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		RetryDelay: 2 * time.Hour, Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	defer func() { cancel(); <-done }()
	deadline := time.Now().Add(10 * time.Second)
	for time.Now().Before(deadline) {
		eng.parkMu.Lock()
		var until time.Time
		for _, p := range eng.parked {
			if time.Until(p.until) > time.Minute { // not a politeness rest
				until = p.until
			}
		}
		eng.parkMu.Unlock()
		if !until.IsZero() {
			if rest := time.Until(until); rest < 119*time.Minute {
				t.Errorf("after a 500 the host rests %v, want RetryDelay 2h", rest.Round(time.Minute))
			}
			return
		}
		time.Sleep(5 * time.Millisecond)
	}
	t.Fatal("the host was never parked after the 500")
}
