package console_test

import (
	"bufio"
	"compress/gzip"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/node/console"
)

func TestMain(m *testing.M) {
	// (the browser test's sink runs Bleve, whose analysis workers are
	// process-wide)
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

func get(t *testing.T, h http.Handler, path string, hdr ...string) *httptest.ResponseRecorder {
	t.Helper()
	r := httptest.NewRequest("GET", path, nil)
	for i := 0; i+1 < len(hdr); i += 2 {
		r.Header.Set(hdr[i], hdr[i+1])
	}
	w := httptest.NewRecorder()
	h.ServeHTTP(w, r)
	return w
}

// TestHandler: the pages, their JSON (three ways), the embedded assets
// (gzip when asked), the headers that keep the pages to their own origin,
// and 404 for anything else.
func TestHandler(t *testing.T) {
	h := console.Handler(console.Views{
		Node:    func(*http.Request) any { return map[string]string{"page": "node"} },
		Network: func(*http.Request) any { return map[string]string{"page": "network"} },
	})
	for _, p := range []string{"/console/", "/console/node", "/console/network"} {
		w := get(t, h, p)
		if w.Code != 200 || !strings.HasPrefix(w.Header().Get("Content-Type"), "text/html") || !strings.Contains(w.Body.String(), "<title>micra") {
			t.Errorf("%s: %d %s", p, w.Code, w.Header().Get("Content-Type"))
		}
		if csp := w.Header().Get("Content-Security-Policy"); !strings.Contains(csp, "default-src 'self'") || !strings.Contains(csp, "frame-ancestors 'none'") {
			t.Errorf("%s: CSP %q", p, csp)
		}
	}
	for path, want := range map[string]string{"/console/node.json": "node", "/console/network.json": "network",
		"/console/network?format=json": "network", "/console/?format=json": "node"} {
		w := get(t, h, path)
		var v map[string]string
		if err := json.Unmarshal(w.Body.Bytes(), &v); err != nil || v["page"] != want || w.Header().Get("Content-Type") != "application/json" {
			t.Errorf("%s: %d %q (%v)", path, w.Code, w.Body.String(), err)
		}
	}
	if w := get(t, h, "/console/network", "Accept", "application/json"); !strings.Contains(w.Body.String(), `"network"`) {
		t.Errorf("Accept: application/json: %q", w.Body.String())
	}
	if w := get(t, h, "/console/network", "Accept", "text/html,application/json;q=0.9"); !strings.Contains(w.Body.String(), "<html") {
		t.Errorf("a browser's Accept got %q", w.Body.String()[:40])
	}
	// a vendored library, gzip-compressed and not
	plain := get(t, h, "/console/assets/vendor/d3-geo.min.js")
	if plain.Code != 200 || !strings.Contains(plain.Header().Get("Content-Type"), "javascript") || plain.Body.Len() < 10000 {
		t.Fatalf("d3-geo: %d %s %d bytes", plain.Code, plain.Header().Get("Content-Type"), plain.Body.Len())
	}
	gz := get(t, h, "/console/assets/vendor/d3-geo.min.js", "Accept-Encoding", "gzip")
	if gz.Header().Get("Content-Encoding") != "gzip" || gz.Body.Len() >= plain.Body.Len() {
		t.Fatalf("gzip: %q, %d bytes", gz.Header().Get("Content-Encoding"), gz.Body.Len())
	}
	zr, err := gzip.NewReader(gz.Body)
	if err != nil {
		t.Fatal(err)
	}
	b, _ := io.ReadAll(zr)
	if string(b) != plain.Body.String() {
		t.Error("gzip body differs from the file")
	}
	for _, f := range []string{"countries-110m.json", "LICENSE-world-atlas", "LICENSE-d3-geo", "LICENSE-uplot", "VERSIONS"} {
		if w := get(t, h, "/console/assets/vendor/"+f); w.Code != 200 {
			t.Errorf("%s: %d", f, w.Code)
		}
	}
	for _, p := range []string{"/console/nope", "/console/assets/", "/console/assets/../console.go", "/console/assets/vendor/nope.js", "/console/x.json", "/other"} {
		if w := get(t, h, p); w.Code != 404 {
			t.Errorf("%s: %d, want 404", p, w.Code)
		}
	}
}

// A sink serves its own page at /console/ and not the node's; a node not
// the sink's.
func TestSinkPage(t *testing.T) {
	h := console.Handler(console.Views{Sink: func(*http.Request) any { return map[string]string{"page": "sink"} }})
	for _, p := range []string{"/console/", "/console/sink"} {
		if w := get(t, h, p); w.Code != 200 || !strings.Contains(w.Body.String(), "<title>micra · sink") {
			t.Errorf("%s: %d %.60q", p, w.Code, w.Body.String())
		}
	}
	for _, p := range []string{"/console/sink.json", "/console/?format=json"} {
		var v map[string]string
		if w := get(t, h, p); json.Unmarshal(w.Body.Bytes(), &v) != nil || v["page"] != "sink" {
			t.Errorf("%s: %d %q", p, w.Code, w.Body.String())
		}
	}
	for _, p := range []string{"/console/node", "/console/network", "/console/node.json", "/console/network.events"} {
		if w := get(t, h, p); w.Code != 404 {
			t.Errorf("a sink's %s: %d, want 404", p, w.Code)
		}
	}
	node := console.Handler(console.Views{Node: func(*http.Request) any { return nil }})
	if w := get(t, node, "/console/sink"); w.Code != 404 {
		t.Errorf("a node's /console/sink: %d, want 404", w.Code)
	}
}

// A page's event stream sends its view at once and then at its pace, one
// JSON line per event, and ends with the client; past MaxEventStreams it
// is refused (the page polls).
func TestEvents(t *testing.T) {
	var calls atomic.Int64
	h := console.Handler(console.Views{Node: func(*http.Request) any { return map[string]int64{"n": calls.Add(1)} },
		Every: time.Millisecond})
	srv := httptest.NewServer(h)
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	open := func() (*http.Response, context.CancelFunc) {
		t.Helper()
		sctx, scancel := context.WithCancel(ctx)
		req, _ := http.NewRequestWithContext(sctx, "GET", srv.URL+"/console/node.events", nil)
		resp, err := http.DefaultClient.Do(req)
		if err != nil {
			t.Fatal(err)
		}
		return resp, scancel
	}
	resp, stop := open()
	if resp.StatusCode != 200 || resp.Header.Get("Content-Type") != "text/event-stream" {
		t.Fatalf("events: %d %s", resp.StatusCode, resp.Header.Get("Content-Type"))
	}
	sc := bufio.NewScanner(resp.Body)
	var got []int64
	for len(got) < 3 && sc.Scan() {
		if d, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			var v map[string]int64
			if err := json.Unmarshal([]byte(d), &v); err != nil {
				t.Fatalf("event data %q: %v", d, err)
			}
			got = append(got, v["n"])
		}
	}
	if len(got) != 3 || got[0] >= got[1] || got[1] >= got[2] {
		t.Fatalf("views %v, want three successive ones", got)
	}
	var streams []context.CancelFunc
	for range console.MaxEventStreams - 1 {
		r, c := open()
		defer r.Body.Close()
		streams = append(streams, c)
	}
	over, c := open()
	defer c()
	body, _ := io.ReadAll(over.Body)
	if over.StatusCode != http.StatusServiceUnavailable || !strings.Contains(string(body), "/console/node.json") {
		t.Errorf("stream %d: %d %q, want 503 naming the JSON to poll", console.MaxEventStreams+1, over.StatusCode, body)
	}
	stop()
	resp.Body.Close()
	for _, c := range streams {
		c()
	}
	// (goleak checks that every stream's goroutine ended)
}
