// Package upgrade owns `micra testnet upgrade`: a rehearsal of a signed
// release on a crawling testnet. The testnet's nodes run build A under
// their supervisors (auto_update = on) with a TUF root made for the
// testnet; mid-crawl the operators' repository signs build B and publishes
// it to one node's release feed, and the release reaches the others over
// the overlay only (gossip announcements, binaries fetched from members).
// The run watches every node's status until each runs B confirmed (or, for
// a bad B, until each is back on A — rolled back, or holding B back because
// others rolled it back — and every node reports the rollbacks), then
// checks the crawl's invariants (cluster.CrawlChecks) at the sink and the
// subscriber beside it.
package upgrade

import (
	"context"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/release"
	"github.com/micra-crawler/micra/testnet/cluster"
	"github.com/micra-crawler/micra/testnet/emu"
)

// Expect is what a rehearsal checks build B does.
type Expect string

const (
	// ExpectUpgrade: every node ends on B, confirmed healthy.
	ExpectUpgrade Expect = "upgrade"
	// ExpectRollback: B fails its trial; every node is back on A and the
	// network reports the rollbacks.
	ExpectRollback Expect = "rollback"
)

// Options configures a rehearsal.
type Options struct {
	// Cluster is the testnet (Dir, Binary — build A —, Peers, Web,
	// World, NodeArgs …); a sink and its subscriber are always started,
	// and NodeBinary and NodeArgsFor are the rehearsal's.
	Cluster cluster.Options
	// To is build B; ToVersion its version ("": `To version --json`
	// says).
	To, ToVersion string
	// Rollout is B's rollout window (default 2 min): each node installs
	// it at a delay fixed by its id within the window.
	Rollout time.Duration
	// PublishAt is the fraction of the web's pages fetched when B is
	// published (default 0.2).
	PublishAt float64
	// Expect is what B is expected to do (default ExpectUpgrade).
	Expect Expect
	// Grace is what a node may take beyond the window to be on B: the
	// binary's fetch, the graceful stop and the trial's settling (default
	// 1 min).
	Grace time.Duration
	// RollbackLimit is the time after publishing within which every node
	// must be back on A, with ExpectRollback (default 2 min).
	RollbackLimit time.Duration
	// Waves is how many parts the web's seeds are given in, one every 10
	// s from the start (default: enough to last until the window ends).
	Waves int
	// Rate is the bytes a second a node serves release binaries at
	// (default 64 MiB: loopback).
	Rate int
	// Timeout bounds the wait for the crawl after the release (default 5
	// min).
	Timeout time.Duration
	// Log receives the timeline as it happens (nil: discarded).
	Log io.Writer
}

func (o *Options) defaults() {
	if o.Rollout <= 0 {
		o.Rollout = 2 * time.Minute
	}
	if o.PublishAt <= 0 {
		o.PublishAt = 0.2
	}
	if o.Expect == "" {
		o.Expect = ExpectUpgrade
	}
	if o.Grace <= 0 {
		o.Grace = time.Minute
	}
	if o.RollbackLimit <= 0 {
		o.RollbackLimit = 2 * time.Minute
	}
	if o.Waves <= 0 {
		o.Waves = max(1, int((o.Rollout+o.Grace)/(10*time.Second)))
	}
	if o.Rate <= 0 {
		o.Rate = 64 << 20
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
	o.Cluster.Sink, o.Cluster.Subscriber = true, true
}

// Event is one line of the timeline.
type Event struct {
	AtS  float64 `json:"at_s"` // seconds since the first seeds
	Kind string  `json:"kind"` // seed, publish, install, trial, confirmed, rolled-back, held-back, report, check
	What string  `json:"what"`
}

// NodeRow is what one node did, in seconds since B was published (-1:
// never).
type NodeRow struct {
	Index       int     `json:"index"`
	PeerID      string  `json:"peer_id"`
	Version     string  `json:"version"`       // the version it runs at the end
	SwitchedS   float64 `json:"switched_s"`    // its process on B started
	ConfirmedS  float64 `json:"confirmed_s"`   // B confirmed healthy by its supervisor
	RolledBackS float64 `json:"rolled_back_s"` // seen back on A with B rolled back
	HeldBackS   float64 `json:"held_back_s"`   // seen holding B back (others rolled it back)
	// Reported is how many rollbacks of B the node's status says the
	// network reports, at the end.
	Reported int    `json:"reported"`
	Reason   string `json:"reason,omitempty"` // its rollback's, or why it held B back
}

// Report is a rehearsal's timeline, table and checks.
type Report struct {
	Peers       int     `json:"peers"`
	FromVersion string  `json:"from_version"`
	ToVersion   string  `json:"to_version"`
	ToSHA256    string  `json:"to_sha256"`
	Expect      Expect  `json:"expect"`
	RolloutS    float64 `json:"rollout_s"`
	PublishedS  float64 `json:"published_s"` // since the first seeds
	// LastS is the last node's switch to B (upgrade) or return to A
	// (rollback), since publishing; -1: not every node.
	LastS float64 `json:"last_s"`
	// MostDown is the most nodes seen not answering (restarting) at once,
	// looked at every second.
	MostDown int              `json:"most_down"`
	Timeline []Event          `json:"timeline"`
	Nodes    []NodeRow        `json:"nodes"`
	Checks   []cluster.Check  `json:"checks"`
	Result   *cluster.Result  `json:"result"`
	Delivery cluster.Delivery `json:"delivery"`
	Held     bool             `json:"held"`
}

// run is one rehearsal's state.
type run struct {
	o     Options
	t     *cluster.Testnet
	repo  *release.Repo
	feed  string
	start time.Time
	pub   time.Time // B published (zero: not yet)

	mu  sync.Mutex
	rep *Report
}

// Run starts the testnet, rehearses the release and stops the testnet.
// An error means the rehearsal could not be carried out; an expectation
// that did not hold is a Check with Held false.
func Run(ctx context.Context, o Options) (*Report, error) {
	o.defaults()
	if o.To == "" || o.Cluster.Binary == "" || o.Cluster.Dir == "" {
		return nil, errors.New("upgrade: the testnet's directory and both builds are required (--dir, --from, --to)")
	}
	if o.Expect != ExpectUpgrade && o.Expect != ExpectRollback {
		return nil, fmt.Errorf("upgrade: --expect %q: want upgrade or rollback", o.Expect)
	}
	r := &run{o: o, rep: &Report{Expect: o.Expect, RolloutS: o.Rollout.Seconds(), LastS: -1}}
	var err error
	if r.rep.FromVersion, err = Version(o.Cluster.Binary); err != nil {
		return nil, fmt.Errorf("--from: %w", err)
	}
	if r.rep.ToVersion = o.ToVersion; r.rep.ToVersion == "" {
		if r.rep.ToVersion, err = Version(o.To); err != nil {
			return nil, fmt.Errorf("--to: %w (a build that cannot say its version: give --to-version)", err)
		}
	}
	if r.rep.ToVersion == r.rep.FromVersion {
		return nil, fmt.Errorf("upgrade: --to is %s, as --from: a release must be another version", r.rep.ToVersion)
	}
	root, err := r.repository()
	if err != nil {
		return nil, err
	}
	co, err := r.nodes(root)
	if err != nil {
		return nil, err
	}
	t, err := cluster.Up(ctx, co)
	if err != nil {
		return nil, err
	}
	defer t.Down()
	r.t = t
	r.rep.Peers = len(t.State.Nodes)
	if err := r.bootstrapNode0(); err != nil {
		return r.rep, err
	}
	if err := t.WaitMembers(ctx); err != nil {
		return r.rep, err
	}
	return r.rep, r.rehearse(ctx)
}

// Version asks a micra binary its version (`BIN version --json`).
func Version(bin string) (string, error) {
	out, err := exec.Command(bin, "version", "--json").Output()
	if err != nil {
		return "", fmt.Errorf("%s version: %w", bin, err)
	}
	var v struct {
		Version string `json:"version"`
	}
	if err := json.Unmarshal(out, &v); err != nil || v.Version == "" {
		return "", fmt.Errorf("%s version --json: no version in %q", bin, out)
	}
	return v.Version, nil
}

// repository makes the operators' repository for the testnet (keys in
// DIR/release/repo) and publishes it, without a release yet, to node 0's
// feed; it returns the root every node is given.
func (r *run) repository() (string, error) {
	dir := filepath.Join(r.o.Cluster.Dir, "release")
	if err := os.RemoveAll(dir); err != nil {
		return "", err
	}
	repo, err := release.Init(filepath.Join(dir, "repo"), release.InitOptions{}, time.Now)
	if err != nil {
		return "", err
	}
	r.repo, r.feed = repo, filepath.Join(dir, "feed")
	if err := repo.Publish(r.feed); err != nil {
		return "", err
	}
	return filepath.Join(dir, "repo", "metadata", "1.root.json"), nil
}

// nodes gives each node its own copy of build A (a release replaces its
// executable), fixed ports (the supervisor restarts a node with the same
// flags, and the others and the sink find it again where it was) and the
// release settings; node 0 reads the feed.
func (r *run) nodes(root string) (cluster.Options, error) {
	co := r.o.Cluster
	if co.Peers <= 0 {
		co.Peers = 12
	}
	bins, args := make([]string, co.Peers), make([][]string, co.Peers)
	for i := range co.Peers {
		dir := filepath.Join(co.Dir, "nodes", fmt.Sprintf("%02d", i), "bin")
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return co, err
		}
		bins[i] = filepath.Join(dir, "micra")
		if err := copyExe(co.Binary, bins[i]); err != nil {
			return co, err
		}
		ip := emu.PeerLoopback(i).String()
		p2p, err := freePort(ip)
		if err != nil {
			return co, err
		}
		api, err := freePort("127.0.0.1")
		if err != nil {
			return co, err
		}
		args[i] = []string{"--auto-update", "on", "--release-root", root, "--release-rate", fmt.Sprint(r.o.Rate),
			"--listen", fmt.Sprintf("/ip4/%s/tcp/%d", ip, p2p), "--api", fmt.Sprintf("127.0.0.1:%d", api)}
		if i == 0 {
			args[i] = append(args[i], "--release-feed", r.feed, "--release-feed-every", "2s")
		}
	}
	co.NodeBinary = func(i int) string { return bins[i] }
	co.NodeArgsFor = func(i int) []string { return args[i] }
	return co, nil
}

// bootstrapNode0 gives node 0 — every node's bootstrap peer, started
// with none — the others' addresses in its config.toml (its flags name no
// bootstrap peer, so the file's apply): restarted on a release, it joins
// the network again instead of starting alone and taking every subnet it
// routes for itself.
func (r *run) bootstrapNode0() error {
	var addrs []string
	for _, ns := range r.t.State.Nodes[1:] {
		for _, a := range ns.Addrs {
			addrs = append(addrs, strconv.Quote(a))
		}
	}
	path := filepath.Join(r.o.Cluster.Dir, "nodes", "00", "config.toml")
	f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(f, "\n# the other nodes (testnet upgrade: node 0 restarts on releases too)\nbootstrap = [%s]\n", strings.Join(addrs, ", "))
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}

// rehearse crawls, publishes B once PublishAt of the pages are fetched,
// watches the nodes until the release has gone through, then waits for
// the crawl and checks.
func (r *run) rehearse(ctx context.Context) error {
	t := r.t
	seeds := t.Web.Seeds()
	waves := min(r.o.Waves, len(seeds))
	t.Web.ResetStats()
	r.start = time.Now()
	sctx, stopSeeding := context.WithCancel(ctx)
	seeded, hurry := make(chan struct{}), make(chan struct{})
	go func() {
		defer close(seeded)
		r.seed(sctx, seeds, waves, hurry)
	}()
	defer func() { stopSeeding(); <-seeded }()

	total := t.Web.TotalPages()
	for float64(t.Web.Stats().UniquePages) < r.o.PublishAt*float64(total) {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(100 * time.Millisecond):
		}
	}
	if err := r.publish(); err != nil {
		return err
	}
	w := newWatch(r)
	limit := r.o.Rollout + r.o.Grace
	if r.o.Expect == ExpectRollback {
		limit = max(limit, r.o.RollbackLimit)
	}
	wctx, cancel := context.WithTimeout(ctx, limit+time.Minute)
	w.until(wctx)
	cancel()
	if ctx.Err() != nil {
		return ctx.Err()
	}
	close(hurry) // (the rest of the web at once: the release is through)
	<-seeded
	r.event("check", "the release went through; waiting for the crawl to complete")
	cctx, cancel := context.WithTimeout(ctx, r.o.Timeout)
	complete, err := t.WaitCrawled(cctx, r.start, nil)
	cancel()
	if err != nil {
		r.event("check", "%v", err)
	}
	res, err := t.Score(ctx, r.start)
	if err != nil {
		return err
	}
	res.Complete = complete
	r.rep.Result = res
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	r.rep.Delivery, err = t.CheckDelivery(dctx)
	cancel()
	if err != nil {
		r.event("check", "the subscriber: %v", err)
	}
	r.event("check", "crawl complete: %d of %d pages at the sink", res.Pages, res.TotalPages)
	w.final(ctx)
	r.checks(w)
	return nil
}

// seed gives the seeds in waves, one every 10 s (the rest at once when
// hurry closes), each to the next node in turn; a wave a node fails (it is
// restarting) goes to the next one, and the seeds a node rejected (a
// routing cut short by its restart) are given again 5 s later, up to 5
// times.
func (r *run) seed(ctx context.Context, seeds []string, waves int, hurry <-chan struct{}) {
	type wave struct {
		urls  []string
		due   time.Time
		again int
	}
	var queue []wave
	for w := range waves {
		queue = append(queue, wave{urls: seeds[w*len(seeds)/waves : (w+1)*len(seeds)/waves], due: r.start.Add(time.Duration(w) * 10 * time.Second)})
	}
	n := len(r.t.State.Nodes)
	next := 0
	for len(queue) > 0 && ctx.Err() == nil {
		w := queue[0]
		queue = queue[1:]
		select {
		case <-ctx.Done():
			return
		case <-hurry:
			hurry = nil
		case <-time.After(time.Until(w.due)):
		}
		for tries := 0; ctx.Err() == nil; tries++ {
			i := next % n
			next++
			cctx, cancel := context.WithTimeout(ctx, time.Minute)
			si, err := r.t.Control(i).Seed(cctx, w.urls)
			cancel()
			if err == nil {
				var rejected []string
				why := ""
				for _, sr := range si.Seeds {
					if sr.Status == node.SeedRejected {
						rejected, why = append(rejected, sr.URL), sr.Reason
					}
				}
				r.event("seed", "%d hosts' home pages to node %d (%d queued, %d handed off, %d rejected)",
					len(w.urls), i, si.Queued, si.HandedOff, si.Rejected)
				if len(rejected) > 0 && w.again < 5 {
					r.event("seed", "%d seeds given again in 5 s (e.g. %s)", len(rejected), why)
					queue = append(queue, wave{urls: rejected, due: time.Now().Add(5 * time.Second), again: w.again + 1})
				}
				break
			}
			if tries%n == n-1 {
				r.event("seed", "no node took %d seeds (last: node %d: %v); trying again", len(w.urls), i, err)
				time.Sleep(time.Second)
			}
		}
	}
}

// publish signs B for this platform with the rollout window and
// publishes the repository to node 0's feed.
func (r *run) publish() error {
	goos, goarch := release.Platform()
	tf, err := r.repo.AddTarget(r.o.To, release.Target{Version: r.rep.ToVersion, OS: goos, Arch: goarch, Rollout: r.o.Rollout})
	if err != nil {
		return fmt.Errorf("sign %s: %w", r.o.To, err)
	}
	if err := r.repo.Publish(r.feed); err != nil {
		return err
	}
	r.pub = time.Now()
	r.rep.PublishedS = r.pub.Sub(r.start).Seconds()
	r.rep.ToSHA256 = hex.EncodeToString(tf.Hashes["sha256"])
	r.event("publish", "%s signed (sha256 %s…, %d bytes, rollout %v) and published to node 0's feed; %d of %d pages fetched",
		r.rep.ToVersion, r.rep.ToSHA256[:12], tf.Length, r.o.Rollout, r.t.Web.Stats().UniquePages, r.t.Web.TotalPages())
	return nil
}

func (r *run) event(kind, format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := Event{AtS: time.Since(r.start).Seconds(), Kind: kind, What: fmt.Sprintf(format, a...)}
	r.rep.Timeline = append(r.rep.Timeline, e)
	fmt.Fprintf(r.o.Log, "%7.1fs  %-11s %s\n", e.AtS, e.Kind, e.What)
}

// sincePub is seconds since B was published.
func (r *run) sincePub() float64 { return time.Since(r.pub).Seconds() }

// copyExe copies an executable (mode 0755).
func copyExe(from, to string) error {
	src, err := os.Open(from)
	if err != nil {
		return err
	}
	defer src.Close()
	dst, err := os.OpenFile(to, os.O_CREATE|os.O_TRUNC|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(dst, src); err != nil {
		dst.Close()
		return err
	}
	return dst.Close()
}

// freePort is a TCP port free on ip now (the node binds it a moment
// later).
func freePort(ip string) (int, error) {
	l, err := net.Listen("tcp", net.JoinHostPort(ip, "0"))
	if err != nil {
		return 0, err
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}
