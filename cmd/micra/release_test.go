package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/release"
	"github.com/micra-crawler/micra/node/upgrade"
)

// The operators' commands end to end: a repository, a signed and published
// release that verify accepts, then the same with the published binary
// altered, which verify refuses.
func TestReleaseCommands(t *testing.T) {
	dir := t.TempDir()
	repo, pub, bin := filepath.Join(dir, "repo"), filepath.Join(dir, "pub"), filepath.Join(dir, "micra-new")
	if err := os.WriteFile(bin, []byte("a build of micra"), 0o755); err != nil {
		t.Fatal(err)
	}
	root := filepath.Join(repo, "metadata", "1.root.json")
	for _, args := range [][]string{
		{"release", "init", "--repo", repo},
		{"release", "sign", "--repo", repo, "--binary", bin, "--version", "v0.2.0", "--os", "linux", "--arch", "amd64", "--rollout", "10m"},
		{"release", "publish", "--repo", repo, "--out", pub},
	} {
		if out, err := runMicra(t, args...); err != nil {
			t.Fatalf("%v: %v\n%s", args, err, out)
		}
	}
	out, err := runMicra(t, "release", "verify", "--root", root, "--from", pub, "--running", "v0.1.0", "--os", "linux", "--arch", "amd64")
	if err != nil || !strings.Contains(out, "verified micra-linux-amd64 v0.2.0") || !strings.Contains(out, "rollout 10m0s") {
		t.Fatalf("verify: %v\n%s", err, out)
	}
	if _, err := runMicra(t, "release", "sign", "--repo", repo, "--binary", bin, "--version", "v0.1.9"); err == nil ||
		!strings.Contains(err.Error(), "a release must be newer") {
		t.Fatalf("an older version signed: %v", err)
	}
	targets, _ := filepath.Glob(filepath.Join(pub, "targets", "*"))
	if len(targets) != 1 {
		t.Fatalf("published targets: %v", targets)
	}
	if err := os.WriteFile(targets[0], []byte("a build of micrA"), 0o644); err != nil {
		t.Fatal(err)
	}
	_, err = runMicra(t, "release", "verify", "--root", root, "--from", pub, "--running", "v0.1.0", "--os", "linux", "--arch", "amd64")
	if err == nil || !strings.Contains(err.Error(), "binary: the binary differs from the targets metadata") {
		t.Fatalf("verify of an altered binary: %v", err)
	}
}

// micra status's release line says what is available and what was refused.
func TestStatusReleaseLine(t *testing.T) {
	now := time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)
	for _, c := range []struct {
		r    node.ReleaseStatus
		want string
	}{
		{node.ReleaseStatus{AutoUpdate: node.AutoUpdateNotify, Note: "no trusted release root (release_root unset): releases are not checked",
			Status: release.Status{Running: "v0.1.0"}},
			"running v0.1.0; auto_update notify; no trusted release root"},
		{node.ReleaseStatus{AutoUpdate: node.AutoUpdateNotify, Trusted: true, BinaryVerified: true, Status: release.Status{Running: "v0.1.0", RootVersion: 2,
			Checked: now, Available: &release.Available{Version: "v0.2.0", Target: "micra-linux-amd64", SHA256: "0d3159db868fea5d9e87"}}},
			"root v2; v0.2.0 AVAILABLE, verified (micra-linux-amd64, sha256 0d3159db868f…, binary checked) — install it by hand"},
		{node.ReleaseStatus{AutoUpdate: node.AutoUpdateNotify, Trusted: true, Status: release.Status{Running: "v0.2.0", RootVersion: 1,
			Checked: now.Add(-time.Minute), Refusal: "release refused: timestamp: expired", RefusedAt: now}},
			"up to date (checked 1m0s ago); last refused"},
		{node.ReleaseStatus{AutoUpdate: node.AutoUpdateOn, Trusted: true, Status: release.Status{Running: "v0.2.0", RootVersion: 1, Checked: now},
			RolledBack: &upgrade.Rollback{Version: "v0.3.0", Reason: "exited 3 times before it was healthy (last exit status 1)", At: now}},
			"v0.3.0 ROLLED BACK " + now.Local().Format(time.DateTime) + ": exited 3 times"},
		{node.ReleaseStatus{AutoUpdate: node.AutoUpdateOn, Trusted: true, Status: release.Status{Running: "v0.2.0", RootVersion: 1, Checked: now,
			Available: &release.Available{Version: "v0.3.0", Target: "micra-linux-amd64", SHA256: "5e0f3c2a9b1d77aa"}},
			Paused: "v0.3.0: 2 members rolled it back, 0 run it confirmed", PausedSince: &now,
			Network: &node.NetworkReleases{Members: 12, Running: map[string]int{"v0.2.0": 11, "v0.3.0": 1}, OnTrial: 1,
				RolledBack: []node.NetworkRollback{{Version: "v0.3.0", SHA256: "5e0f3c2a9b1d77aa", Nodes: 2, Reason: "exited 3 times"}}}},
			"HELD BACK since " + now.Local().Format(time.DateTime) + ": v0.3.0: 2 members rolled it back, 0 run it confirmed\n" +
				"releases       12 nodes report: v0.2.0 on 11, v0.3.0 on 1 (1 on trial); v0.3.0 ROLLED BACK on 2 nodes (sha256 5e0f3c2a9b1d…: exited 3 times)"},
	} {
		var b strings.Builder
		printStatus(&b, node.StatusInfo{Release: &c.r}, now)
		if !strings.Contains(b.String(), c.want) {
			t.Errorf("status printed\n%s\nwant %q", b.String(), c.want)
		}
	}
}
