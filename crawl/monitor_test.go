package crawl

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// Monitoring turned on for a crawl fetched without it revisits its pages:
// they had no revisit date, and nothing else gives them one.
func TestMonitorTurnedOnForAFinishedCrawl(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>page</title><a href="/a">a</a>`)
	})
	state := t.TempDir()
	cfg := Config{StateDir: state, Seeds: []string{srv.URL + "/"}, Concurrency: 1, Fetch: revisitFetch(),
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t)}
	first := cfg
	first.StopWhenIdle = true
	if st := runPass(t, first); st.Fetched != 2 || st.Scheduled != 0 {
		t.Fatalf("first pass without monitoring: fetched %d, scheduled %d", st.Fetched, st.Scheduled)
	}

	second := cfg
	second.Monitor = Monitor{Enabled: true, Sleep: 20 * time.Millisecond}
	eng, stop := revisitRun(t, second)
	waitFor(t, 10*time.Second, "both pages revisited", func() bool { h := hits(); return h["/"] >= 2 && h["/a"] >= 2 })
	stop()
	if st := eng.Stats(); st.Unchanged+st.NotModified < 2 {
		t.Fatalf("revisits: unchanged %d, not modified %d; server hits %v", st.Unchanged, st.NotModified, hits())
	}
}
