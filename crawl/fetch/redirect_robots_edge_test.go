package fetch

// Edge cases found by review; each test failed before its fix.

import (
	"bytes"
	"context"
	"io"
	"net/http"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/klauspost/compress/gzip"
)

// Validators belong to the URL whose response carried them. Fetch sends
// them on every hop, so after a redirect a *different* resource judges them:
// /a was last fetched with Last-Modified 2024; /a now redirects to /c, a page
// last modified in 2023, which rightly answers 304 to "If-Modified-Since
// 2024" — and the crawler concludes /a did not change.
func TestValidatorsNotSentToRedirectTarget(t *testing.T) {
	var mu sync.Mutex
	var condAtC []string
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/a":
			http.Redirect(w, r, "/c", http.StatusFound)
		case "/c":
			mu.Lock()
			condAtC = append(condAtC, r.Header.Get("If-Modified-Since")+r.Header.Get("If-None-Match"))
			mu.Unlock()
			http.ServeContent(w, r, "c.html", time.Date(2023, 1, 1, 0, 0, 0, 0, time.UTC),
				strings.NewReader("<title>c</title><p>a different page</p>"))
		}
	}))
	f := testFetcher(t, nil)
	// /a's last response carried only Last-Modified (no ETag).
	resp, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/a", LastModified: "Mon, 01 Jan 2024 00:00:00 GMT"})
	if err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if resp.NotModified || len(condAtC) != 1 || condAtC[0] != "" {
		t.Fatalf("validators of /a were sent to the redirect target /c (got %q there); NotModified=%v, body %d bytes: "+
			"/a's new content is taken as unchanged", condAtC, resp.NotModified, len(resp.Body))
	}
}

// fetchRobots' own comment says a 3xx without Location is "unavailable"
// (allow all). The page fetch machinery returns ReasonBadRedirect first, which
// falls through to "unreachable": the whole host is disallowed, retried every
// RobotsErrorTTL, and the engine finally gives its URLs up.
func TestRobotsRedirectWithoutLocationIsUnavailable(t *testing.T) {
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			w.WriteHeader(http.StatusFound) // no Location
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<p>page</p>")
	}))
	f := testFetcher(t, nil)
	if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/page"}); err != nil {
		t.Fatalf("robots.txt answered 302 without Location (unavailable → allow all), but the page was refused: %v", err)
	}
}

// A Crawl-delay above 10^6 s is dropped, not capped: the host gets no delay
// at all instead of MaxCrawlDelay.
func TestHugeCrawlDelayIsCappedNotIgnored(t *testing.T) {
	var mu sync.Mutex
	var hits []time.Time
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, "User-agent: *\nCrawl-delay: 10000000\n")
			return
		}
		mu.Lock()
		hits = append(hits, time.Now())
		mu.Unlock()
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<p>page</p>")
	}))
	f := testFetcher(t, func(c *Config) { c.MaxCrawlDelay = 300 * time.Millisecond })
	for _, p := range []string{"/p1", "/p2"} {
		if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + p}); err != nil {
			t.Fatal(err)
		}
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := hits[1].Sub(hits[0]); gap < 290*time.Millisecond {
		t.Fatalf("Crawl-delay 10000000 s: pages %v apart; want at least the cap MaxCrawlDelay (300ms)", gap)
	}
}

// RFC 9309 §2.2.2: percent-encoded unreserved octets in the URI are decoded
// before matching. Redirect targets are matched as sent, so a redirect to
// /%70rivate/... (the server decodes it to /private/...) passes
// "Disallow: /private".
func TestRobotsMatchesDecodedRedirectTarget(t *testing.T) {
	var mu sync.Mutex
	var private int
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/robots.txt":
			io.WriteString(w, "User-agent: *\nDisallow: /private\n")
		case r.URL.Path == "/go":
			w.Header().Set("Location", "/%70rivate/secret")
			w.WriteHeader(http.StatusFound)
		case strings.HasPrefix(r.URL.Path, "/private"):
			mu.Lock()
			private++
			mu.Unlock()
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<p>secret</p>")
		}
	}))
	f := testFetcher(t, nil)
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/go"})
	mu.Lock()
	defer mu.Unlock()
	if ReasonOf(err) != ReasonRobots || private != 0 {
		t.Fatalf("redirect to /%%70rivate/secret: err %v, requests to the disallowed /private: %d; want ReasonRobots and none", err, private)
	}
}

// Content-Encoding may list any number of codings; each gets a live decoder
// at once. 4 000 "gzip" layers fit in a 20 KB header and a ~105 KB body,
// and make one fetch allocate ~150 MB (64 workers: ~10 GB) although the
// decoded page is 9 bytes. curl caps the chain at 5 (CVE-2022-32206).
func TestContentEncodingChainBounded(t *testing.T) {
	const layers = 4000
	body := []byte("<p>hi</p>")
	for i := 0; i < layers; i++ {
		var b bytes.Buffer
		w, _ := gzip.NewWriterLevel(&b, gzip.NoCompression)
		w.Write(body)
		w.Close()
		body = b.Bytes()
	}
	ce := strings.TrimSuffix(strings.Repeat("gzip,", layers), ",")
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", ce)
		w.Write(body)
	}))
	f := testFetcher(t, nil)
	var m0, m1 runtime.MemStats
	runtime.GC()
	runtime.ReadMemStats(&m0)
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/layers"})
	runtime.ReadMemStats(&m1)
	alloc := m1.TotalAlloc - m0.TotalAlloc
	if alloc > 32<<20 {
		t.Fatalf("%d-layer Content-Encoding (%d wire bytes): fetch allocated %d MiB (err %v); want the chain refused "+
			"(ReasonContentEncoding) before building thousands of decoders", layers, len(body), alloc>>20, err)
	}
}
