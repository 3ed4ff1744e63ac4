package crawl

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"net/netip"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// reviewRun starts eng.Run in the background; stop cancels it and waits.
func revisitRun(t *testing.T, cfg Config) (*Engine, func()) {
	t.Helper()
	eng, err := New(cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { eng.Run(ctx) })
	var once sync.Once
	stop := func() {
		once.Do(func() {
			cancel()
			wg.Wait()
			eng.Close()
		})
	}
	t.Cleanup(stop)
	return eng, stop
}

func revisitFetch() fetch.Config {
	return fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet}
}

// One host parked for a long back-off (503 Retry-After on its revisit)
// must not stop the monitoring of every other host: monitorLoop skips
// DueRevisits while Stats().Queued > 0, and the parked host's queued
// revisit keeps Queued above zero.
func TestRevisitsNotStalledByParkedHost(t *testing.T) {
	slow, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if n > 1 {
			w.Header().Set("Retry-After", "3600")
			http.Error(w, "busy", http.StatusServiceUnavailable)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>slow</title>`)
	})
	fast, fastHits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>fast</title>`)
	})
	eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{slow.URL + "/", fast.URL + "/"},
		Fetch: revisitFetch(), Concurrency: 2, Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 50 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond}})
	waitFor(t, 10*time.Second, "the slow host's 503", func() bool { return eng.Stats().Events["retry_later"] >= 1 })
	before := fastHits()["/"]
	time.Sleep(2 * time.Second) // ≥ 20 revisit intervals of the fast host
	after := fastHits()["/"]
	stop()
	if after-before < 5 {
		t.Fatalf("fast host revisited %d times in 2 s (interval ≤ 100 ms) while another host was parked; queued %d",
			after-before, eng.Stats().Queued)
	}
}

// A host that used up its robots retries long ago keeps its count until a
// page of it is fetched: a later single robots.txt failure gives a new URL
// up at once, with no retry.
func TestRobotsRetryCountResetsAfterOutage(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			if n <= 5 { // 1–4: outage (seed /a given up); 5: one blip much later
				http.Error(w, "down", http.StatusInternalServerError)
				return
			}
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, `<title>%s</title>`, r.URL.Path)
	})
	fc := revisitFetch()
	fc.RobotsErrorTTL = 50 * time.Millisecond
	eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/a"}, Fetch: fc, Concurrency: 1,
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t)})
	waitFor(t, 10*time.Second, "/a given up", func() bool { return eng.Stats().ByReason["robots"] == 1 })
	time.Sleep(500 * time.Millisecond) // 10 × RobotsErrorTTL: the outage is long over
	if _, bad := eng.AddSeeds(context.Background(), []string{srv.URL + "/b"}); len(bad) > 0 {
		t.Fatal(bad)
	}
	deadline := time.Now().Add(3 * time.Second)
	for hits()["/b"] == 0 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	stop()
	if h := hits(); h["/b"] != 1 {
		t.Fatalf("/b fetched %d times after one robots.txt failure (server %v, errors %v); want it retried once robots.txt answered",
			h["/b"], h, eng.Stats().ByReason)
	}
}

// docs/crawl.md: for a robots.txt unreachable, "a page already known is
// simply revisited on its schedule". The engine parks the host (here for
// RobotsErrorTTL = 1 h) with the known page queued instead.
func TestKnownPageNotParkedForRobots(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			if n == 1 {
				http.NotFound(w, r)
				return
			}
			http.Error(w, "down", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>known</title>`)
	})
	fc := revisitFetch()
	fc.RobotsTTL, fc.RobotsErrorTTL = 20*time.Millisecond, time.Hour
	eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: fc, Concurrency: 1,
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t),
		Monitor: Monitor{Enabled: true, Sleep: 50 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 100 * time.Millisecond}})
	waitFor(t, 10*time.Second, "a revisit refused for robots.txt", func() bool {
		st := eng.Stats()
		return st.ByReason["robots_unreachable"]+st.ByReason["robots"] >= 1
	})
	time.Sleep(time.Second)
	st := eng.Stats()
	h, _, _ := eng.front.History(srv.URL + "/")
	stop()
	if st.Queued != 0 || st.Scheduled != 1 {
		t.Fatalf("known page refused for an unreachable robots.txt: queued %d, scheduled %d, next visit %v (errors %v); want it back on its schedule",
			st.Queued, st.Scheduled, h.NextVisit, st.ByReason)
	}
}

// flakyHandoffRouter owns 127.0.0.1 and fails its first `fails` hand-offs.
type flakyHandoffRouter struct {
	fails int32
	n     atomic.Int32
}

func (r *flakyHandoffRouter) Route(_ context.Context, u *url.URL, _ netip.Addr) (Route, error) {
	return Route{Mine: u.Hostname() == "127.0.0.1"}, nil
}
func (r *flakyHandoffRouter) Handoff(context.Context, []Routed) error {
	if r.n.Add(1) <= r.fails {
		return errors.New("overlay unreachable")
	}
	return nil
}
func (*flakyHandoffRouter) NeedsIP() bool { return false }

// Failed hand-offs are counted in the same per-URL counter as transient
// fetch failures (process: e.retries.again(it.URL, MaxInt)) and never
// reset: after two failed hand-offs the page's first 500 gives it up at
// once, with no retry — and with it its links, which were never routed.
func TestHandoffFailuresDoNotUseTransientRetries(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if n == 3 {
			http.Error(w, "hiccup", http.StatusInternalServerError)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>page</title><a href="http://foreign.test/x">x</a>`)
	})
	rt := &flakyHandoffRouter{fails: 2}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Router: rt, Fetch: revisitFetch(),
		RetryDelay: 10 * time.Millisecond, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st := eng.Stats()
	if st.HandedOff != 1 || hits()["/"] != 4 {
		t.Fatalf("page fetched %d times, links handed off %d, errors %v; want the single 500 retried (MaxRetries 2) and the link handed off",
			hits()["/"], st.HandedOff, st.ByReason)
	}
}

// timeoutRouteRouter owns 127.0.0.1; its first `fails` routings of other
// hosts time out inside the router (a DHT lookup on a slow network).
type timeoutRouteRouter struct {
	fails  int32
	n      atomic.Int32
	handed atomic.Int32
}

func (r *timeoutRouteRouter) Route(_ context.Context, u *url.URL, _ netip.Addr) (Route, error) {
	if u.Hostname() == "127.0.0.1" {
		return Route{Mine: true}, nil
	}
	if r.n.Add(1) <= r.fails {
		return Route{}, fmt.Errorf("overlay: dht get /micra/deleg/7: %w", context.DeadlineExceeded)
	}
	return Route{Owner: "other"}, nil
}
func (r *timeoutRouteRouter) Handoff(_ context.Context, rs []Routed) error {
	r.handed.Add(int32(len(rs)))
	return nil
}
func (*timeoutRouteRouter) NeedsIP() bool { return false }

// A link whose routing timed out inside the router is not dropped as a bad
// link: the page is visited again and the link handed to its owner then.
func TestLinkRoutingTimeoutKeepsTheLink(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>page</title><a href="http://foreign.test/x">x</a>`)
	})
	rt := &timeoutRouteRouter{fails: 1}
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Router: rt, Fetch: revisitFetch(),
		RetryDelay: 10 * time.Millisecond, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	st := eng.Stats()
	if rt.handed.Load() != 1 || st.BadLinks != 0 {
		t.Fatalf("link handed off %d times, bad links %d (page fetched %d times): want the timed-out link routed again and handed off",
			rt.handed.Load(), st.BadLinks, hits()["/"])
	}
}
