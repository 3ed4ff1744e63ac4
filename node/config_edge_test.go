package node

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strings"
	"testing"
	"time"

	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/prometheus/client_golang/prometheus"
)

// constMeasurer answers every probe with the same time; nothing is dialled.
type constMeasurer struct{}

func (constMeasurer) Measure(context.Context, overlay.ProbeTarget) (time.Duration, error) {
	return 5 * time.Millisecond, nil
}

func defaultTree(t *testing.T) *hierarchy.Tree {
	t.Helper()
	tree, err := hierarchy.Default()
	if err != nil {
		t.Skip("no embedded hierarchy:", err)
	}
	return tree
}

func edgeConfig(t *testing.T, tree *hierarchy.Tree) Config {
	cfg := TestnetConfig()
	cfg.DataDir = t.TempDir()
	cfg.Hierarchy = tree
	cfg.Logger = quiet
	cfg.Measurer = constMeasurer{}
	cfg.Overlay.ProbeGuard = func(netip.Addr) error { return nil }
	cfg.Crawl.Progress = -1
	return cfg
}

// Regression (the defect it caught): a file setting max_depth (or any one scope field) replaces the
// engine's whole default scope by a Scope with only that field set: the
// per-host page cap and every crawler-trap rule (URL length, path repeat,
// path segments, query parameters) are silently switched off.
func TestMaxDepthKeepsTrapLimits(t *testing.T) {
	c, err := Parse([]byte(`{"data_dir": "x", "max_depth": 5}`))
	if err != nil {
		t.Fatal(err)
	}
	want := urlnorm.DefaultScope()
	want.MaxDepth = 5
	if got := c.Crawl.Scope; got.MaxPagesPerHost != want.MaxPagesPerHost || got.MaxURLLength != want.MaxURLLength ||
		got.MaxPathRepeat != want.MaxPathRepeat || got.MaxPathSegments != want.MaxPathSegments || got.MaxQueryParams != want.MaxQueryParams {
		t.Fatalf(`"max_depth": 5 gives scope %+v; want the default limits with MaxDepth 5 (%+v)`, got, want)
	}
}

// Regression (the defect it caught): a testnet configuration (fetches to private and loopback
// addresses allowed, probes to loopback) accepts a listen address on every
// interface, so peers from elsewhere can hand it URLs of the operator's
// private network to fetch.
func TestTestnetRefusesNonLoopbackListen(t *testing.T) {
	c, err := Parse([]byte(`{"data_dir": "x", "testnet": true, "listen": ["/ip4/0.0.0.0/tcp/4001"]}`))
	if err != nil {
		t.Fatal(err)
	}
	if err := c.Validate(); err == nil {
		t.Fatalf("testnet config listening on %v (AllowPrivate %v) validated", c.Overlay.ListenAddrs, c.Crawl.Fetch.AllowPrivate)
	}
}

// Regression (the defect it caught): File.Config checks no numeric range. A negative capacity is
// kept (advertised as 0, which delegation reads as "unlimited"), a negative
// max_depth means unlimited depth, a negative concurrency silently becomes
// 64, and a negative per_ip passes Parse and Validate and only fails in
// Open as "fetch: negative PerIPLimit" (no file, no field).
func TestNegativeNumbersRefused(t *testing.T) {
	for _, field := range []string{"capacity", "max_depth", "concurrency", "per_ip", "seed_members"} {
		in := fmt.Sprintf("{\"data_dir\": \"x\",\n \"%s\": -5}", field)
		c, err := Parse([]byte(in))
		if err == nil {
			err = c.Validate()
		}
		if err == nil || !strings.Contains(err.Error(), field) {
			t.Errorf("%q: Parse+Validate = %v, want an error naming %s", in, err, field)
		}
	}
}

// Regression (the defect it caught): a second Close panics or fails (badger, spool).
func TestDoubleClose(t *testing.T) {
	tree := defaultTree(t)
	cfg := edgeConfig(t, tree)
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
	defer func() {
		if r := recover(); r != nil {
			t.Fatalf("second Close panicked: %v", r)
		}
	}()
	if err := n.Close(); err != nil {
		t.Fatalf("second Close: %v", err)
	}
}

// Regression (the defect it caught): a node without the crawler role advertises capacity 0, which
// delegation reads as unlimited room: it is a full member of the hash ring
// (and every policy's fallback), so subnets are delegated to a peer that
// refuses every hand-off ("this peer does not crawl").
func TestNoCrawlNodeNeverOwnsSubnets(t *testing.T) {
	tree := defaultTree(t)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	ccfg := edgeConfig(t, tree)
	ccfg.Policy = "hash"
	ccfg.Overlay.CrawlerAddr = netip.MustParseAddr("1.1.1.1")
	crawler, err := Open(ctx, ccfg)
	if err != nil {
		t.Fatal(err)
	}
	defer crawler.Close()
	var boot []string
	for _, a := range crawler.Peer().Host().Addrs() {
		boot = append(boot, a.String()+"/p2p/"+crawler.Peer().ID().String())
	}
	ocfg := edgeConfig(t, tree)
	ocfg.Policy = "hash"
	ocfg.Crawler = false
	ocfg.Overlay.Bootstrap = boot
	relay, err := Open(ctx, ocfg)
	if err != nil {
		t.Fatal(err)
	}
	defer relay.Close()
	for _, nd := range []*Node{crawler, relay} {
		if err := nd.Peer().WaitMembers(ctx, 2); err != nil {
			t.Fatal(err)
		}
	}
	relayID := relay.Peer().CrawlerID()
	var toRelay []string
	for o := 1; o < 224; o += 7 {
		a := netip.AddrFrom4([4]byte{byte(o), 2, 3, 4})
		if a.IsPrivate() || a.IsLoopback() {
			continue
		}
		d, err := crawler.Peer().Delegate(ctx, a)
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner == relayID {
			toRelay = append(toRelay, a.String())
		}
	}
	if len(toRelay) > 0 {
		t.Fatalf("%d addresses delegated to the --no-crawl peer (capacity %d, no hand-off sink), e.g. %s",
			len(toRelay), relay.cfg.Overlay.Capacity, strings.Join(toRelay[:min(3, len(toRelay))], ", "))
	}
}

// Leak check: a node opened, run (metrics on, one seed) and closed leaves
// no goroutine behind.
func TestNoGoroutineLeakAfterClose(t *testing.T) {
	tree := defaultTree(t)
	defer goleak.VerifyNone(t, goleak.IgnoreCurrent())
	cfg := edgeConfig(t, tree)
	cfg.Overlay.CrawlerAddr = netip.MustParseAddr("1.1.1.1")
	cfg.MetricsAddr = "127.0.0.1:0"
	cfg.Seeds = []string{"http://127.0.0.1:1/"}
	cfg.Crawl.Fetch.AllowPrivate = true
	n, err := Open(context.Background(), cfg)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 1500*time.Millisecond)
	defer cancel()
	if err := n.Run(ctx); err != nil {
		t.Fatal(err)
	}
	if err := n.Close(); err != nil {
		t.Fatal(err)
	}
}

// The metrics server answers GET /metrics and 404 elsewhere.
func TestMetricsHandlerPaths(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounter(prometheus.CounterOpts{Name: "micra_test_total", Help: "test"})
	reg.MustRegister(c)
	srv := httptest.NewServer(MetricsHandler(reg))
	defer srv.Close()
	for path, want := range map[string]int{"/metrics": 200, "/": 404, "/status": 404} {
		resp, err := http.Get(srv.URL + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if resp.StatusCode != want || (want == 200 && !strings.Contains(string(body), "micra_test_total")) {
			t.Errorf("%s: %d, want %d", path, resp.StatusCode, want)
		}
	}
}
