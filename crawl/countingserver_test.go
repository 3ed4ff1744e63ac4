package crawl

import (
	"maps"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
)

// countingServer serves handle on loopback and counts requests per path;
// handle gets this request's number for its path (1 for the first). hits
// returns a copy of the counts so far.
func countingServer(t *testing.T, handle func(w http.ResponseWriter, r *http.Request, n int)) (srv *httptest.Server, hits func() map[string]int) {
	t.Helper()
	var mu sync.Mutex
	counts := map[string]int{}
	srv = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		counts[r.URL.Path]++
		n := counts[r.URL.Path]
		mu.Unlock()
		handle(w, r, n)
	}))
	t.Cleanup(srv.Close)
	return srv, func() map[string]int {
		mu.Lock()
		defer mu.Unlock()
		return maps.Clone(counts)
	}
}
