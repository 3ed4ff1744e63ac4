package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// robotsServer answers robots.txt with 500 for the first failures requests
// (failures < 0: always), then 404 (allow all); pages link to /a and /b.
func robotsServer(t *testing.T, failures int) (*httptest.Server, func() map[string]int) {
	return countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			if failures < 0 || n <= failures {
				http.Error(w, "overloaded", http.StatusInternalServerError)
				return
			}
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<title>page %s</title><a href="/a">a</a> <a href="/b">b</a>`, r.URL.Path)
	})
}

// RFC 9309 §2.3.1.4: an unreachable robots.txt disallows the host *for a
// while*. The queued URLs must wait and be crawled once robots.txt answers,
// not be dropped: a robots.txt that fails once would otherwise lose a whole
// site (here, the seed and everything behind it).
func TestRobotsUnreachableURLsWaitNotDropped(t *testing.T) {
	srv, hits := robotsServer(t, 1)
	fc := fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, RobotsErrorTTL: 100 * time.Millisecond, Logger: quiet}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: fc, Concurrency: 2,
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st, h := eng.Stats(), hits()
	if st.Fetched != 3 || h["/"] != 1 || h["/a"] != 1 || h["/b"] != 1 || h["/robots.txt"] != 2 {
		t.Fatalf("fetched %d pages; server hits %v; want /, /a, /b once each after robots.txt recovered", st.Fetched, h)
	}
}

// A robots.txt that never answers is retried a bounded number of times;
// then the URLs are given up (counted) and a one-pass crawl ends.
func TestRobotsUnreachableGivesUp(t *testing.T) {
	srv, hits := robotsServer(t, -1)
	fc := fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, RobotsErrorTTL: 50 * time.Millisecond, Logger: quiet}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: fc, Concurrency: 2,
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st, h := eng.Stats(), hits()
	if st.Fetched != 0 || h["/"] != 0 {
		t.Fatalf("fetched %d pages with robots.txt unreachable; server hits %v", st.Fetched, h)
	}
	if want := 1 + maxRobotsRetries; h["/robots.txt"] != want {
		t.Errorf("robots.txt asked %d times, want %d (first try and %d retries)", h["/robots.txt"], want, maxRobotsRetries)
	}
	if st.ByReason["robots"] != 1 {
		t.Errorf("errors %v, want the given-up URL counted once as robots", st.ByReason)
	}
}

// A host whose name does not exist (NXDOMAIN: a dead domain, a typo) is not
// "temporarily unreachable": its URLs are given up at once instead of
// waiting 3 × RobotsErrorTTL, which would hold a one-pass crawl for half an
// hour per dead link.
func TestRobotsHostNotFoundNotRetried(t *testing.T) {
	fc := fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, RobotsErrorTTL: time.Hour,
		Resolver: mapResolver{}, Logger: quiet}
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{"http://no-such-host.test/"}, Fetch: fc, Concurrency: 2,
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := eng.Stats()
	if ctx.Err() != nil || st.Queued != 0 || st.Events["robots_unreachable"] != 0 || st.ByReason["robots"] != 1 {
		t.Fatalf("crawl of an unresolvable host: ctx %v, queued %d, errors %v; want it given up at once", ctx.Err(), st.Queued, st.ByReason)
	}
}
