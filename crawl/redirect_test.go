package crawl

import (
	"fmt"
	"net/http"
	"testing"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A page reached through a redirect is fetched once: the redirect's target
// counts as fetched, so a link straight to it — even one already queued,
// as siblings on one page are — is not fetched a second time (on the real
// web: http→https, missing trailing slashes, moved pages).
func TestRedirectTargetNotFetchedTwice(t *testing.T) {
	srv, serverHits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/old":
			http.Redirect(w, r, "/new", http.StatusMovedPermanently)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<title>page %s</title><a href="/old">old</a> <a href="/new">new</a> <a href="/later">later</a>`, r.URL.Path)
		}
	})
	out := t.TempDir()
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Concurrency: 1,
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: out}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if hits := serverHits(); hits["/new"] != 1 || hits["/old"] != 1 || hits["/later"] != 1 {
		t.Fatalf("server hits %v; want /new fetched once (through /old)", hits)
	}
	recs := readCarriers(t, out)
	if len(recs) != 3 {
		t.Fatalf("%d records, want 3 (/, /old → /new, /later)", len(recs))
	}
	for _, r := range recs {
		if r.URL == srv.URL+"/old" && r.FinalURL != srv.URL+"/new" {
			t.Errorf("record of /old has final URL %q", r.FinalURL)
		}
	}
	if st := eng.Stats(); st.AlreadyFetched != 1 || st.Fetched != 3 {
		t.Errorf("already fetched %d (want /new, 1), fetched %d", st.AlreadyFetched, st.Fetched)
	}
}
