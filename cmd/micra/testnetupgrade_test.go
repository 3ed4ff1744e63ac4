package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/testnet/upgrade"
)

// runUpgradeCmd runs `micra testnet upgrade` (this test binary as build A)
// and returns its report.
func runUpgradeCmd(t *testing.T, args ...string) (*upgrade.Report, error, string) {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], append([]string{"testnet", "upgrade", "--dir", dir, "-n", "3", "--hosts", "20", "--pages-per-host", "3",
		"--wire-scale", "0", "--json", "--timeout", "2m"}, args...)...)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	err := cmd.Run()
	var rep upgrade.Report
	if jerr := json.Unmarshal(stdout.Bytes(), &rep); jerr != nil {
		t.Fatalf("testnet upgrade: %v; %v: %s\n%s", err, jerr, stdout.String(), stderr.String())
	}
	return &rep, err, stdout.String() + "\n" + stderr.String()
}

// checkHeld fails the test for each check that did not hold but overlap
// (a restart re-delegates the restarting node's subnets: measured, not
// asserted on three nodes).
func checkHeld(t *testing.T, rep *upgrade.Report, err error) {
	t.Helper()
	for _, c := range rep.Checks {
		if !c.Held && c.Invariant != "overlap at the sink" {
			t.Errorf("%s: %s, want %s", c.Invariant, c.Measured, c.Goal)
		}
	}
	if (err == nil) != rep.Held {
		t.Errorf("exit %v with every check held %v", err, rep.Held)
	}
}

// A real second build (this package linked with another version) reaches
// every node over the overlay and is confirmed there, while the testnet
// crawls; nothing acknowledged is lost and the subscriber's stream has no
// gap.
func TestTestnetUpgrade(t *testing.T) {
	if testing.Short() {
		t.Skip("builds micra and starts a testnet")
	}
	b := filepath.Join(t.TempDir(), "micra-b")
	build := exec.Command("go", "build", "-o", b, "-ldflags", "-X github.com/micra-crawler/micra/node.linkVersion=v9.0.0", ".")
	build.Env = append(os.Environ(), "GOFLAGS=-buildvcs=false")
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	rep, err, out := runUpgradeCmd(t, "--to", b, "--rollout", "8s", "--grace", "52s", "--publish-at", "0.1")
	t.Log(out)
	if rep.ToVersion != "v9.0.0" || rep.FromVersion == rep.ToVersion {
		t.Fatalf("from %q to %q", rep.FromVersion, rep.ToVersion)
	}
	checkHeld(t, rep, err)
	for _, n := range rep.Nodes {
		if n.Version != "v9.0.0" || n.SwitchedS < 0 || n.ConfirmedS < n.SwitchedS {
			t.Errorf("node %d: %+v", n.Index, n)
		}
	}
	if len(rep.Checks) < 9 {
		t.Errorf("%d checks: %+v", len(rep.Checks), rep.Checks)
	}
}

// A build that exits at start is rolled back by the nodes that try it;
// each node's status reports how many nodes rolled it back, and a node that
// heard of those rollbacks before its wave holds the release back.
func TestTestnetUpgradeRollbackReported(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	bad := filepath.Join(t.TempDir(), "micra-bad")
	if err := os.WriteFile(bad, []byte("#!/bin/sh\necho 'this build exits at start' >&2\nexit 1\n"), 0o755); err != nil {
		t.Fatal(err)
	}
	rep, err, out := runUpgradeCmd(t, "--to", bad, "--to-version", "v9.9.9", "--expect", "rollback",
		"--rollout", "20s", "--grace", "10s", "--rollback-limit", "2m")
	t.Log(out)
	checkHeld(t, rep, err)
	rolled := 0
	for _, n := range rep.Nodes {
		if n.RolledBackS >= 0 {
			rolled++
			if !strings.Contains(n.Reason, "before it was healthy") {
				t.Errorf("node %d rolled back for %q", n.Index, n.Reason)
			}
		}
		if n.Reported != rolled && n.Reported == 0 {
			t.Errorf("node %d reports no rollback", n.Index)
		}
	}
	if rolled == 0 {
		t.Errorf("no node rolled back: %+v", rep.Nodes)
	}
}
