// Package console is micra's web console: a node page (identity, peers,
// subnets owned, crawl progress, capacity and windows, add seeds,
// pause/resume) and a network page (a world map of the crawlers, the
// subnets each owns and the hosts each crawled; the paper's figures so
// far and the probes-per-URL curve), served by
// the node's local control API under /console/ behind the API's own guards
// (loopback hosts only, no cross-origin POST); and a sink page (ingest,
// log, index, search, readers) served by the index sink's HTTP API.
// docs/console.md.
//
// The pages are static files embedded in the binary (assets/, with the
// vendored libraries in assets/vendor: `make console-assets`); they read
// the JSON this package serves beside them (/console/node.json,
// /console/network.json, /console/sink.json), which the server composes
// from its own API's answers (Views), pushed as Server-Sent Events
// (/console/PAGE.events) or polled; the node page adds seeds and pauses
// the crawl through the control API. Nothing runs while no page is open.
package console

import (
	"bytes"
	"compress/gzip"
	"embed"
	"encoding/json"
	"fmt"
	"io/fs"
	"mime"
	"net/http"
	"path"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

//go:embed assets
var assets embed.FS

// Prefix is where the console is mounted on the control API.
const Prefix = "/console/"

// Views answers each page's JSON: the page's data as scripts read it
// (GET /console/node.json, /console/network.json, /console/sink.json, or
// the page itself with ?format=json or Accept: application/json). A page
// whose view is nil is not served: a node serves the node and network
// pages, the index sink its sink page.
type Views struct {
	Node    func(r *http.Request) any
	Network func(r *http.Request) any
	Sink    func(r *http.Request) any
	// Every is how often a page's event stream (/console/PAGE.events)
	// sends its view; 0: each page's own pace (pageEvery).
	Every time.Duration
}

// pages maps a page's path (after Prefix) to its HTML file; "" is the
// first page the Views serve (node, else sink).
var pages = map[string]string{"node": "node.html", "network": "network.html", "sink": "sink.html"}

// pageEvery is how often each page is updated: its event stream's pace,
// and its polling's when the browser has no EventSource.
var pageEvery = map[string]time.Duration{"node": 2 * time.Second, "network": 3 * time.Second, "sink": 2 * time.Second}

// MaxEventStreams bounds the event streams open at once; past it a page
// is answered 503 and polls instead.
const MaxEventStreams = 16

// Handler serves the console under Prefix (it expects the full request
// path, as a mux pattern "GET /console/" passes it).
func Handler(v Views) http.Handler {
	static, err := fs.Sub(assets, "assets")
	if err != nil {
		panic(err) // the embedded tree is fixed at build time
	}
	h := &handler{views: v, static: static, gz: map[string]*gzEntry{}}
	return h
}

type handler struct {
	views  Views
	static fs.FS

	mu sync.Mutex
	gz map[string]*gzEntry // compressed assets, made on first request

	streams atomic.Int32 // event streams open
}

type gzEntry struct {
	once sync.Once
	b    []byte
}

func (h *handler) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	p, ok := strings.CutPrefix(r.URL.Path, Prefix)
	if !ok {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	// the pages load only their own files and talk only to this origin;
	// no frame may hold them (the seed button is a state change)
	hd.Set("Content-Security-Policy", "default-src 'self'; img-src 'self' data:; style-src 'self' 'unsafe-inline'; frame-ancestors 'none'; base-uri 'none'; form-action 'self'")
	hd.Set("X-Frame-Options", "DENY")
	hd.Set("X-Content-Type-Options", "nosniff")
	hd.Set("Referrer-Policy", "no-referrer")
	if p == "" {
		p = "node"
		if h.views.Node == nil {
			p = "sink"
		}
	}
	if name, ok := strings.CutSuffix(p, ".json"); ok {
		if view := h.view(name); view != nil {
			writeJSON(w, view(r))
			return
		}
	}
	if name, ok := strings.CutSuffix(p, ".events"); ok {
		if view := h.view(name); view != nil {
			h.serveEvents(w, r, name, view)
			return
		}
	}
	if file, ok := pages[p]; ok && h.view(p) != nil {
		if wantsJSON(r) {
			writeJSON(w, h.view(p)(r))
			return
		}
		hd.Add("Vary", "Accept")
		h.serveFile(w, r, file, "no-cache")
		return
	}
	if strings.HasPrefix(p, "assets/") {
		h.serveFile(w, r, strings.TrimPrefix(p, "assets/"), "max-age=300")
		return
	}
	http.NotFound(w, r)
}

func (h *handler) view(name string) func(*http.Request) any {
	switch name {
	case "node":
		return h.views.Node
	case "network":
		return h.views.Network
	case "sink":
		return h.views.Sink
	}
	return nil
}

// serveEvents streams a page's view as Server-Sent Events (event: view,
// data: the JSON on one line) at once and then at the page's pace, until
// the client goes away or the server stops (the request's context ends).
// Nothing is computed for a page nobody has open.
func (h *handler) serveEvents(w http.ResponseWriter, r *http.Request, name string, view func(*http.Request) any) {
	flusher, ok := w.(http.Flusher)
	if !ok {
		http.Error(w, "event streams unsupported here: poll "+Prefix+name+".json", http.StatusNotImplemented)
		return
	}
	if h.streams.Add(1) > MaxEventStreams {
		h.streams.Add(-1)
		http.Error(w, fmt.Sprintf("more than %d console event streams open: poll %s%s.json", MaxEventStreams, Prefix, name), http.StatusServiceUnavailable)
		return
	}
	defer h.streams.Add(-1)
	every := h.views.Every
	if every <= 0 {
		every = pageEvery[name]
	}
	hd := w.Header()
	hd.Set("Content-Type", "text/event-stream")
	hd.Set("Cache-Control", "no-store")
	hd.Set("X-Accel-Buffering", "no") // (a proxy in front must not hold the events)
	w.WriteHeader(http.StatusOK)
	// a dropped stream is retried after the page's pace
	fmt.Fprintf(w, "retry: %d\n\n", every.Milliseconds())
	tick := time.NewTicker(every)
	defer tick.Stop()
	ctx := r.Context()
	for {
		b, err := json.Marshal(view(r))
		if err != nil {
			fmt.Fprintf(w, "event: error\ndata: %q\n\n", err.Error())
			flusher.Flush()
			return
		}
		// json.Marshal writes no newline: the view is one data line
		if _, err := fmt.Fprintf(w, "event: view\ndata: %s\n\n", b); err != nil {
			return
		}
		flusher.Flush()
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}

// wantsJSON: ?format=json, or an Accept header that prefers JSON to HTML.
func wantsJSON(r *http.Request) bool {
	if f := r.URL.Query().Get("format"); f != "" {
		return f == "json"
	}
	a := r.Header.Get("Accept")
	return strings.Contains(a, "application/json") && !strings.Contains(a, "text/html")
}

func writeJSON(w http.ResponseWriter, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// serveFile answers an embedded file, gzip-compressed when the client
// takes it (compressed once, on its first request).
func (h *handler) serveFile(w http.ResponseWriter, r *http.Request, name, cache string) {
	if name == "" || strings.Contains(name, "..") {
		http.NotFound(w, r)
		return
	}
	b, err := fs.ReadFile(h.static, name)
	if err != nil {
		http.NotFound(w, r)
		return
	}
	hd := w.Header()
	ct := mime.TypeByExtension(path.Ext(name))
	if ct == "" || strings.HasPrefix(name, "vendor/LICENSE") || path.Base(name) == "VERSIONS" {
		ct = "text/plain; charset=utf-8"
	}
	hd.Set("Content-Type", ct)
	hd.Set("Cache-Control", cache)
	hd.Add("Vary", "Accept-Encoding")
	if len(b) > 1024 && strings.Contains(r.Header.Get("Accept-Encoding"), "gzip") {
		b = h.gzipped(name, b)
		hd.Set("Content-Encoding", "gzip")
	}
	http.ServeContent(w, r, "", time.Time{}, bytes.NewReader(b)) // embedded: no modification time
}

func (h *handler) gzipped(name string, raw []byte) []byte {
	h.mu.Lock()
	e := h.gz[name]
	if e == nil {
		e = &gzEntry{}
		h.gz[name] = e
	}
	h.mu.Unlock()
	e.once.Do(func() {
		var buf bytes.Buffer
		zw, _ := gzip.NewWriterLevel(&buf, gzip.BestCompression)
		_, _ = zw.Write(raw)
		_ = zw.Close()
		e.b = buf.Bytes()
	})
	return e.b
}
