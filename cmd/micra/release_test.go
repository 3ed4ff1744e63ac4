package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
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
