package crawl

import (
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// slowURLServer links "/" to /bad first and then to /p1…/p9; bad(path)
// decides which paths fail with 500.
func slowURLServer(t *testing.T, bad func(path string) bool) (string, func() map[string]int) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch {
		case r.URL.Path == "/robots.txt":
			http.NotFound(w, r)
		case bad(r.URL.Path):
			http.Error(w, "trouble", http.StatusInternalServerError)
		default:
			w.Header().Set("Content-Type", "text/html")
			var b strings.Builder
			b.WriteString(`<title>page</title><a href="/bad">bad</a>`)
			for i := 1; i <= 9; i++ {
				fmt.Fprintf(&b, ` <a href="/p%d">p%d</a>`, i, i)
			}
			fmt.Fprint(w, b.String())
		}
	})
	return srv.URL, hits
}

func slowURLRun(t *testing.T, seed string) (*Engine, func()) {
	// RetryDelay is an hour: a host that rests for its bad URL fetches
	// nothing more within the test.
	return revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{seed + "/"}, Concurrency: 1,
		Fetch: revisitFetch(), RetryDelay: time.Hour, StopWhenIdle: true, Progress: -1, Logger: testLogger(t),
		Receiver: pack.FileSink{Dir: t.TempDir()}})
}

// One failing URL does not stop its host: it waits at the back of the
// queue while the host's other URLs are fetched.
func TestOneBadURLDoesNotParkItsHost(t *testing.T) {
	seed, hits := slowURLServer(t, func(p string) bool { return p == "/bad" })
	eng, stop := slowURLRun(t, seed)
	defer stop()
	waitFor(t, 10*time.Second, "the host's other URLs fetched while /bad waits", func() bool {
		return eng.Stats().Fetched == 10
	})
	if h := hits(); h["/bad"] != 1 {
		t.Fatalf("server hits %v: want /bad tried once (its retry is an hour away)", h)
	}
	if st := eng.Stats(); st.Queued != 1 || st.Events["retried"] != 1 {
		t.Fatalf("queued %d, events %v; want /bad still queued for its retry", st.Queued, st.Events)
	}
}

// A host whose URLs keep failing is itself in trouble: after hostSlowAfter
// consecutive failures it rests as a whole.
func TestFailingHostRests(t *testing.T) {
	seed, hits := slowURLServer(t, func(p string) bool { return p != "/" })
	eng, stop := slowURLRun(t, seed)
	defer stop()
	waitFor(t, 10*time.Second, "the host parked", func() bool {
		eng.parkMu.Lock()
		defer eng.parkMu.Unlock()
		return len(eng.parked) == 1
	})
	var failed int
	for p, n := range hits() {
		if p != "/" && p != "/robots.txt" {
			failed += n
		}
	}
	if failed != hostSlowAfter {
		t.Fatalf("server hits %v: want the host resting after %d failed URLs", hits(), hostSlowAfter)
	}
}
