package fetch

import (
	"context"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// TestRobotsGoogleCases checks the matcher against cases from Google's
// reference test suite (google/robotstxt robots_test.cc), through the same
// RobotsEntry.Allows the fetcher uses.
func TestRobotsGoogleCases(t *testing.T) {
	const groups = "allow: /foo/bar/\n\nuser-agent: FooBot\ndisallow: /\nallow: /x/\nuser-agent: BarBot\n" +
		"disallow: /\nallow: /y/\n\n\nallow: /w/\nuser-agent: BazBot\n\nuser-agent: FooBot\nallow: /z/\ndisallow: /\n"
	cases := []struct {
		name, robots, agent, url string
		want                     bool
	}{
		{"LineSyntax_Line correct", "user-agent: FooBot\ndisallow: /\n", "FooBot", "http://foo.bar/x/y", false},
		{"LineSyntax_Line incorrect", "foo: FooBot\nbar: /\n", "FooBot", "http://foo.bar/x/y", true},
		{"LineSyntax_Line missing colon accepted", "user-agent FooBot\ndisallow /\n", "FooBot", "http://foo.bar/x/y", false},
		{"Groups x", groups, "FooBot", "http://foo.bar/x/b", true},
		{"Groups z (groups combined)", groups, "FooBot", "http://foo.bar/z/d", true},
		{"Groups y", groups, "FooBot", "http://foo.bar/y/c", false},
		{"Groups BarBot y", groups, "BarBot", "http://foo.bar/y/c", true},
		{"Groups BarBot w", groups, "BarBot", "http://foo.bar/w/a", true},
		{"Groups BarBot z", groups, "BarBot", "http://foo.bar/z/d", false},
		{"Groups BazBot z", groups, "BazBot", "http://foo.bar/z/d", true},
		{"Rules outside groups ignored", groups, "FooBot", "http://foo.bar/foo/bar/", false},
		{"Sitemap does not close group", "User-agent: BarBot\nSitemap: https://foo.bar/sitemap\nUser-agent: *\nDisallow: /\n", "BarBot", "http://foo.bar/", false},
		{"Unknown line does not close group", "User-agent: FooBot\nInvalid-Unknown-Line: unknown\nUser-agent: *\nDisallow: /\n", "FooBot", "http://foo.bar/", false},
		{"Line names case-insensitive", "uSeR-aGeNt: FooBot\nAlLoW: /x/\ndIsAlLoW: /\n", "FooBot", "http://foo.bar/a/b", false},
		{"Line names case-insensitive allow", "USER-AGENT: FooBot\nALLOW: /x/\nDISALLOW: /\n", "FooBot", "http://foo.bar/x/y", true},
		{"UA value case-insensitive", "User-Agent: FoO bAr\nAllow: /x/\nDisallow: /\n", "foo", "http://foo.bar/a/b", false},
		{"UA up to first space", "User-Agent: *\nDisallow: /\nUser-Agent: Foo Bar\nAllow: /x/\nDisallow: /\n", "Foo", "http://foo.bar/x/y", true},
		{"Empty robots", "", "FooBot", "http://foo.bar/x/y", true},
		{"Global group secondary", "user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n", "FooBot", "http://foo.bar/x/y", false},
		{"Global group applies to others", "user-agent: *\nallow: /\nuser-agent: FooBot\ndisallow: /\n", "BarBot", "http://foo.bar/x/y", true},
		{"Only specific groups", "user-agent: FooBot\nallow: /\nuser-agent: BarBot\ndisallow: /\n", "QuxBot", "http://foo.bar/x/y", true},
		{"Value case-sensitive lower", "user-agent: FooBot\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/y", false},
		{"Value case-sensitive upper", "user-agent: FooBot\ndisallow: /X/\n", "FooBot", "http://foo.bar/x/y", true},
		{"Longest match disallow", "user-agent: FooBot\ndisallow: /x/page.html\nallow: /x/\n", "FooBot", "http://foo.bar/x/page.html", false},
		{"Longest match allow", "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/page.html", true},
		{"Longest match dir", "user-agent: FooBot\nallow: /x/page.html\ndisallow: /x/\n", "FooBot", "http://foo.bar/x/", false},
		{"Equal empty: allow wins", "user-agent: FooBot\ndisallow: \nallow: \n", "FooBot", "http://foo.bar/x/page.html", true},
		{"Equal root: allow wins", "user-agent: FooBot\ndisallow: /\nallow: /\n", "FooBot", "http://foo.bar/x/page.html", true},
		{"x vs x/ a", "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x", false},
		{"x vs x/ b", "user-agent: FooBot\ndisallow: /x\nallow: /x/\n", "FooBot", "http://foo.bar/x/", true},
		{"Wildcard longest", "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "http://foo.bar/page.html", false},
		{"Wildcard longest 2", "user-agent: FooBot\nallow: /page\ndisallow: /*.html\n", "FooBot", "http://foo.bar/page", true},
		{"Specific group overrides global", "User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n", "FooBot", "http://foo.bar/x/page", true},
		{"Specific group own rule", "User-agent: *\nDisallow: /x/\nUser-agent: FooBot\nDisallow: /y/\n", "FooBot", "http://foo.bar/y/page", false},
		{"Encoding query", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar?qux=taz&baz=http://foo.bar?tar&par\n", "FooBot", "http://foo.bar/foo/bar?qux=taz&baz=http://foo.bar?tar&par", true},
		{"3-byte char", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/ツ\n", "FooBot", "http://foo.bar/foo/bar/%E3%83%84", true},
		{"Encoded unreserved not equal", "User-agent: FooBot\nDisallow: /\nAllow: /foo/bar/%62%61%7A\n", "FooBot", "http://foo.bar/foo/bar/baz", false},
		{"Special * ", "User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "FooBot", "http://foo.bar/foo/bar/quz", false},
		{"Special * 2", "User-agent: FooBot\nDisallow: /foo/bar/quz\nAllow: /foo/*/qux\n", "FooBot", "http://foo.bar/foo/bax/quz", true},
		{"Special $", "User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "FooBot", "http://foo.bar/foo/bar", false},
		{"Special $ 2", "User-agent: FooBot\nDisallow: /foo/bar$\nAllow: /foo/bar/qux\n", "FooBot", "http://foo.bar/foo/bar/baz", true},
		{"Special # comment", "User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "FooBot", "http://foo.bar/foo/bar", true},
		{"Special # comment 2", "User-agent: FooBot\n# Disallow: /\nDisallow: /foo/quz#qux\nAllow: /\n", "FooBot", "http://foo.bar/foo/quz", false},
		{"index.html is directory", "User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n", "foobot", "http://foo.com/allowed-slash/", true},
		{"index.htm is not", "User-Agent: *\nAllow: /allowed-slash/index.html\nDisallow: /\n", "foobot", "http://foo.com/allowed-slash/index.htm", false},
		{"BOM skipped", "\xEF\xBB\xBFUser-Agent: foo\nAllow: /AnyValue\n", "foo", "http://foo.com/AnyValue", true},
		{"BOM skipped disallow", "\xEF\xBB\xBFUser-Agent: foo\nDisallow: /AnyValue\n", "foo", "http://foo.com/AnyValue", false},
		{"CR line ends", "User-Agent: foo\rDisallow: /x\r", "foo", "http://foo.com/x", false},
	}
	for _, c := range cases {
		e := RobotsEntry{Status: RobotsRules, Body: c.robots}
		if got := e.Allows(c.agent, c.url); got != c.want {
			t.Errorf("%s: Allows(%q, %q) = %v, want %v", c.name, c.agent, c.url, got, c.want)
		}
	}
	if !(RobotsEntry{Status: RobotsAllowAll}).Allows("x", "http://a/") || (RobotsEntry{Status: RobotsDisallowAll}).Allows("x", "http://a/") {
		t.Fatal("allow-all / disallow-all entries")
	}
}

func TestParseRobotsExtras(t *testing.T) {
	for _, c := range []struct {
		body string
		want time.Duration
	}{
		{"User-agent: *\nCrawl-delay: 2\n", 2 * time.Second},
		{"User-agent: *\nCrawl-delay: 2\n\nUser-agent: micra\nCrawl-delay: 0.5\n", 500 * time.Millisecond},
		{"User-agent: other\nUser-agent: MICRA\nCrawl-delay: 7\nUser-agent: *\nCrawl-delay: 1\n", 7 * time.Second},
		{"User-agent: micra\nDisallow: /x\nUser-agent: *\nCrawl-delay: 9\n", 0}, // our group has none
		{"User-agent: other\nCrawl-delay: 9\n", 0},
		{"User-agent: *\nCrawl-delay: soon\n", 0},
	} {
		got, _ := parseRobotsExtras(c.body, "micra")
		if got != c.want {
			t.Errorf("crawl-delay of %q = %v, want %v", c.body, got, c.want)
		}
	}
	_, sm := parseRobotsExtras("Sitemap: http://a/s.xml\nUser-agent: *\nDisallow:\nSitemap: http://a/t.xml\n", "micra")
	if len(sm) != 2 {
		t.Fatalf("sitemaps %v", sm)
	}
}

// robotsWorld is one loopback server answering for many host names (all
// resolving to 127.0.0.1); each name has its own robots.txt behaviour.
type robotsWorld struct {
	mu          sync.Mutex
	robotsHits  map[string]int
	pageHits    map[string][]time.Time
	robots500Ok atomic.Bool
}

func (w *robotsWorld) handler(rw http.ResponseWriter, r *http.Request) {
	host := strings.Split(r.Host, ":")[0]
	w.mu.Lock()
	if r.URL.Path == "/robots.txt" {
		w.robotsHits[host]++
	} else if !strings.HasPrefix(r.URL.Path, "/robots") && !strings.HasPrefix(r.URL.Path, "/hop") {
		w.pageHits[host] = append(w.pageHits[host], time.Now())
	}
	w.mu.Unlock()
	if r.URL.Path == "/robots.txt" {
		switch host {
		case "r404.test":
			http.NotFound(rw, r)
		case "r401.test":
			http.Error(rw, "no", http.StatusUnauthorized)
		case "r500.test":
			if w.robots500Ok.Load() {
				io.WriteString(rw, "User-agent: *\nDisallow: /private\n")
				return
			}
			http.Error(rw, "oops", http.StatusInternalServerError)
		case "r429.test":
			http.Error(rw, "slow down", http.StatusTooManyRequests)
		case "rredir.test":
			http.Redirect(rw, r, "/robots-real.txt", http.StatusMovedPermanently)
		case "rredir6.test":
			http.Redirect(rw, r, "/hop/1", http.StatusFound)
		case "rdelay.test":
			io.WriteString(rw, "User-agent: *\nCrawl-delay: 100\n")
		case "rdelay-small.test":
			io.WriteString(rw, "User-agent: micra\nCrawl-delay: 0.25\n")
		case "rslow.test":
			time.Sleep(50 * time.Millisecond)
			io.WriteString(rw, "User-agent: *\nDisallow: /private\n")
		default:
			io.WriteString(rw, "User-agent: *\nDisallow: /private\n")
		}
		return
	}
	if r.URL.Path == "/robots-real.txt" {
		io.WriteString(rw, "User-agent: micra\nDisallow: /private\n")
		return
	}
	if r.URL.Path == "/go-private" {
		http.Redirect(rw, r, "/private/secret", http.StatusFound)
		return
	}
	if strings.HasPrefix(r.URL.Path, "/hop/") {
		n, _ := strconv.Atoi(strings.TrimPrefix(r.URL.Path, "/hop/"))
		http.Redirect(rw, r, "/hop/"+strconv.Itoa(n+1), http.StatusFound)
		return
	}
	rw.Header().Set("Content-Type", "text/html")
	io.WriteString(rw, "page")
}

func newRobotsWorld(t *testing.T) (*robotsWorld, int, mapResolver) {
	w := &robotsWorld{robotsHits: map[string]int{}, pageHits: map[string][]time.Time{}}
	srv := serve(t, http.HandlerFunc(w.handler))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := mapResolver{}
	for _, h := range []string{"r404.test", "r401.test", "r500.test", "r429.test", "rredir.test", "rredir6.test",
		"rdelay.test", "rdelay-small.test", "rslow.test", "plain.test", "rdown.test"} {
		res[h] = netip.MustParseAddr("127.0.0.1")
	}
	return w, port, res
}

func TestRobotsVariants(t *testing.T) {
	w, port, res := newRobotsWorld(t)
	// rdown.test points at a port nobody listens on.
	l, _ := net.Listen("tcp", "127.0.0.1:0")
	downPort := l.Addr().(*net.TCPAddr).Port
	l.Close()
	clk := &fakeClock{now: time.Now()}
	f := testFetcher(t, func(c *Config) {
		c.Resolver = res
		c.Now = clk.Now
		c.RobotsErrorTTL = time.Minute
		c.RobotsTTL = time.Hour
	})
	ctx := context.Background()
	u := func(host, path string) string { return "http://" + host + ":" + strconv.Itoa(port) + path }
	fetchOK := func(url string) {
		t.Helper()
		if _, err := f.Fetch(ctx, Request{URL: url}); err != nil {
			t.Fatalf("%s: %v", url, err)
		}
	}
	// 4xx → allow all.
	fetchOK(u("r404.test", "/private"))
	fetchOK(u("r401.test", "/private"))
	// 2xx rules.
	fetchOK(u("plain.test", "/public"))
	_, err := f.Fetch(ctx, Request{URL: u("plain.test", "/private/x")})
	wantReason(t, err, ReasonRobots)
	// A redirect into a disallowed path is refused at the hop.
	_, err = f.Fetch(ctx, Request{URL: u("plain.test", "/go-private")})
	wantReason(t, err, ReasonRobots)
	// 5xx → disallow all, page never requested.
	_, err = f.Fetch(ctx, Request{URL: u("r500.test", "/public")})
	wantReason(t, err, ReasonRobots)
	// 429 on robots.txt → treated as unreachable.
	_, err = f.Fetch(ctx, Request{URL: u("r429.test", "/public")})
	wantReason(t, err, ReasonRobots)
	// Unreachable → disallow all.
	_, err = f.Fetch(ctx, Request{URL: "http://rdown.test:" + strconv.Itoa(downPort) + "/"})
	wantReason(t, err, ReasonRobots)
	// Redirected robots.txt is followed.
	fetchOK(u("rredir.test", "/public"))
	_, err = f.Fetch(ctx, Request{URL: u("rredir.test", "/private")})
	wantReason(t, err, ReasonRobots)
	// More than 5 robots redirects → unavailable → allow all.
	fetchOK(u("rredir6.test", "/private"))

	w.mu.Lock()
	if n := len(w.pageHits["r500.test"]) + len(w.pageHits["r429.test"]); n != 0 {
		t.Fatalf("pages fetched from hosts whose robots.txt failed: %d", n)
	}
	if w.robotsHits["plain.test"] != 1 || w.robotsHits["r500.test"] != 1 {
		t.Fatalf("robots.txt not cached: %v", w.robotsHits)
	}
	w.mu.Unlock()

	// After RobotsErrorTTL the 5xx host is asked again; it now answers.
	w.robots500Ok.Store(true)
	_, err = f.Fetch(ctx, Request{URL: u("r500.test", "/public")})
	wantReason(t, err, ReasonRobots) // still inside the disallow window
	clk.Advance(61 * time.Second)
	fetchOK(u("r500.test", "/public"))
	_, err = f.Fetch(ctx, Request{URL: u("r500.test", "/private")})
	wantReason(t, err, ReasonRobots)
	// RobotsTTL expiry refetches.
	clk.Advance(2 * time.Hour)
	fetchOK(u("plain.test", "/public"))
	w.mu.Lock()
	if w.robotsHits["plain.test"] != 2 || w.robotsHits["r500.test"] != 2 {
		t.Fatalf("robots.txt not refetched after expiry: %v", w.robotsHits)
	}
	w.mu.Unlock()
	if ok, err := f.Allowed(ctx, u("plain.test", "/private/a")); ok || err != nil {
		t.Fatalf("Allowed(private) = %v, %v", ok, err)
	}
}

func TestRobotsCrawlDelay(t *testing.T) {
	w, port, res := newRobotsWorld(t)
	f := testFetcher(t, func(c *Config) { c.Resolver = res; c.MaxCrawlDelay = 300 * time.Millisecond })
	ctx := context.Background()
	u := func(host, path string) string { return "http://" + host + ":" + strconv.Itoa(port) + path }
	for i := 0; i < 3; i++ {
		for _, h := range []string{"rdelay.test", "rdelay-small.test"} {
			if _, err := f.Fetch(ctx, Request{URL: u(h, "/p"+strconv.Itoa(i))}); err != nil {
				t.Fatal(err)
			}
		}
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	check := func(host string, lo, hi time.Duration) {
		hits := w.pageHits[host]
		if len(hits) != 3 {
			t.Fatalf("%s: %d hits", host, len(hits))
		}
		for i := 1; i < len(hits); i++ {
			if gap := hits[i].Sub(hits[i-1]); gap < lo || gap > hi {
				t.Fatalf("%s: gap %v outside [%v, %v]", host, gap, lo, hi)
			}
		}
	}
	check("rdelay.test", 290*time.Millisecond, 2*time.Second)       // 100 s capped at 300 ms
	check("rdelay-small.test", 240*time.Millisecond, 2*time.Second) // 0.25 s honoured
	if got := counterValue(t, f.m.crawlDelayCapped); got != 1 {
		t.Fatalf("crawl-delay capped counter = %v, want 1", got)
	}
}

func TestRobotsFetchedOnceUnderConcurrency(t *testing.T) {
	w, port, res := newRobotsWorld(t)
	f := testFetcher(t, func(c *Config) { c.Resolver = res })
	var wg sync.WaitGroup
	for i := 0; i < 10; i++ {
		wg.Add(1)
		go func(i int) {
			defer wg.Done()
			f.Fetch(context.Background(), Request{URL: "http://rslow.test:" + strconv.Itoa(port) + "/p" + strconv.Itoa(i)})
		}(i)
	}
	wg.Wait()
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.robotsHits["rslow.test"] != 1 || len(w.pageHits["rslow.test"]) != 10 {
		t.Fatalf("robots hits %d, page hits %d", w.robotsHits["rslow.test"], len(w.pageHits["rslow.test"]))
	}
}

// Crawl-delay spaces every request to the host, the robots.txt fetch
// included: the first page waits the delay after robots.txt, as the later
// pages do after each other.
func TestCrawlDelayAfterRobotsFetch(t *testing.T) {
	var mu sync.Mutex
	var robotsAt, pageAt time.Time
	srv := httptest.NewServer(http.HandlerFunc(func(rw http.ResponseWriter, r *http.Request) {
		mu.Lock()
		defer mu.Unlock()
		if r.URL.Path == "/robots.txt" {
			robotsAt = time.Now()
			io.WriteString(rw, "User-agent: *\nCrawl-delay: 0.3\n")
			return
		}
		pageAt = time.Now()
		rw.Header().Set("Content-Type", "text/html")
		io.WriteString(rw, "<title>p</title>")
	}))
	defer srv.Close()
	f := testFetcher(t, nil)
	if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/p"}); err != nil {
		t.Fatal(err)
	}
	mu.Lock()
	defer mu.Unlock()
	if gap := pageAt.Sub(robotsAt); gap < 290*time.Millisecond {
		t.Fatalf("first page %v after robots.txt; Crawl-delay 0.3 s", gap)
	}
}
