package node

import (
	"context"
	"io"
	"net/http"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl"

	"github.com/micra-crawler/micra/testnet/synthweb"
)

// controlClient waits for node i's control API and returns a client of it.
func controlClient(t *testing.T, c *cluster, i int) *ControlClient {
	t.Helper()
	nd := c.nodes[i]
	waitFor(t, 10*time.Second, "the control API", func() bool { return nd.ControlURL() != "" })
	cl, err := NewControlClient(nd.ControlURL())
	if err != nil {
		t.Fatal(err)
	}
	return cl
}

// TestControlAPI: two real nodes on loopback, each serving its control
// API; every endpoint is read from node 0 and checked against the node
// itself (peer id, cached owners, seeds queued and handed off), the guards
// refuse a foreign Host and a cross-origin POST, and the api file lives
// exactly as long as Run.
func TestControlAPI(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 4, HostsPerIP: 1, PagesPerHost: 5, CanonicalLinks: true})
	c := openCluster(t, web, 2, false, func(i int, cfg *Config) {
		cfg.Crawl.MaxCarrierHold = 100 * time.Millisecond
		cfg.Pprof = i == 1
		if i == 0 {
			allDay, _ := crawl.ParseWindow("00:00-24:00")
			cfg.Crawl.Windows = crawl.Windows{Spans: []crawl.Window{allDay}}
		}
	})
	c.runAll()
	nd := c.nodes[0]
	cl := controlClient(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()

	// the api file names the URL, private to the operator
	apiFile := filepath.Join(nd.cfg.DataDir, APIFile)
	fi, err := os.Stat(apiFile)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Errorf("api file mode %v, want 0600", fi.Mode().Perm())
	}
	if u, err := ReadAPIFile(nd.cfg.DataDir); err != nil || u != nd.ControlURL() {
		t.Fatalf("api file says %q (%v), node serves %q", u, err, nd.ControlURL())
	}

	id, err := cl.ID(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if id.PeerID != nd.Peer().ID().String() || id.Role != "crawler" || id.Policy != nd.cfg.Policy ||
		id.Hierarchy != nd.Tree().ID().String() || id.CrawlerAddr != c.emu.crawler[0].String() ||
		id.Capacity != nd.cfg.Overlay.Capacity || id.Version.Go == "" || len(id.Version.Protocols) == 0 {
		t.Errorf("id %+v", id)
	}
	if len(id.Addrs) == 0 || !strings.HasSuffix(id.Addrs[0], "/p2p/"+id.PeerID) {
		t.Errorf("addrs %v: want multiaddrs ending in /p2p/<id>", id.Addrs)
	}

	peers, err := cl.Peers(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if len(peers) != 2 || peers[0].PeerID != id.PeerID || peers[0].State != "self" ||
		peers[1].PeerID != c.nodes[1].Peer().ID().String() || peers[1].State == "dead" ||
		peers[1].CrawlerAddr != c.emu.crawler[1].String() || peers[1].LastHeard == nil || peers[1].Capacity <= 0 {
		t.Errorf("peers %+v", peers)
	}

	// seeds: a host near node 0 is queued here, one near node 1 handed to
	// it, a URL that does not parse rejected; the same seed again is known
	near := map[int]int{} // crawler → a host placed near it
	for h := range web.Config().Hosts {
		n, _ := c.emu.nearestOf(c.emu.Map(web.HostIP(h)))
		if _, ok := near[n]; !ok {
			near[n] = h
		}
	}
	if len(near) < 2 {
		t.Fatalf("hosts near %v only", near)
	}
	mine, theirs := web.PageURL(near[0], 0), web.PageURL(near[1], 0)
	res, err := cl.Seed(ctx, []string{mine, theirs, "http://exa mple.com/"})
	if err != nil {
		t.Fatal(err)
	}
	if res.Queued != 1 || res.HandedOff != 1 || res.Rejected != 1 || len(res.Seeds) != 3 ||
		res.Seeds[0].Status != SeedQueued || res.Seeds[0].Owner != id.PeerID ||
		res.Seeds[1].Status != SeedHandedOff || res.Seeds[1].Owner != c.nodes[1].Peer().ID().String() ||
		res.Seeds[2].Status != SeedRejected || res.Seeds[2].Reason == "" {
		t.Fatalf("seeds %+v", res)
	}
	again, err := cl.Seed(ctx, []string{mine})
	if err != nil || again.Known != 1 {
		t.Errorf("seed again: %+v, %v; want known", again, err)
	}

	// the two seeds lead to every page (links cross hosts), each fetched
	// by its host's owner; then both nodes are caught up
	c.waitCoverage(t, 30*time.Second)
	waitFor(t, 30*time.Second, "both nodes to catch up", func() bool {
		for i := range c.nodes {
			st, err := controlClient(t, c, i).Status(ctx)
			if err != nil || !st.CaughtUp {
				return false
			}
		}
		return true
	})
	st, err := cl.Status(ctx)
	if err != nil {
		t.Fatal(err)
	}
	if st.PeerID != id.PeerID || st.MembersLive != 2 || st.CrawlersLive != 2 || st.PeersConnected < 1 ||
		st.SubnetsOwned < 2 || st.Since.IsZero() || st.Frontier == nil || st.Frontier.Queued != 0 ||
		st.Outbox == nil || st.Outbox.PendingRecords != 0 || st.Outbox.CarriersDelivered == 0 ||
		st.Handoff.Pending != 0 || st.Handoff.URLs == 0 || st.Sink == nil || st.Sink.CarriersDir == "" ||
		!st.Sink.LastOK || st.Sink.Delivered == 0 || st.Crawl == nil {
		t.Fatalf("status %+v\nfrontier %+v outbox %+v sink %+v", st, st.Frontier, st.Outbox, st.Sink)
	}
	// capacity in use: the load its heartbeats advertise; its window
	// (open all day) as the setting reads it
	if cp := st.Capacity; cp == nil || cp.PagesPerDay != nd.cfg.Overlay.Capacity || cp.Load == nil || *cp.Load != nd.loadDay.Load() ||
		cp.LoadPct == nil || *cp.LoadPct != 100*float64(*cp.Load)/float64(cp.PagesPerDay) {
		t.Errorf("status capacity %+v, want %d pages/day and the load reported (%d)", st.Capacity, nd.cfg.Overlay.Capacity, nd.loadDay.Load())
	}
	if w := st.Windows; w == nil || !w.Open || len(w.Spans) != 1 || w.Spans[0] != "00:00-24:00" || w.NextClose != nil || w.NextOpen != nil || w.Location != "UTC" {
		t.Errorf("status windows %+v, want the all-day window, open, never closing", st.Windows)
	}
	pages := 0
	for _, k := range fetchedHosts(t, nd) {
		pages += k
	}
	if st.Crawl.PagesFetched != int64(pages) || pages == 0 {
		t.Errorf("status: %d pages fetched; node 0's history holds %d", st.Crawl.PagesFetched, pages)
	}

	// owners: the cached owner of a host's address, as the router reads it
	ip := web.HostIP(near[1])
	mapped := c.emu.Map(ip)
	want, ok := nd.Peer().CachedOwner(mapped)
	if !ok {
		t.Fatalf("node 0 has no cached owner for %v", mapped)
	}
	owners, err := cl.Owners(ctx, []string{ip.String(), "no-such-host.invalid"}, false, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(owners) != 2 {
		t.Fatalf("owners %+v", owners)
	}
	o := owners[0]
	if o.Owner != string(want) || o.Owner != c.nodes[1].Peer().ID().String() || o.Mine || !o.Cached ||
		o.Addr != ip.String() || o.Mapped != mapped.String() || o.Subnet != uint32(nd.Tree().SmallestNonUnary(mapped)) ||
		o.Range == "" || o.Reason != "cached" || !strings.Contains(o.Explanation, "owner="+o.Owner) || o.Epoch == 0 {
		t.Errorf("owner of %v: %+v, want cached owner %s", ip, o, want)
	}
	if owners[1].Error == "" {
		t.Errorf("an unresolvable host: %+v, want an error", owners[1])
	}
	looked, err := cl.Owners(ctx, []string{mapped.String()}, true, false)
	if err != nil || len(looked) != 1 || looked[0].Owner != string(want) || looked[0].Error != "" {
		t.Errorf("lookup of %v: %+v, %v; want %s", mapped, looked, err, want)
	}
	all, err := cl.Owners(ctx, nil, false, false)
	if err != nil || !slices.ContainsFunc(all, func(x OwnerInfo) bool { return x.Subnet == o.Subnet && x.Owner == o.Owner }) {
		t.Errorf("records listed: %+v, %v; want subnet %d owned by %s among them", all, err, o.Subnet, o.Owner)
	}
	own, err := cl.Owners(ctx, nil, false, true)
	if err != nil || len(own) != st.SubnetsOwned || slices.ContainsFunc(own, func(x OwnerInfo) bool { return !x.Mine }) {
		t.Errorf("own records: %+v, %v; want the %d subnets node 0 owns", own, err, st.SubnetsOwned)
	}

	// metrics from the same registry; pprof only where enabled; 404 elsewhere
	get := func(base, path string, hdr ...string) (int, string) {
		t.Helper()
		req, _ := http.NewRequestWithContext(ctx, http.MethodGet, base+path, nil)
		for i := 0; i+1 < len(hdr); i += 2 {
			if hdr[i] == "Host" {
				req.Host = hdr[i+1]
			} else {
				req.Header.Set(hdr[i], hdr[i+1])
			}
		}
		return do(t, req)
	}
	if code, body := get(cl.URL(), "/metrics"); code != 200 || !strings.Contains(body, "micra_node_urls_owned_total") {
		t.Errorf("/metrics: %d %.200s", code, body)
	}
	for _, p := range []string{"/", "/v1/nothing", "/debug/pprof/"} {
		if code, _ := get(cl.URL(), p); code != http.StatusNotFound {
			t.Errorf("GET %s: %d, want 404", p, code)
		}
	}
	if code, _ := get(cl.URL(), "/v1/seeds"); code != http.StatusMethodNotAllowed {
		t.Errorf("GET /v1/seeds: %d, want 405", code)
	}
	if code, _ := get(controlClient(t, c, 1).URL(), "/debug/pprof/"); code != 200 {
		t.Errorf("pprof on node 1 (enabled): %d", code)
	}

	// DNS rebinding: a Host that is not loopback is refused; CSRF: a POST
	// from another origin is refused
	if code, body := get(cl.URL(), "/v1/id", "Host", "attacker.example:80"); code != http.StatusForbidden {
		t.Errorf("foreign Host: %d %s, want 403", code, body)
	}
	if code, _ := get(cl.URL(), "/v1/id", "Host", "localhost"); code != 200 {
		t.Errorf("Host localhost: %d, want 200", code)
	}
	post := func(origin string) int {
		req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cl.URL()+"/v1/seeds", strings.NewReader(mine+"\n"))
		req.Header.Set("Origin", origin)
		code, _ := do(t, req)
		return code
	}
	if code := post("http://attacker.example"); code != http.StatusForbidden {
		t.Errorf("cross-origin POST: %d, want 403", code)
	}
	if code := post(cl.URL()); code != 200 {
		t.Errorf("same-origin POST (text seeds): %d, want 200", code)
	}

	// the web console: its pages and their JSON behind the same guards
	if code, body := get(cl.URL(), "/console/node.json"); code != 200 || !strings.Contains(body, `"peer_id": "`+id.PeerID+`"`) {
		t.Errorf("/console/node.json: %d %.200s", code, body)
	}
	if code, body := get(cl.URL(), "/console/network"); code != 200 || !strings.Contains(body, "<html") {
		t.Errorf("/console/network: %d %.200s", code, body)
	}
	if code, _ := get(cl.URL(), "/console/", "Host", "attacker.example:80"); code != http.StatusForbidden {
		t.Errorf("console with a foreign Host: %d, want 403", code)
	}

	// pause and resume: behind the same guards; while paused a new seed
	// stays queued (every worker waits at the engine's gate), resumed it
	// is fetched; the pause is kept in DATA/paused for a restart
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, cl.URL()+"/v1/pause", nil)
	req.Header.Set("Origin", "http://attacker.example")
	if code, _ := do(t, req); code != http.StatusForbidden || nd.Engine().Paused().Paused {
		t.Errorf("cross-origin pause: %d, paused %v; want 403 and running", code, nd.Engine().Paused().Paused)
	}
	p, err := cl.Pause(ctx)
	if err != nil || !p.Paused || !p.Changed || p.Since == nil {
		t.Fatalf("pause: %+v, %v", p, err)
	}
	if p, err := cl.Pause(ctx); err != nil || !p.Paused || p.Changed {
		t.Errorf("pause again: %+v, %v; want paused, unchanged", p, err)
	}
	if _, err := os.Stat(filepath.Join(nd.cfg.DataDir, PauseFile)); err != nil {
		t.Errorf("pause file: %v", err)
	}
	extra := mine + "-while-paused"
	if res, err := cl.Seed(ctx, []string{extra}); err != nil || res.Queued != 1 {
		t.Fatalf("seed while paused: %+v, %v", res, err)
	}
	workers := nd.cfg.Crawl.Concurrency
	waitFor(t, 30*time.Second, "every worker at the pause gate", func() bool { return nd.Engine().Paused().Held == workers })
	st, err = cl.Status(ctx)
	if err != nil || !st.Paused || st.PausedSince == nil || st.Frontier.Queued != 1 || st.CaughtUp {
		t.Fatalf("status while paused: %+v, %v; want paused with the seed queued", st, err)
	}
	fetched := st.Crawl.Requests
	if code, body := get(cl.URL(), "/console/node.json"); code != 200 || !strings.Contains(body, `"paused": true`) {
		t.Errorf("/console/node.json while paused: %d %.200s", code, body)
	}
	if p, err := cl.Resume(ctx); err != nil || p.Paused || !p.Changed {
		t.Fatalf("resume: %+v, %v", p, err)
	}
	if _, err := os.Stat(filepath.Join(nd.cfg.DataDir, PauseFile)); !os.IsNotExist(err) {
		t.Errorf("pause file after resume: %v", err)
	}
	waitFor(t, 30*time.Second, "the seed fetched after resume", func() bool {
		st, err := cl.Status(ctx)
		return err == nil && !st.Paused && st.Frontier.Queued == 0 && st.Crawl.Requests > fetched
	})
	if _, err := controlClient(t, c, 0).Resume(ctx); err != nil {
		t.Errorf("resume a running crawl: %v", err)
	}

	c.halt(t, 0)
	if _, err := os.Stat(apiFile); !os.IsNotExist(err) {
		t.Errorf("api file after Run returned: %v", err)
	}
	if nd.ControlURL() != "" {
		t.Errorf("ControlURL %q after Run", nd.ControlURL())
	}
	if _, err := cl.ID(ctx); err == nil {
		t.Error("the control API answers after Run returned")
	}
}

func do(t *testing.T, req *http.Request) (int, string) {
	t.Helper()
	hc := &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}
	resp, err := hc.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return resp.StatusCode, string(b)
}

func TestControlConfig(t *testing.T) {
	for _, tc := range []struct {
		cc   ControlConfig
		want string // "" valid, else part of the error
	}{
		{ControlConfig{}, ""},
		{ControlConfig{ControlAddr: "off"}, ""},
		{ControlConfig{ControlAddr: "127.0.0.1:5001"}, ""},
		{ControlConfig{ControlAddr: "[::1]:0"}, ""},
		{ControlConfig{ControlAddr: "localhost:5001"}, ""},
		{ControlConfig{ControlAddr: "0.0.0.0:5001"}, "not loopback"},
		{ControlConfig{ControlAddr: ":5001"}, "not loopback"},
		{ControlConfig{ControlAddr: "192.0.2.1:5001"}, "not loopback"},
		{ControlConfig{ControlAddr: "0.0.0.0:5001", ControlAllowRemote: true}, ""},
		{ControlConfig{ControlAddr: "5001"}, "want host:port"},
	} {
		err := tc.cc.validateControl()
		if (tc.want == "") != (err == nil) || err != nil && !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", tc.cc, err, tc.want)
		}
	}
	cfg, err := Parse([]byte(`{"data_dir": "d", "api": "127.0.0.1:5001", "pprof": true}`))
	if err != nil || cfg.ControlAddr != "127.0.0.1:5001" || !cfg.Pprof {
		t.Fatalf("api and pprof keys: %+v, %v", cfg.ControlConfig, err)
	}
	cfg, err = Parse([]byte(`{"data_dir": "d", "api": "0.0.0.0:5001"}`))
	if err == nil {
		err = cfg.Validate()
	}
	if err == nil || !strings.Contains(err.Error(), "not loopback") {
		t.Errorf("a non-loopback api address: %v", err)
	}
}

func TestParseSeeds(t *testing.T) {
	for in, want := range map[string][]string{
		`["http://a/", "http://b/"]`:          {"http://a/", "http://b/"},
		"http://a/\n\n# c\n  http://b/  \r\n": {"http://a/", "http://b/"},
		"":                                    nil,
	} {
		got, err := parseSeeds([]byte(in))
		if err != nil || !slices.Equal(got, want) {
			t.Errorf("%q: %q, %v; want %q", in, got, err, want)
		}
	}
	if _, err := parseSeeds([]byte(`["a", 1]`)); err == nil {
		t.Error("a JSON list with a number: no error")
	}
}
