package node

// Signed releases on a node (docs/releases.md): the trusted root and what
// it accepted (release.Keeper in DATA/release), bundles offered from the
// release_feed directory or the overlay, and the log line, status and
// metrics that say a verified newer release is available.

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/node/release"
	"github.com/micra-crawler/micra/node/upgrade"
	"github.com/micra-crawler/micra/overlay"
)

// AutoUpdate is what a node does with signed releases.
type AutoUpdate string

const (
	// AutoUpdateNotify (the default, also ""): verify releases offered and
	// say when a newer one is available; install nothing.
	AutoUpdateNotify AutoUpdate = "notify"
	// AutoUpdateOff: check nothing.
	AutoUpdateOff AutoUpdate = "off"
	// AutoUpdateOn: install a verified newer release (with rollback).
	AutoUpdateOn AutoUpdate = "on"
)

// ErrRestart is what Run returns when it stopped to restart on a release
// it installed: the process exits with upgrade.ExitRestart and its
// supervisor starts the new binary.
var ErrRestart = errors.New("node: stopped to restart on a newly installed release")

// ParseAutoUpdate reads the auto_update setting.
func ParseAutoUpdate(s string) (AutoUpdate, error) {
	switch m := AutoUpdate(s); m {
	case AutoUpdateOff, AutoUpdateNotify, AutoUpdateOn:
		return m, nil
	case "":
		return AutoUpdateNotify, nil
	}
	return "", fmt.Errorf("%q: want off, notify or on", s)
}

// ReleaseConfig is how a node checks signed releases.
type ReleaseConfig struct {
	AutoUpdate AutoUpdate // "" is AutoUpdateNotify
	// Root is the trusted root to install in DataDir/release when none is
	// there yet (the release_root setting).
	Root string
	// Feed is a published release repository read every FeedEvery
	// (default 1 min) and offered like a bundle from the overlay.
	Feed      string
	FeedEvery time.Duration
	// Now is the clock releases are verified against (nil: time.Now).
	Now func() time.Time
	// Supervised: the node runs under an upgrade.Supervisor (micra node
	// starts one itself with auto_update = on), which alone can restart it
	// on a new binary and roll a failed one back: "on" needs it.
	Supervised bool
	// Executable is the binary a release replaces (default os.Executable).
	Executable string
	// Rate is the bytes a second this node serves release binaries at, to
	// all members together (default overlay's 4 MiB).
	Rate int
}

func (c ReleaseConfig) validate() error {
	switch c.AutoUpdate {
	case "", AutoUpdateOff, AutoUpdateNotify:
	case AutoUpdateOn:
		if !c.Supervised {
			return errors.New(`node: auto_update = "on" needs a supervisor to restart the node on a release and roll it back (micra node starts one itself; a program embedding package node runs upgrade.Supervisor)`)
		}
	default:
		return fmt.Errorf("node: auto_update %q: want off, notify or on", c.AutoUpdate)
	}
	if c.Rate < 0 {
		return fmt.Errorf("node: release Rate %d is negative", c.Rate)
	}
	if c.FeedEvery < 0 {
		return fmt.Errorf("node: release FeedEvery %v is negative", c.FeedEvery)
	}
	return nil
}

// ReleaseStatus is the release part of GET /v1/status.
type ReleaseStatus struct {
	AutoUpdate AutoUpdate `json:"auto_update"`
	// Trusted: the node has a trusted root; Note says why not.
	Trusted bool   `json:"trusted"`
	Note    string `json:"note,omitempty"`
	Feed    string `json:"feed,omitempty"`
	release.Status
	// BinaryVerified: the available release's binary was fetched (from a
	// member or the feed) and matches its targets metadata; Binary is
	// where it is kept.
	BinaryVerified bool   `json:"binary_verified,omitempty"`
	Binary         string `json:"binary,omitempty"`
	// InstallAt: with auto_update = on, when this node installs the
	// available release (its wave in the rollout window).
	InstallAt *time.Time `json:"install_at,omitempty"`
	// OnTrial: this run is a release on trial (its supervisor rolls it
	// back unless it proves healthy). RolledBack: the last release rolled
	// back on this node, and why.
	OnTrial    *upgrade.Pending  `json:"on_trial,omitempty"`
	RolledBack *upgrade.Rollback `json:"rolled_back,omitempty"`
	// Paused: with auto_update = on, the available release is held back
	// here because members rolled it back (why, and since when).
	Paused      string     `json:"paused,omitempty"`
	PausedSince *time.Time `json:"paused_since,omitempty"`
	// Network is what the members' release reports say, this node's
	// included.
	Network *NetworkReleases `json:"network,omitempty"`
}

// NetworkReleases is what the members heard since this node started
// report of their releases (in their release announcements, signed by
// gossip), this node included.
type NetworkReleases struct {
	Members int            `json:"members"` // nodes reporting
	Running map[string]int `json:"running"` // version → nodes running it
	OnTrial int            `json:"on_trial"`
	// RolledBack is each release members rolled back, most nodes first.
	RolledBack []NetworkRollback `json:"rolled_back,omitempty"`
}

// NetworkRollback is one release rolled back on Nodes members.
type NetworkRollback struct {
	Version string `json:"version"`
	SHA256  string `json:"sha256"`
	Nodes   int    `json:"nodes"`
	Reason  string `json:"reason"` // one member's
}

// pauseRecheck is how often a release held back is judged again.
const pauseRecheck = 5 * time.Second

// bundleFile keeps the newest accepted bundle's wire form in the release
// directory.
const bundleFile = "bundle.mrb"

// updates is a node's release checking.
type updates struct {
	cfg    ReleaseConfig
	log    *slog.Logger
	now    func() time.Time
	keeper *release.Keeper // nil: off, or no trusted root (note)
	note   string

	refused   *prometheus.CounterVec
	available prometheus.Gauge

	store string // DATA/release/targets: verified binaries, served to members

	ctx    context.Context // ends at close: fetches stop
	cancel context.CancelFunc
	wg     sync.WaitGroup

	mu          sync.Mutex
	rels        *overlay.Releases // the overlay's release channel (nil: off, or no root)
	lastRefusal string            // logged once until another one
	binaryOK    map[string]bool   // sha256 → the binary was verified
	fetching    string            // the sha256 being fetched ("" none)
	bundle      []byte            // the wire form of the newest accepted bundle
	self        string            // this node's peer id (its wave delay)
	members     *overlay.Members  // the live members, who share the rollout window
	restart     func()            // ends Run to restart on an installed release (set by Run)
	scheduled   map[string]time.Time
	installed   *upgrade.Pending
	paused      string          // why the release due is held back ("" none)
	pausedSince time.Time       // since when
	heard       map[string]bool // peer+sha256 of members' rollbacks logged
}

func newUpdates(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*updates, error) {
	u := &updates{cfg: cfg.Release, log: log, now: cfg.Release.Now, binaryOK: map[string]bool{},
		store: filepath.Join(cfg.DataDir, "release", "targets"), scheduled: map[string]time.Time{}, heard: map[string]bool{}}
	u.ctx, u.cancel = context.WithCancel(context.Background())
	if u.cfg.AutoUpdate == "" {
		u.cfg.AutoUpdate = AutoUpdateNotify
	}
	if u.now == nil {
		u.now = time.Now
	}
	if u.cfg.FeedEvery == 0 {
		u.cfg.FeedEvery = time.Minute
	}
	u.refused = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "micra_node_release_refused_total",
		Help: "Release bundles this node refused, by reason (foreign, threshold, expired, rollback, hash, no_target, malformed)."}, []string{"reason"})
	u.available = prometheus.NewGauge(prometheus.GaugeOpts{Name: "micra_node_release_available",
		Help: "1 while a verified release newer than this binary is available."})
	rolledBack := prometheus.NewGaugeFunc(prometheus.GaugeOpts{Name: "micra_node_release_members_rolled_back",
		Help: "Members (this node included) that report rolling back the newest verified release."}, func() float64 {
		return float64(u.rolledBackOfAvailable())
	})
	for _, c := range []prometheus.Collector{u.refused, u.available, rolledBack} {
		if err := reg.Register(c); err != nil {
			return nil, fmt.Errorf("node: register metrics: %w", err)
		}
	}
	if u.cfg.AutoUpdate == AutoUpdateOff {
		u.note = "auto_update = off"
		return u, nil
	}
	k, err := release.OpenKeeper(filepath.Join(cfg.DataDir, "release"), u.cfg.Root, runtime.GOOS, runtime.GOARCH, Build().Version)
	if err != nil {
		if u.cfg.Root != "" {
			return nil, fmt.Errorf("node: %w", err)
		}
		// a volunteer who set nothing: no root, nothing checked, said once
		u.note = "no trusted release root (release_root unset): releases are not checked"
		log.Info("releases not checked: no trusted root (set release_root)")
		return u, nil
	}
	u.keeper = k
	return u, nil
}

// offer verifies a bundle from source (a feed directory, a peer) and says
// in the log when it makes a newer release available, or why it was
// refused (once per distinct refusal).
func (u *updates) offer(b release.Bundle, source string) (release.Release, error) {
	if u.keeper == nil {
		return release.Release{}, errors.New(u.note)
	}
	rel, fresh, err := u.keeper.Offer(b, u.now())
	if err != nil {
		u.refused.WithLabelValues(refusalReason(err)).Inc()
		u.mu.Lock()
		again := err.Error() == u.lastRefusal
		u.lastRefusal = err.Error()
		u.mu.Unlock()
		if !again {
			u.log.Warn("release refused", "from", source, "err", err)
		}
		return rel, err
	}
	if wire, err := b.Encode(); err == nil {
		held := u.holds(rel)
		u.mu.Lock()
		changed := !bytes.Equal(wire, u.bundle)
		u.bundle = wire
		rels := u.rels
		u.mu.Unlock()
		if changed {
			// kept, so a restarted node announces what it holds before
			// anyone announces to it
			if err := os.WriteFile(filepath.Join(filepath.Dir(u.store), bundleFile), wire, 0o600); err != nil {
				u.log.Warn("release bundle not kept", "err", err)
			}
		}
		if held && rel.Newer && u.cfg.AutoUpdate == AutoUpdateOn {
			u.schedule(rel) // (once per release; a restarted node takes its slot once it hears the members)
		}
		if changed && held && rels != nil {
			// fresher metadata (a new timestamp) for the release this node
			// serves: announce that from now on
			if err := rels.Announce(wire, rel.SHA256); err != nil {
				u.log.Warn("release not announced", "err", err)
			}
		}
	}
	if rel.Newer {
		u.available.Set(1)
	}
	if fresh {
		u.log.Info("verified newer release available", "version", rel.Version, "running", Build().Version,
			"target", rel.Target, "sha256", rel.SHA256, "rollout", rel.Rollout, "from", source, "auto_update", string(u.cfg.AutoUpdate))
	}
	return rel, nil
}

// holds reports whether the store has rel's binary, checked against the
// signed hash (once per binary): newer than this node or the one it runs,
// a binary held is served and announced, so a node that upgraded serves
// the others.
func (u *updates) holds(rel release.Release) bool {
	u.mu.Lock()
	ok := u.binaryOK[rel.SHA256]
	u.mu.Unlock()
	if ok {
		return true
	}
	f, err := os.Open(filepath.Join(u.store, rel.SHA256))
	if err != nil {
		return false
	}
	defer f.Close()
	if err := rel.Check(f); err != nil {
		return false
	}
	u.mu.Lock()
	u.binaryOK[rel.SHA256] = true
	u.mu.Unlock()
	return true
}

// checkFeed offers the feed directory's bundle, and checks the binary it
// holds for a newer release.
func (u *updates) checkFeed() error {
	b, err := release.ReadBundle(u.cfg.Feed)
	if err != nil {
		return err
	}
	rel, err := u.offer(b, u.cfg.Feed)
	if err != nil || !rel.Newer {
		return err
	}
	u.mu.Lock()
	done := u.binaryOK[rel.SHA256]
	u.mu.Unlock()
	if done {
		return nil
	}
	f, err := os.Open(release.TargetPath(u.cfg.Feed, rel.SHA256))
	if err != nil {
		return fmt.Errorf("release %s: %w", rel.Version, err)
	}
	defer f.Close()
	if err := rel.Check(f); err != nil {
		u.refused.WithLabelValues(refusalReason(err)).Inc()
		u.log.Warn("release binary refused", "from", u.cfg.Feed, "err", err)
		return err
	}
	u.log.Info("release binary verified", "version", rel.Version, "sha256", rel.SHA256, "from", u.cfg.Feed)
	if _, err := f.Seek(0, io.SeekStart); err != nil {
		return err
	}
	if err := u.keep(rel, f); err != nil {
		return err
	}
	return nil
}

// keep copies a verified binary into the store (served to members from
// then on), marks it verified and announces the release as held.
func (u *updates) keep(rel release.Release, r io.Reader) error {
	if err := os.MkdirAll(u.store, 0o700); err != nil {
		return err
	}
	path := filepath.Join(u.store, rel.SHA256)
	if r != nil {
		tmp, err := os.CreateTemp(u.store, ".copy-*")
		if err != nil {
			return err
		}
		_, err = io.Copy(tmp, r)
		if err == nil {
			err = tmp.Sync()
		}
		if cerr := tmp.Close(); err == nil {
			err = cerr
		}
		if err == nil {
			err = os.Rename(tmp.Name(), path)
		}
		if err != nil {
			os.Remove(tmp.Name())
			return fmt.Errorf("release store: %w", err)
		}
	}
	u.mu.Lock()
	u.binaryOK[rel.SHA256] = true
	bundle, rels := u.bundle, u.rels
	u.mu.Unlock()
	if rels != nil && bundle != nil {
		if err := rels.Announce(bundle, rel.SHA256); err != nil {
			u.log.Warn("release not announced", "err", err)
		}
	}
	if u.cfg.AutoUpdate == AutoUpdateOn && rel.Newer {
		u.schedule(rel)
	}
	return nil
}

// schedule installs rel after this node's wave delay within the release's
// rollout window, unless it was rolled back here already.
func (u *updates) schedule(rel release.Release) {
	dir := filepath.Dir(u.store)
	if rb, ok, _ := upgrade.ReadRollback(dir); ok && rb.SHA256 == rel.SHA256 {
		u.mu.Lock()
		_, said := u.scheduled[rel.SHA256]
		u.scheduled[rel.SHA256] = time.Time{} // (never installed: said once)
		u.mu.Unlock()
		if !said {
			u.log.Warn("release not installed: it was rolled back on this node", "version", rel.Version, "reason", rb.Reason, "at", rb.At)
		}
		return
	}
	if _, ok, _ := upgrade.ReadPending(dir); ok {
		return // this run is a release on trial: it is judged first
	}
	u.mu.Lock()
	if _, ok := u.scheduled[rel.SHA256]; ok || u.ctx.Err() != nil {
		u.mu.Unlock()
		return
	}
	u.scheduled[rel.SHA256] = time.Time{} // (not shown until the delay is known)
	u.wg.Add(1)
	u.mu.Unlock()
	go func() {
		defer u.wg.Done()
		if !u.waitMembers(rel.Rollout) {
			return
		}
		var members []string
		if u.members != nil {
			for _, c := range u.members.Live() {
				members = append(members, string(c.ID))
			}
		}
		delay := upgrade.WaveDelay(u.self, rel.SHA256, rel.Rollout, members)
		u.mu.Lock()
		u.scheduled[rel.SHA256] = u.now().Add(delay)
		u.mu.Unlock()
		u.log.Info("release to be installed", "version", rel.Version, "in", delay.Round(time.Second), "rollout", rel.Rollout, "members", len(members))
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-u.ctx.Done():
			return
		case <-t.C:
		}
		if !u.waitNotHeldBack(rel) {
			return
		}
		if err := u.install(rel); err != nil {
			u.log.Error("release not installed", "version", rel.Version, "err", err)
		}
	}()
}

// membersWait bounds how long a node that knows no other member waits for
// one before taking its wave: a node that has just (re)started hears the
// others within a few heartbeats, and its slot in the rollout window
// depends on them (upgrade.WaveDelay).
const membersWait = 10 * time.Second

// waitMembers waits, at most min(membersWait, rollout/4), until this node
// knows another live member; false if the node stops meanwhile.
func (u *updates) waitMembers(rollout time.Duration) bool {
	if u.members == nil || rollout <= 0 {
		return u.ctx.Err() == nil
	}
	deadline := time.Now().Add(min(membersWait, rollout/4))
	for len(u.members.Live()) < 2 && time.Now().Before(deadline) {
		select {
		case <-u.ctx.Done():
			return false
		case <-time.After(250 * time.Millisecond):
		}
	}
	return u.ctx.Err() == nil
}

// waitNotHeldBack waits while rel is held back (heldBack), saying so in
// the log and the status; false if the node stops meanwhile.
func (u *updates) waitNotHeldBack(rel release.Release) bool {
	for {
		why, held := u.heldBack(rel)
		u.mu.Lock()
		was := u.paused
		if held {
			u.paused = rel.Version + ": " + why
			if was == "" {
				u.pausedSince = u.now()
			}
		} else {
			u.paused = ""
		}
		u.mu.Unlock()
		switch {
		case !held && was != "":
			u.log.Info("release no longer held back: installing it", "version", rel.Version)
		case held && was == "":
			u.log.Warn("release held back: members rolled it back", "version", rel.Version, "why", why)
		}
		if !held {
			return true
		}
		select {
		case <-u.ctx.Done():
			return false
		case <-time.After(pauseRecheck):
		}
	}
}

// heldBack says whether rel is not to be installed now: more members
// (heard since this node started) report rolling it back than report
// running it confirmed. A release that
// exits at start on the first nodes of its waves is then tried by no
// other; one rolled back by a single unlucky machine while others run it
// healthy goes on.
func (u *updates) heldBack(rel release.Release) (string, bool) {
	return heldBackBy(u.reports(), rel)
}

func heldBackBy(reports []overlay.ReleaseReport, rel release.Release) (string, bool) {
	rolled, confirmed := 0, 0
	for _, r := range reports {
		if r.Running == rel.Version && !r.OnTrial {
			confirmed++
		}
		for _, rb := range r.RolledBack {
			if rb.SHA256 == rel.SHA256 {
				rolled++
				break
			}
		}
	}
	if rolled > 0 && rolled > confirmed {
		return fmt.Sprintf("%d members rolled it back, %d run it confirmed", rolled, confirmed), true
	}
	return "", false
}

// report is what this node says of its releases in its announcements.
func (u *updates) report() overlay.ReleaseReport {
	dir := filepath.Dir(u.store)
	r := overlay.ReleaseReport{Running: Build().Version}
	if _, ok, _ := upgrade.ReadPending(dir); ok {
		r.OnTrial = true
	}
	if rb, ok, _ := upgrade.ReadRollback(dir); ok && rb.SHA256 != "" {
		r.RolledBack = []overlay.RolledBack{{SHA256: rb.SHA256, Version: rb.Version, Reason: rb.Reason}}
	}
	return r
}

// sendReport makes this node's report the one its announcements carry.
func (u *updates) sendReport() {
	u.mu.Lock()
	rels := u.rels
	u.mu.Unlock()
	if rels == nil {
		return
	}
	if err := rels.Report(u.report()); err != nil {
		u.log.Warn("release report not sent", "err", err)
	}
}

// reports are the members' release reports and this node's.
func (u *updates) reports() []overlay.ReleaseReport {
	u.mu.Lock()
	rels := u.rels
	u.mu.Unlock()
	out := []overlay.ReleaseReport{u.report()}
	if rels != nil {
		for _, r := range rels.Reports() {
			out = append(out, r)
		}
	}
	return out
}

// network sums the reports.
func (u *updates) network() *NetworkReleases { return summarize(u.reports()) }

func summarize(reports []overlay.ReleaseReport) *NetworkReleases {
	n := &NetworkReleases{Running: map[string]int{}}
	rolled := map[string]*NetworkRollback{}
	for _, r := range reports {
		n.Members++
		if r.Running != "" {
			n.Running[r.Running]++
		}
		if r.OnTrial {
			n.OnTrial++
		}
		for _, rb := range r.RolledBack {
			nr := rolled[rb.SHA256]
			if nr == nil {
				nr = &NetworkRollback{Version: rb.Version, SHA256: rb.SHA256, Reason: rb.Reason}
				rolled[rb.SHA256] = nr
			}
			nr.Nodes++
		}
	}
	for _, nr := range rolled {
		n.RolledBack = append(n.RolledBack, *nr)
	}
	slices.SortFunc(n.RolledBack, func(a, b NetworkRollback) int {
		return cmp.Or(b.Nodes-a.Nodes, strings.Compare(a.Version, b.Version))
	})
	return n
}

// rolledBackOfAvailable counts the members (this node included) reporting
// a rollback of the newest verified release.
func (u *updates) rolledBackOfAvailable() int {
	if u.keeper == nil {
		return 0
	}
	rel, ok := u.keeper.Available()
	if !ok {
		return 0
	}
	for _, nr := range u.network().RolledBack {
		if nr.SHA256 == rel.SHA256 {
			return nr.Nodes
		}
	}
	return 0
}

// watchTrial sends the report again once this run's release is
// confirmed (the supervisor ends the trial; the node is not told).
func (u *updates) watchTrial() {
	defer u.wg.Done()
	dir := filepath.Dir(u.store)
	for {
		if _, ok, _ := upgrade.ReadPending(dir); !ok {
			u.sendReport()
			return
		}
		select {
		case <-u.ctx.Done():
			return
		case <-time.After(time.Second):
		}
	}
}

// install puts rel's verified binary in place of the executable and ends
// Run: the node shuts down gracefully and its supervisor starts the new
// binary on trial.
func (u *updates) install(rel release.Release) error {
	exe := u.cfg.Executable
	if exe == "" {
		var err error
		if exe, err = os.Executable(); err != nil {
			return err
		}
		if exe, err = filepath.EvalSymlinks(exe); err != nil {
			return err
		}
	}
	src := filepath.Join(u.store, rel.SHA256)
	f, err := os.Open(src)
	if err != nil {
		return err
	}
	err = rel.Check(f) // once more: the store is on disk, and this is what runs next
	f.Close()
	if err != nil {
		return err
	}
	p := upgrade.Pending{From: Build().Version, To: rel.Version, SHA256: rel.SHA256, At: u.now()}
	if err := upgrade.Install(exe, src, filepath.Dir(u.store), p); err != nil {
		return err
	}
	u.mu.Lock()
	u.installed = &p
	restart := u.restart
	u.mu.Unlock()
	u.log.Info("release installed; restarting on it", "version", rel.Version, "exe", exe, "previous", exe+".prev")
	if restart != nil {
		restart()
	}
	return nil
}

// run says the node is healthy once it is ready and health says so
// (under a supervisor: the health check of a release on trial), then reads
// the feed until ctx ends.
func (u *updates) run(ctx context.Context, ready <-chan struct{}, health func() (bool, string), restart func()) {
	u.mu.Lock()
	u.restart = restart
	u.mu.Unlock()
	if u.cfg.Supervised {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
		said := ""
		for ok, why := health(); !ok; ok, why = health() {
			if why != said {
				u.log.Info("ready, not yet healthy", "why", why)
				said = why
			}
			select {
			case <-ctx.Done():
				return
			case <-time.After(500 * time.Millisecond):
			}
		}
		if err := upgrade.WriteHealthy(filepath.Dir(u.store), Build().Version, u.now()); err != nil {
			u.log.Warn("healthy marker not written", "err", err)
		}
		if _, ok, _ := upgrade.ReadPending(filepath.Dir(u.store)); ok {
			u.mu.Lock()
			if u.ctx.Err() == nil {
				u.wg.Add(1)
				go u.watchTrial()
			}
			u.mu.Unlock()
		}
	}
	if u.keeper == nil || u.cfg.Feed == "" {
		return
	}
	t := time.NewTicker(u.cfg.FeedEvery)
	defer t.Stop()
	for {
		if err := u.checkFeed(); err != nil && !errors.As(err, new(*release.Refused)) {
			u.log.Warn("release feed", "dir", u.cfg.Feed, "err", err)
		}
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
	}
}

// healthOf is a ready node's health: a member of the overlay (another
// live member heard, when it has peers to join) and making progress (no
// record waiting, or a carrier delivered since it started). A build that
// starts but cannot join or deliver is rolled back like one that exits.
func healthOf(bootstraps, membersLive, waiting int, delivered int64) (bool, string) {
	if bootstraps > 0 && membersLive < 2 {
		return false, "no other live member yet"
	}
	if waiting > 0 && delivered == 0 {
		return false, fmt.Sprintf("%d records and carriers waiting, none delivered yet", waiting)
	}
	return true, ""
}

// attach opens the overlay's release channel: announcements are judged by
// the keeper before gossip forwards them, and a newer release's binary is
// fetched from the members that hold it.
func (u *updates) attach(p *overlay.Peer) error {
	if u.keeper == nil {
		return nil
	}
	u.self = p.ID().String()
	u.members = p.Members()
	rels, err := overlay.OpenReleases(p, overlay.ReleaseConfig{Store: u.store, Verify: u.verify, Deliver: u.deliver, Rate: u.cfg.Rate})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	u.mu.Lock()
	u.rels = rels
	u.mu.Unlock()
	u.sendReport()
	if wire, err := os.ReadFile(filepath.Join(filepath.Dir(u.store), bundleFile)); err == nil {
		if b, err := release.DecodeBundle(wire); err == nil {
			_, _ = u.offer(b, "data_dir") // a refusal (expired since) is logged and counted
		}
	}
	return nil
}

// verify is the gossip validator's verdict on an announcement: forged,
// malformed or another network's metadata is rejected (its senders are
// penalised); what is merely stale or unjudgeable is ignored.
func (u *updates) verify(a overlay.ReleaseAnnouncement) overlay.ReleaseVerdict {
	b, err := release.DecodeBundle(a.Bundle)
	if err != nil {
		u.refused.WithLabelValues("malformed").Inc()
		return overlay.ReleaseReject
	}
	rel, err := u.offer(b, "peer "+a.From.String())
	switch {
	case err == nil && a.Target != "" && a.Target != rel.SHA256:
		return overlay.ReleaseReject // holds a binary the metadata does not name
	case err == nil:
		return overlay.ReleaseAccept
	case errors.Is(err, release.ErrExpired), errors.Is(err, release.ErrRollback), errors.Is(err, release.ErrNoTarget):
		return overlay.ReleaseIgnore
	case errors.As(err, new(*release.Refused)):
		return overlay.ReleaseReject
	}
	return overlay.ReleaseIgnore
}

// deliver starts fetching the available release's binary when a member
// announces holding it and this node has not got it yet.
func (u *updates) deliver(a overlay.ReleaseAnnouncement) {
	for _, rb := range a.Report.RolledBack {
		k := a.From.String() + rb.SHA256
		u.mu.Lock()
		fresh := !u.heard[k] && len(u.heard) < 1<<16
		u.heard[k] = true
		u.mu.Unlock()
		if fresh {
			u.log.Warn("a member rolled a release back", "peer", a.From.String(), "version", rb.Version, "reason", rb.Reason)
		}
	}
	rel, ok := u.keeper.Available()
	if !ok || a.Target != rel.SHA256 {
		return
	}
	u.mu.Lock()
	if u.binaryOK[rel.SHA256] || u.fetching != "" || u.ctx.Err() != nil {
		u.mu.Unlock()
		return
	}
	u.fetching = rel.SHA256
	u.wg.Add(1)
	u.mu.Unlock()
	go func() {
		defer u.wg.Done()
		err := u.fetch(rel)
		// a holder that has not heard this node's membership yet (it just
		// joined) or is busy: again in a few heartbeats, not at the next
		// announcement minutes later
		for try := 0; try < fetchRetries && errors.Is(err, overlay.ErrReleaseTryLater); try++ {
			t := time.NewTimer(fetchRetryWait)
			select {
			case <-u.ctx.Done():
			case <-t.C:
			}
			t.Stop()
			if u.ctx.Err() != nil {
				break
			}
			err = u.fetch(rel)
		}
		u.mu.Lock()
		u.fetching = ""
		u.mu.Unlock()
		if err != nil && u.ctx.Err() == nil {
			u.log.Warn("release binary not fetched; trying again at the next announcement", "version", rel.Version, "err", err)
		}
	}()
}

// A fetch refused for a while (overlay.ErrReleaseTryLater) is tried again
// fetchRetries times, fetchRetryWait apart.
const (
	fetchRetries   = 10
	fetchRetryWait = 2 * time.Second
)

// fetch gets rel's binary from the members holding it, verifies it against
// the signed metadata and only then keeps it.
func (u *updates) fetch(rel release.Release) error {
	if err := os.MkdirAll(u.store, 0o700); err != nil {
		return err
	}
	dl := filepath.Join(u.store, rel.SHA256+".download")
	u.mu.Lock()
	rels := u.rels
	u.mu.Unlock()
	from, err := rels.Fetch(u.ctx, rel.SHA256, rel.Length, dl)
	if err != nil {
		return err
	}
	f, err := os.Open(dl)
	if err != nil {
		return err
	}
	err = rel.Check(f)
	f.Close()
	if err != nil {
		// not the release's bytes: none of them is kept
		os.Remove(dl)
		u.refused.WithLabelValues(refusalReason(err)).Inc()
		u.log.Warn("release binary refused", "from", from.String(), "err", err)
		return err
	}
	if err := os.Rename(dl, filepath.Join(u.store, rel.SHA256)); err != nil {
		return err
	}
	u.log.Info("release binary verified", "version", rel.Version, "sha256", rel.SHA256, "from", from.String())
	return u.keep(rel, nil)
}

// close stops fetching and leaves the release channel (before the overlay
// peer closes).
func (u *updates) close() error {
	u.mu.Lock()
	u.cancel()
	rels := u.rels
	u.mu.Unlock()
	u.wg.Wait()
	if rels != nil {
		return rels.Close()
	}
	return nil
}

func (u *updates) status() *ReleaseStatus {
	s := &ReleaseStatus{AutoUpdate: u.cfg.AutoUpdate, Note: u.note, Feed: u.cfg.Feed}
	s.Running = Build().Version
	dir := filepath.Dir(u.store)
	if p, ok, _ := upgrade.ReadPending(dir); ok {
		s.OnTrial = &p
	}
	if rb, ok, _ := upgrade.ReadRollback(dir); ok {
		s.RolledBack = &rb
	}
	if u.keeper == nil {
		return s
	}
	s.Trusted = true
	s.Status = u.keeper.Status()
	s.Network = u.network()
	u.mu.Lock()
	if u.paused != "" {
		s.Paused = u.paused
		at := u.pausedSince
		s.PausedSince = &at
	}
	u.mu.Unlock()
	if a := s.Available; a != nil {
		u.mu.Lock()
		s.BinaryVerified = u.binaryOK[a.SHA256]
		u.mu.Unlock()
		if s.BinaryVerified {
			s.Binary = filepath.Join(u.store, a.SHA256)
		}
		u.mu.Lock()
		if at, ok := u.scheduled[a.SHA256]; ok && !at.IsZero() {
			s.InstallAt = &at
		}
		u.mu.Unlock()
	}
	return s
}

// health is healthOf this node now.
func (n *Node) health() (bool, string) {
	waiting := 0
	var delivered int64
	if n.eng != nil {
		st := n.eng.Stats()
		waiting, delivered = st.PendingRecords+st.PendingCarriers, st.CarriersDelivered
	}
	return healthOf(len(n.cfg.Overlay.Bootstrap), n.peer.Members().Count(), waiting, delivered)
}

// OfferRelease verifies a release bundle from source (a peer, a
// directory) against the node's trusted root: the release it makes
// available, or the refusal.
func (n *Node) OfferRelease(b release.Bundle, source string) (release.Release, error) {
	return n.updates.offer(b, source)
}

// refusalReason is a refusal's metric label.
func refusalReason(err error) string {
	for _, r := range []struct {
		err  error
		name string
	}{{release.ErrForeign, "foreign"}, {release.ErrThreshold, "threshold"}, {release.ErrExpired, "expired"},
		{release.ErrRollback, "rollback"}, {release.ErrHash, "hash"}, {release.ErrNoTarget, "no_target"}} {
		if errors.Is(err, r.err) {
			return r.name
		}
	}
	return "malformed"
}
