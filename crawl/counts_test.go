package crawl

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// A URL whose first fetch answers 404 is a dead link, counted as an error;
// "gone" is for a known page that disappeared.
func TestFirstFetch404IsAnErrorNotGone(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>home</title><a href="/missing">dead link</a>`)
		default:
			http.NotFound(w, r)
		}
	})
	st := runOnePass(t, srv.URL+"/").Stats()
	if st.Gone != 0 || st.Errors != 1 || st.ByReason["status_404"] != 1 || st.Records != 1 {
		t.Fatalf("gone %d, errors %d %v, records %d; want the dead link as one status_404 error and nothing gone",
			st.Gone, st.Errors, st.ByReason, st.Records)
	}
}

// Errors count URLs that failed; what was tried again (and then worked, or
// failed once) is an event, not another error.
func TestErrorsCountFailedURLsEventsApart(t *testing.T) {
	srv, hits := flakyServer(t, -1) // /a always 500
	st := runOnePass(t, srv.URL+"/").Stats()
	if h := hits()["/a"]; h != 1+defaultMaxRetries {
		t.Fatalf("/a asked %d times, want %d", h, 1+defaultMaxRetries)
	}
	if st.Errors != 1 || len(st.ByReason) != 1 || st.Events["retried"] != defaultMaxRetries {
		t.Fatalf("errors %d %v, events %v; want 1 failed URL and %d retries apart", st.Errors, st.ByReason, st.Events, defaultMaxRetries)
	}
}

// HTML bytes count every HTML body fetched, also one found unchanged on a
// revisit: the carrier/HTML ratio must not be flattered by revisits.
func TestHTMLBytesCountUnchangedBodies(t *testing.T) {
	const page = `<title>same</title><p>the same words every time</p>`
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html") // no validators: a full GET each time
		fmt.Fprint(w, page)
	})
	eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Concurrency: 1,
		Fetch: revisitFetch(), Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 50 * time.Millisecond}})
	waitFor(t, 10*time.Second, "an unchanged revisit", func() bool { return eng.Stats().Unchanged >= 1 })
	stop()
	st := eng.Stats()
	bodies := st.New + st.Changed + st.Unchanged
	if st.HTMLBytes != bodies*int64(len(page)) {
		t.Fatalf("HTML bytes %d after %d bodies of %d bytes (%d new, %d unchanged; server hits %v)",
			st.HTMLBytes, bodies, len(page), st.New, st.Unchanged, hits())
	}
}

// With ShipLinks a record carries its page's out-links, normalised and
// each once; without it, none.
func TestShipLinks(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>home</title><a href="/b#top">b</a> <a href="/b">b again</a> <a href="HTTP://Example.ORG:80/x">x</a>`)
	})
	for _, ship := range []bool{false, true} {
		var mu sync.Mutex
		var home *pack.Record
		runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Concurrency: 1, ShipLinks: ship,
			Scope:        urlnorm.Scope{MaxDepth: 0},
			Fetch:        fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
			OnRecord:     func(_ context.Context, r *pack.Record) error { mu.Lock(); defer mu.Unlock(); home = r; return nil },
			StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
		want := ""
		if ship {
			want = srv.URL + "/b http://example.org/x"
		}
		if home == nil || strings.Join(home.Links, " ") != want {
			t.Fatalf("ShipLinks %v: links %v, want %q", ship, home, want)
		}
	}
}
