package release

import (
	"bytes"
	"errors"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// clock is a settable fake clock.
type clock struct{ t time.Time }

func (c *clock) now() time.Time { return c.t }

var t0 = time.Date(2026, 11, 29, 12, 0, 0, 0, time.UTC)

// fixture is a repository, its first root (what nodes were set up to
// trust) and a binary file.
type fixture struct {
	t    testing.TB
	clk  *clock
	repo *Repo
	root []byte
	bin  []byte
}

func newFixture(t testing.TB, o InitOptions) *fixture {
	t.Helper()
	clk := &clock{t: t0}
	r, err := Init(filepath.Join(t.TempDir(), "repo"), o, clk.now)
	if err != nil {
		t.Fatal(err)
	}
	root, err := r.Root()
	if err != nil {
		t.Fatal(err)
	}
	return &fixture{t: t, clk: clk, repo: r, root: root}
}

// release signs a binary of the given version for linux/amd64, publishes,
// and returns the published directory's bundle.
func (f *fixture) release(version string, rollout time.Duration) Bundle {
	f.t.Helper()
	f.bin = []byte("micra binary " + version + "\x00\x7fELF")
	path := filepath.Join(f.t.TempDir(), "micra")
	if err := os.WriteFile(path, f.bin, 0o755); err != nil {
		f.t.Fatal(err)
	}
	if _, err := f.repo.AddTarget(path, Target{Version: version, OS: "linux", Arch: "amd64", Rollout: rollout}); err != nil {
		f.t.Fatal(err)
	}
	return f.publish()
}

func (f *fixture) publish() Bundle {
	f.t.Helper()
	out := filepath.Join(f.t.TempDir(), "pub")
	if err := f.repo.Publish(out); err != nil {
		f.t.Fatal(err)
	}
	b, err := ReadBundle(out)
	if err != nil {
		f.t.Fatal(err)
	}
	return b
}

func (f *fixture) verifier(running string) *Verifier {
	return &Verifier{Root: f.root, OS: "linux", Arch: "amd64", Running: running}
}

func wantRefused(t *testing.T, err error, role string, reason error) {
	t.Helper()
	var r *Refused
	if !errors.As(err, &r) || !errors.Is(err, reason) || r.Role != role {
		t.Fatalf("got %v; want a refusal of %s: %v", err, role, reason)
	}
	t.Logf("refused as wanted: %v", err)
}

func TestSignedReleaseAccepted(t *testing.T) {
	f := newFixture(t, InitOptions{})
	b := f.release("v1.2.0", 2*time.Hour)
	rel, err := f.verifier("v1.1.0").Verify(b, bytes.NewReader(f.bin), f.clk.now())
	if err != nil {
		t.Fatal(err)
	}
	if rel.Version != "v1.2.0" || !rel.Newer || rel.Rollout != 2*time.Hour || rel.Length != int64(len(f.bin)) || rel.Target != "micra-linux-amd64" {
		t.Fatalf("release %+v", rel)
	}
	if rel.State.Version != "v1.2.0" || rel.State.Timestamp != 2 || rel.State.Targets != 2 {
		t.Fatalf("state %+v", rel.State)
	}
	// the version running is not newer, and not refused
	rel, err = f.verifier("v1.2.0").Metadata(b, f.clk.now())
	if err != nil || rel.Newer {
		t.Fatalf("same version: %+v, %v", rel, err)
	}
}

func TestRefusedBinaryHashDiffers(t *testing.T) {
	f := newFixture(t, InitOptions{})
	b := f.release("v1.2.0", 0)
	bad := bytes.Clone(f.bin)
	bad[3] ^= 1 // same length, other content
	_, err := f.verifier("v1.1.0").Verify(b, bytes.NewReader(bad), f.clk.now())
	wantRefused(t, err, "binary", ErrHash)
	_, err = f.verifier("v1.1.0").Verify(b, bytes.NewReader(append(bytes.Clone(f.bin), 0)), f.clk.now())
	wantRefused(t, err, "binary", ErrHash)
}

func TestRefusedBelowThreshold(t *testing.T) {
	// two timestamp keys, both needed: one stolen online key signs alone
	f := newFixture(t, InitOptions{Keys: map[string]int{metadata.TIMESTAMP: 2}, Threshold: map[string]int{metadata.TIMESTAMP: 2}})
	b := f.release("v1.2.0", 0)
	if _, err := f.verifier("").Metadata(b, f.clk.now()); err != nil {
		t.Fatalf("both signatures: %v", err)
	}
	ts, err := metadata.Timestamp().FromBytes(b.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	ts.Signatures = ts.Signatures[:1]
	if b.Timestamp, err = ts.ToBytes(true); err != nil {
		t.Fatal(err)
	}
	_, err = f.verifier("").Metadata(b, f.clk.now())
	wantRefused(t, err, "timestamp", ErrThreshold)

	// a new root signed by one root key of the two its threshold needs
	g := newFixture(t, InitOptions{})
	gb := g.release("v1.2.0", 0)
	r2, err := metadata.Root().FromBytes(gb.Roots[0])
	if err != nil {
		t.Fatal(err)
	}
	r2.Signed.Version = 2
	r2.Signed.Roles[metadata.ROOT].Threshold = 1
	r2.ClearSignatures()
	s, err := g.repo.keys[metadata.ROOT][0].signer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := r2.Sign(s); err != nil {
		t.Fatal(err)
	}
	raw, err := r2.ToBytes(true)
	if err != nil {
		t.Fatal(err)
	}
	gb.Roots = append(gb.Roots, raw)
	_, err = g.verifier("").Metadata(gb, g.clk.now())
	wantRefused(t, err, "root", ErrThreshold)
}

func TestRefusedExpiredTimestamp(t *testing.T) {
	f := newFixture(t, InitOptions{})
	b := f.release("v1.2.0", 0)
	f.clk.t = t0.Add(DefaultExpiry.Timestamp + time.Second) // a day on, nothing re-published: frozen
	_, err := f.verifier("").Metadata(b, f.clk.now())
	wantRefused(t, err, "timestamp", ErrExpired)
	// the operators' next publish (a fresh timestamp) is accepted again
	if _, err := f.verifier("").Metadata(f.publish(), f.clk.now()); err != nil {
		t.Fatalf("re-published: %v", err)
	}
}

func TestRefusedRollback(t *testing.T) {
	f := newFixture(t, InitOptions{})
	old := f.release("v1.1.0", 0)
	f.clk.t = t0.Add(time.Hour)
	cur := f.release("v1.2.0", 0)
	v := f.verifier("v1.0.0")
	rel, err := v.Metadata(cur, f.clk.now())
	if err != nil {
		t.Fatal(err)
	}
	// replayed older metadata, still unexpired, after the node accepted the newer
	v.State = rel.State
	_, err = v.Metadata(old, f.clk.now())
	wantRefused(t, err, "timestamp", ErrRollback)

	// a release older than the version the node runs, freshly signed
	g := newFixture(t, InitOptions{})
	_, err = g.verifier("v1.3.0").Metadata(g.release("v1.2.0", 0), g.clk.now())
	wantRefused(t, err, "targets", ErrRollback)
}

func TestRefusedOtherNetworksRelease(t *testing.T) {
	ours := newFixture(t, InitOptions{})
	ours.release("v1.2.0", 0)
	theirs := newFixture(t, InitOptions{})
	b := theirs.release("v9.0.0", 0)
	_, err := ours.verifier("").Metadata(b, ours.clk.now())
	wantRefused(t, err, "timestamp", ErrForeign)
	// their root chain, past the version ours trusts, is not signed by our root keys
	if err := theirs.repo.RotateKey(metadata.TIMESTAMP); err != nil {
		t.Fatal(err)
	}
	_, err = ours.verifier("").Metadata(theirs.publish(), ours.clk.now())
	wantRefused(t, err, "root", ErrForeign)
}

func TestKeyRotationFollowed(t *testing.T) {
	f := newFixture(t, InitOptions{})
	b1 := f.release("v1.2.0", 0)
	oldTS, err := metadata.Timestamp().FromBytes(b1.Timestamp)
	if err != nil {
		t.Fatal(err)
	}
	oldKey := f.repo.keys[metadata.TIMESTAMP][0]
	if err := f.repo.RotateKey(metadata.TIMESTAMP); err != nil {
		t.Fatal(err)
	}
	if err := f.repo.RotateKey(metadata.ROOT); err != nil {
		t.Fatal(err)
	}
	b := f.publish()
	v := f.verifier("")
	rel, err := v.Metadata(b, f.clk.now())
	if err != nil {
		t.Fatalf("node on root v1 after two rotations: %v", err)
	}
	if rel.RootVersion != 3 {
		t.Fatalf("root version %d, want 3", rel.RootVersion)
	}
	// from now on the node trusts root v3: the retired timestamp key's
	// signature on a newer timestamp is refused
	v.Root, v.State = rel.Root, rel.State
	oldTS.Signed.Version = rel.State.Timestamp + 1
	oldTS.ClearSignatures()
	s, err := oldKey.signer()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := oldTS.Sign(s); err != nil {
		t.Fatal(err)
	}
	if b.Timestamp, err = oldTS.ToBytes(true); err != nil {
		t.Fatal(err)
	}
	_, err = v.Metadata(b, f.clk.now())
	wantRefused(t, err, "timestamp", ErrForeign)
	// and the repository reopened from disk signs on with the new keys
	r, err := Open(f.repo.Dir(), f.clk.now)
	if err != nil {
		t.Fatal(err)
	}
	f.repo = r
	if _, err := v.Metadata(f.release("v1.3.0", 0), f.clk.now()); err != nil {
		t.Fatalf("after reopening: %v", err)
	}
}

func TestRefusedNoBinaryForPlatform(t *testing.T) {
	f := newFixture(t, InitOptions{})
	b := f.release("v1.2.0", 0)
	v := f.verifier("")
	v.Arch = "riscv64"
	_, err := v.Metadata(b, f.clk.now())
	wantRefused(t, err, "targets", ErrNoTarget)
}

func TestAddTargetRefusesBadInput(t *testing.T) {
	f := newFixture(t, InitOptions{})
	f.release("v1.2.0", 0)
	path := filepath.Join(t.TempDir(), "bin")
	if err := os.WriteFile(path, []byte("x"), 0o755); err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		t    Target
		want string
	}{
		{Target{Version: "1.3", OS: "linux", Arch: "amd64"}, `--version "1.3": want a semantic version`},
		{Target{Version: "v1.1.0", OS: "linux", Arch: "amd64"}, "already has v1.2.0"},
		{Target{Version: "v1.3.0", Arch: "amd64"}, "--os and --arch"},
	} {
		if _, err := f.repo.AddTarget(path, c.t); err == nil || !bytes.Contains([]byte(err.Error()), []byte(c.want)) {
			t.Errorf("%+v: %v; want %q", c.t, err, c.want)
		}
	}
	if _, err := Init(f.repo.Dir(), InitOptions{}, f.clk.now); err == nil {
		t.Error("Init over an existing repository succeeded")
	}
	if _, err := Open(t.TempDir(), f.clk.now); err == nil {
		t.Error("Open of an empty directory succeeded")
	}
}

func TestBundleEncodeDecode(t *testing.T) {
	f := newFixture(t, InitOptions{})
	f.release("v1.2.0", 0)
	if err := f.repo.RotateKey(metadata.TIMESTAMP); err != nil {
		t.Fatal(err)
	}
	b := f.publish()
	data, err := b.Encode()
	if err != nil {
		t.Fatal(err)
	}
	raw := 0
	for _, m := range append(append([][]byte(nil), b.Roots...), b.Targets, b.Snapshot, b.Timestamp) {
		raw += len(m)
	}
	t.Logf("bundle with %d roots: %d bytes of metadata, %d on the wire", len(b.Roots), raw, len(data))
	d, err := DecodeBundle(data)
	if err != nil {
		t.Fatal(err)
	}
	if _, err := f.verifier("").Metadata(d, f.clk.now()); err != nil {
		t.Fatal(err)
	}
	for _, bad := range []Bundle{{Roots: b.Roots}, {Targets: b.Targets, Snapshot: b.Snapshot, Timestamp: b.Timestamp}} {
		enc, err := bad.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBundle(enc); err == nil {
			t.Errorf("an incomplete bundle decoded")
		}
	}
	if _, err := DecodeBundle([]byte("MRB1 not zstd")); err == nil {
		t.Error("junk decoded")
	}
	if _, err := DecodeBundle(data[4:]); err == nil {
		t.Error("a bundle without its header decoded")
	}
}

func FuzzDecodeBundle(f *testing.F) {
	fx := newFixture(f, InitOptions{})
	data, err := fx.release("v1.2.0", 0).Encode()
	if err != nil {
		f.Fatal(err)
	}
	f.Add(data)
	f.Add([]byte("MRB1"))
	f.Fuzz(func(t *testing.T, data []byte) {
		b, err := DecodeBundle(data)
		if err != nil {
			return
		}
		if len(b.Roots) == 0 || len(b.Roots) > MaxRoots || b.Targets == nil {
			t.Fatalf("decoded a bundle out of bounds: %d roots", len(b.Roots))
		}
		again, err := b.Encode()
		if err != nil {
			t.Fatal(err)
		}
		if _, err := DecodeBundle(again); err != nil {
			t.Fatalf("re-encoded bundle does not decode: %v", err)
		}
	})
}

// Bundles come from peers: whatever their bytes, the verifier answers with
// a refusal, never a panic (go-tuf's parser panics on some shapes).
func FuzzVerifyBundle(f *testing.F) {
	fx := newFixture(f, InitOptions{})
	b := fx.release("v1.2.0", 0)
	f.Add(b.Roots[0], b.Timestamp, b.Snapshot, b.Targets)
	f.Add([]byte(`{"signed":1,"signatures":[]}`), []byte(`{"signed":{"_type":"timestamp"}}`), []byte(`[]`), []byte(`{}`))
	f.Add([]byte(`{"signed":{"_type":"root","version":2,"keys":{"a":null},"roles":{"root":null}},"signatures":[{"keyid":"a"}]}`),
		b.Timestamp, b.Snapshot, b.Targets)
	v := fx.verifier("")
	f.Fuzz(func(t *testing.T, root, ts, snap, targets []byte) {
		_, _ = v.Metadata(Bundle{Roots: [][]byte{b.Roots[0], root}, Timestamp: ts, Snapshot: snap, Targets: targets}, t0)
	})
}
