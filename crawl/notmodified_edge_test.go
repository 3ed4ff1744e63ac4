package crawl

// Edge cases found by review; each test failed before its fix.

import (
	"net/http"
	"testing"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A 304 to a GET without validators (a new URL: nothing stored) is a server
// error, not "not modified". The engine counts it as not-modified, writes a
// history with one fetch and no content, ships no record and counts no
// error: the page is silently lost, and a later link to it is skipped as
// already fetched.
func TestUnconditional304OnNewPageIsAnError(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("ETag", `"x"`)
		w.WriteHeader(http.StatusNotModified) // whatever was asked
	})
	seed := srv.URL + "/"
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{seed}, Concurrency: 1,
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st := eng.Stats()
	hist, known, _ := eng.front.History(seed)
	if st.NotModified != 0 || st.Errors == 0 {
		t.Fatalf("new page answered 304 to an unconditional GET (%d requests): not-modified %d, errors %d %v, records %d, "+
			"history known=%v fetches=%d status=%d; want a counted error (e.g. status_304) and no page history",
			hits()["/"], st.NotModified, st.Errors, st.ByReason, st.Records, known, hist.Fetches, hist.Status)
	}
}
