package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/BurntSushi/toml"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/chaos"
	"github.com/micra-crawler/micra/testnet/cluster"
)

// TestTestnetRun runs `micra testnet run` as a user does: real node
// processes, a sink and the synthetic web in an emulated world. Every page
// reaches the sink once (coverage 1, overlap 0, nothing fetched twice),
// hosts go to their nearest crawlers, and the testnet leaves no state behind.
func TestTestnetRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], "testnet", "run", "--dir", dir, "-n", "3", "--hosts", "24", "--pages-per-host", "5", "--json", "--timeout", "3m")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testnet run: %v\n%s", err, stderr.String())
	}
	var r struct {
		cluster.Result
		Sink *cluster.SinkSample `json:"sink"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if !r.Complete || r.Pages != 24*5 || r.TotalPages != 24*5 {
		t.Errorf("pages at the sink %d of %d (complete %v)", r.Pages, r.TotalPages, r.Complete)
	}
	if r.Overlap != 0 || r.DuplicateFetches != 0 {
		t.Errorf("overlap %d, fetched twice %d: want 0", r.Overlap, r.DuplicateFetches)
	}
	if r.RobotsFetches > 24 {
		t.Errorf("robots.txt fetched %d times for 24 hosts", r.RobotsFetches)
	}
	// location-aware: on this world the simulator puts every host at its
	// nearest crawler; hashing or random owners would put about a third
	if len(r.PagesPerCrawler) < 2 || r.OptimalPct < 60 {
		t.Errorf("pages per crawler %v, %.0f %% of hosts at their nearest crawler: want the crawl spread by nearness", r.PagesPerCrawler, r.OptimalPct)
	}
	if r.Sink == nil || len(r.Sink.First) != 3 || r.Sink.Query == "" || r.Sink.Search.Total == 0 {
		t.Errorf("sink sample %+v: want 3 records and a search with hits", r.Sink)
	}
	if _, err := os.Stat(cluster.StateFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("testnet.json left behind: %v", err)
	}
	t.Logf("%+v\n%s", r.Result, stderr.String())
}

// TestTestnetRunKill: crash faults on real processes. A crawler node is
// SIGKILLed mid-crawl; the crawl still completes with every page at the
// sink (its subnets re-delegated, the URLs handed to it re-routed by their
// senders' ledgers), and the testnet stops cleanly around the dead node.
// What it had delivered is recovered from the sink, so the sink's overlap
// stays within 1 %; the pages fetched twice at the web (its undelivered
// outbox) are reported.
func TestTestnetRunKill(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], "testnet", "run", "--dir", dir, "-n", "4", "--hosts", "40", "--pages-per-host", "5",
		"--kill", "1", "--kill-at", "0.3", "--wire-scale", "0", "--show", "0", "--json", "--timeout", "3m")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testnet run --kill 1: %v\n%s", err, stderr.String())
	}
	var r cluster.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(r.Killed) != 1 || r.Killed[0] != 1 || r.KilledAtPages < 60 {
		t.Fatalf("killed %v with %d pages fetched, want node 1 at 30 %% of 200", r.Killed, r.KilledAtPages)
	}
	if !r.Complete || r.Pages != r.TotalPages {
		t.Errorf("after a crash: %d of %d pages at the sink (complete %v), want all", r.Pages, r.TotalPages, r.Complete)
	}
	// the killed node's delivered pages are recovered from the sink, not
	// fetched again: at most 1 % of the pages reach the sink twice
	if r.Overlap*100 > int64(r.Pages) {
		t.Errorf("overlap %d records at the sink: more than 1 %% of %d pages", r.Overlap, r.Pages)
	}
	t.Logf("overlap %d records at the sink, %d pages fetched twice at the web, of %d\n%s", r.Overlap, r.DuplicateFetches, r.Pages, stderr.String())
}

// TestTestnetUpJoin joins a running testnet as a user would: `micra testnet
// up --spare 1` prints join.toml, a node started with the command its
// comments give becomes a live crawler of the network, and `down` removes
// the file, whose addresses are the run's.
func TestTestnetUpJoin(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	up := exec.Command(os.Args[0], "testnet", "up", "--dir", dir, "-n", "2", "--spare", "1", "--hosts", "6", "--pages-per-host", "2")
	up.Env = append(os.Environ(), mainEnv+"=1")
	var upOut, upErr syncBuffer
	up.Stdout, up.Stderr = &upOut, &upErr
	up.WaitDelay = 10 * time.Second // its output is read until every process holding it exits
	if err := up.Start(); err != nil {
		t.Fatal(err)
	}
	upP := watch(up)
	t.Cleanup(func() { upP.stop(t) })

	// up prints the join configuration once the testnet is up
	deadline := time.Now().Add(2 * time.Minute)
	for !strings.Contains(upOut.String(), "bootstrap = [") {
		select {
		case <-upP.exited:
			t.Fatalf("testnet up exited: %v\n%s", upP.err, upErr.String())
		case <-time.After(200 * time.Millisecond):
		}
		if time.Now().After(deadline) {
			t.Fatalf("no join configuration printed\n%s\n%s", upOut.String(), upErr.String())
		}
	}
	st, err := cluster.ReadState(dir)
	if err != nil {
		t.Fatal(err)
	}
	b, err := os.ReadFile(filepath.Join(dir, "join.toml"))
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(upOut.String(), string(b)) {
		t.Errorf("up printed another configuration than join.toml's:\n%s", upOut.String())
	}
	var jf struct {
		Bootstrap []string `toml:"bootstrap"`
		Sink      string   `toml:"sink"`
	}
	if _, err := toml.Decode(string(b), &jf); err != nil {
		t.Fatal(err)
	}
	var want []string
	for _, n := range st.Nodes {
		want = append(want, n.Addrs...)
	}
	if !slices.Equal(jf.Bootstrap, want) || st.Sink == nil || jf.Sink != st.Sink.Addr {
		t.Errorf("join.toml: bootstrap %q sink %s; the testnet's nodes %q, sink %+v", jf.Bootstrap, jf.Sink, want, st.Sink)
	}

	// the command its comments give, as they give it
	var args []string
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "#     micra node "); ok {
			args = append([]string{"node"}, strings.Fields(rest)...)
		}
	}
	if !slices.Contains(args, "--emulate-peer") {
		t.Fatalf("no command with a spare place in join.toml:\n%s", b)
	}
	joiner := exec.Command(os.Args[0], args...)
	joiner.Env = append(os.Environ(), mainEnv+"=1")
	var jOut syncBuffer
	joiner.Stdout, joiner.Stderr = &jOut, &jOut
	joiner.WaitDelay = 10 * time.Second
	if err := joiner.Start(); err != nil {
		t.Fatal(err)
	}
	jP := watch(joiner)
	t.Cleanup(func() { jP.stop(t) })

	// every node counts it among the live crawlers
	for _, n := range st.Nodes {
		c, err := node.NewControlClient(n.API)
		if err != nil {
			t.Fatal(err)
		}
		for {
			s, err := c.Status(context.Background())
			if err == nil && s.CrawlersLive == 3 {
				break
			}
			if time.Now().After(deadline.Add(time.Minute)) {
				t.Fatalf("node %d: status %+v, %v: want 3 live crawlers\njoiner:\n%s", n.Index, s, err, jOut.String())
			}
			time.Sleep(200 * time.Millisecond)
		}
	}
	jP.stop(t)
	down := exec.Command(os.Args[0], "testnet", "down", "--dir", dir)
	down.Env = append(os.Environ(), mainEnv+"=1")
	if out, err := down.CombinedOutput(); err != nil {
		t.Fatalf("testnet down: %v\n%s", err, out)
	}
	select {
	case <-upP.exited:
	case <-time.After(30 * time.Second):
		t.Fatal("testnet up still running after down")
	}
	if _, err := os.Stat(filepath.Join(dir, "join.toml")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("join.toml left behind: %v", err)
	}
}

// watched is a process a test started and stops once, however often asked.
type watched struct {
	cmd    *exec.Cmd
	exited chan struct{} // closed when it has exited; err is then its exit
	err    error
	once   sync.Once
}

func watch(c *exec.Cmd) *watched {
	w := &watched{cmd: c, exited: make(chan struct{})}
	go func() { w.err = c.Wait(); close(w.exited) }()
	return w
}

// stop sends SIGTERM and waits for the exit (SIGKILL after 90 s).
func (w *watched) stop(t *testing.T) {
	w.once.Do(func() {
		_ = w.cmd.Process.Signal(syscall.SIGTERM)
		select {
		case <-w.exited:
		case <-time.After(90 * time.Second):
			_ = w.cmd.Process.Kill()
			<-w.exited
			t.Errorf("%s did not stop on SIGTERM", w.cmd.Args[1:3])
		}
	})
}

// TestTestnetRunRestart: a crawler and the sink are SIGKILLed mid-crawl
// (the sink while carriers come in) and started again on their data
// directories. Nothing either acknowledged is lost: every page reaches the
// sink, no record is committed twice, and the indexer following the sink
// (a real `micra subscribe --follow` process) read every record once, in
// order, with no gap across the sink's restart.
func TestTestnetRunRestart(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], "testnet", "run", "--dir", dir, "-n", "3", "--hosts", "30", "--pages-per-host", "5",
		"--kill", "1", "--kill-at", "0.3", "--restart", "3s", "--kill-sink", "--node-flag=--carrier-hold=2s",
		"--wire-scale", "0", "--show", "0", "--json", "--timeout", "3m")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testnet run --kill 1 --restart --kill-sink: %v\n%s", err, stderr.String())
	}
	var r cluster.Result
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if len(r.Killed) != 1 || len(r.Restarted) != 1 || r.Restarted[0] != r.Killed[0] || !r.SinkKilled {
		t.Fatalf("killed %v, restarted %v, sink killed %v: want one node killed and started again, and the sink", r.Killed, r.Restarted, r.SinkKilled)
	}
	if !r.Complete || r.Pages != r.TotalPages {
		t.Errorf("%d of %d pages at the sink (complete %v), want all", r.Pages, r.TotalPages, r.Complete)
	}
	d := r.Delivery
	if d == nil {
		t.Fatal("no subscriber check")
	}
	if d.Lost != 0 || d.IngestedTwice != 0 || d.Gaps != 0 || d.Repeats != 0 || uint64(d.Followed) != d.Head || d.Head < uint64(r.Pages) {
		t.Errorf("delivery %+v: want every record once at the sink and at its subscriber", *d)
	}
	if b, err := os.ReadFile(filepath.Join(dir, "subscriber", "subscriber.log")); err != nil || !strings.Contains(string(b), "reconnecting") {
		t.Errorf("the subscriber never lost its stream (%v): the sink's kill did not reach it\n%s", err, b)
	}
	t.Logf("overlap %d, fetched twice %d of %d pages; %d records, %d carriers redelivered\n%s",
		r.Overlap, r.DuplicateFetches, r.Pages, d.Head, d.RedeliveredCarriers, stderr.String())
}

// TestTestnetChaos: a short seeded chaos run on real processes (its seed
// draws the sink's kill during ingest, then a partition into two halves)
// holds every invariant but overlap, which is reported: both halves of a
// partition crawl what they cannot hand over (docs/RELIABILITY.md). A
// crawler's kill and restart is TestTestnetRunRestart's.
func TestTestnetChaos(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], "testnet", "chaos", "--dir", dir, "-n", "4", "--hosts", "30", "--pages-per-host", "4",
		"--minutes", "0.4", "--seed", "2", "--gap-min", "1s", "--gap-max", "2s", "--node-flag=--carrier-hold=2s", "--wire-scale", "0", "--json", "--timeout", "3m")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep chaos.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("testnet chaos: %v; %v: %s\n%s", err, jerr, stdout.String(), stderr.String())
	}
	kinds := map[string]bool{}
	for _, e := range rep.Timeline {
		kinds[e.Kind] = true
	}
	for _, k := range []string{"partition", "heal", "kill-sink", "restart", "converged"} {
		if !kinds[k] {
			t.Errorf("no %q in the timeline: %+v", k, rep.Timeline)
		}
	}
	for _, c := range rep.Checks {
		if !c.Held && c.Invariant != "overlap at the sink" {
			t.Errorf("%s: %s, want %s", c.Invariant, c.Measured, c.Goal)
		}
	}
	if len(rep.Checks) < 8 || rep.Samples == 0 {
		t.Errorf("%d checks, %d samples of the owners", len(rep.Checks), rep.Samples)
	}
	if (err == nil) != rep.Held {
		t.Errorf("exit %v with every check held %v", err, rep.Held)
	}
	t.Logf("%s\n%s", stdout.String(), stderr.String())
}
