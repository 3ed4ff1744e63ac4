package crawl

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// cancellingResolver resolves every name to loopback, except that the
// first lookup of trigger stops the crawl (as a SIGTERM arriving while a
// worker routes the links of a page it has just fetched) and, like
// net.DefaultResolver, a lookup under a cancelled context fails.
type cancellingResolver struct {
	trigger string
	cancel  context.CancelFunc
	fired   atomic.Bool
}

func (r *cancellingResolver) LookupNetIP(ctx context.Context, _, host string) ([]netip.Addr, error) {
	if host == r.trigger && r.fired.CompareAndSwap(false, true) {
		r.cancel()
	}
	if err := ctx.Err(); err != nil {
		return nil, &net.DNSError{Err: err.Error(), Name: host}
	}
	return []netip.Addr{netip.MustParseAddr("127.0.0.1")}, nil
}

// ownAllRouter owns every URL with an address (a node's router owning
// every subnet involved).
type ownAllRouter struct{}

func (ownAllRouter) Route(_ context.Context, _ *url.URL, ip netip.Addr) (Route, error) {
	if !ip.IsValid() {
		return Route{}, errors.New("no address")
	}
	return Route{Addr: ip, Mine: true}, nil
}
func (ownAllRouter) Handoff(context.Context, []Routed) error { return nil }
func (ownAllRouter) NeedsIP() bool                           { return true }

// A page fetched while the crawl is being stopped must keep its links: the
// record is stored (emit ignores cancellation) and the hand-off is finished
// (WithoutCancel), but the ownership check (resolution, Owns) runs on the
// cancelled context, fails, the links are dropped as "bad links" and the
// page is marked Done — its links are lost for good.
func TestLinksOfPageFetchedAtShutdownKept(t *testing.T) {
	srv, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		port := srv0port(r)
		fmt.Fprintf(w, `<title>seed</title><a href="http://other.test:%s/a">a</a> <a href="http://other.test:%s/b">b</a>`, port, port)
	})
	port := fmt.Sprint(srv.Listener.Addr().(*net.TCPAddr).Port)
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	res := &cancellingResolver{trigger: "other.test", cancel: cancel}
	seed := "http://seed.test:" + port + "/"
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{seed}, Router: ownAllRouter{},
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Resolver: res, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if !res.fired.Load() {
		t.Fatal("the links were never routed: the test did not exercise the shutdown")
	}
	_, done, _ := eng.Frontier().History(seed)
	for _, l := range []string{"http://other.test:" + port + "/a", "http://other.test:" + port + "/b"} {
		seen, _ := eng.Frontier().Seen(l)
		if done && !seen {
			t.Errorf("page %s marked done, but its link %s was neither queued nor handed off: lost (queued %d, bad links %d)",
				seed, l, eng.Stats().Queued, eng.Stats().BadLinks)
		}
	}
}

func srv0port(r *http.Request) string {
	_, p, _ := net.SplitHostPort(r.Host)
	return p
}

// failingHandoffRouter owns the seed's host and cannot hand anything off
// (overlay unreachable, or a permanent refusal such as an address outside
// the hierarchy).
type failingHandoffRouter struct{ own string }

func (r failingHandoffRouter) Route(_ context.Context, u *url.URL, _ netip.Addr) (Route, error) {
	return Route{Mine: u.Hostname() == r.own}, nil
}
func (failingHandoffRouter) Handoff(context.Context, []Routed) error {
	return errors.New("overlay unreachable")
}
func (failingHandoffRouter) NeedsIP() bool { return false }

// A page whose foreign links cannot be handed off stays queued ("visited
// again"), but with no rest at all: the host is released, acquired again at
// once and the page fetched back-to-back, a duplicate "new" record stored
// every time, and a one-pass crawl never ends. Transient failures of a
// fetch rest RetryDelay (doubling) and are bounded by MaxRetries; a failed
// hand-off has neither.
func TestFailedHandoffNotRefetchedInHotLoop(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>page</title><a href="http://foreign.test/x">x</a>`)
	})
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Router: failingHandoffRouter{own: "127.0.0.1"},
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	st := eng.Stats()
	if n := hits()["/"]; n > 3 {
		t.Errorf("page fetched %d times in 2 s (records %d, handoff errors %d): a failed hand-off re-fetches its page with no rest and no bound",
			n, st.Records, st.Events["handoff"])
	}
}

// slowRouteRouter owns the seed's host; routing slow.test waits for its
// context to end and then answers a route to no owner, as the node's
// router does when no owner can be decided in time (the URL is spooled).
// Handoff fails on an ended context, as a durable spool write does.
type slowRouteRouter struct {
	own    string
	handed atomic.Int64
}

func (r *slowRouteRouter) Route(ctx context.Context, u *url.URL, _ netip.Addr) (Route, error) {
	if u.Hostname() == "slow.test" {
		<-ctx.Done()
		return Route{Subnet: 7}, nil
	}
	return Route{Mine: u.Hostname() == r.own, Owner: "other"}, nil
}
func (r *slowRouteRouter) Handoff(ctx context.Context, rs []Routed) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	r.handed.Add(int64(len(rs)))
	return nil
}
func (*slowRouteRouter) NeedsIP() bool { return false }

// Routing a page's links may take the whole of its bound (the overlay
// deciding a subnet under load): the hand-off that follows gets a bound of
// its own. Before, it ran on what routing left, nothing, and failed: the
// page stayed queued with no history and was fetched again, here or by its
// host's next owner after a move (a duplicate seen on the testnet).
func TestSlowLinkRoutingDoesNotRefetchThePage(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, n int) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>page</title><a href="http://slow.test/x">x</a> <a href="http://fast.test/y">y</a>`)
	})
	router := &slowRouteRouter{own: "127.0.0.1"}
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Router: router, RetryDelay: 50 * time.Millisecond,
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.finishBound = 200 * time.Millisecond
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := eng.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if n := hits()["/"]; n != 1 || router.handed.Load() != 2 {
		t.Fatalf("page fetched %d times, %d links handed off (handoff errors %d): want once, both links handed off",
			n, router.handed.Load(), eng.Stats().Events["handoff"])
	}
}
