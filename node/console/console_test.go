package console_test

import (
	"compress/gzip"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"

	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/node/console"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

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
