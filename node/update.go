package node

// Signed releases on a node (docs/releases.md): the trusted root and what
// it accepted (release.Keeper in DATA/release), bundles offered from the
// release_feed directory or the overlay, and the log line, status and
// metrics that say a verified newer release is available.

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"path/filepath"
	"runtime"
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
}

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
	restart     func()            // ends Run to restart on an installed release (set by Run)
	scheduled   map[string]time.Time
	installed   *upgrade.Pending
}

func newUpdates(cfg Config, log *slog.Logger, reg prometheus.Registerer) (*updates, error) {
	u := &updates{cfg: cfg.Release, log: log, now: cfg.Release.Now, binaryOK: map[string]bool{},
		store: filepath.Join(cfg.DataDir, "release", "targets"), scheduled: map[string]time.Time{}}
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
	for _, c := range []prometheus.Collector{u.refused, u.available} {
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
			u.schedule(rel) // (once per release; a restarted node keeps its wave)
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
		u.log.Warn("release not installed: it was rolled back on this node", "version", rel.Version, "reason", rb.Reason, "at", rb.At)
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
	delay := upgrade.WaveDelay(u.self, rel.SHA256, rel.Rollout)
	u.scheduled[rel.SHA256] = u.now().Add(delay)
	u.wg.Add(1)
	u.mu.Unlock()
	u.log.Info("release to be installed", "version", rel.Version, "in", delay.Round(time.Second), "rollout", rel.Rollout)
	go func() {
		defer u.wg.Done()
		t := time.NewTimer(delay)
		defer t.Stop()
		select {
		case <-u.ctx.Done():
			return
		case <-t.C:
		}
		if err := u.install(rel); err != nil {
			u.log.Error("release not installed", "version", rel.Version, "err", err)
		}
	}()
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

// run says the node is healthy once it is ready (under a supervisor: the
// health check of a release on trial), then reads the feed until ctx ends.
func (u *updates) run(ctx context.Context, ready <-chan struct{}, restart func()) {
	u.mu.Lock()
	u.restart = restart
	u.mu.Unlock()
	if u.cfg.Supervised {
		select {
		case <-ctx.Done():
			return
		case <-ready:
		}
		if err := upgrade.WriteHealthy(filepath.Dir(u.store), Build().Version, u.now()); err != nil {
			u.log.Warn("healthy marker not written", "err", err)
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

// attach opens the overlay's release channel: announcements are judged by
// the keeper before gossip forwards them, and a newer release's binary is
// fetched from the members that hold it.
func (u *updates) attach(p *overlay.Peer) error {
	if u.keeper == nil {
		return nil
	}
	u.self = p.ID().String()
	rels, err := overlay.OpenReleases(p, overlay.ReleaseConfig{Store: u.store, Verify: u.verify, Deliver: u.deliver})
	if err != nil {
		return fmt.Errorf("node: %w", err)
	}
	u.mu.Lock()
	u.rels = rels
	u.mu.Unlock()
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
		u.mu.Lock()
		u.fetching = ""
		u.mu.Unlock()
		if err != nil && u.ctx.Err() == nil {
			u.log.Warn("release binary not fetched; trying again at the next announcement", "version", rel.Version, "err", err)
		}
	}()
}

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
	if a := s.Available; a != nil {
		u.mu.Lock()
		s.BinaryVerified = u.binaryOK[a.SHA256]
		u.mu.Unlock()
		if s.BinaryVerified {
			s.Binary = filepath.Join(u.store, a.SHA256)
		}
		u.mu.Lock()
		if at, ok := u.scheduled[a.SHA256]; ok {
			s.InstallAt = &at
		}
		u.mu.Unlock()
	}
	return s
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
