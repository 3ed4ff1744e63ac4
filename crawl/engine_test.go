package crawl

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/fsys"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(runChild())
	}
	goleak.VerifyTestMain(m)
}

var quiet = slog.New(slog.NewTextHandler(io.Discard, nil))

func testLogger(t *testing.T) *slog.Logger {
	if testing.Verbose() {
		return slog.Default()
	}
	return quiet
}

func synthFetchConfig(res fetch.Resolver) fetch.Config {
	return fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, PerIPLimit: 4, Resolver: res, Logger: quiet}
}

func startWeb(t *testing.T, cfg synthweb.Config) *synthweb.Web {
	t.Helper()
	web, err := synthweb.Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	return web
}

func readCarriers(t *testing.T, dir string) []pack.Record {
	t.Helper()
	var recs []pack.Record
	if err := pack.ReadDir(dir, func(_ pack.Header, r *pack.Record) error { recs = append(recs, *r); return nil }); err != nil {
		t.Fatal(err)
	}
	return recs
}

// The first pass over a synthetic web fetches every page exactly once,
// respects robots.txt, and ships records far smaller than the HTML.
func TestFirstPassSynthweb(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 24, HostsPerIP: 4, PagesPerHost: 25})
	out := t.TempDir()
	eng, err := New(Config{
		CrawlerID: "t1", StateDir: t.TempDir(), Seeds: web.Seeds(), Fetch: synthFetchConfig(web),
		Concurrency: 16, Receiver: pack.FileSink{Dir: out},
		StopWhenIdle: true, Progress: -1, Logger: testLogger(t), Registerer: prometheus.NewRegistry(),
	})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, ws := eng.Stats(), web.Stats()
	t.Logf("fetched %d pages in %v (%.0f pages/s), server %+v, carrier ratio %.4f", st.Fetched, st.Elapsed, st.PagesPerSec, ws, st.CarrierRatio())
	if ws.UniquePages != int64(web.TotalPages()) {
		t.Errorf("server served %d distinct pages, web has %d", ws.UniquePages, web.TotalPages())
	}
	if ws.DuplicateFetches != 0 {
		t.Errorf("duplicate fetches: server %d", ws.DuplicateFetches)
	}
	if ws.RobotsViolations != 0 {
		t.Errorf("%d robots violations", ws.RobotsViolations)
	}
	recs := readCarriers(t, out)
	if int64(len(recs)) != st.Fetched || st.Records != st.Fetched {
		t.Errorf("%d records in carriers, %d records, %d fetched", len(recs), st.Records, st.Fetched)
	}
	urls := map[string]bool{}
	for _, r := range recs {
		if urls[r.URL] {
			t.Errorf("record for %s twice", r.URL)
		}
		urls[r.URL] = true
		if r.Change != pack.ChangeNew || r.Status != 200 || len(r.Keywords) == 0 || r.Title == "" || r.CrawlerID != "t1" {
			t.Fatalf("bad record %+v", r)
		}
	}
	if ratio := st.CarrierRatio(); ratio <= 0 || ratio > 1.0/20 {
		t.Errorf("carrier bytes / HTML bytes = %.4f, want ≤ 1/20", ratio)
	}
}

// After the first pass every page is revisited with a conditional GET; only
// the pages the web changed produce records. Phase one is a single pass
// (StopWhenIdle) that schedules the revisits; the web then changes; phase two
// is a monitoring run on the same state.
func TestMonitoringConditionalRevisits(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 8, HostsPerIP: 4, PagesPerHost: 20})
	out, state := t.TempDir(), t.TempDir()
	cfg := Config{
		CrawlerID: "mon", StateDir: state, Seeds: web.Seeds(), Fetch: synthFetchConfig(web),
		Concurrency: 8, Receiver: pack.FileSink{Dir: out}, MaxCarrierHold: 50 * time.Millisecond,
		Monitor:  Monitor{Enabled: true, Sleep: 300 * time.Millisecond, MinInterval: 50 * time.Millisecond, MaxInterval: time.Hour},
		Progress: -1, Logger: testLogger(t), StopWhenIdle: true, ShutdownDrain: 30 * time.Second,
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 45*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats(); st.Fetched != int64(web.TotalPages()) || st.Scheduled != st.Fetched {
		t.Fatalf("first pass: %+v", st)
	}
	eng.Close()

	changed := web.Change(0.25, 1)
	cfg.StopWhenIdle = false
	eng, err = New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	rctx, rcancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	var runErr error
	wg.Go(func() { runErr = eng.Run(rctx) })
	// Wait until every page has been revisited at least once (some may have
	// been revisited twice by then: intervals adapt while the round runs).
	waitFor(t, 30*time.Second, "revisit round", func() bool {
		revisited := 0
		eng.front.EachHistory(func(h *frontier.History) error {
			if h.Fetches >= 2 {
				revisited++
			}
			return nil
		})
		return revisited == web.TotalPages()
	})
	rcancel()
	wg.Wait()
	if runErr != nil {
		t.Fatal(runErr)
	}
	st := eng.Stats()
	t.Logf("changed by web %d; crawler: changed %d, not modified %d, unchanged %d, records %d", changed, st.Changed, st.NotModified, st.Unchanged, st.Records)
	if st.Changed != int64(changed) {
		t.Errorf("crawler saw %d changed pages, web changed %d", st.Changed, changed)
	}
	if st.NotModified < int64(web.TotalPages()-changed) {
		t.Errorf("%d not-modified answers, want ≥ %d", st.NotModified, web.TotalPages()-changed)
	}
	var changedRecs, newRecs int
	for _, r := range readCarriers(t, out) {
		switch r.Change {
		case pack.ChangeChanged:
			changedRecs++
		case pack.ChangeNew:
			newRecs++
		}
	}
	if changedRecs != changed || newRecs != web.TotalPages() {
		t.Errorf("shipped %d changed and %d new records, want %d and %d", changedRecs, newRecs, changed, web.TotalPages())
	}
	// Adaptive: changed pages are revisited sooner than unchanged ones.
	var sumChanged, sumSame time.Duration
	var nChanged, nSame int
	eng.front.EachHistory(func(h *frontier.History) error {
		if h.Changes > 1 {
			sumChanged += h.Interval
			nChanged++
		} else if h.Fetches > 1 {
			sumSame += h.Interval
			nSame++
		}
		return nil
	})
	if nChanged == 0 || nSame == 0 || sumChanged/time.Duration(nChanged) >= sumSame/time.Duration(nSame) {
		t.Errorf("adaptive intervals: changed pages %d, unchanged %d, mean intervals %v vs %v", nChanged, nSame,
			sumChanged/time.Duration(max(nChanged, 1)), sumSame/time.Duration(max(nSame, 1)))
	}
}

func waitFor(t *testing.T, d time.Duration, what string, cond func() bool) {
	t.Helper()
	deadline := time.Now().Add(d)
	for !cond() {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

// splitRouter owns the hosts whose name (or name:port, for test servers
// that share an address) is in own, and hands off the rest.
type splitRouter struct {
	own    map[string]bool
	mu     sync.Mutex
	handed []string
}

func (r *splitRouter) Route(_ context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	if !ip.IsValid() {
		return Route{}, os.ErrInvalid
	}
	return Route{Addr: ip, Mine: r.own[u.Hostname()] || r.own[u.Host]}, nil
}
func (r *splitRouter) Handoff(_ context.Context, urls []Routed) error {
	r.mu.Lock()
	for _, u := range urls {
		r.handed = append(r.handed, u.URL)
	}
	r.mu.Unlock()
	return nil
}
func (r *splitRouter) NeedsIP() bool { return true }

func TestRouterHandsOffForeignURLs(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 6, HostsPerIP: 2, PagesPerHost: 10})
	hosts := web.Hosts()
	r := &splitRouter{own: map[string]bool{hosts[0]: true, hosts[1]: true, hosts[2]: true}}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: web.Seeds()[:3], Fetch: synthFetchConfig(web), Router: r,
		Concurrency: 4, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if len(r.handed) == 0 {
		t.Fatal("nothing handed off")
	}
	seen := map[string]bool{}
	for _, u := range r.handed {
		pu, _ := url.Parse(u)
		if r.own[pu.Hostname()] {
			t.Fatalf("owned URL handed off: %s", u)
		}
		// Handed off once: the owner took it durably; every page linking to
		// it must not send it through the overlay again.
		if seen[u] {
			t.Fatalf("URL handed off twice: %s", u)
		}
		seen[u] = true
	}
	if got := eng.Stats().Fetched; got != 30 {
		t.Errorf("fetched %d pages, want the 30 of the 3 owned hosts", got)
	}
	// Ownership changes: a URL handed off earlier comes back and is admitted
	// (the hand-off mark is not the seen-set).
	if n, bad := eng.AddSeeds(context.Background(), r.handed[:1]); n != 1 || len(bad) > 0 {
		t.Errorf("handed-off URL handed back: %d queued, %v", n, bad)
	}
}

func TestFileSystemCrawl(t *testing.T) {
	root := t.TempDir()
	// write replaces a file atomically (a temporary file renamed into
	// place): the crawler revisits every 50-100 ms, and one that read
	// between a truncate and the write saw an empty "changed" page.
	write := func(name, body string, mod time.Time) {
		p := filepath.Join(root, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		tmp := filepath.Join(filepath.Dir(p), ".tmp-"+filepath.Base(p))
		if err := os.WriteFile(tmp, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
		if err := os.Chtimes(tmp, mod, mod); err != nil {
			t.Fatal(err)
		}
		if err := os.Rename(tmp, p); err != nil {
			t.Fatal(err)
		}
	}
	t0 := time.Now().Add(-time.Hour).Truncate(time.Second)
	write("index.html", `<title>Home of the archive</title><a href="docs/a.html">a</a> archive pages`, t0)
	write("docs/a.html", `<title>Alpha document</title><p>alpha alpha text</p><a href="../orphan-link.html">gone</a>`, t0)
	write("docs/b.html", `<title>Beta document</title><p>not linked from anywhere, found by walking</p>`, t0)
	write("docs/.hidden.html", `<title>hidden</title>`, t0)
	write("notes.txt", `plain text is not crawled`, t0)
	out := t.TempDir()
	state := t.TempDir()
	cfg := Config{
		CrawlerID: "fs", StateDir: state, FileRoots: []fsys.Root{{Dir: root, Prefix: "http://www.example.test/site/"}},
		FileOnly: true, Receiver: pack.FileSink{Dir: out}, Progress: -1, Logger: testLogger(t), ShutdownDrain: 30 * time.Second,
		Monitor:        Monitor{Enabled: true, Sleep: 50 * time.Millisecond, MinInterval: 10 * time.Millisecond},
		MaxCarrierHold: 20 * time.Millisecond,
	}
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { eng.Run(ctx) })
	waitFor(t, 10*time.Second, "file crawl", func() bool { return eng.Stats().Records >= 3 })
	// Change one file: new content and modification time.
	write("docs/a.html", `<title>Alpha document, revised</title><p>omega</p>`, t0.Add(time.Minute))
	waitFor(t, 10*time.Second, "file change", func() bool { return eng.Stats().Changed >= 1 })
	waitFor(t, 10*time.Second, "unchanged files", func() bool { return eng.Stats().NotModified >= 2 })
	cancel()
	wg.Wait()
	eng.Close()
	recs := readCarriers(t, out)
	byURL := map[string][]pack.Record{}
	for _, r := range recs {
		if r.Source != pack.SourceFile {
			t.Errorf("record %s source %v", r.URL, r.Source)
		}
		byURL[r.URL] = append(byURL[r.URL], r)
	}
	if len(byURL["http://www.example.test/site/"]) != 1 || len(byURL["http://www.example.test/site/docs/b.html"]) != 1 {
		t.Errorf("records by URL: %v", keys(byURL))
	}
	a := byURL["http://www.example.test/site/docs/a.html"]
	if len(a) != 2 || a[1].Change != pack.ChangeChanged || a[1].Title != "Alpha document, revised" {
		t.Errorf("changed file records: %+v", a)
	}
	for u := range byURL {
		if strings.Contains(u, "hidden") || strings.Contains(u, "notes") {
			t.Errorf("unexpected record %s", u)
		}
	}
}

func keys[V any](m map[string]V) []string {
	var out []string
	for k := range m {
		out = append(out, k)
	}
	return out
}

func TestWindows(t *testing.T) {
	w, err := ParseWindow("Mon-Fri 22:00-06:00")
	if err != nil {
		t.Fatal(err)
	}
	ws := Windows{Spans: []Window{w}}
	at := func(s string) time.Time { tt, _ := time.Parse("2006-01-02 15:04", s); return tt }
	// 2026-11-23 is a Monday.
	cases := map[string]bool{
		"2026-11-23 23:00": true,  // Monday night
		"2026-11-24 05:59": true,  // Tuesday morning (Monday's window)
		"2026-11-24 12:00": false, // midday
		"2026-11-23 03:00": false, // Monday morning belongs to Sunday's window: closed
		"2026-11-28 23:00": false, // Saturday
		"2026-11-29 02:00": false, // Sunday morning (Saturday's window)
	}
	for s, want := range cases {
		if got := ws.Open(at(s)); got != want {
			t.Errorf("%s: open=%v, want %v", s, got, want)
		}
	}
	if next := ws.NextOpen(at("2026-11-24 12:00")); !next.Equal(at("2026-11-24 22:00")) {
		t.Errorf("next open %v", next)
	}
	for _, bad := range []string{"", "25:00-01:00", "Funday 01:00-02:00", "10:00-10:00", "10-11"} {
		if _, err := ParseWindow(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// With a politeness delay, a resting host is parked and its worker crawls
// other hosts meanwhile. Checked on the order of requests, not on wall-clock
// speed (the machine may be slow): each host's pages link only to the same
// host, so without parking a worker would finish a host before starting the
// next and at most Concurrency (2) hosts would ever be in progress at once.
// And per host, no two requests come closer than the 100 ms delay.
func TestRestingHostsAreParked(t *testing.T) {
	type hit struct {
		host string
		at   time.Time
	}
	var mu sync.Mutex
	var hits []hit
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		mu.Lock()
		hits = append(hits, hit{r.Host, time.Now()})
		mu.Unlock()
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<title>%s</title><a href="/1">1</a> <a href="/2">2</a> <a href="/3">3</a> <a href="/4">4</a>`, r.URL.Path)
	}))
	defer srv.Close()
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := mapResolver{}
	var seeds []string
	for i := range 16 {
		name := fmt.Sprintf("h%02d.test", i)
		res[name] = "127.0.0.1"
		seeds = append(seeds, fmt.Sprintf("http://%s:%d/", name, port))
	}
	fc := fetch.Config{AllowPrivate: true, MinDelay: 100 * time.Millisecond, DelayFactor: -1, PerIPLimit: 16, Resolver: res, Logger: quiet}
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: seeds, Fetch: fc, Concurrency: 2,
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats(); st.Fetched != 80 {
		t.Fatalf("fetched %d of 80", st.Fetched)
	}
	mu.Lock()
	defer mu.Unlock()
	first, last := map[string]int{}, map[string]int{}
	prev := map[string]time.Time{}
	for i, h := range hits {
		if _, ok := first[h.host]; !ok {
			first[h.host] = i
		}
		last[h.host] = i
		if p, ok := prev[h.host]; ok && h.at.Sub(p) < 95*time.Millisecond { // 5 ms for clock granularity
			t.Errorf("host %s asked again after %v (delay 100 ms)", h.host, h.at.Sub(p))
		}
		prev[h.host] = h.at
	}
	maxOpen := 0
	for i := range hits {
		open := 0
		for h := range first {
			if first[h] <= i && i <= last[h] {
				open++
			}
		}
		maxOpen = max(maxOpen, open)
	}
	if len(first) != 16 || maxOpen <= 2 {
		t.Errorf("%d hosts; at most %d hosts in progress at once with 2 workers: resting hosts were not parked", len(first), maxOpen)
	}
}

// A 429 with Retry-After parks the host; the refused URL is fetched after the
// back-off, nothing is lost or fetched twice.
func TestTooManyRequestsParksHost(t *testing.T) {
	srv, serverHits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch {
		case r.URL.Path == "/robots.txt":
			http.NotFound(w, r)
		case r.URL.Path == "/b" && n == 1:
			w.Header().Set("Retry-After", "1")
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<title>page %s</title><a href="/a">a</a> <a href="/b">b</a> <a href="/c">c</a>`, r.URL.Path)
		}
	})
	fc := fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet}
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: fc, Concurrency: 2,
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	start := time.Now()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st, hits := eng.Stats(), serverHits()
	if st.Fetched != 4 || hits["/b"] != 2 || hits["/a"] != 1 || hits["/c"] != 1 {
		t.Fatalf("fetched %d, server hits %v", st.Fetched, hits)
	}
	if took := time.Since(start); took < 900*time.Millisecond {
		t.Errorf("Retry-After: 1 not honoured, crawl took %v", took)
	}
}

// A site crawled partly from its document root (static files) and partly over
// HTTP (the dynamic part): one crawl, the same records, the source marked.
func TestFileAndHTTPTogether(t *testing.T) {
	root := t.TempDir()
	os.WriteFile(filepath.Join(root, "doc.html"), []byte(`<title>Static document</title><a href="/app/list">list</a>`), 0o644)
	var httpHits sync.Map
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		httpHits.Store(r.URL.Path, true)
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<title>Dynamic %s</title><a href="/static/doc.html">doc</a> <a href="/app/item?id=1">item</a>`, r.URL.Path)
	}))
	defer srv.Close()
	out := t.TempDir()
	runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/app/"},
		FileRoots: []fsys.Root{{Dir: root, Prefix: srv.URL + "/static/"}},
		Fetch:     fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver:  pack.FileSink{Dir: out}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	got := map[string]pack.Source{}
	for _, r := range readCarriers(t, out) {
		got[strings.TrimPrefix(r.URL, srv.URL)] = r.Source
	}
	want := map[string]pack.Source{"/app/": pack.SourceHTTP, "/app/list": pack.SourceHTTP, "/app/item?id=1": pack.SourceHTTP, "/static/doc.html": pack.SourceFile}
	if fmt.Sprint(got) != fmt.Sprint(want) {
		t.Errorf("records %v, want %v", got, want)
	}
	if _, ok := httpHits.Load("/static/doc.html"); ok {
		t.Error("a file-root URL was fetched over HTTP")
	}
}

// observingRouter owns every URL and records the engine's fetch timings.
type observingRouter struct {
	LocalRouter
	mu   sync.Mutex
	seen map[string][]fetch.Timing // by URL
	took map[string]time.Duration
}

func (r *observingRouter) Fetched(_ context.Context, u *url.URL, _ Route, t fetch.Timing, took time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen[u.String()] = append(r.seen[u.String()], t)
	r.took[u.String()] = took
}

// TestFetchObserverSeesEveryFetch: a Router that implements FetchObserver
// gets the timing of every page fetched, once, with the time to the first
// byte (a round trip plus the server's time) and the total.
func TestFetchObserverSeesEveryFetch(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 4, HostsPerIP: 2, PagesPerHost: 8})
	r := &observingRouter{seen: map[string][]fetch.Timing{}, took: map[string]time.Duration{}}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: web.Seeds(), Fetch: synthFetchConfig(web), Router: r,
		Concurrency: 4, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st := eng.Stats()
	if st.Fetched != int64(web.TotalPages()) {
		t.Fatalf("fetched %d of %d pages", st.Fetched, web.TotalPages())
	}
	if len(r.seen) != int(st.Fetched) {
		t.Fatalf("observer saw %d URLs, the engine fetched %d pages", len(r.seen), st.Fetched)
	}
	hosts := map[string]int{}
	for u, ts := range r.seen {
		if len(ts) != 1 {
			t.Errorf("%s observed %d times", u, len(ts))
		}
		if ts[0].FirstByte <= 0 || ts[0].Total < ts[0].FirstByte || r.took[u] < ts[0].Total {
			t.Errorf("%s: timing %+v, took %v", u, ts[0], r.took[u])
		}
		pu, _ := url.Parse(u)
		hosts[pu.Hostname()]++
	}
	for _, h := range web.Hosts() {
		if hosts[h] != 8 {
			t.Errorf("host %s: %d pages observed, want 8", h, hosts[h])
		}
	}
}

// movingRouter owns every host for routing, but the hosts in moved have
// changed hands since their URLs were queued (Rechecker).
type movingRouter struct {
	splitRouter
	moved map[string]bool
}

func (r *movingRouter) Recheck(_ context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	if !ip.IsValid() {
		return Route{}, os.ErrInvalid
	}
	return Route{Addr: ip, Mine: !r.moved[u.Hostname()]}, nil
}

// URLs queued for a host whose subnet moved to another crawler are handed
// to it instead of fetched here: none of them reaches the server from
// this crawler, each goes once, and the frontier forgets them.
func TestQueuedURLsOfMovedHostsWithdrawn(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 4, HostsPerIP: 1, PagesPerHost: 10})
	hosts := web.Hosts()
	r := &movingRouter{moved: map[string]bool{hosts[3]: true}}
	r.own = map[string]bool{hosts[0]: true, hosts[1]: true, hosts[2]: true, hosts[3]: true}
	eng := crawlQueued(t, web, r, 4, nil)
	st := eng.Stats()
	movedPrefix := "http://" + hosts[3] + ":"
	handed := map[string]int{}
	for _, u := range r.handed {
		if !strings.HasPrefix(u, movedPrefix) {
			t.Fatalf("%s handed off, but its host did not move", u)
		}
		handed[u]++
	}
	for p := range 10 {
		if u := web.PageURL(3, p); handed[u] != 1 {
			t.Fatalf("%s handed off %d times, want once", u, handed[u])
		}
	}
	if st.Withdrawn != int64(len(handed)) || st.Fetched != 30 {
		t.Fatalf("withdrawn %d (handed %d distinct), fetched %d; want the 30 pages of the three hosts that stayed", st.Withdrawn, len(handed), st.Fetched)
	}
	for u := range handed {
		seen, _ := eng.Frontier().Seen(u)
		off, _ := eng.Frontier().HandedOff(u)
		if seen || !off {
			t.Fatalf("%s withdrawn: seen %v, handed off %v", u, seen, off)
		}
	}
	if ws := web.Stats(); ws.UniquePages != 30 || ws.DuplicateFetches != 0 {
		t.Fatalf("server: %+v, want the 30 pages of the hosts that stayed, once each", ws)
	}
}

// bouncingRouter hands the URLs of a moved host straight back to this
// crawler's own engine, as the overlay does when the owner it finds is
// this crawler after all, and the host is this crawler's again from then on.
type bouncingRouter struct {
	movingRouter
	eng     *Engine
	bounced atomic.Int64
}

func (r *bouncingRouter) Recheck(ctx context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.movingRouter.Recheck(ctx, u, ip)
}

func (r *bouncingRouter) Handoff(ctx context.Context, urls []Routed) error {
	r.mu.Lock()
	clear(r.moved)
	r.mu.Unlock()
	r.bounced.Add(int64(len(urls)))
	back := make([]string, len(urls))
	for i, u := range urls {
		back[i] = u.URL
	}
	return r.eng.Accept(ctx, back)
}

// A withdrawal whose hand-off comes back to this crawler loses nothing:
// the URLs are queued again and fetched here, once each.
func TestWithdrawnURLsHandedBackAreFetched(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 2, HostsPerIP: 1, PagesPerHost: 10})
	hosts := web.Hosts()
	r := &bouncingRouter{movingRouter: movingRouter{moved: map[string]bool{hosts[1]: true}}}
	r.own = map[string]bool{hosts[0]: true, hosts[1]: true}
	eng := crawlQueued(t, web, r, 2, func(e *Engine) { r.eng = e })
	if r.bounced.Load() == 0 {
		t.Fatal("nothing was handed off: the test did not exercise the round trip")
	}
	if st, ws := eng.Stats(), web.Stats(); st.Fetched != 20 || ws.UniquePages != 20 || ws.DuplicateFetches != 0 {
		t.Fatalf("fetched %d (server: %d distinct, %d twice) after %d URLs came back; want all 20 pages once", st.Fetched, ws.UniquePages, ws.DuplicateFetches, r.bounced.Load())
	}
}

// crawlQueued queues every page of web in a new engine routed by r (all of
// them this crawler's when queued), calls setup, and crawls until idle.
func crawlQueued(t *testing.T, web *synthweb.Web, r Router, concurrency int, setup func(*Engine)) *Engine {
	t.Helper()
	eng, err := New(Config{StateDir: t.TempDir(), Fetch: synthFetchConfig(web), Router: r,
		Concurrency: concurrency, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t),
		Registerer: prometheus.NewRegistry()})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	if setup != nil {
		setup(eng)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var queued []string
	for h := range web.Config().Hosts {
		for p := range web.Config().PagesPerHost {
			queued = append(queued, web.PageURL(h, p))
		}
	}
	if err := eng.Accept(ctx, queued); err != nil {
		t.Fatal(err)
	}
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	return eng
}
