package node

import (
	"context"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

func TestParseErrorsNameLineAndField(t *testing.T) {
	for _, tc := range []struct{ in, want string }{
		{"{\"data_dir\": \"x\",\n \"min_dely\": \"1s\"}", `2:`},
		{"{\"data_dir\": \"x\",\n \"concurrency\": \"4\"}", `2:20: concurrency: want int`},
		{"{\"data_dir\": \"x\",\n \"sleep\": \"4 days\"}", `sleep: "4 days" is not a duration`},
		{"{\"data_dir\": \"x\",\n \"crawler_addr\": \"1.2.3\"}", `crawler_addr`},
		{"{\"data_dir\": \"x\"} {}", `unexpected data after`},
		{"", `empty configuration`},
		{"{\"data_dir\": \"x\",\n\n \"listen\": [1]}", `3:`},
	} {
		_, err := Parse([]byte(tc.in))
		if err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("Parse(%q) = %v, want an error containing %q", tc.in, err, tc.want)
		}
	}
}

func TestLoadFile(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "node.json")
	os.WriteFile(path, []byte(`{"data_dir": "n1", "testnet": true, "crawler_addr": "1.1.1.1", "policy": "MICRA",
		"min_delay": "250ms", "seeds": ["http://a.example/"], "bootstrap": ["/ip4/127.0.0.1/tcp/4001/p2p/x"]}`), 0o644)
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if c.DataDir != filepath.Join(dir, "n1") || c.Policy != "micra" || c.Crawl.Fetch.MinDelay != 250*time.Millisecond ||
		c.Overlay.CrawlerAddr != netip.MustParseAddr("1.1.1.1") || !c.Crawl.Fetch.AllowPrivate || len(c.Seeds) != 1 || !c.Crawler {
		t.Errorf("loaded %+v", c)
	}
	if err := c.Validate(); err != nil {
		t.Errorf("Validate: %v", err)
	}
	if _, err := LoadFile(filepath.Join(dir, "missing.json")); err == nil {
		t.Error("missing file accepted")
	}
}

// Regression (the defect it caught): only data_dir was resolved against the
// configuration file's directory; key_file, psk_file, hierarchy and carriers
// resolved against the process's working directory, so the same file named
// other files depending on where micra was started.
func TestLoadFileResolvesPathsAgainstItsDirectory(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "conf")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	abs := filepath.Join(t.TempDir(), "net.psk")
	path := filepath.Join(dir, "node.json")
	os.WriteFile(path, []byte(`{"data_dir": "n1", "key_file": "keys/id.key", "psk_file": "`+filepath.ToSlash(abs)+`",
		"hierarchy": "../snap.bin", "carriers": "out"}`), 0o644)
	t.Chdir(t.TempDir()) // the working directory is elsewhere
	c, err := LoadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	sink, _ := c.Crawl.Receiver.(pack.FileSink)
	for _, p := range []struct{ field, got, want string }{
		{"data_dir", c.DataDir, filepath.Join(dir, "n1")},
		{"key_file", c.Overlay.KeyFile, filepath.Join(dir, "keys", "id.key")},
		{"psk_file", c.Overlay.PSKFile, abs}, // absolute: unchanged
		{"hierarchy", c.HierarchyFile, filepath.Join(filepath.Dir(dir), "snap.bin")},
		{"carriers", sink.Dir, filepath.Join(dir, "out")},
	} {
		if p.got != p.want {
			t.Errorf("%s: %q, want %q (relative to the file's directory)", p.field, p.got, p.want)
		}
	}
	// Parse has no file: its paths stay as written.
	c, err = Parse([]byte(`{"data_dir": "n1", "key_file": "k", "hierarchy": "h", "carriers": "out"}`))
	if err != nil {
		t.Fatal(err)
	}
	if sink, _ := c.Crawl.Receiver.(pack.FileSink); c.DataDir != "n1" || c.Overlay.KeyFile != "k" || c.HierarchyFile != "h" || sink.Dir != "out" {
		t.Errorf("Parse changed relative paths: %+v", c)
	}
}

func TestValidate(t *testing.T) {
	c := DefaultConfig()
	c.Policy = "nearest"
	c.Overlay.ConnHighWater = c.Overlay.MaxConns
	c.Crawler = false
	c.Seeds = []string{"http://a.example/"}
	err := c.Validate()
	for _, want := range []string{"DataDir is required", `unknown delegation policy "nearest"`, "seeds need the crawler role", "ConnHighWater"} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Validate() = %v, want it to mention %q", err, want)
		}
	}
}

// TestHandoffSinkAndPageHistory: a batch accepted twice is queued once;
// one node's page history of a subnet imports into another, whose seen-set
// then holds those pages with their validators.
func TestHandoffSinkAndPageHistory(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 4, HostsPerIP: 2, PagesPerHost: 5, CanonicalLinks: true})
	tree, err := hierarchy.Default()
	if err != nil {
		t.Skip(err)
	}
	emu := newEmulation(t, tree, web, 1)
	open := func(seeds []string) *Node {
		cfg := TestnetConfig()
		cfg.DataDir, cfg.Hierarchy, cfg.Logger, cfg.AddrMapper = t.TempDir(), tree, quiet, emu.Map
		cfg.Overlay.CrawlerAddr = emu.crawler[0]
		cfg.Overlay.ProbeGuard = func(netip.Addr) error { return nil }
		cfg.Measurer = measurer{emu, 0}
		cfg.Crawl.Progress = -1
		cfg.Crawl.Fetch = fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Resolver: web, Logger: quiet}
		cfg.Seeds = seeds
		cfg.SeedWait.Members = 1 // alone, and knows it
		n, err := Open(context.Background(), cfg)
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { n.Close() })
		return n
	}
	a := open(web.Seeds())
	ctx := context.Background()
	batch := []string{web.PageURL(0, 1), web.PageURL(0, 2), web.PageURL(1, 1)}
	for range 2 {
		if err := a.Engine().Accept(ctx, batch); err != nil {
			t.Fatal(err)
		}
	}
	if q := a.Engine().Frontier().Stats().Queued; q != int64(len(batch)) {
		t.Fatalf("a batch accepted twice queued %d URLs, want %d", q, len(batch))
	}
	// Crawl everything on a (it owns every subnet: it is alone).
	rctx, cancel := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Run(rctx) }()
	// Wait for the frontier to drain too: the web counts a page when it
	// serves it, the frontier records its history only when the crawler
	// has processed the response, and cancelling in between loses it.
	deadline := time.Now().Add(20 * time.Second)
	for (web.Stats().UniquePages < int64(web.TotalPages()) || a.Engine().Frontier().Stats().Queued > 0) && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := web.Stats().UniquePages; got != int64(web.TotalPages()) {
		t.Fatalf("one node crawled %d of %d pages", got, web.TotalPages())
	}

	ip, _ := web.LookupNetIP(ctx, "ip", web.Hosts()[0])
	s := tree.SmallestNonUnary(emu.Map(ip[0]))
	var pages []overlay.PageState
	ph := &pageHistory{eng: a.Engine(), router: a.router}
	if err := ph.History(ctx, s, netip.Prefix{}, func(p overlay.PageState) error { pages = append(pages, p); return nil }); err != nil {
		t.Fatal(err)
	}
	want := 2 * web.Config().PagesPerHost // two hosts per IP, one IP per subnet
	if len(pages) != want {
		t.Fatalf("history of subnet %d has %d pages, want %d", s, len(pages), want)
	}
	// a block's history: the pages of the hosts in that /24 only
	count := func(block netip.Prefix) int {
		n := 0
		if err := ph.History(ctx, s, block, func(overlay.PageState) error { n++; return nil }); err != nil {
			t.Fatal(err)
		}
		return n
	}
	block := delegation.BlockOf(emu.Map(ip[0]))
	if n := count(block); n != want {
		t.Fatalf("history of block %v (the hosts' own) has %d pages, want %d", block, n, want)
	}
	elsewhere := netip.PrefixFrom(block.Addr().Prev(), 24).Masked() // the /24 below
	if n := count(elsewhere); n != 0 {
		t.Fatalf("history of block %v (no host there) has %d pages, want none", elsewhere, n)
	}
	for _, p := range pages {
		if p.ETag == "" || len(p.ContentHash) == 0 || p.LastFetch.IsZero() || len(p.FetchTimes) == 0 {
			t.Fatalf("page state without validators or timings: %+v", p)
		}
	}
	b := open(nil)
	// b owns the subnet (alone, it delegates it to itself): recovered pages
	// arrive after a gain, when the record is in the cache
	if _, err := b.Peer().Join(ctx); err != nil {
		t.Fatal(err)
	}
	if d, err := b.Peer().Delegate(ctx, emu.Map(ip[0])); err != nil || d.Owner != b.Peer().CrawlerID() {
		t.Fatalf("b delegating the subnet: %v %v", d, err)
	}
	// Import keeps every page of the subnet, but schedules revisits only
	// of the hosts this crawler owns: while another crawler owns the
	// subnet (it moved on before its history arrived), the pages are kept
	// off the schedule, for the crawler it moved to
	other := &Router{peer: elsewhereOwner{b.router.peer}, tree: b.router.tree, mapAddr: b.router.mapAddr, res: b.router.res, resolveHost: b.router.resolveHost,
		log: quiet}
	if err := (&pageHistory{eng: b.Engine(), router: other, monitor: true, sleep: time.Hour}).Import(ctx, s, pages); err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		h, ok, err := b.Engine().Frontier().History(p.URL)
		if err != nil || !ok || h.ETag != p.ETag || !h.NextVisit.IsZero() {
			t.Fatalf("%s, a page of another crawler's host: history %v %+v (%v); want it kept, off the schedule", p.URL, ok, h, err)
		}
		if seen, _ := b.Engine().Frontier().Seen(p.URL); seen {
			t.Fatalf("%s, a page of another crawler's host, in the seen-set: a link to it would not reach its owner", p.URL)
		}
	}
	// a page of another subnet is not imported where hosts are resolved
	// (as the owner of the whole subnet, none is)
	var stray string
	for _, host := range web.Hosts() {
		hip, _ := web.LookupNetIP(ctx, "ip", host)
		if tree.SmallestNonUnary(emu.Map(hip[0])) != s {
			stray = "http://" + host + "/stray.html"
			break
		}
	}
	if err := (&pageHistory{eng: b.Engine(), router: other}).Import(ctx, s, []overlay.PageState{{URL: stray, ETag: `"x"`, LastFetch: time.Now(), HTTPStatus: 200}}); err != nil {
		t.Fatal(err)
	}
	if _, ok, _ := b.Engine().Frontier().History(stray); ok {
		t.Fatalf("%s, a page of another subnet, imported into subnet %d's history", stray, s)
	}
	// once this crawler owns them, the same pages go on the schedule: half
	// while a block of the subnet is another crawler's (each host is then
	// checked), the rest as the subnet's sole owner (none is)
	blocked := &Router{peer: blockedOwner{b.router.peer}, tree: b.router.tree, mapAddr: b.router.mapAddr, res: b.router.res, resolveHost: b.router.resolveHost,
		log: quiet}
	if err := (&pageHistory{eng: b.Engine(), router: blocked, monitor: true, sleep: time.Hour}).Import(ctx, s, pages[:len(pages)/2]); err != nil {
		t.Fatal(err)
	}
	pb := &pageHistory{eng: b.Engine(), router: b.router, monitor: true, sleep: time.Hour}
	if err := pb.Import(ctx, s, pages[len(pages)/2:]); err != nil {
		t.Fatal(err)
	}
	for _, p := range pages {
		h, ok, err := b.Engine().Frontier().History(p.URL)
		if err != nil || !ok || h.ETag != p.ETag || h.Fetches != 1 || h.Changes != 1 || h.NextVisit.IsZero() {
			t.Fatalf("imported history of %s: %+v %v %v; want it on the schedule", p.URL, h, ok, err)
		}
		if seen, _ := b.Engine().Frontier().Seen(p.URL); !seen {
			t.Fatalf("%s not in the seen-set after import", p.URL)
		}
	}
}

// elsewhereOwner is an overlay peer for which every address is another
// crawler's.
type elsewhereOwner struct{ owner }

func (e elsewhereOwner) Delegate(ctx context.Context, ip netip.Addr) (delegation.Decision, error) {
	d, err := e.owner.Delegate(ctx, ip)
	d.Owner = "someone-else"
	return d, err
}

func (e elsewhereOwner) CachedOwner(netip.Addr) (delegation.CrawlerID, bool) {
	return "someone-else", true
}

func (e elsewhereOwner) CachedRecord(s hierarchy.NodeID) (delegation.Record, bool) {
	return delegation.Record{Subnet: s, Owner: "someone-else"}, true
}

// blockedOwner is an overlay peer whose record of every subnet also gives
// an unrelated block to another crawler: hosts must be checked one by one.
type blockedOwner struct{ owner }

func (o blockedOwner) CachedRecord(s hierarchy.NodeID) (delegation.Record, bool) {
	rec, ok := o.owner.CachedRecord(s)
	rec.Blocks = append(rec.Blocks, delegation.BlockDelegation{Host: netip.MustParseAddr("192.0.2.1"), Owner: "someone-else"})
	return rec, ok
}

// Load balancing is second-best by default, each move held 10 minutes
// (see Config.Balance); the file's keys change both, and a misspelt mode
// or hold is an error naming the key.
func TestBalanceSetting(t *testing.T) {
	if c := DefaultConfig(); c.Balance != delegation.BalanceSecondBest || c.BalanceHold != 10*time.Minute {
		t.Fatalf("default balance %v held %v, want second-best held 10m", c.Balance, c.BalanceHold)
	}
	c, err := Parse([]byte(`{"data_dir": "d", "balance": "release", "balance_hold": "0s"}`))
	if err != nil || c.Balance != delegation.BalanceRelease || c.BalanceHold != 0 {
		t.Fatalf("balance release, no hold: %v %v %v", c.Balance, c.BalanceHold, err)
	}
	if c, err = Parse([]byte(`{"data_dir": "d", "balance": "off"}`)); err != nil || c.Balance != delegation.BalanceOff {
		t.Fatalf("balance off: %v %v", c.Balance, err)
	}
	if _, err = Parse([]byte(`{"data_dir": "d", "balance_hold": "soon"}`)); err == nil || !strings.Contains(err.Error(), "balance_hold") {
		t.Fatalf("balance_hold soon: %v", err)
	}
	if _, err = Parse([]byte(`{"data_dir": "d", "balance": "fair"}`)); err == nil || !strings.Contains(err.Error(), "balance") {
		t.Fatalf("balance fair: %v", err)
	}
}

// A volunteer's node keeps only peers' public addresses; a testnet, or a
// network on a LAN (private_peers), keeps private ones too.
func TestPrivatePeersSetting(t *testing.T) {
	if !DefaultConfig().Overlay.PublicDHTFilters || TestnetConfig().Overlay.PublicDHTFilters {
		t.Fatal("public address filters: want on by default, off on a testnet")
	}
	c, err := Parse([]byte(`{"data_dir": "d", "private_peers": true}`))
	if err != nil || c.Overlay.PublicDHTFilters {
		t.Fatalf("private_peers = true: filters %v, %v", c.Overlay.PublicDHTFilters, err)
	}
	if c, err = Parse([]byte(`{"data_dir": "d"}`)); err != nil || !c.Overlay.PublicDHTFilters {
		t.Fatalf("default: filters %v, %v", c.Overlay.PublicDHTFilters, err)
	}
	if c, err = Parse([]byte(`{"data_dir": "d", "testnet": true}`)); err != nil || c.Overlay.PublicDHTFilters {
		t.Fatalf("testnet: filters %v, %v", c.Overlay.PublicDHTFilters, err)
	}
}

// SWIM is the membership by default, on a volunteer's node and a testnet's;
// heartbeat stays selectable, and another name is an error naming the key.
func TestMembershipSetting(t *testing.T) {
	for name, c := range map[string]Config{"default": DefaultConfig(), "testnet": TestnetConfig()} {
		if c.Overlay.Membership != overlay.MembershipSWIM {
			t.Fatalf("%s: membership %q, want %q", name, c.Overlay.Membership, overlay.MembershipSWIM)
		}
	}
	for file, want := range map[string]string{
		`{"data_dir": "d"}`:                                             overlay.MembershipSWIM,
		`{"data_dir": "d", "testnet": true}`:                            overlay.MembershipSWIM,
		`{"data_dir": "d", "membership": "swim"}`:                       overlay.MembershipSWIM,
		`{"data_dir": "d", "membership": "heartbeat"}`:                  overlay.MembershipHeartbeat,
		`{"data_dir": "d", "testnet": true, "membership": "heartbeat"}`: overlay.MembershipHeartbeat,
	} {
		c, err := Parse([]byte(file))
		if err != nil || c.Overlay.Membership != want {
			t.Fatalf("%s: membership %q, %v; want %q", file, c.Overlay.Membership, err, want)
		}
	}
	if _, err := Parse([]byte(`{"data_dir": "d", "membership": "gossip"}`)); err == nil || !strings.Contains(err.Error(), "membership") {
		t.Fatalf("membership gossip: %v", err)
	}
}
