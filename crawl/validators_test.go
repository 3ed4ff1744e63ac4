package crawl

import (
	"context"
	"net/http"
	"net/http/httptest"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A 304 may carry new validators (RFC 9111 §4.3.4: the stored response's
// headers are updated from it). The next conditional GET must send the new
// ETag; with the stale one the server can never answer 304 again and every
// revisit of an unchanged page would ship the full body.
func TestNotModifiedUpdatesValidators(t *testing.T) {
	var mu sync.Mutex
	var sent []string // If-None-Match of each request for "/"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path != "/" {
			http.NotFound(w, r)
			return
		}
		inm := r.Header.Get("If-None-Match")
		mu.Lock()
		sent = append(sent, inm)
		mu.Unlock()
		switch inm {
		case "":
			w.Header().Set("ETag", `"v1"`)
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<title>validators</title><p>same content throughout</p>"))
		default: // the content never changes; the server renames its validator once
			w.Header().Set("ETag", `"v2"`)
			w.WriteHeader(http.StatusNotModified)
		}
	}))
	defer srv.Close()
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"},
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 20 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 40 * time.Millisecond}})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { eng.Run(ctx) })
	// Wait on the engine, not the server: the server sees the third request
	// before the engine has counted its 304.
	waitFor(t, 20*time.Second, "three fetches of /, two answered 304", func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(sent) >= 3 && eng.Stats().NotModified >= 2
	})
	cancel()
	wg.Wait()
	mu.Lock()
	defer mu.Unlock()
	if sent[0] != "" || sent[1] != `"v1"` || sent[2] != `"v2"` {
		t.Fatalf("If-None-Match sent %q; want \"\", \"v1\", then the ETag of the 304, \"v2\"", sent)
	}
	if st := eng.Stats(); st.Records != 1 || st.NotModified < 2 {
		t.Errorf("records %d (want 1: the page never changed), not-modified %d", st.Records, st.NotModified)
	}
}
