package crawl

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// flakyServer fails /a with 500 for the first failA requests (-1: always);
// "/" links to /a and /b.
func flakyServer(t *testing.T, failA int) (*httptest.Server, func() map[string]int) {
	return countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.URL.Path == "/robots.txt":
			http.NotFound(w, r)
		case r.URL.Path == "/a" && (failA < 0 || n <= failA):
			http.Error(w, "temporary trouble", http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<title>page %s</title><a href="/a">a</a> <a href="/b">b</a>`, r.URL.Path)
		}
	})
}

func runOnePass(t *testing.T, seed string) *Engine {
	t.Helper()
	return runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{seed}, Concurrency: 2,
		Fetch:      fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		RetryDelay: 20 * time.Millisecond, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
}

// runPass opens an engine on cfg (a one-pass crawl: StopWhenIdle), runs it
// to the end within 30 s, closes it (its state can be opened again) and
// returns its counters.
func runPass(t *testing.T, cfg Config) Stats {
	t.Helper()
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return eng.Stats()
}

// runToIdle opens an engine on cfg (a one-pass crawl: StopWhenIdle), runs it
// to the end within 30 s and closes it when the test ends.
func runToIdle(t *testing.T, cfg Config) *Engine {
	t.Helper()
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return eng
}

// A new URL that fails transiently (5xx, timeout, connection trouble) is
// tried again after a pause instead of being lost for good after one try.
func TestTransientFailureRetried(t *testing.T) {
	srv, hits := flakyServer(t, 2)
	eng := runOnePass(t, srv.URL+"/")
	st, h := eng.Stats(), hits()
	if st.Fetched != 3 || st.Records != 3 || h["/a"] != 3 || h["/b"] != 1 {
		t.Fatalf("fetched %d, records %d, server hits %v; want /a fetched after two 500s", st.Fetched, st.Records, h)
	}
	if st.Events["retried"] != 2 || st.ByReason["status_500"] != 0 || st.Errors != 0 {
		t.Errorf("errors %v, events %v, want 2 retried and no failure", st.ByReason, st.Events)
	}
}

// A URL that keeps failing is given up after MaxRetries retries, counted
// under its reason; the one-pass crawl ends.
func TestTransientFailureGivenUp(t *testing.T) {
	srv, hits := flakyServer(t, -1)
	eng := runOnePass(t, srv.URL+"/")
	st, h := eng.Stats(), hits()
	if want := 1 + defaultMaxRetries; h["/a"] != want || st.Fetched != 2 {
		t.Fatalf("fetched %d, server hits %v; want /a tried %d times", st.Fetched, h, want)
	}
	if st.ByReason["status_500"] != 1 || st.Errors != 1 || st.Events["retried"] != int64(defaultMaxRetries) {
		t.Errorf("errors %v, events %v; want one failed URL after its retries", st.ByReason, st.Events)
	}
}

// A server that answers 429 forever does not hold a one-pass crawl forever:
// each answer is honoured (Retry-After), and after maxBackoffs of them in a
// row the URL is given up and counted.
func TestTooManyRequestsStormGivenUp(t *testing.T) {
	var mu sync.Mutex
	hits := 0
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		mu.Lock()
		hits++
		mu.Unlock()
		w.Header().Set("Retry-After", "0")
		w.WriteHeader(http.StatusTooManyRequests)
	}))
	defer srv.Close()
	eng := runOnePass(t, srv.URL+"/")
	st := eng.Stats()
	mu.Lock()
	defer mu.Unlock()
	if hits != maxBackoffs+1 || st.Fetched != 0 {
		t.Fatalf("server asked %d times, fetched %d; want %d refusals then give up", hits, st.Fetched, maxBackoffs+1)
	}
	if st.ByReason["retry_later_given_up"] != 1 || st.Errors != 1 || st.Events["retry_later"] != int64(maxBackoffs+1) {
		t.Errorf("errors %v, events %v", st.ByReason, st.Events)
	}
}

// dyingResolver answers until dead is set, then NXDOMAIN: a domain that
// expired between robots.txt and its pages.
type dyingResolver struct{ dead atomic.Bool }

func (d *dyingResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if !d.dead.Load() {
		return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// A host name that no longer exists is not a passing failure: its URLs are
// given up at once, not retried.
func TestHostNotFoundNotRetried(t *testing.T) {
	res := &dyingResolver{}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		res.dead.Store(true) // after robots.txt (allow all), the name is gone
		http.NotFound(w, r)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{fmt.Sprintf("http://dying.test:%d/", port)}, Concurrency: 1,
		Fetch:      fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, DNSTTL: time.Nanosecond, Resolver: res, Logger: quiet},
		RetryDelay: 10 * time.Millisecond, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if st := eng.Stats(); st.ByReason["dns"] != 1 || st.Events["retried"] != 0 {
		t.Errorf("errors %v; want the page given up at once under dns", st.ByReason)
	}
}
