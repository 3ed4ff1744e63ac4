package crawl

import (
	"context"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// countingResolver counts the resolutions of each host.
type countingResolver struct {
	next fetch.Resolver
	mu   sync.Mutex
	n    map[string]int
}

func (c *countingResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	c.mu.Lock()
	c.n[host]++
	c.mu.Unlock()
	return c.next.LookupNetIP(ctx, network, host)
}

// routeCountingRouter owns every URL, re-checks every queued one, and
// records what each step was given.
type routeCountingRouter struct {
	mu       sync.Mutex
	routed   map[string]int        // Route calls per URL
	rechecks map[string]int        // Recheck calls per URL
	addrs    map[string]netip.Addr // the address each host was routed by
	fetched  map[string]netip.Addr // the address each fetch reached, by host
	mixed    []string
}

func (r *routeCountingRouter) Route(_ context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.routed[u.String()]++
	r.addrs[u.Hostname()] = ip
	return Route{Addr: ip, Mine: true, Owner: "self"}, nil
}
func (r *routeCountingRouter) Recheck(_ context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.rechecks[u.String()]++
	return Route{Addr: ip, Mine: true, Owner: "self"}, nil
}
func (r *routeCountingRouter) Handoff(context.Context, []Routed) error { return nil }
func (r *routeCountingRouter) NeedsIP() bool                           { return true }
func (r *routeCountingRouter) Fetched(_ context.Context, u *url.URL, rt Route, t fetch.Timing, _ time.Duration) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if rt.Addr != t.Remote {
		r.mixed = append(r.mixed, u.String()+": routed by "+rt.Addr.String()+", fetched from "+t.Remote.String())
	}
	r.fetched[u.Hostname()] = t.Remote
}

// TestRouteOnce: the router and the fetcher share one resolution per host
// per TTL (a counting resolver sees each host once), each discovered URL
// is routed once and re-checked at most once before its fetch, and the
// address a URL was routed by is the address its fetch reached.
func TestRouteOnce(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 6, HostsPerIP: 2, PagesPerHost: 12})
	res := &countingResolver{next: web, n: map[string]int{}}
	r := &routeCountingRouter{routed: map[string]int{}, rechecks: map[string]int{}, addrs: map[string]netip.Addr{}, fetched: map[string]netip.Addr{}}
	fc := synthFetchConfig(res)
	fc.DNSTTL = time.Hour
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: web.Seeds(), Fetch: fc, Router: r,
		Concurrency: 4, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if st := eng.Stats(); st.Fetched != int64(web.TotalPages()) {
		t.Fatalf("fetched %d of %d pages", st.Fetched, web.TotalPages())
	}
	for _, h := range web.Hosts() {
		if got := res.n[h]; got != 1 {
			t.Errorf("host %s resolved %d times by router and fetcher together, want 1", h, got)
		}
		if r.addrs[h] != r.fetched[h] || !r.fetched[h].IsValid() {
			t.Errorf("host %s routed by %v, fetched from %v", h, r.addrs[h], r.fetched[h])
		}
	}
	for u, n := range r.routed {
		if n > 1 {
			t.Errorf("%s routed %d times", u, n)
		}
	}
	for u, n := range r.rechecks {
		if n > 1 {
			t.Errorf("%s re-checked %d times before its fetch", u, n)
		}
	}
	if len(r.mixed) > 0 {
		t.Errorf("fetches that reached another address than their route's: %v", r.mixed)
	}
}
