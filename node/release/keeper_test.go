package release

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

func TestKeeperInstallsRootAndRemembers(t *testing.T) {
	f := newFixture(t, InitOptions{})
	dir := filepath.Join(t.TempDir(), "release")
	if _, err := OpenKeeper(dir, "", "linux", "amd64", "v1.0.0"); err == nil || !strings.Contains(err.Error(), "set release_root") {
		t.Fatalf("no root: %v", err)
	}
	junk := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(junk, []byte(`{"signed":{}}`), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := OpenKeeper(dir, junk, "linux", "amd64", "v1.0.0"); err == nil || !strings.Contains(err.Error(), "release_root "+junk) {
		t.Fatalf("junk root: %v", err)
	}
	rootPath := filepath.Join(t.TempDir(), "root.json")
	if err := os.WriteFile(rootPath, f.root, 0o644); err != nil {
		t.Fatal(err)
	}
	k, err := OpenKeeper(dir, rootPath, "linux", "amd64", "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	old := f.release("v1.1.0", time.Minute)
	f.clk.t = t0.Add(time.Hour)
	cur := f.release("v1.2.0", time.Minute)
	rel, fresh, err := k.Offer(cur, f.clk.now())
	if err != nil || !fresh || rel.Version != "v1.2.0" {
		t.Fatalf("offer: %+v %v %v", rel, fresh, err)
	}
	if _, fresh, err := k.Offer(cur, f.clk.now()); err != nil || fresh {
		t.Fatalf("the same bundle again: fresh %v, %v", fresh, err)
	}
	if a, ok := k.Available(); !ok || a.Version != "v1.2.0" {
		t.Fatalf("available: %+v %v", a, ok)
	}

	// a restarted node remembers what it accepted: the older bundle is a rollback
	k2, err := OpenKeeper(dir, "", "linux", "amd64", "v1.0.0")
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := k2.Offer(old, f.clk.now()); !errors.Is(err, ErrRollback) {
		t.Fatalf("older bundle after a restart: %v", err)
	}
	if s := k2.Status(); !strings.Contains(s.Refusal, "a rollback") || !s.RefusedAt.Equal(f.clk.now()) || s.Available != nil {
		t.Fatalf("status %+v", s)
	}

	// a rotated root is followed and kept: the directory trusts v2 afterwards
	if err := f.repo.RotateKey(metadata.SNAPSHOT); err != nil {
		t.Fatal(err)
	}
	if _, _, err := k2.Offer(f.publish(), f.clk.now()); err != nil {
		t.Fatal(err)
	}
	onDisk, err := os.ReadFile(filepath.Join(dir, trustedRootFile))
	if err != nil {
		t.Fatal(err)
	}
	v2, _ := f.repo.Root()
	if !bytes.Equal(onDisk, v2) || k2.Status().RootVersion != 2 {
		t.Fatalf("trusted root not advanced to v2 (status %+v)", k2.Status())
	}
	// the configured release_root (v1) no longer replaces it
	k3, err := OpenKeeper(dir, rootPath, "linux", "amd64", "v1.0.0")
	if err != nil || k3.Status().RootVersion != 2 {
		t.Fatalf("reopened with release_root v1: %+v %v", k3.Status(), err)
	}
}
