package synthweb

import (
	"bytes"
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/url"
	"regexp"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func start(t *testing.T, cfg Config) *Web {
	t.Helper()
	w, err := Start(cfg)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { w.Close() })
	return w
}

func fetcher(t *testing.T, w *Web) *fetch.Fetcher {
	t.Helper()
	f, err := fetch.New(fetch.Config{
		AllowPrivate: true, NoDelay: true, DelayFactor: -1, PerIPLimit: 4,
		Resolver: w, Logger: slog.New(slog.NewTextHandler(io.Discard, nil)),
	})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	return f
}

var hrefRE = regexp.MustCompile(`href="([^"]*)"`)

func TestShapeAndDeterminism(t *testing.T) {
	w := start(t, Config{Seed: 7})
	if len(w.Hosts()) != 200 || w.NumIPs() != 50 || w.TotalPages() != 20000 {
		t.Fatalf("hosts %d ips %d pages %d", len(w.Hosts()), w.NumIPs(), w.TotalPages())
	}
	f := fetcher(t, w)
	ctx := context.Background()
	var size, links, local int
	const sample = 40
	for i := 0; i < sample; i++ {
		resp, err := f.Fetch(ctx, fetch.Request{URL: w.PageURL(i*5, i)})
		if err != nil {
			t.Fatal(err)
		}
		size += len(resp.Body)
		base, _ := url.Parse(resp.FinalURL)
		for _, m := range hrefRE.FindAllSubmatch(resp.Body, -1) {
			u, err := urlnorm.Resolve(base, string(m[1]))
			if err != nil {
				t.Fatal(err)
			}
			if strings.HasPrefix(u.Path, "/private/") {
				continue
			}
			links++
			if u.Host == base.Host {
				local++
			}
		}
		if !bytes.Contains(resp.Body, []byte("<title>")) || !bytes.Contains(resp.Body, []byte("<h2>")) {
			t.Fatalf("page lacks title or headings")
		}
	}
	avg := size / sample
	if avg < 9<<10 || avg > 12<<10 {
		t.Fatalf("average page %d bytes, want ~10 KiB", avg)
	}
	if links != 20*sample {
		t.Fatalf("%d links on %d pages", links, sample)
	}
	if frac := float64(local) / float64(links); frac < 0.75 || frac > 0.88 {
		t.Fatalf("local link fraction %.2f", frac)
	}
	// Same seed, same bytes; other seed, other bytes.
	w2 := start(t, Config{Seed: 7, AddrPrefix: [2]byte{127, 78}})
	w3 := start(t, Config{Seed: 8, AddrPrefix: [2]byte{127, 79}})
	w2.port, w3.port = w.port, w.port // page text embeds the port
	if !bytes.Equal(w.page(3, 4, 0), w2.page(3, 4, 0)) || bytes.Equal(w.page(3, 4, 0), w3.page(3, 4, 0)) {
		t.Fatal("pages are not a function of the seed")
	}
}

func TestConditionalChangeAndStats(t *testing.T) {
	w := start(t, Config{Hosts: 8, PagesPerHost: 10})
	f := fetcher(t, w)
	ctx := context.Background()
	u := w.PageURL(2, 3)
	r1, err := f.Fetch(ctx, fetch.Request{URL: u})
	if err != nil {
		t.Fatal(err)
	}
	r2, err := f.Fetch(ctx, fetch.Request{URL: u, ETag: r1.ETag})
	if err != nil || !r2.NotModified {
		t.Fatalf("If-None-Match: %+v %v", r2, err)
	}
	r3, err := f.Fetch(ctx, fetch.Request{URL: u, LastModified: r1.LastModified})
	if err != nil || !r3.NotModified {
		t.Fatalf("If-Modified-Since: %+v %v", r3, err)
	}
	if _, err := f.Fetch(ctx, fetch.Request{URL: u}); err != nil { // a duplicate
		t.Fatal(err)
	}
	st := w.Stats()
	if st.PageFetches != 2 || st.UniquePages != 1 || st.DuplicateFetches != 1 || st.NotModified != 2 || st.RobotsFetches != 1 {
		t.Fatalf("stats %+v", st)
	}
	n := w.Change(0.5, 1)
	if n < 20 || n > 60 {
		t.Fatalf("Change(0.5) changed %d of 80", n)
	}
	changed := 0
	for p := 0; p < 10; p++ {
		for h := 0; h < 8; h++ {
			if w.Version(h, p) > 0 {
				changed++
			}
		}
	}
	if changed != n {
		t.Fatalf("versions say %d changed, Change said %d", changed, n)
	}
	// Find a changed page: its old validators no longer match.
	for h := 0; h < 8; h++ {
		for p := 0; p < 10; p++ {
			if w.Version(h, p) == 0 {
				continue
			}
			old := w.etag(h, p, 0)
			r, err := f.Fetch(ctx, fetch.Request{URL: w.PageURL(h, p), ETag: old})
			if err != nil || r.NotModified || r.ETag == old {
				t.Fatalf("changed page answered %+v %v", r, err)
			}
			return
		}
	}
}

// TestCrawlClosure crawls a small web breadth-first with the real fetcher
// and normaliser: every page is reached, none twice, robots respected.
func TestCrawlClosure(t *testing.T) {
	w := start(t, Config{Hosts: 12, HostsPerIP: 3, PagesPerHost: 15})
	f := fetcher(t, w)
	n := urlnorm.New(urlnorm.DefaultOptions())
	seen := map[string]bool{}
	var mu sync.Mutex
	queue := []string{}
	for _, s := range w.Seeds()[:2] {
		c, _ := n.Normalize(s)
		seen[c] = true
		queue = append(queue, c)
	}
	ctx := context.Background()
	robotsRefused := 0
	for len(queue) > 0 {
		batch := queue
		queue = nil
		var wg sync.WaitGroup
		for _, u := range batch {
			wg.Add(1)
			go func(u string) {
				defer wg.Done()
				resp, err := f.Fetch(ctx, fetch.Request{URL: u})
				mu.Lock()
				defer mu.Unlock()
				if err != nil {
					if fetch.ReasonOf(err) == fetch.ReasonRobots {
						robotsRefused++
						return
					}
					t.Error(err)
					return
				}
				base, _ := url.Parse(resp.FinalURL)
				for _, m := range hrefRE.FindAllSubmatch(resp.Body, -1) {
					nu, err := n.Resolve(base, string(m[1]))
					if err != nil {
						t.Error(err)
						continue
					}
					if s := nu.String(); !seen[s] {
						seen[s] = true
						queue = append(queue, s)
					}
				}
			}(u)
		}
		wg.Wait()
	}
	st := w.Stats()
	if st.UniquePages != int64(w.TotalPages()) || st.DuplicateFetches != 0 || st.RobotsViolations != 0 || st.NotFound != 0 {
		t.Fatalf("crawl reached %d of %d pages, %d duplicates, %d robots violations, %d not found (stats %+v)",
			st.UniquePages, w.TotalPages(), st.DuplicateFetches, st.RobotsViolations, st.NotFound, st)
	}
	if robotsRefused == 0 {
		t.Fatal("no /private/ link was met")
	}
	if st.RobotsFetches != 12 {
		t.Fatalf("robots fetched %d times for 12 hosts", st.RobotsFetches)
	}
}

func TestUnknownHostAndPaths(t *testing.T) {
	w := start(t, Config{Hosts: 2, PagesPerHost: 3, HostLatency: func(h int) time.Duration { return time.Duration(h) * 20 * time.Millisecond }})
	c := &http.Client{Transport: &http.Transport{DialContext: w.DialContext}}
	defer c.CloseIdleConnections()
	start := time.Now()
	resp, err := c.Get("http://" + w.Hosts()[1] + ":" + itoa(w.Port()) + "/")
	if err != nil {
		t.Fatal(err)
	}
	io.Copy(io.Discard, resp.Body)
	resp.Body.Close()
	if d := time.Since(start); d < 20*time.Millisecond {
		t.Fatalf("host 1 answered in %v despite 20 ms HostLatency", d)
	}
	for path, want := range map[string]int{"/p/2.html": 200, "/p/3.html": 404, "/p/0.html": 404, "/x": 404, "/robots.txt": 200} {
		resp, err := c.Get("http://" + w.Hosts()[1] + ":" + itoa(w.Port()) + path)
		if err != nil {
			t.Fatal(err)
		}
		io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
	if w.HostIndex(w.Hosts()[1]) != 1 || w.HostIndex("nowhere.test") != -1 || !w.HostIP(1).IsLoopback() {
		t.Fatal("HostIndex/HostIP")
	}
	if _, err := w.LookupNetIP(context.Background(), "ip", "nowhere.test"); err == nil {
		t.Fatal("unknown host resolved")
	}
}

func itoa(i int) string { return strconv.Itoa(i) }

func TestGzip(t *testing.T) {
	w := start(t, Config{Hosts: 2, PagesPerHost: 3, Gzip: true})
	f := fetcher(t, w)
	resp, err := f.Fetch(context.Background(), fetch.Request{URL: w.PageURL(0, 1)})
	if err != nil {
		t.Fatal(err)
	}
	st := w.Stats()
	if resp.WireBytes >= int64(len(resp.Body))/2 || st.HTMLBytes != int64(len(resp.Body)) || st.BytesServed < resp.WireBytes || st.BytesServed > resp.WireBytes+512 {
		t.Fatalf("wire %d body %d stats %+v", resp.WireBytes, len(resp.Body), st)
	}
	if !acceptsGzip("br;q=1, gzip;q=0.5") || acceptsGzip("gzip;q=0") || acceptsGzip("br") {
		t.Fatal("acceptsGzip")
	}
}
