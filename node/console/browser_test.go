package console_test

// The console in a real browser: headless Chromium (Debian's chromium,
// which .ci/run installs) driven through chromedp against three real
// nodes on loopback. Skipped, saying why, where no Chromium is found.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"net/http"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/chromedp/cdproto/runtime"
	"github.com/chromedp/chromedp"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// chromium finds the browser: $MICRA_CHROMIUM, else chromium (Debian),
// chromium-browser or google-chrome on PATH; the test skips without one.
func chromium(t *testing.T) string {
	t.Helper()
	if p := os.Getenv("MICRA_CHROMIUM"); p != "" {
		return p
	}
	for _, n := range []string{"chromium", "chromium-browser", "google-chrome", "google-chrome-stable"} {
		if p, err := exec.LookPath(n); err == nil {
			return p
		}
	}
	t.Skip("no Chromium found (chromium, chromium-browser, google-chrome on PATH, or $MICRA_CHROMIUM): " +
		"the console's browser test needs one; `apt-get install -y chromium` (.ci/run installs it)")
	return ""
}

// world places the synthetic web's hosts and the crawlers at addresses of
// distinct subnets of the embedded hierarchy, each host near one crawler
// (round robin), so who should crawl it is known.
type world struct {
	tree    *hierarchy.Tree
	web     *synthweb.Web
	mapped  map[netip.Addr]netip.Addr // loopback → emulated
	crawler []netip.Addr
	nearest map[netip.Addr]int // emulated → crawler
}

func newWorld(t *testing.T, web *synthweb.Web, crawlers int) *world {
	tree, err := hierarchy.Default()
	if err != nil {
		t.Skip("no embedded hierarchy:", err)
	}
	w := &world{tree: tree, web: web, mapped: map[netip.Addr]netip.Addr{}, nearest: map[netip.Addr]int{}}
	var pool []netip.Addr
	used := map[hierarchy.NodeID]bool{}
	for o := 1; o < 224 && len(pool) < web.NumIPs()+crawlers; o++ {
		a := netip.AddrFrom4([4]byte{byte(o), 1, 1, 1})
		s := tree.SmallestNonUnary(a)
		if a.IsPrivate() || a.IsLoopback() || s == hierarchy.None || s == hierarchy.Root || used[s] {
			continue
		}
		used[s] = true
		pool = append(pool, a)
	}
	if len(pool) < web.NumIPs()+crawlers {
		t.Fatalf("only %d distinct subnets", len(pool))
	}
	w.crawler = pool[:crawlers]
	k := 0
	for h := range web.Config().Hosts {
		ip := web.HostIP(h)
		if _, ok := w.mapped[ip]; !ok {
			m := pool[crawlers+k]
			w.mapped[ip], w.nearest[m] = m, k%crawlers
			k++
		}
	}
	return w
}

func (w *world) Map(a netip.Addr) netip.Addr {
	if m, ok := w.mapped[a]; ok {
		return m
	}
	return a
}

// HostPlace places each host of the web a few degrees from its nearest
// crawler (the world the measurer below answers for): the network page's
// world.
func (w *world) HostPlace(name string) (lat, lon float64, nearest netip.Addr, ok bool) {
	h := w.web.HostIndex(name)
	if h < 0 {
		return 0, 0, netip.Addr{}, false
	}
	c := w.nearest[w.Map(w.web.HostIP(h))]
	p := positions[c%len(positions)]
	a := float64(h) * 2.4 // radians apart
	return p[0] + 4*math.Sin(a), p[1] + 6*math.Cos(a), w.crawler[c], true
}

// HostCount is the web's hosts.
func (w *world) HostCount() int { return w.web.Config().Hosts }

// measurer: crawler i is 5 ms from its hosts and its own address, 80 ms
// from everything else; no probe leaves the process.
type measurer struct {
	w *world
	i int
}

func (m measurer) Measure(_ context.Context, t overlay.ProbeTarget) (time.Duration, error) {
	if n, ok := m.w.nearest[t.Addr]; ok && n == m.i || t.Addr == m.w.crawler[m.i] {
		return 5 * time.Millisecond, nil
	}
	return 80 * time.Millisecond, nil
}

// positions the crawlers advertise: Paris, New York, Tokyo.
var positions = [][2]float64{{48.86, 2.35}, {40.71, -74.01}, {35.68, 139.69}}

// startNodes opens and runs n crawler nodes over web, each at its
// position, delivering to the sink at sinkAddr; they stop when the test
// ends.
func startNodes(t *testing.T, web *synthweb.Web, w *world, n int, sinkAddr string) []*node.Node {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	nodes := make([]*node.Node, n)
	var boot []string
	for i := range n {
		cfg := node.TestnetConfig()
		cfg.DataDir = t.TempDir()
		cfg.Hierarchy = w.tree
		cfg.Logger = quiet
		cfg.AddrMapper = w.Map
		cfg.Measurer = measurer{w, i}
		cfg.Policy = "ipmicra" // asks every candidate: the owner of each host is known exactly
		cfg.Overlay.CrawlerAddr = w.crawler[i]
		cfg.Overlay.Lat, cfg.Overlay.Lon, cfg.Overlay.HasPos = positions[i%len(positions)][0], positions[i%len(positions)][1], true
		cfg.Overlay.ProbeGuard = func(netip.Addr) error { return nil }
		cfg.Overlay.Bootstrap = slices.Clone(boot)
		cfg.SeedWait.Members = n
		cfg.Crawl.Concurrency = 4
		cfg.Crawl.Progress = -1
		cfg.Crawl.MaxCarrierHold = 200 * time.Millisecond
		cfg.Crawl.Fetch = fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, PerIPLimit: 4, Resolver: web, Logger: quiet}
		cfg.Sink, cfg.Crawl.Receiver = sinkAddr, nil
		cfg.World = w
		nd, err := node.Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		nodes[i] = nd
		for _, a := range nd.Peer().Host().Addrs() {
			boot = append(boot, a.String()+"/p2p/"+nd.Peer().ID().String())
		}
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	for _, nd := range nodes {
		nd.Peer().DHT().RefreshRoutingTable()
	}
	for _, nd := range nodes {
		if err := nd.Peer().WaitMembers(ctx, n); err != nil {
			t.Fatal(err)
		}
	}
	for i, nd := range nodes {
		rctx, stop := context.WithCancel(context.Background())
		done := make(chan error, 1)
		go func() { done <- nd.Run(rctx) }()
		t.Cleanup(func() {
			stop()
			if err := <-done; err != nil {
				t.Errorf("node %d: Run: %v", i, err)
			}
			if err := nd.Close(); err != nil {
				t.Errorf("node %d: Close: %v", i, err)
			}
		})
	}
	return nodes
}

// until polls cond every 100 ms until it holds or ctx ends.
func until(t *testing.T, ctx context.Context, what string, cond func() bool) {
	t.Helper()
	for !cond() {
		select {
		case <-ctx.Done():
			t.Fatalf("%s: %v", what, ctx.Err())
		case <-time.After(100 * time.Millisecond):
		}
	}
}

// TestConsoleInBrowser: three real nodes; Chromium opens node 0's
// network page and finds one marker per live crawler, at the crawlers'
// peer ids; on the node page a seed is added through the form, the node
// queues it and crawls its host, and the page shows the pages fetched;
// back on the network page the host's subnet is drawn in the colour of
// the owner the control API names. No JavaScript error on the way.
// Screenshots go to the test's artifact directory (go test -artifacts).
func TestConsoleInBrowser(t *testing.T) {
	exe := chromium(t)
	web, err := synthweb.Start(synthweb.Config{Hosts: 6, HostsPerIP: 1, PagesPerHost: 4, CanonicalLinks: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { web.Close() })
	w := newWorld(t, web, 3)
	store, sinkAddr := openSink(t)
	nodes := startNodes(t, web, w, 3, sinkAddr)
	nd := nodes[0]
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	until(t, ctx, "node 0's control API", func() bool { return nd.ControlURL() != "" })
	cl, err := node.NewControlClient(nd.ControlURL())
	if err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "three live crawlers", func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.CrawlersLive == 3
	})

	shots := t.ArtifactDir()
	actx, acancel := chromedp.NewExecAllocator(ctx, append(chromedp.DefaultExecAllocatorOptions[:],
		chromedp.ExecPath(exe), chromedp.Headless, chromedp.NoSandbox, chromedp.DisableGPU, chromedp.NoFirstRun,
		chromedp.Flag("disable-quic", true), chromedp.Flag("disable-background-networking", true),
		chromedp.Flag("disable-component-update", true), chromedp.Flag("disable-sync", true),
		chromedp.UserDataDir(t.TempDir()), chromedp.WindowSize(1280, 1000))...)
	defer acancel()
	bctx, bcancel := chromedp.NewContext(actx)
	defer bcancel()
	var (
		mu     sync.Mutex
		jsErrs []string
	)
	if err := chromedp.Listen(bctx, func(ev any) {
		mu.Lock()
		defer mu.Unlock()
		switch ev := ev.(type) {
		case *runtime.EventExceptionThrown:
			d := ev.ExceptionDetails
			msg := d.Text
			if d.Exception != nil {
				msg += " " + d.Exception.Description
			}
			jsErrs = append(jsErrs, fmt.Sprintf("%s (%s:%d)", msg, d.URL, d.LineNumber+1))
		case *runtime.EventConsoleAPICalled:
			if ev.Type == runtime.ConsoleAPICalledType("error") {
				var args []string
				for _, a := range ev.Args {
					args = append(args, string(a.Value)+a.Description)
				}
				jsErrs = append(jsErrs, "console.error "+strings.Join(args, " "))
			}
		}
	}); err != nil {
		t.Fatal(err)
	}
	base := nd.ControlURL()
	do := func(steps ...chromedp.Action[chromedp.Void]) {
		t.Helper()
		if err := chromedp.Do(bctx, steps...); err != nil {
			t.Fatal(err)
		}
	}
	shot := func(name string) {
		t.Helper()
		png := eval(t, bctx, chromedp.FullScreenshot(100))
		if err := os.WriteFile(filepath.Join(shots, name), png, 0o644); err != nil {
			t.Fatal(err)
		}
	}

	// the network page: one marker per live crawler
	peers, err := cl.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	var live []string
	for _, p := range peers {
		if p.Capacity > 0 && (p.State == "self" || p.State == "alive") {
			live = append(live, p.PeerID)
		}
	}
	start := time.Now()
	do(chromedp.Navigate(base+"/console/network"), chromedp.WaitVisible(`body[data-ready="1"]`))
	marked := eval(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#map circle.crawler")].map(c => c.dataset.peer)`))
	landPath := eval(t, bctx, chromedp.Evaluate[int](`document.querySelector("#map path.land").getAttribute("d").length`))
	firstRender := eval(t, bctx, chromedp.Evaluate[float64](`performance.getEntriesByName("map-drawn")[0].startTime`))
	// bytes over the wire for the page, its scripts and the map (a first
	// visit: nothing cached yet)
	weight := eval(t, bctx, chromedp.Evaluate[float64](`performance.getEntriesByType("navigation").concat(performance.getEntriesByType("resource")).reduce((a, e) => a + e.transferSize, 0)`))
	shot("network.png")
	t.Logf("network page: map drawn %.0f ms after navigation started (browser's performance timing); %d crawler markers", firstRender, len(marked))
	slices.Sort(live)
	slices.Sort(marked)
	if !slices.Equal(marked, live) {
		t.Errorf("crawler markers %v, want the live crawlers %v", marked, live)
	}
	if st, _ := cl.Status(ctx); len(marked) != st.CrawlersLive {
		t.Errorf("%d crawler markers, status says %d crawlers live", len(marked), st.CrawlersLive)
	}
	if landPath < 10000 {
		t.Errorf("the map's land path is %d characters: world-atlas not drawn", landPath)
	}

	// the node page: add a seed for a host node 0 is nearest to
	h := -1
	for i := range web.Config().Hosts {
		if w.nearest[w.Map(web.HostIP(i))] == 0 {
			h = i
			break
		}
	}
	seed := web.HomeURL(h)
	do(chromedp.Navigate(base+"/console/node"), chromedp.WaitVisible(`body[data-ready="1"]`))
	ident := eval(t, bctx, chromedp.Text("#ident"))
	// capacity in use and time windows (none set: always open)
	capText := eval(t, bctx, chromedp.Poll[string](`(document.querySelector("#capacity[data-load]")||{}).textContent`, chromedp.WithPollingInterval(100*time.Millisecond)))
	winText := eval(t, bctx, chromedp.Text("#windows"))
	if st, err := cl.Status(ctx); err != nil || st.Capacity == nil || !strings.Contains(capText, fmt.Sprintf(" of %s pages/day", thousands(st.Capacity.PagesPerDay))) {
		t.Errorf("the node page's capacity %q; status %+v (%v)", capText, st.Capacity, err)
	}
	if !strings.HasPrefix(winText, "open") || !strings.Contains(winText, "always (no windows set)") {
		t.Errorf("the node page's time windows %q, want open, always", winText)
	}
	do(chromedp.SendKeys("#seeds", seed), chromedp.Click("#seedbtn"), chromedp.WaitVisible("#seedres .seed-status"))
	status := eval(t, bctx, chromedp.Text("#seedres .seed-status"))
	if !strings.Contains(ident, nd.Peer().ID().String()) {
		t.Errorf("the node page's identity does not name the node %s: %q", nd.Peer().ID(), ident)
	}
	if status != "queued" {
		t.Fatalf("seed %s from the page: %q, want queued (node 0 is its host's nearest crawler)", seed, status)
	}
	until(t, ctx, "the seed's host crawled by node 0", func() bool {
		st, err := cl.Status(ctx)
		return err == nil && st.Crawl != nil && st.Crawl.PagesFetched >= int64(web.Config().PagesPerHost)
	})
	shown := eval(t, bctx, chromedp.Poll[string](`/^[1-9]/.test((document.querySelector("#pages")||{}).textContent||"") && document.querySelector("#pages").textContent`,
		chromedp.WithPollingInterval(100*time.Millisecond)))
	shot("node.png")
	t.Logf("node page after the seed: %q", shown)
	if tr := eval(t, bctx, chromedp.Evaluate[string](`document.body.dataset.transport`)); tr != "sse" {
		t.Errorf("the node page updates by %q, want sse (Server-Sent Events)", tr)
	}

	// pause and resume the crawl from the node page: the control API says
	// paused, the page's next update shows it; then resumed
	do(chromedp.Click("#pausebtn"), chromedp.WaitVisible(`#pausemsg[data-state="paused"]`))
	if st, err := cl.Status(ctx); err != nil || !st.Paused || !nd.Engine().Paused().Paused {
		t.Fatalf("after the page's Pause: status paused %v (%v), engine %+v", st.Paused, err, nd.Engine().Paused())
	}
	pausedText := eval(t, bctx, chromedp.Poll[string](`/^paused since/.test((document.querySelector("#crawlstate")||{}).textContent||"") && document.querySelector("#crawlstate").textContent`,
		chromedp.WithPollingInterval(100*time.Millisecond)))
	btn := eval(t, bctx, chromedp.Text("#pausebtn"))
	shot("node-paused.png")
	do(chromedp.Click("#pausebtn"), chromedp.WaitVisible(`#pausemsg[data-state="running"]`))
	if st, err := cl.Status(ctx); err != nil || st.Paused || nd.Engine().Paused().Paused {
		t.Fatalf("after the page's Resume: status paused %v (%v)", st.Paused, err)
	}
	if btn != "Resume crawling" {
		t.Errorf("the button while paused says %q, want Resume crawling", btn)
	}
	eval(t, bctx, chromedp.Poll[bool](`(document.querySelector("#crawlstate")||{}).textContent === "running"`, chromedp.WithPollingInterval(100*time.Millisecond)))
	t.Logf("node page paused: %q; resumed", pausedText)

	// the network page again: every subnet in its owner's colour
	owners, err := cl.Owners(ctx, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	ownerOf := map[string]string{}
	for _, o := range owners {
		ownerOf[fmt.Sprint(o.Subnet)] = o.Owner
	}
	hostSubnet := fmt.Sprint(uint32(w.tree.SmallestNonUnary(w.Map(web.HostIP(h)))))
	if ownerOf[hostSubnet] != nd.Peer().ID().String() {
		t.Fatalf("the control API names %q as the seed host's subnet %s owner, want node 0", ownerOf[hostSubnet], hostSubnet)
	}
	type dot struct{ Subnet, Owner, Fill, OwnerFill string }
	do(chromedp.Navigate(base+"/console/network"), chromedp.WaitVisible(`#map circle.subnet[data-subnet="`+hostSubnet+`"]`))
	dots := eval(t, bctx, chromedp.Evaluate[[]dot](`[...document.querySelectorAll("#map circle.subnet")].map(c => ({Subnet: c.dataset.subnet, Owner: c.dataset.owner,
		Fill: c.getAttribute("fill") || "", OwnerFill: (document.querySelector('#map circle[data-peer="' + c.dataset.owner + '"]') || {getAttribute: () => "none"}).getAttribute("fill")}))`))
	shot("network-crawled.png")
	for _, d := range dots {
		want, known := ownerOf[d.Subnet]
		if known && d.Owner != want {
			t.Errorf("subnet %s drawn for %q, the control API says %q", d.Subnet, d.Owner, want)
		}
		if d.Owner != "" && d.Fill != d.OwnerFill {
			t.Errorf("subnet %s in %q, its owner's marker in %q", d.Subnet, d.Fill, d.OwnerFill)
		}
	}
	t.Logf("network page: %d subnets drawn; first visit %.0f KB transferred (map included); browser part %v", len(dots), weight/1024, time.Since(start).Round(time.Millisecond))

	// the whole web seeded through the control API and crawled: the
	// network page draws every host at its place in the colour of the
	// crawler the control API names as its owner, and its figures are the
	// JSON's, which are the sink's and the records'
	if _, err := cl.Seed(ctx, web.Seeds()); err != nil {
		t.Fatal(err)
	}
	until(t, ctx, "every page at the sink, every node caught up", func() bool {
		c, _ := store.Counts()
		if c.Pages < int64(web.TotalPages()) {
			return false
		}
		for _, n := range nodes {
			if !n.Status().CaughtUp {
				return false
			}
		}
		return true
	})
	checkHosts(t, ctx, bctx, cl, web, store)
	shot("network-hosts.png")

	// the sink page: a sink with the nodes' carriers, its full-text index
	// caught up, a reader following its log; the page shows the head,
	// the crawlers and the reader's cursor, and a search from its box
	// lists the pages /v1/search finds
	sk := startSink(t, ctx, nodes, store)
	do(chromedp.Navigate(sk.url+"/console/"), chromedp.WaitVisible(`body[data-ready="1"]`))
	head := eval(t, bctx, chromedp.Text("#head"))
	indexed := eval(t, bctx, chromedp.Text("#indexed"))
	crawlerRows := eval(t, bctx, chromedp.Evaluate[int](`document.querySelectorAll("#crawlers tr").length`))
	readerCells := eval(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#readers tr:first-child td")].map(td => td.textContent)`))
	if want := fmt.Sprint(sk.store.Head()); head != want {
		t.Errorf("sink page head %q, want %s", head, want)
	}
	if !strings.HasPrefix(indexed, fmt.Sprint(sk.store.Head())+" of ") {
		t.Errorf("sink page index progress %q, want all %d records indexed", indexed, sk.store.Head())
	}
	if _, cr := sk.store.Counts(); crawlerRows != len(cr) {
		t.Errorf("sink page lists %d crawlers, the sink counts %d", crawlerRows, len(cr))
	}
	// columns: # kind reader filter since from cursor behind …
	if len(readerCells) < 8 || readerCells[1] != "ndjson · follow" || readerCells[6] != fmt.Sprint(sk.store.Head()) || readerCells[7] != "0" {
		t.Errorf("sink page reader row %q, want the NDJSON follower at the head %d", readerCells, sk.store.Head())
	}
	do(chromedp.SendKeys("#q", sk.word), chromedp.Click("#searchbtn"), chromedp.WaitVisible("#hits .hit"))
	hits := eval(t, bctx, chromedp.Evaluate[[]string](`[...document.querySelectorAll("#hits .hit a")].map(a => a.getAttribute("href"))`))
	shot("sink.png")
	if !slices.Equal(hits, sk.hits) {
		t.Errorf("the sink page's search for %q lists %q; /v1/search answers %q", sk.word, hits, sk.hits)
	}
	if tr := eval(t, bctx, chromedp.Evaluate[string](`document.body.dataset.transport`)); tr != "sse" {
		t.Errorf("the sink page updates by %q, want sse", tr)
	}
	t.Logf("sink page: head %s, %s indexed, search %q: %d hits", head, indexed, sk.word, len(hits))
	mu.Lock()
	defer mu.Unlock()
	if len(jsErrs) > 0 {
		t.Errorf("JavaScript errors: %q", jsErrs)
	}
}

// eval runs a browser action and returns its value, failing the test on an
// error.
func eval[T any](t *testing.T, ctx context.Context, a chromedp.Action[T]) T {
	t.Helper()
	v, err := chromedp.Run(ctx, a)
	if err != nil {
		t.Fatal(err)
	}
	return v
}

// checkHosts: on the network page (open, after a complete crawl) every
// host of the web is drawn once, in the colour of the crawler the control
// API names as its owner (which is its nearest: the world's), hovering it
// draws a line to that crawler, and every figure of the paper's table is
// the JSON's (/console/network.json), which agrees with the sink's counts
// and the records' probes (/v1/owners).
func checkHosts(t *testing.T, ctx, bctx context.Context, cl *node.ControlClient, web *synthweb.Web, store *sink.Store) {
	t.Helper()
	n := web.Config().Hosts
	type hostDot struct{ Host, Owner, Nearest, Fill, OwnerFill string }
	dots := eval(t, bctx, chromedp.Poll[[]hostDot](fmt.Sprintf(`(() => { const ds = [...document.querySelectorAll("#map circle.host")];
		return ds.length === %d && ds.map(c => ({Host: c.dataset.host, Owner: c.dataset.owner, Nearest: c.dataset.nearest, Fill: c.getAttribute("fill"),
			OwnerFill: (document.querySelector('#map circle[data-peer="' + c.dataset.owner + '"]') || {getAttribute: () => "none"}).getAttribute("fill")})); })()`, n),
		chromedp.WithPollingInterval(100*time.Millisecond)))
	for _, d := range dots {
		h := web.HostIndex(d.Host)
		if h < 0 {
			t.Errorf("a host dot for %q, not a host of the web", d.Host)
			continue
		}
		os, err := cl.Owners(ctx, []string{web.HostIP(h).String()}, false, false)
		if err != nil || len(os) != 1 {
			t.Fatalf("/v1/owners?addr=%s: %v %v", web.HostIP(h), os, err)
		}
		if d.Owner != os[0].Owner || d.Fill != d.OwnerFill || d.Nearest != d.Owner {
			t.Errorf("host %s drawn for %q (nearest %q) in %q; the control API names %q, whose marker is %q", d.Host, d.Owner, d.Nearest, d.Fill, os[0].Owner, d.OwnerFill)
		}
	}
	// hovering a host draws a line from it to its crawler's marker
	line := eval(t, bctx, chromedp.Evaluate[[]string](`(() => { const c = document.querySelector("#map circle.host");
		const b = c.getBoundingClientRect();
		c.dispatchEvent(new MouseEvent("mouseenter", {clientX: b.x, clientY: b.y}));
		const l = document.querySelector("#map line.link"), m = document.querySelector('#map circle[data-peer="' + c.dataset.owner + '"]');
		return l ? [l.getAttribute("x1"), l.getAttribute("y1"), l.getAttribute("x2"), l.getAttribute("y2"), c.getAttribute("cx"), c.getAttribute("cy"), m.getAttribute("cx"), m.getAttribute("cy")] : []; })()`))
	if len(line) != 8 || line[0] != line[4] || line[1] != line[5] || line[2] != line[6] || line[3] != line[7] {
		t.Errorf("hovering a host: line %q, want from the host (cx, cy) to its crawler's marker", line)
	}

	// the paper's table: each cell's raw value is the JSON's (read again
	// until a view and the JSON agree: both move while records change)
	var v node.ConsoleNetwork
	var cells map[string]string
	for range 20 {
		cells = eval(t, bctx, chromedp.Evaluate[map[string]string](`Object.fromEntries([...document.querySelectorAll("#paper [data-key]")].map(c => [c.dataset.key, c.dataset.value]))`))
		v = getJSON[node.ConsoleNetwork](t, ctx, cl.URL()+"/console/network.json")
		if figuresMatch(cells, v.Figures) == nil {
			break
		}
		time.Sleep(300 * time.Millisecond)
	}
	if err := figuresMatch(cells, v.Figures); err != nil {
		t.Errorf("the page's figures against /console/network.json: %v", err)
	}
	f := v.Figures
	counts, _ := store.Counts()
	owners, err := cl.Owners(ctx, nil, false, false)
	if err != nil {
		t.Fatal(err)
	}
	probes := 0
	for _, o := range owners {
		probes += len(o.Probes)
	}
	if f.Pages != web.TotalPages() || f.Hosts != n || f.WorldHosts != n || f.CoveragePct == nil || *f.CoveragePct != 100 ||
		f.Overlap != counts.Overlap || f.Judged != n || f.OptimalPct == nil || *f.OptimalPct != 100 || f.Cursor != store.Head() ||
		f.Probes != probes || f.ProbesPerURL == nil || *f.ProbesPerURL != float64(probes)/float64(n) || f.MakespanS <= 0 || f.Error != "" {
		t.Errorf("figures %+v; want %d pages, %d hosts all at their nearest, overlap %d, cursor %d, %d probes (the records')",
			f, web.TotalPages(), n, counts.Overlap, store.Head(), probes)
	}
	if len(v.Curve) == 0 || v.Curve[len(v.Curve)-1].Hosts != n || v.Curve[len(v.Curve)-1].PerURL != *f.ProbesPerURL {
		t.Errorf("curve %+v: its last point is not every host and probe (%v per URL)", v.Curve, f.ProbesPerURL)
	}
	if plots := eval(t, bctx, chromedp.Evaluate[int](`document.querySelectorAll("#curve .uplot").length`)); plots != 1 {
		t.Errorf("%d probes-per-URL charts drawn, want 1", plots)
	}
	t.Logf("network page: %d hosts drawn in their owners' colours; figures: at nearest %.1f %%, %.2f probes/URL, makespan %.1f s, coverage %.0f %%, overlap %d",
		len(dots), *f.OptimalPct, *f.ProbesPerURL, f.MakespanS, *f.CoveragePct, f.Overlap)
}

// figuresMatch compares the page's raw figure values with the JSON's.
func figuresMatch(cells map[string]string, f node.NetworkFigures) error {
	b, _ := json.Marshal(f)
	var want map[string]any
	_ = json.Unmarshal(b, &want)
	if len(cells) == 0 {
		return fmt.Errorf("no figures on the page")
	}
	for k, got := range cells {
		w, ok := want[k]
		switch {
		case !ok && got == "":
		case !ok:
			return fmt.Errorf("%s: page %q, JSON has none", k, got)
		default:
			x, err := strconv.ParseFloat(got, 64)
			if wf, isNum := w.(float64); !isNum || err != nil || math.Abs(x-wf) > 1e-9*math.Max(1, math.Abs(wf)) {
				return fmt.Errorf("%s: page %q, JSON %v", k, got, w)
			}
		}
	}
	return nil
}

// getJSON reads a JSON document.
func getJSON[T any](t *testing.T, ctx context.Context, u string) T {
	t.Helper()
	var v T
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if err := json.NewDecoder(resp.Body).Decode(&v); err != nil {
		t.Fatalf("%s: %v", u, err)
	}
	return v
}

// thousands formats n as the page's num() does (en: 1,234,567).
func thousands(n int) string {
	s := strconv.Itoa(n)
	for i := len(s) - 3; i > 0; i -= 3 {
		s = s[:i] + "," + s[i:]
	}
	return s
}
