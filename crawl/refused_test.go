package crawl

import (
	"fmt"
	"net/http"
	"net/netip"
	"testing"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// Seeds the address guard refuses (a loopback server, without
// AllowPrivate) are not consumed: a later run on the same state that may
// reach them (AllowPrivate) crawls them; a run that still may not keeps
// them back without a request.
func TestRefusedSeedsKeptForARunThatMayReachThem(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>home</title><a href="/a">a</a>`)
	})
	state := t.TempDir()
	run := func(allow bool) Stats {
		return runPass(t, Config{StateDir: state, Seeds: []string{srv.URL + "/"}, Concurrency: 1,
			Fetch:    fetch.Config{AllowPrivate: allow, NoDelay: true, DelayFactor: -1, Logger: quiet},
			Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	}
	for range 2 {
		st := run(false)
		if st.Fetched != 0 || st.Refused != 1 || st.Queued != 0 || len(hits()) != 0 {
			t.Fatalf("without AllowPrivate: fetched %d, refused %d, queued %d, server hits %v; want the seed kept back, no request",
				st.Fetched, st.Refused, st.Queued, hits())
		}
	}
	st := run(true)
	if st.Fetched != 2 || st.Refused != 0 || hits()["/"] != 1 || hits()["/a"] != 1 {
		t.Fatalf("with AllowPrivate: fetched %d, refused %d, server hits %v; want the refused seed and its link crawled",
			st.Fetched, st.Refused, hits())
	}
}

// A URL whose redirect leads to an address the guard refuses is not kept
// as refused: its own address was reachable, and a later run would only
// fetch it again to be refused again. It fails like any other URL.
func TestRedirectToARefusedAddressIsAFailure(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, "http://127.0.0.2:9/private", http.StatusFound)
	})
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Concurrency: 1,
		Fetch: fetch.Config{AllowPrefixes: []netip.Prefix{netip.MustParsePrefix("127.0.0.1/32")}, NoDelay: true,
			DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if st := eng.Stats(); st.Refused != 0 || st.ByReason["guard"] != 1 || hits()["/"] != 1 {
		t.Fatalf("refused %d, errors %v, hits %v; want the redirecting URL failed under guard, not kept", st.Refused, st.ByReason, hits())
	}
}
