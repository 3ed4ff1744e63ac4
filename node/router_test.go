package node

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// timingOwner is an owner that owns everything and records what the
// router's fetch observer gives it.
type timingOwner struct {
	tree    delegation.Tree // places addresses in Decisions (nil: none)
	mu      sync.Mutex
	reviews []timedCall
	slow    []timedCall
	foreign map[netip.Addr]bool // owned by "other"
}

type timedCall struct {
	ip             netip.Addr
	url            string
	took, baseline time.Duration
}

func (o *timingOwner) Delegate(_ context.Context, ip netip.Addr) (delegation.Decision, error) {
	if o.foreign[ip] {
		return delegation.Decision{IP: ip, Subnet: o.subnet(ip), Owner: "other", Cached: true, Reason: delegation.ReasonCached}, nil
	}
	return delegation.Decision{IP: ip, Subnet: o.subnet(ip), Owner: o.CrawlerID(), Cached: true, Reason: delegation.ReasonCached}, nil
}

// subnet is what a Decision for ip names as its subnet.
func (o *timingOwner) subnet(ip netip.Addr) hierarchy.NodeID {
	if o.tree == nil {
		return hierarchy.None
	}
	return o.tree.SmallestNonUnary(ip)
}

func (o *timingOwner) CachedOwner(ip netip.Addr) (delegation.CrawlerID, bool) {
	if o.foreign[ip] {
		return "other", true
	}
	return o.CrawlerID(), true
}
func (o *timingOwner) Arriving(netip.Addr) bool { return false }

func (o *timingOwner) CachedRoute(ip netip.Addr) (delegation.CrawlerID, delegation.Record, bool) {
	owner, ok := o.CachedOwner(ip)
	return owner, delegation.Record{Subnet: o.subnet(ip), Owner: owner}, ok
}
func (o *timingOwner) CachedRecord(hierarchy.NodeID) (delegation.Record, bool) {
	return delegation.Record{}, false
}
func (o *timingOwner) HandoffAll(context.Context, []overlay.HandoffItem) error {
	return nil
}
func (o *timingOwner) CrawlerID() delegation.CrawlerID { return "self" }
func (o *timingOwner) Review(_ context.Context, ip netip.Addr, took time.Duration) (delegation.Decision, bool, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.reviews = append(o.reviews, timedCall{ip: ip, took: took})
	return delegation.Decision{IP: ip, Owner: "self", Cached: true, Reason: delegation.ReasonKept}, true, nil
}
func (o *timingOwner) ReportSlowPage(_ context.Context, ip netip.Addr, u string, observed, expected time.Duration) (delegation.Decision, error) {
	o.mu.Lock()
	defer o.mu.Unlock()
	o.slow = append(o.slow, timedCall{ip: ip, url: u, took: observed, baseline: expected})
	return delegation.Decision{IP: ip, Owner: "self"}, nil
}

// TestRouterFeedsOwnTimings: the router (a crawl.FetchObserver) gives the
// first fetch from each host that opened a connection to a review, with its
// connect time (a round trip, as a probe measures; a reused connection's
// time to first byte adds the server's time), at the mapped address; later
// fetches from the host are not reviewed again; hosts that resolve nowhere
// are ignored; a page whose time doubles (and grows by more than the
// calibration floor) twice in a row is reported slow once.
func TestRouterFeedsOwnTimings(t *testing.T) {
	ctx := context.Background()
	mapped := func(a netip.Addr) netip.Addr { // 127.0.0.x → 198.51.100.x
		b := a.As4()
		return netip.AddrFrom4([4]byte{198, 51, 100, b[3]})
	}
	// a.test and b.test are routed (Owns); c.test resolves nowhere
	r, own := newTimingRouter(t, mapped, mapResolver{"a.test": netip.MustParseAddr("127.0.0.1"), "b.test": netip.MustParseAddr("127.0.0.2")})
	mustURL := func(s string) *url.URL {
		u, err := url.Parse(s)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, h := range []struct {
		host string
		ip   string
	}{{"a.test", "127.0.0.1"}, {"b.test", "127.0.0.2"}} {
		if rt, err := r.Route(ctx, mustURL("http://"+h.host+"/"), netip.MustParseAddr(h.ip)); err != nil || !rt.Mine {
			t.Fatalf("Route %s: %v %v", h.host, rt, err)
		}
	}
	ms := time.Millisecond
	// a.test: a new connection, then reused ones
	r.Fetched(ctx, mustURL("http://a.test/1"), crawl.Route{}, fetch.Timing{Connect: 5 * ms, FirstByte: 9 * ms, Total: 12 * ms}, 12*ms)
	r.Fetched(ctx, mustURL("http://a.test/2"), crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 7 * ms, Total: 9 * ms}, 9*ms)
	// b.test: the connection robots.txt opened is reused, and the page
	// takes the server 200 ms to start: no round trip to review with (a
	// probe is a TCP connect; b.test is 3 ms away, not 203)
	r.Fetched(ctx, mustURL("http://b.test/1"), crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 203 * ms, Total: 205 * ms}, 205*ms)
	r.Fetched(ctx, mustURL("http://b.test/2"), crawl.Route{}, fetch.Timing{Connect: 3 * ms, FirstByte: 4 * ms, Total: 5 * ms}, 5*ms)
	r.Fetched(ctx, mustURL("http://b.test/3"), crawl.Route{}, fetch.Timing{Connect: 4 * ms, FirstByte: 5 * ms, Total: 6 * ms}, 6*ms)
	// never routed and not resolvable: its address is unknown here
	r.Fetched(ctx, mustURL("http://c.test/1"), crawl.Route{}, fetch.Timing{Connect: 3 * ms, FirstByte: 4 * ms, Total: 5 * ms}, 5*ms)

	want := []timedCall{{ip: netip.MustParseAddr("198.51.100.1"), took: 5 * ms}, {ip: netip.MustParseAddr("198.51.100.2"), took: 3 * ms}}
	if len(own.reviews) != len(want) {
		t.Fatalf("reviews %+v, want %+v", own.reviews, want)
	}
	for i := range want {
		if own.reviews[i] != want[i] {
			t.Fatalf("review %d: %+v, want %+v", i, own.reviews[i], want[i])
		}
	}
	if got := counterOf(t, r.reviews.WithLabelValues("kept")); got != 2 {
		t.Fatalf("kept reviews counted %v, want 2", got)
	}

	// calibration: a page steady at 30 ms to its first byte, then 190 ms
	// twice in a row
	page := mustURL("http://a.test/monitored")
	for range 5 {
		r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 30 * ms, Total: 40 * ms}, 40*ms)
	}
	r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 190 * ms, Total: 200 * ms}, 200*ms)
	if len(own.slow) != 0 {
		t.Fatalf("one slow time reported: %+v", own.slow)
	}
	r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 190 * ms, Total: 200 * ms}, 200*ms)
	if len(own.slow) != 1 || own.slow[0] != (timedCall{ip: netip.MustParseAddr("198.51.100.1"), url: page.String(), took: 190 * ms, baseline: 30 * ms}) {
		t.Fatalf("slow pages %+v, want one for %s at 190 ms over 30 ms", own.slow, page)
	}
	// loopback-scale jitter (0.3 → 0.9 ms) is no path change
	jit := mustURL("http://b.test/jitter")
	for range 5 {
		r.Fetched(ctx, jit, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 200 * time.Microsecond, Total: 300 * time.Microsecond}, 300*time.Microsecond)
	}
	for range 3 {
		r.Fetched(ctx, jit, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 800 * time.Microsecond, Total: 900 * time.Microsecond}, 900*time.Microsecond)
	}
	if len(own.slow) != 1 || counterOf(t, r.slowPages) != 1 {
		t.Fatalf("sub-millisecond jitter reported slow: %+v", own.slow)
	}
	if len(own.reviews) != 2 {
		t.Fatalf("later fetches reviewed again: %+v", own.reviews)
	}
}

func counterOf(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

// newTimingRouter is a router over a timingOwner, resolving only res.
func newTimingRouter(t *testing.T, mapAddr AddrMapper, res mapResolver) (*Router, *timingOwner) {
	t.Helper()
	r, err := newRouter(nil, mapAddr, res, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	own := &timingOwner{}
	r.peer = own
	return r, own
}

// mapResolver resolves the hosts it lists, and no other (no DNS traffic).
type mapResolver map[string]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, fmt.Errorf("mapResolver: no address for %s", host)
}

// TestRouterReviewsHandedOffHosts: URLs handed to this crawler by other
// peers reach its engine through Accept, not Owns, so the router has not
// seen their hosts when it fetches them — yet they are this crawler's
// subnets (most of them, in a network of many peers), and their first fetch
// must be reviewed and their pages calibrated like any other: the router
// resolves the host as the engine did.
func TestRouterReviewsHandedOffHosts(t *testing.T) {
	ctx := context.Background()
	mapped := func(a netip.Addr) netip.Addr { // 127.0.0.x → 198.51.100.x
		b := a.As4()
		return netip.AddrFrom4([4]byte{198, 51, 100, b[3]})
	}
	r, own := newTimingRouter(t, mapped, mapResolver{"handed.test": netip.MustParseAddr("127.0.0.3")})
	ms := time.Millisecond
	page, _ := url.Parse("http://handed.test/p")
	r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Connect: 4 * ms, FirstByte: 30 * ms, Total: 40 * ms}, 40*ms)
	want := timedCall{ip: netip.MustParseAddr("198.51.100.3"), took: 4 * ms}
	if len(own.reviews) != 1 || own.reviews[0] != want {
		t.Fatalf("handed-off host: reviews %+v, want %+v", own.reviews, want)
	}
	for range 4 {
		r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 30 * ms, Total: 40 * ms}, 40*ms)
	}
	for range 2 {
		r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 190 * ms, Total: 200 * ms}, 200*ms)
	}
	if len(own.slow) != 1 || own.slow[0].ip != want.ip {
		t.Fatalf("handed-off host's page slow twice in a row: reported %+v", own.slow)
	}
	if len(own.reviews) != 1 {
		t.Fatalf("later fetches reviewed again: %+v", own.reviews)
	}
}

// decidingOwner is a timingOwner whose Delegate decides the subnet of the
// hosts in fresh now (a new record for itself), as the first host of a
// subnet does.
type decidingOwner struct {
	*timingOwner
	fresh map[netip.Addr]bool
}

func (o decidingOwner) Delegate(ctx context.Context, ip netip.Addr) (delegation.Decision, error) {
	if !o.fresh[ip] {
		return o.timingOwner.Delegate(ctx, ip)
	}
	rec := delegation.Record{Subnet: 7, Owner: o.CrawlerID(), OwnerRTT: 5 * time.Millisecond, Epoch: 1, DecidedBy: o.CrawlerID()}
	return delegation.Decision{IP: ip, Subnet: 7, Owner: o.CrawlerID(), OwnerRTT: rec.OwnerRTT, Record: rec, Reason: delegation.ReasonConfident}, nil
}

// TestRouterSkipsReviewOfDecidingHost: the host whose Owns decided its
// subnet for this crawler is the one the decision counts already (its tally
// starts with that host for the owner); reviewing its first fetch would count
// it twice and probe again for what was just probed. Only further hosts of
// the subnet are reviewed, as in the simulator.
func TestRouterSkipsReviewOfDecidingHost(t *testing.T) {
	ctx := context.Background()
	r, own := newTimingRouter(t, nil, mapResolver{})
	r.peer = decidingOwner{timingOwner: own, fresh: map[netip.Addr]bool{netip.MustParseAddr("127.0.0.1"): true}}
	var routes []crawl.Route
	for _, h := range []struct{ host, ip string }{{"first.test", "127.0.0.1"}, {"further.test", "127.0.0.2"}} {
		u, _ := url.Parse("http://" + h.host + "/")
		rt, err := r.Route(ctx, u, netip.MustParseAddr(h.ip))
		if err != nil || !rt.Mine {
			t.Fatalf("Route %s: %v %v", h.host, rt, err)
		}
		routes = append(routes, rt)
	}
	ms := time.Millisecond
	for i, h := range []string{"first.test", "further.test"} {
		u, _ := url.Parse("http://" + h + "/")
		// the fetch follows its route (no host resolves here)
		r.Fetched(ctx, u, routes[i], fetch.Timing{Connect: 5 * ms, FirstByte: 9 * ms, Total: 12 * ms, Remote: routes[i].Addr}, 12*ms)
	}
	want := []timedCall{{ip: netip.MustParseAddr("127.0.0.2"), took: 5 * ms}}
	if len(own.reviews) != 1 || own.reviews[0] != want[0] {
		t.Fatalf("reviews %+v, want only the further host's %+v", own.reviews, want)
	}
}

// TestRouterCalibratesRequestTimes: a page first fetched over a kept-alive
// connection and revisited later over new ones (the idle connection is long
// gone by then) pays DNS, connect and TLS on every revisit — three round
// trips where the first fetch paid one. That is no slower path: calibration
// judges the request's own time, not the connection's set-up, and reports
// nothing. A request that really became slow is still reported.
func TestRouterCalibratesRequestTimes(t *testing.T) {
	ctx := context.Background()
	r, own := newTimingRouter(t, nil, mapResolver{"tls.test": netip.MustParseAddr("127.0.0.4")})
	ms := time.Millisecond
	page, _ := url.Parse("https://tls.test/monitored")
	// first pass: the connection robots.txt opened is reused
	r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 25 * ms, Total: 30 * ms}, 30*ms)
	// revisits, hours apart: DNS, a new connection and a TLS handshake each
	for range 3 {
		tm := fetch.Timing{DNS: 3 * ms, Connect: 20 * ms, TLS: 40 * ms, FirstByte: 88 * ms, Total: 93 * ms}
		r.Fetched(ctx, page, crawl.Route{}, tm, tm.Total)
	}
	if len(own.slow) != 0 {
		t.Fatalf("revisits over new connections reported slow: %+v", own.slow)
	}
	// the request itself slows down (a new path): 25 → 145 ms to the
	// first byte
	for range 2 {
		tm := fetch.Timing{DNS: 3 * ms, Connect: 20 * ms, TLS: 40 * ms, FirstByte: 208 * ms, Total: 213 * ms}
		r.Fetched(ctx, page, crawl.Route{}, tm, tm.Total)
	}
	if len(own.slow) != 1 || own.slow[0].took != 145*ms || own.slow[0].baseline != 25*ms {
		t.Fatalf("a request slowed from 25 to 145 ms twice: reported %+v", own.slow)
	}
}

// TestRouterCalibratesOwnHostsOnly: a page on a host owned by another
// crawler (a redirect target fetched here) that slows down says nothing
// about that owner's path: no calibration event.
func TestRouterCalibratesOwnHostsOnly(t *testing.T) {
	ctx := context.Background()
	mine, theirs := netip.MustParseAddr("127.0.0.5"), netip.MustParseAddr("127.0.0.6")
	r, own := newTimingRouter(t, nil, mapResolver{"mine.test": mine, "theirs.test": theirs})
	own.foreign = map[netip.Addr]bool{theirs: true}
	ms := time.Millisecond
	for _, host := range []string{"theirs.test", "mine.test"} {
		page, _ := url.Parse("http://" + host + "/p")
		for _, d := range []time.Duration{30 * ms, 30 * ms, 30 * ms, 150 * ms, 150 * ms} {
			r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: d - ms, Total: d}, d)
		}
	}
	if len(own.slow) != 1 || own.slow[0].ip != mine || counterOf(t, r.slowPages) != 1 {
		t.Fatalf("slow pages reported %+v: want only mine.test's", own.slow)
	}
}

// TestRouterReviewsAnAddressOnce: the sites of a shared-hosting address share
// its round trip, so only the first fetch from the address is reviewed.
func TestRouterReviewsAnAddressOnce(t *testing.T) {
	ctx := context.Background()
	shared := netip.MustParseAddr("127.0.0.9")
	r, own := newTimingRouter(t, nil, mapResolver{"one.test": shared, "two.test": shared, "three.test": netip.MustParseAddr("127.0.0.10")})
	for _, h := range []string{"one.test", "two.test", "three.test"} {
		u, _ := url.Parse("http://" + h + "/")
		r.Fetched(ctx, u, crawl.Route{}, fetch.Timing{Connect: 4 * time.Millisecond, FirstByte: 9 * time.Millisecond, Total: 12 * time.Millisecond}, 12*time.Millisecond)
	}
	if len(own.reviews) != 2 || own.reviews[0].ip != shared || own.reviews[1].ip != netip.MustParseAddr("127.0.0.10") {
		t.Fatalf("reviews %+v: want one for the shared address, one for three.test", own.reviews)
	}
}

// TestRouterRecheck: the engine's question before it fetches a queued
// URL (crawl.Rechecker) follows the record of the moment, at the mapped
// address, and leaves the routing counters alone.
func TestRouterRecheck(t *testing.T) {
	ctx := context.Background()
	mapped := func(a netip.Addr) netip.Addr { // 127.0.0.x → 198.51.100.x
		b := a.As4()
		return netip.AddrFrom4([4]byte{198, 51, 100, b[3]})
	}
	r, own := newTimingRouter(t, mapped, mapResolver{})
	own.foreign = map[netip.Addr]bool{netip.MustParseAddr("198.51.100.9"): true} // moved to "other"
	u, _ := url.Parse("http://queued.test/p")
	for _, tc := range []struct {
		ip   string
		want bool
	}{{"127.0.0.3", true}, {"127.0.0.9", false}} {
		rt, err := r.Recheck(ctx, u, netip.MustParseAddr(tc.ip))
		if err != nil || rt.Mine != tc.want || rt.Addr != netip.MustParseAddr(tc.ip) {
			t.Fatalf("Recheck at %s: %+v %v, want mine %v at the address given", tc.ip, rt, err, tc.want)
		}
	}
	if _, err := r.Recheck(ctx, u, netip.Addr{}); err == nil {
		t.Fatal("Recheck without an address: no error")
	}
	if o, f := counterOf(t, r.owned), counterOf(t, r.foreign); o != 0 || f != 0 {
		t.Fatalf("Recheck counted as routing: owned %v, foreign %v", o, f)
	}
}
