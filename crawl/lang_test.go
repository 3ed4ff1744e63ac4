package crawl

import (
	"context"
	"fmt"
	"net/http"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A host's language is the fallback once two of its pages told theirs and
// most agree; else the crawl's, once ten did and most agree.
func TestLangHintsMajority(t *testing.T) {
	var h langHints
	see := func(host string, langs ...string) {
		for _, l := range langs {
			h.observe(host, l)
		}
	}
	check := func(host, want string) {
		t.Helper()
		if got := h.fallback(host); got != want {
			t.Errorf("fallback(%q) = %q, want %q", host, got, want)
		}
	}
	check("a", "")
	see("a", "en", "")
	check("a", "") // one page is no evidence (and "" is no language)
	see("a", "en")
	check("a", "en")
	see("b", "en", "fr")
	check("b", "") // a tie is no majority; the crawl has 4 pages only
	see("b", "fr")
	check("b", "fr")
	see("c", "fr", "fr", "en", "en", "en", "en")
	check("c", "en") // 4 of 6
	// the crawl: en 7, fr 4 of 11 pages
	check("new", "en")
	see("d", "fr", "fr", "fr")
	check("new", "") // 7 of 14: no majority
	check("d", "fr")
}

// The hosts remembered are bounded: when full, the table starts over (the
// crawl-wide counts stay).
func TestLangHintsBound(t *testing.T) {
	h := langHints{max: 3}
	for i := range 3 {
		h.observe(fmt.Sprint("h", i), "fr")
		h.observe(fmt.Sprint("h", i), "fr")
	}
	h.observe("h0", "fr") // a host already known takes no new place
	if len(h.hosts) != 3 || h.fallback("h0") != "fr" {
		t.Fatalf("%d hosts, h0 %q", len(h.hosts), h.fallback("h0"))
	}
	h.observe("h3", "en")
	if len(h.hosts) != 1 || h.fallback("h0") != "" {
		t.Fatalf("after the restart: %d hosts, h0 %q; want h0 forgotten", len(h.hosts), h.fallback("h0"))
	}
	h.observe("h4", "fr")
	h.observe("h4", "fr")
	if h.fallback("h0") != "fr" { // the crawl's 9 fr of 10 pages
		t.Fatalf("h0 %q; want the crawl's fr", h.fallback("h0"))
	}
}

// Concurrent observers and readers (go test -race).
func TestLangHintsConcurrent(t *testing.T) {
	var h langHints
	var wg sync.WaitGroup
	for g := range 8 {
		wg.Go(func() {
			for i := range 100 {
				h.observe(fmt.Sprint("h", i%10), []string{"en", "fr"}[g%2])
				h.fallback(fmt.Sprint("h", i%7))
			}
		})
	}
	wg.Wait()
	if n := h.all[0].pages + h.all[1].pages; n != 800 {
		t.Fatalf("%d pages counted, want 800", n)
	}
}

// A page too short for the stop-word vote, with no <html lang>, is stemmed
// in the language the crawler learned from its host's other pages: its
// record says "header", not "headers" beside the other pages' "header".
func TestLangFallbackStemsShortPage(t *testing.T) {
	long := `<html><head><title>Guide %d</title></head><body><p>` + strings.Repeat(
		`This is the guide to the crawler. It explains how the pages of a site are fetched,
how the links of each page are followed and what is kept of the page when it is stored. `, 3) +
		`</p><a href="%s">next</a></body></html>`
	// A chain: each long page links to the next only, the last one to the
	// short page, so the short page is fetched after every long one
	// whatever the order of the queue (and Concurrency 1 fetches one page
	// at a time: the host's language is learned before it is fetched).
	pages := map[string]string{
		"/":  fmt.Sprintf(long, 1, "/2"),
		"/2": fmt.Sprintf(long, 2, "/3"),
		"/3": fmt.Sprintf(long, 3, "/short"),
		"/short": `<html><head><title>Headers</title></head><body>
<ul><li>Request headers</li><li>Cookies</li></ul></body></html>`,
	}
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		body, ok := pages[r.URL.Path]
		if !ok {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprint(w, body)
	})
	var mu sync.Mutex
	recs := map[string]pack.Record{}
	var order []string
	runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Concurrency: 1,
		Fetch: fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		OnRecord: func(_ context.Context, r *pack.Record) error {
			path := strings.TrimPrefix(r.URL, srv.URL)
			mu.Lock()
			recs[path], order = *r, append(order, path)
			mu.Unlock()
			return nil
		},
		StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if !slices.Equal(order, []string{"/", "/2", "/3", "/short"}) {
		t.Fatalf("records in order %v", order)
	}
	for _, p := range []string{"/", "/2", "/3"} {
		if recs[p].Lang != "en" {
			t.Fatalf("%s: lang %q, want en detected", p, recs[p].Lang)
		}
	}
	short := recs["/short"]
	var got []string
	for _, k := range short.Keywords {
		got = append(got, k.Term)
	}
	if short.Lang != "en" || !slices.Contains(got, "header") || slices.Contains(got, "headers") {
		t.Fatalf("short page: lang %q, keywords %v; want en, \"header\" stemmed", short.Lang, got)
	}
}
