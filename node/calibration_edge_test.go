package node

import (
	"context"
	"fmt"
	"net/netip"
	"net/url"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// loopbackTree is a small hierarchy: 127.0.0.0/8 with /16 and /24 subnets.
func loopbackTree(t *testing.T) *hierarchy.Tree {
	t.Helper()
	b := hierarchy.NewBuilder()
	add := func(start, end, org string) {
		if err := b.Add(hierarchy.Range{Start: netip.MustParseAddr(start), End: netip.MustParseAddr(end), Org: org,
			Registry: hierarchy.Registry(1), Country: "NL"}); err != nil {
			t.Fatal(err)
		}
	}
	add("127.0.0.0", "127.255.255.255", "LOOPBACK")
	for i := range 2 {
		add(fmt.Sprintf("127.%d.0.0", i), fmt.Sprintf("127.%d.255.255", i), "ORG")
		for j := range 2 {
			add(fmt.Sprintf("127.%d.%d.0", i, j), fmt.Sprintf("127.%d.%d.255", i, j), "ORG")
		}
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// TestCalibrationIgnoresBodyTime: revisits are conditional GETs;
// a 304 carries no body, a 200 carries the page. The router's "request
// time" (Total minus DNS/connect/TLS) includes the body transfer (and the
// fetcher's decoding), so a page whose history is 304s looks "slow" the
// first two times it changes, although time to first byte — the path and
// the server — did not move. That re-delegates the subnet.
func TestCalibrationIgnoresBodyTime(t *testing.T) {
	ctx := context.Background()
	r, own := newTimingRouter(t, nil, mapResolver{"news.test": netip.MustParseAddr("127.0.0.8")})
	ms := time.Millisecond
	page, _ := url.Parse("http://news.test/front")
	// first visit, 200 with its body
	r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 30 * ms, Total: 130 * ms}, 130*ms)
	// unchanged revisits: 304, no body
	for range 4 {
		r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 30 * ms, Total: 31 * ms}, 31*ms)
	}
	// the page changes twice: 200s, same time to first byte, 100 ms of body
	for range 2 {
		r.Fetched(ctx, page, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 31 * ms, Total: 131 * ms}, 131*ms)
	}
	if len(own.slow) != 0 {
		t.Fatalf("page changed (200 after 304s, time to first byte unchanged 30→31 ms) reported slow: %+v", own.slow)
	}
}

// TestSlowPagesOfOneSubnetReportedOnce: a host that gets slow (server-side, or a path
// change) makes every one of its pages cross the threshold. Each page's
// event calls ReportSlowPage: one full re-delegation (probes, epoch+1,
// SLOW_PAGE + DELEGATED on gossip) per page of the same subnet, at once.
// One re-delegation per subnet per cool-down is what the event means.
func TestSlowPagesOfOneSubnetReportedOnce(t *testing.T) {
	ctx := context.Background()
	tree := loopbackTree(t)
	r, err := newRouter(tree, nil, mapResolver{"slow.test": netip.MustParseAddr("127.0.0.9")}, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	own := &timingOwner{}
	r.peer = own
	ms := time.Millisecond
	const pages = 20
	us := make([]*url.URL, pages)
	for i := range us {
		us[i], _ = url.Parse(fmt.Sprintf("http://slow.test/p%d", i))
	}
	for range 3 {
		for _, u := range us {
			r.Fetched(ctx, u, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 39 * ms, Total: 40 * ms}, 40*ms)
		}
	}
	for range 2 {
		for _, u := range us {
			r.Fetched(ctx, u, crawl.Route{}, fetch.Timing{Reused: true, FirstByte: 199 * ms, Total: 200 * ms}, 200*ms)
		}
	}
	if len(own.slow) > 1 {
		t.Fatalf("one subnet (%d) slowed: %d re-delegations requested in a row (one per page)",
			tree.SmallestNonUnary(netip.MustParseAddr("127.0.0.9")), len(own.slow))
	}
}
