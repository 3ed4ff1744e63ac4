package node

import (
	"bytes"
	"context"
	"errors"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/testutil"

	"github.com/micra-crawler/micra/node/release"
	"github.com/micra-crawler/micra/node/upgrade"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// releaseFeed makes a release repository at the clock's time, signs a
// binary for this platform as version, and publishes it to a feed
// directory; it returns the repository, the feed and the root to trust.
func releaseFeed(t *testing.T, now func() time.Time, version string) (*release.Repo, string, string) {
	t.Helper()
	dir := t.TempDir()
	repo, err := release.Init(filepath.Join(dir, "repo"), release.InitOptions{}, now)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(dir, "micra-new")
	if err := os.WriteFile(bin, []byte("micra "+version), 0o755); err != nil {
		t.Fatal(err)
	}
	goos, goarch := release.Platform()
	if _, err := repo.AddTarget(bin, release.Target{Version: version, OS: goos, Arch: goarch}); err != nil {
		t.Fatal(err)
	}
	feed := filepath.Join(dir, "feed")
	if err := repo.Publish(feed); err != nil {
		t.Fatal(err)
	}
	return repo, feed, filepath.Join(dir, "repo", "metadata", "1.root.json")
}

// logBuffer collects log lines, safe for the node's goroutines.
type logBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuffer) count(s string) int {
	l.mu.Lock()
	defer l.mu.Unlock()
	return strings.Count(l.b.String(), s)
}

// notify: a feed's newer release is verified (metadata and binary), said
// once in the log and in the status; once its timestamp expires (a frozen
// feed) the next check is refused, counted, and said once.
func TestUpdatesNotifyFromFeed(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, feed, root := releaseFeed(t, clock, "v9.9.9")
	var logs logBuffer
	reg := prometheus.NewRegistry()
	cfg := Config{DataDir: t.TempDir(), Release: ReleaseConfig{Root: root, Feed: feed, Now: clock}}
	u, err := newUpdates(cfg, slog.New(slog.NewTextHandler(&logs, nil)), reg)
	if err != nil {
		t.Fatal(err)
	}
	for range 2 {
		if err := u.checkFeed(); err != nil {
			t.Fatal(err)
		}
	}
	s := u.status()
	if !s.Trusted || s.AutoUpdate != AutoUpdateNotify || s.Available == nil || s.Available.Version != "v9.9.9" ||
		!s.BinaryVerified || s.RootVersion != 1 || s.Refusal != "" {
		t.Fatalf("status %+v", s)
	}
	if n := logs.count(`msg="verified newer release available"`); n != 1 {
		t.Errorf("logged available %d times, want once", n)
	}
	if v := testutil.ToFloat64(u.available); v != 1 {
		t.Errorf("available gauge %v", v)
	}
	// the trusted root was installed in the data directory
	if _, err := os.Stat(filepath.Join(cfg.DataDir, "release", "root.json")); err != nil {
		t.Fatal(err)
	}

	now = now.Add(release.DefaultExpiry.Timestamp + time.Minute)
	for range 2 {
		if err := u.checkFeed(); err == nil {
			t.Fatal("a frozen feed accepted")
		}
	}
	s = u.status()
	if !strings.Contains(s.Refusal, "timestamp: expired") || !s.RefusedAt.Equal(now) {
		t.Fatalf("status after expiry %+v", s)
	}
	if v := testutil.ToFloat64(u.refused.WithLabelValues("expired")); v != 2 {
		t.Errorf("refused{expired} = %v, want 2", v)
	}
	if n := logs.count(`msg="release refused"`); n != 1 {
		t.Errorf("logged the refusal %d times, want once", n)
	}
}

// A feed whose binary differs from its signed targets: the metadata says a
// release is available, the binary is refused and never marked verified.
func TestUpdatesFeedBinaryRefused(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	clock := func() time.Time { return now }
	_, feed, root := releaseFeed(t, clock, "v9.9.9")
	bins, _ := filepath.Glob(filepath.Join(feed, "targets", "*"))
	if len(bins) != 1 {
		t.Fatal(bins)
	}
	if err := os.WriteFile(bins[0], []byte("micra v9.9.X"), 0o644); err != nil {
		t.Fatal(err)
	}
	u, err := newUpdates(Config{DataDir: t.TempDir(), Release: ReleaseConfig{Root: root, Feed: feed, Now: clock}}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if err := u.checkFeed(); err == nil || !strings.Contains(err.Error(), "binary differs") {
		t.Fatalf("checkFeed: %v", err)
	}
	if s := u.status(); s.BinaryVerified {
		t.Fatalf("status %+v", s)
	}
	if v := testutil.ToFloat64(u.refused.WithLabelValues("hash")); v != 1 {
		t.Errorf("refused{hash} = %v", v)
	}
}

func TestUpdatesSettings(t *testing.T) {
	u, err := newUpdates(Config{DataDir: t.TempDir()}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	if s := u.status(); s.Trusted || !strings.Contains(s.Note, "release_root unset") {
		t.Errorf("no root: %+v", s)
	}
	if _, err := newUpdates(Config{DataDir: t.TempDir(), Release: ReleaseConfig{Root: filepath.Join(t.TempDir(), "none.json")}}, quiet, prometheus.NewRegistry()); err == nil ||
		!strings.Contains(err.Error(), "release_root") {
		t.Errorf("a missing release_root: %v", err)
	}
	c := TestnetConfig()
	c.DataDir = t.TempDir()
	c.Release.AutoUpdate = AutoUpdateOn
	if err := c.Validate(); err == nil || !strings.Contains(err.Error(), `auto_update = "on" needs a supervisor`) {
		t.Errorf("on without a supervisor: %v", err)
	}
	c.Release.Supervised = true
	if err := c.Validate(); err != nil {
		t.Errorf("on, supervised: %v", err)
	}
	if _, err := ParseAutoUpdate("sometimes"); err == nil {
		t.Error("auto_update sometimes parsed")
	}
}

// A running node's status says a verified newer release is available.
func TestControlStatusReleaseAvailable(t *testing.T) {
	_, feed, root := releaseFeed(t, time.Now, "v9.9.9")
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := openCluster(t, web, 1, false, func(_ int, cfg *Config) {
		cfg.Release.Root, cfg.Release.Feed = root, feed
	})
	c.runAll()
	cl := controlClient(t, c, 0)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var s StatusInfo
	waitFor(t, 20*time.Second, "the release in the status", func() bool {
		var err error
		s, err = cl.Status(ctx)
		return err == nil && s.Release != nil && s.Release.Available != nil && s.Release.BinaryVerified
	})
	if r := s.Release; r.Available.Version != "v9.9.9" || r.Running != Build().Version || r.Feed != feed {
		t.Fatalf("release status %+v", r)
	}
}

// A release published to one node's feed reaches the others over the
// overlay: each verifies the announced metadata against its own trusted
// root, fetches the binary from a member holding it, checks it against the
// signed hash and then serves it too.
func TestReleaseSpreadsOverOverlay(t *testing.T) {
	dir := t.TempDir()
	repo, err := release.Init(filepath.Join(dir, "repo"), release.InitOptions{}, time.Now)
	if err != nil {
		t.Fatal(err)
	}
	bin := make([]byte, 700<<10)
	for i := range bin {
		bin[i] = byte(i * 7)
	}
	binPath := filepath.Join(dir, "micra-new")
	if err := os.WriteFile(binPath, bin, 0o755); err != nil {
		t.Fatal(err)
	}
	goos, goarch := release.Platform()
	if _, err := repo.AddTarget(binPath, release.Target{Version: "v9.9.9", OS: goos, Arch: goarch}); err != nil {
		t.Fatal(err)
	}
	feed := filepath.Join(dir, "feed")
	if err := repo.Publish(feed); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(dir, "repo", "metadata", "1.root.json")
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := openCluster(t, web, 3, false, func(i int, cfg *Config) {
		cfg.Release.Root = root
		if i == 0 {
			cfg.Release.Feed = feed
		}
	})
	c.runAll()
	for i := range c.nodes {
		waitFor(t, 60*time.Second, "the release's binary on every node", func() bool {
			s := c.nodes[i].updates.status()
			return s.Available != nil && s.BinaryVerified
		})
		s := c.nodes[i].updates.status()
		got, err := os.ReadFile(s.Binary)
		if err != nil || !bytes.Equal(got, bin) || s.Available.Version != "v9.9.9" {
			t.Fatalf("node %d: %s: %d bytes, %v (status %+v)", i, s.Binary, len(got), err, s)
		}
	}
}

// auto_update = on under a supervisor: the verified binary from the feed
// replaces the executable (the previous one kept), the release is put on
// trial, and Run ends with ErrRestart after the graceful stop. A release
// rolled back on this node before is not installed again.
func TestAutoUpdateInstallsAndRestarts(t *testing.T) {
	_, feed, root := releaseFeed(t, time.Now, "v9.9.9")
	exe := filepath.Join(t.TempDir(), "micra")
	if err := os.WriteFile(exe, []byte("the running build"), 0o755); err != nil {
		t.Fatal(err)
	}
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := openCluster(t, web, 1, false, func(_ int, cfg *Config) {
		cfg.Release = ReleaseConfig{AutoUpdate: AutoUpdateOn, Supervised: true, Root: root, Feed: feed, Executable: exe}
	})
	c.run(0)
	select {
	case err := <-c.done[0]:
		c.cancel[0] = nil
		if !errors.Is(err, ErrRestart) {
			t.Fatalf("Run: %v, want ErrRestart", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop to restart on the release")
	}
	if b, _ := os.ReadFile(exe); string(b) != "micra v9.9.9" {
		t.Fatalf("executable after the install: %q", b)
	}
	if b, _ := os.ReadFile(exe + ".prev"); string(b) != "the running build" {
		t.Fatalf("previous binary: %q", b)
	}
	rel := filepath.Join(c.nodes[0].cfg.DataDir, "release")
	p, ok, err := upgrade.ReadPending(rel)
	if err != nil || !ok || p.To != "v9.9.9" || p.From != Build().Version {
		t.Fatalf("on trial: %+v %v %v", p, ok, err)
	}
	if h, ok, _ := upgrade.ReadHealthy(rel); !ok || h.Version != Build().Version {
		t.Errorf("the healthy marker of the run before: %+v", h)
	}
	if s := c.nodes[0].Status().Release; s.OnTrial == nil || s.OnTrial.To != "v9.9.9" {
		t.Errorf("status %+v", s)
	}
}

func TestAutoUpdateSkipsRolledBackRelease(t *testing.T) {
	_, feed, root := releaseFeed(t, time.Now, "v9.9.9")
	exe := filepath.Join(t.TempDir(), "micra")
	if err := os.WriteFile(exe, []byte("the running build"), 0o755); err != nil {
		t.Fatal(err)
	}
	var logs logBuffer
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := openCluster(t, web, 1, false, func(_ int, cfg *Config) {
		cfg.Release = ReleaseConfig{AutoUpdate: AutoUpdateOn, Supervised: true, Root: root, Feed: feed, Executable: exe}
		cfg.Logger = slog.New(slog.NewTextHandler(&logs, nil))
		// what a supervisor wrote when this release failed here before
		b, _ := release.ReadBundle(feed)
		k, err := release.OpenKeeper(filepath.Join(cfg.DataDir, "release"), root, runtime.GOOS, runtime.GOARCH, "")
		if err != nil {
			t.Fatal(err)
		}
		r, _, err := k.Offer(b, time.Now())
		if err != nil {
			t.Fatal(err)
		}
		scratch, stage := filepath.Join(t.TempDir(), "micra"), filepath.Join(t.TempDir(), "bad")
		for _, f := range []string{scratch, stage} {
			if err := os.WriteFile(f, []byte("x"), 0o755); err != nil {
				t.Fatal(err)
			}
		}
		dir := filepath.Join(cfg.DataDir, "release")
		if err := upgrade.Install(scratch, stage, dir, upgrade.Pending{To: "v9.9.9", SHA256: r.SHA256}); err != nil {
			t.Fatal(err)
		}
		if _, err := upgrade.RollBack(dir, "exited 3 times before it was healthy", time.Now()); err != nil {
			t.Fatal(err)
		}
	})
	c.run(0)
	waitFor(t, 30*time.Second, "the refusal to install in the log", func() bool {
		return logs.count("release not installed: it was rolled back on this node") == 1
	})
	if b, _ := os.ReadFile(exe); string(b) != "the running build" {
		t.Fatalf("executable replaced by a release rolled back before: %q", b)
	}
	if s := c.nodes[0].Status().Release; s.RolledBack == nil || s.RolledBack.Version != "v9.9.9" || s.InstallAt != nil {
		t.Errorf("status %+v", s)
	}
}

// A node that held a release before it stopped announces it again once it
// is back, from the bundle it kept, with no feed and before anyone else
// announces: a member that joins later fetches the binary from it.
func TestRestartedHolderAnnouncesAgain(t *testing.T) {
	_, feed, root := releaseFeed(t, time.Now, "v9.9.9")
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := newCluster(t, web, 2)
	data := t.TempDir()
	withFeed := func(_ int, cfg *Config) { cfg.DataDir, cfg.Release.Root, cfg.Release.Feed = data, root, feed }
	c.open(t, 0, nil, false, withFeed)
	c.run(0)
	waitFor(t, 30*time.Second, "the binary from the feed", func() bool { return c.nodes[0].updates.status().BinaryVerified })
	c.stop(t, 0)

	boot := c.open(t, 0, nil, false, func(_ int, cfg *Config) { cfg.DataDir, cfg.Release.Root = data, root })
	c.run(0)
	c.open(t, 1, boot, false, func(_ int, cfg *Config) { cfg.Release.Root = root })
	c.run(1)
	waitFor(t, 60*time.Second, "the binary on the node that joined", func() bool {
		s := c.nodes[1].updates.status()
		return s.Available != nil && s.BinaryVerified
	})
}

// A release is held back while more members report rolling it back than
// run it confirmed: the first rollback stops the others' waves, a single
// rollback among nodes that run it healthy does not.
func TestReleaseHeldBackByRollbacks(t *testing.T) {
	bad := release.Release{Version: "v0.3.0", SHA256: strings.Repeat("ab", 32)}
	rb := []overlay.RolledBack{{SHA256: bad.SHA256, Version: "v0.3.0", Reason: "exited 3 times"}}
	for _, c := range []struct {
		name    string
		reports []overlay.ReleaseReport
		held    bool
	}{
		{"nobody tried it", []overlay.ReleaseReport{{Running: "v0.2.0"}, {Running: "v0.2.0"}}, false},
		{"one rolled back, none runs it", []overlay.ReleaseReport{{Running: "v0.2.0", RolledBack: rb}, {Running: "v0.2.0"}}, true},
		{"one rolled back, one on trial", []overlay.ReleaseReport{{Running: "v0.2.0", RolledBack: rb}, {Running: "v0.3.0", OnTrial: true}}, true},
		{"one rolled back, two run it confirmed", []overlay.ReleaseReport{{Running: "v0.2.0", RolledBack: rb}, {Running: "v0.3.0"}, {Running: "v0.3.0"}}, false},
		{"another release rolled back", []overlay.ReleaseReport{{Running: "v0.2.0", RolledBack: []overlay.RolledBack{{SHA256: strings.Repeat("cd", 32)}}}}, false},
	} {
		why, held := heldBackBy(c.reports, bad)
		if held != c.held {
			t.Errorf("%s: held back %v (%q), want %v", c.name, held, why, c.held)
		}
	}
	n := summarize([]overlay.ReleaseReport{{Running: "v0.2.0", RolledBack: rb}, {Running: "v0.2.0", RolledBack: rb}, {Running: "v0.3.0", OnTrial: true}})
	if n.Members != 3 || n.Running["v0.2.0"] != 2 || n.Running["v0.3.0"] != 1 || n.OnTrial != 1 ||
		len(n.RolledBack) != 1 || n.RolledBack[0].Nodes != 2 || n.RolledBack[0].Version != "v0.3.0" {
		t.Errorf("summary %+v", n)
	}
}

// A release on trial is healthy once it is ready, a member and making
// progress: not while it has peers to join and hears none, nor while
// records wait and none was delivered.
func TestHealthBeyondReady(t *testing.T) {
	for _, c := range []struct {
		bootstraps, members, waiting int
		delivered                    int64
		ok                           bool
	}{
		{0, 1, 0, 0, true},  // alone on purpose, nothing to do
		{2, 1, 0, 0, false}, // has peers to join, hears none
		{2, 3, 0, 0, true},  // a member with nothing to deliver
		{2, 3, 40, 0, false},
		{2, 3, 40, 1, true},
	} {
		ok, why := healthOf(c.bootstraps, c.members, c.waiting, c.delivered)
		if ok != c.ok || ok == (why != "") {
			t.Errorf("%+v: healthy %v (%q)", c, ok, why)
		}
	}
}

// A node that stops to restart on a release does not announce its leave:
// its peers declare it dead only for its silence and hold its subnets for
// their owner grace, so it comes back to its own frontier and outbox
// instead of finding them crawled again. A plain stop still leaves.
func TestRestartOnReleaseHoldsSubnets(t *testing.T) {
	_, feed, root := releaseFeed(t, time.Now, "v9.9.9")
	exe := filepath.Join(t.TempDir(), "micra")
	if err := os.WriteFile(exe, []byte("the running build"), 0o755); err != nil {
		t.Fatal(err)
	}
	web := startWeb(t, synthweb.Config{Hosts: 1, HostsPerIP: 1, PagesPerHost: 1})
	c := openCluster(t, web, 2, false, func(i int, cfg *Config) {
		if i == 0 {
			cfg.Release = ReleaseConfig{AutoUpdate: AutoUpdateOn, Supervised: true, Root: root, Feed: feed, Executable: exe}
		}
	})
	restarter := c.nodes[0].Peer().ID()
	events := make(chan overlay.MemberEvent, 16)
	c.nodes[1].Peer().Members().OnChange(func(ev overlay.MemberEvent) {
		if ev.Peer == restarter && ev.Dead {
			events <- ev
		}
	})
	c.run(1)
	c.run(0)
	select {
	case err := <-c.done[0]:
		c.cancel[0] = nil
		if !errors.Is(err, ErrRestart) {
			t.Fatalf("Run: %v, want ErrRestart", err)
		}
	case <-time.After(60 * time.Second):
		t.Fatal("the node did not stop to restart on the release")
	}
	crawler := c.nodes[0].Peer().CrawlerID()
	if err := c.nodes[0].Close(); err != nil {
		t.Fatal(err)
	}
	c.nodes[0] = nil
	select {
	case ev := <-events:
		if ev.Reason != overlay.ReasonFailed {
			t.Fatalf("the restarting node declared dead with reason %q, want %q (no leave announced)", ev.Reason, overlay.ReasonFailed)
		}
		if !c.nodes[1].Peer().Members().Held(crawler) {
			t.Errorf("the restarting node's subnets are not held by its peer")
		}
	case <-time.After(30 * time.Second):
		t.Fatal("the restarting node was never declared dead")
	}
}
