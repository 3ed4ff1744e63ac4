package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Redirect targets are monitored on their own: a page reached only through
// a redirect gets a history with its validators and a revisit schedule of
// its own, so once the source is gone (here: 404) the target is still
// revisited with conditional GETs (304) and its changes are shipped. Before,
// the target had a one-fetch history and no schedule, and was never fetched
// again once its source went away.
func TestRedirectTargetRevisitedAfterSourceGone(t *testing.T) {
	var version atomic.Int32
	version.Store(1)
	var aGone atomic.Bool     // /a answered 404
	var b304 atomic.Int32     // 304s for /b after that
	var bConditional []string // If-None-Match of every request for /b
	var mu sync.Mutex
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/a":
			if n == 1 {
				http.Redirect(w, r, "/b", http.StatusMovedPermanently)
				return
			}
			aGone.Store(true)
			http.NotFound(w, r)
		case "/b":
			v := version.Load()
			etag := fmt.Sprintf(`"v%d"`, v)
			inm := r.Header.Get("If-None-Match")
			mu.Lock()
			bConditional = append(bConditional, inm)
			mu.Unlock()
			w.Header().Set("ETag", etag)
			if inm == etag {
				if aGone.Load() {
					b304.Add(1)
				}
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprintf(w, `<title>b version %d</title><p>the page behind the redirect, version %d</p>`, v, v)
		default:
			http.NotFound(w, r)
		}
	})
	out := t.TempDir()
	eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/a"}, Fetch: revisitFetch(), Concurrency: 1,
		Receiver: pack.FileSink{Dir: out}, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 50 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond}})
	waitFor(t, 10*time.Second, "a conditional revisit of /b answered 304 after /a went away", func() bool { return b304.Load() >= 1 })
	version.Store(2)
	waitFor(t, 10*time.Second, "the change of /b picked up", func() bool { return eng.Stats().Changed >= 1 })
	stop()

	b := srv.URL + "/b"
	var sources, gone, bChanged int
	for _, r := range readCarriers(t, out) {
		switch {
		case r.URL == srv.URL+"/a" && r.Change == pack.ChangeNew && r.FinalURL == b:
			sources++
		case r.URL == srv.URL+"/a" && r.Change == pack.ChangeGone:
			gone++
		case r.URL == b && r.Change == pack.ChangeChanged && r.ETag == `"v2"`:
			bChanged++
		case r.URL == b:
			t.Errorf("unexpected record for /b: %s, ETag %s", r.Change, r.ETag)
		}
	}
	if sources != 1 || gone != 1 || bChanged != 1 {
		t.Errorf("records: /a new→/b %d, /a gone %d, /b changed %d; want 1 each (server %v)", sources, gone, bChanged, hits())
	}
	mu.Lock()
	defer mu.Unlock()
	if bConditional[0] != "" || bConditional[1] != `"v1"` {
		t.Errorf("If-None-Match sent for /b: %q; want none through the redirect, then the target's own ETag", bConditional)
	}
}

// A redirect target gets one schedule, however many sources lead to it and
// whether it is also linked directly (before or after the redirects): the
// persisted schedule holds one entry per page.
func TestRedirectTargetScheduledOnce(t *testing.T) {
	for _, tc := range []struct {
		name, links       string
		bHits, alreadyHit int
	}{
		// /a1 and /a2 both redirect to /b (each fetch follows it); the
		// direct link to /b, queued already, is skipped
		{"sources first", `<a href="/a1">1</a><a href="/a2">2</a><a href="/b">b</a>`, 2, 1},
		{"target first", `<a href="/b">b</a><a href="/a1">1</a><a href="/a2">2</a>`, 3, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				switch r.URL.Path {
				case "/robots.txt":
					http.NotFound(w, r)
				case "/a1", "/a2":
					http.Redirect(w, r, "/b", http.StatusFound)
				case "/":
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprintf(w, `<title>home</title>%s`, tc.links)
				default:
					w.Header().Set("ETag", `"b1"`)
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprint(w, `<title>b</title><p>the target</p>`)
				}
			})
			db := openDB(t)
			cfg := Config{DB: db, Seeds: []string{srv.URL + "/"}, Fetch: revisitFetch(), Concurrency: 1,
				Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t),
				Monitor: Monitor{Enabled: true, Sleep: time.Hour}}
			eng, err := New(cfg)
			if err != nil {
				t.Fatal(err)
			}
			ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
			err = eng.Run(ctx)
			cancel()
			st := eng.Stats()
			eng.Close()
			if err != nil {
				t.Fatal(err)
			}
			if h := hits(); h["/b"] != tc.bHits || st.AlreadyFetched != int64(tc.alreadyHit) {
				t.Errorf("server %v, already fetched %d; want /b fetched %d times, %d skipped", h, st.AlreadyFetched, tc.bHits, tc.alreadyHit)
			}
			// the schedule as stored (counted afresh when the state is opened)
			eng = runToIdle(t, Config{DB: db, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1,
				Logger: testLogger(t), Monitor: cfg.Monitor})
			if st := eng.Stats(); st.Scheduled != 4 {
				t.Errorf("%d revisits scheduled, want 4: /, /a1, /a2 and /b once", st.Scheduled)
			}
			h, known, err := eng.front.History(srv.URL + "/b")
			if err != nil || !known || h.NextVisit.IsZero() || h.Fetches != 1 || h.ETag != `"b1"` || h.Depth != 1 {
				t.Errorf("history of /b: known %v, %+v, %v; want one fetch, its ETag, depth 1 and a next visit", known, h, err)
			}
		})
	}
}

// A redirect target is admitted as any URL is: one refused by robots.txt,
// by the scope (hosts, traps) or by its host's budget gets no history and
// no schedule.
func TestRedirectTargetRefusedNotScheduled(t *testing.T) {
	other, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>elsewhere</title>`)
	})
	for _, tc := range []struct {
		name      string
		target    string // where /a redirects
		sameHosts bool
		scope     urlnorm.Scope
		scheduled int64 // "/" and /a, unless /a failed
	}{
		{name: "robots", target: "/private/b", scheduled: 1},
		{name: "other host", target: other.URL + "/b", sameHosts: true, scheduled: 2},
		{name: "path trap", target: "/x/x/x/x/b", scheduled: 2},
		{name: "host budget", target: "/b", scope: urlnorm.Scope{MaxPagesPerHost: 2}, scheduled: 2},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				switch r.URL.Path {
				case "/robots.txt":
					fmt.Fprint(w, "User-agent: *\nDisallow: /private/\n")
				case "/":
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprint(w, `<title>home</title><a href="/a">a</a>`)
				case "/a":
					http.Redirect(w, r, tc.target, http.StatusMovedPermanently)
				default:
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprint(w, `<title>target</title>`)
				}
			})
			target := tc.target
			if target[0] == '/' {
				target = srv.URL + target
			}
			eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: revisitFetch(), Concurrency: 1,
				SameHostsAsSeeds: tc.sameHosts, Scope: tc.scope, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true,
				Progress: -1, Logger: testLogger(t), Monitor: Monitor{Enabled: true, Sleep: time.Hour}})
			u, err := eng.norm.Parse(target)
			if err != nil {
				t.Fatal(err)
			}
			h, known, _ := eng.front.History(u.String())
			seen, _ := eng.front.Seen(u.String())
			if st := eng.Stats(); known || seen || st.Scheduled != tc.scheduled {
				t.Errorf("target %s: history %v (%+v), seen %v, %d scheduled (want %d); server %v, errors %v",
					target, known, h, seen, st.Scheduled, tc.scheduled, hits(), st.ByReason)
			}
		})
	}
}

// A redirect target another crawler owns is handed to it, as a link to it
// would be (its owner monitors it), and is not scheduled here.
func TestRedirectTargetOfOtherCrawlerHandedOff(t *testing.T) {
	other, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>elsewhere</title>`)
	})
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		http.Redirect(w, r, other.URL+"/b", http.StatusMovedPermanently)
	})
	su, _ := url.Parse(srv.URL)
	rt := &splitRouter{own: map[string]bool{su.Host: true}}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/a"}, Router: rt, Fetch: revisitFetch(),
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: time.Hour}})
	_, known, _ := eng.front.History(other.URL + "/b")
	rt.mu.Lock()
	defer rt.mu.Unlock()
	if st := eng.Stats(); known || st.Scheduled != 1 || len(rt.handed) != 1 || rt.handed[0] != other.URL+"/b" {
		t.Errorf("foreign target: history here %v, %d scheduled (want /a only), handed off %v", known, st.Scheduled, rt.handed)
	}
}

// State from before redirect targets were scheduled holds, for a target,
// a one-fetch history without content or schedule. The source's next
// visit — here unchanged content, no record — puts the target on the
// schedule, so it is monitored from then on.
func TestOldRedirectMarkScheduledOnSourceRevisit(t *testing.T) {
	body := `<title>b</title><p>the page behind the redirect</p>`
	var bConditional atomic.Int32
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/a":
			http.Redirect(w, r, "/b", http.StatusMovedPermanently)
		case "/b":
			w.Header().Set("ETag", `"b1"`)
			if r.Header.Get("If-None-Match") == `"b1"` {
				bConditional.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, body)
		}
	})
	a, b := srv.URL+"/a", srv.URL+"/b"
	host := urlnorm.HostKey(mustParse(a))
	then := time.Now().Add(-time.Hour)
	db := openDB(t)
	fr, err := frontier.New(db, frontier.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// what the previous version left: /a fetched and scheduled (due now),
	// /b marked with one fetch
	if n, err := fr.ImportHistory([]frontier.History{
		{URL: a, Host: host, FirstFetch: then, LastFetch: then, LastChange: then, Status: 200, Fetches: 1, Changes: 1,
			ContentHash: extract.ContentHash([]byte(body)), Interval: time.Hour, NextVisit: then.Add(time.Minute)},
		{URL: b, Host: host, FirstFetch: then, LastFetch: then, Status: 200, Fetches: 1},
	}); err != nil || n != 2 {
		t.Fatalf("import: %d, %v", n, err)
	}
	fr.Close()
	eng, stop := monitoredRun(t, db)
	waitFor(t, 10*time.Second, "a conditional revisit of /b", func() bool { return bConditional.Load() >= 1 })
	st := eng.Stats()
	stop()
	if st.Unchanged < 1 || st.Records != 0 {
		t.Errorf("unchanged %d, records %d; want /a's revisit unchanged, nothing shipped", st.Unchanged, st.Records)
	}
}

// monitoredRun runs one crawler on db, monitoring with revisits due within
// 100 ms, its records to a throw-away directory.
func monitoredRun(t *testing.T, db *badger.DB) (*Engine, func()) {
	t.Helper()
	return revisitRun(t, Config{DB: db, Fetch: revisitFetch(), Concurrency: 1, Receiver: pack.FileSink{Dir: t.TempDir()},
		Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 50 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond}})
}

// openDB opens a state store closed when the test ends, after the engines
// on it (registered later, cleaned up first).
func openDB(t *testing.T) *badger.DB {
	t.Helper()
	db, err := frontier.OpenDB(t.TempDir(), frontier.DBOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	return db
}

// A page this crawler handed off keeps its history off the schedule
// (Frontier.Withdraw); when its URL comes back (ownership flipped back) it
// is not fetched again as new, and monitoring puts it back on the schedule:
// its next visit is a conditional GET.
func TestHandedOffPageBackOnTheSchedule(t *testing.T) {
	body := `<title>b</title><p>a page handed off and back</p>`
	var conditional, unconditional atomic.Int32
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/b":
			w.Header().Set("ETag", `"b1"`)
			if r.Header.Get("If-None-Match") == `"b1"` {
				conditional.Add(1)
				w.WriteHeader(http.StatusNotModified)
				return
			}
			unconditional.Add(1)
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, body)
		}
	})
	b := srv.URL + "/b"
	host := urlnorm.HostKey(mustParse(b))
	then := time.Now().Add(-time.Hour)
	db := openDB(t)
	fr, err := frontier.New(db, frontier.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	// a monitored crawl (else the engine's start schedules every page off
	// the schedule), the page queued here, its history recovered from the
	// crawler before, then handed off to the subnet's next owner
	if err := fr.SetMonitoring(true); err != nil {
		t.Fatal(err)
	}
	if n, err := fr.Add([]frontier.Item{{URL: b, Host: host}}); err != nil || n != 1 {
		t.Fatalf("add: %d, %v", n, err)
	}
	h, ok, err := fr.AcquireHost()
	if err != nil || !ok {
		t.Fatalf("acquire: %v %v", ok, err)
	}
	it, ok, err := fr.Next(h)
	if err != nil || !ok {
		t.Fatalf("next: %v %v", ok, err)
	}
	if _, err := fr.ImportHistory([]frontier.History{{URL: b, Host: host, FirstFetch: then, LastFetch: then, LastChange: then,
		Status: 200, ETag: `"b1"`, Fetches: 1, Changes: 1, ContentHash: extract.ContentHash([]byte(body))}}); err != nil {
		t.Fatal(err)
	}
	if err := fr.Withdraw([]frontier.Item{it}, func([]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	if err := fr.ReleaseHost(h); err != nil {
		t.Fatal(err)
	}
	// it comes back
	if n, err := fr.Add([]frontier.Item{{URL: b, Host: host}}); err != nil || n != 1 {
		t.Fatalf("the URL handed back: %d admitted, %v", n, err)
	}
	fr.Close()
	eng, stop := monitoredRun(t, db)
	waitFor(t, 10*time.Second, "a conditional revisit of /b", func() bool { return conditional.Load() >= 1 })
	st := eng.Stats()
	stop()
	if n := unconditional.Load(); n != 0 {
		t.Errorf("/b fetched %d times as new, want 0: its history came back with it", n)
	}
	if st.AlreadyFetched != 1 {
		t.Errorf("already fetched %d, want 1 (the URL handed back)", st.AlreadyFetched)
	}
}
