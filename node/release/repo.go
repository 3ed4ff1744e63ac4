package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"runtime"
	"strings"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
	"golang.org/x/mod/semver"
)

// The files of a repository directory (the operators' working copy, with
// its private keys) and of a published one (what nodes fetch; no keys).
const (
	keysDir     = "keys"
	retiredDir  = "keys/retired"
	metaDir     = "metadata"
	targetsDir  = "targets"
	configFile  = "repo.json"
	rootFile    = "root.json"
	targetsFile = "targets.json"
	snapFile    = "snapshot.json"
	tsFile      = "timestamp.json"
)

// Expiry is how long each role's metadata stays valid once signed. The
// timestamp's is the shortest: it is re-signed at every publish, and a node
// handed a frozen (replayed) repository refuses it once it expires.
type Expiry struct {
	Root      time.Duration `json:"root"`
	Targets   time.Duration `json:"targets"`
	Snapshot  time.Duration `json:"snapshot"`
	Timestamp time.Duration `json:"timestamp"`
}

// DefaultExpiry: a root for a year, targets for 90 days, a snapshot for a
// week, a timestamp for a day.
var DefaultExpiry = Expiry{Root: 365 * 24 * time.Hour, Targets: 90 * 24 * time.Hour, Snapshot: 7 * 24 * time.Hour, Timestamp: 24 * time.Hour}

func (e Expiry) of(role string) time.Duration {
	switch role {
	case metadata.ROOT:
		return e.Root
	case metadata.TARGETS:
		return e.Targets
	case metadata.SNAPSHOT:
		return e.Snapshot
	}
	return e.Timestamp
}

// Roles are the four top-level roles, in the order a repository signs them.
var Roles = []string{metadata.ROOT, metadata.TARGETS, metadata.SNAPSHOT, metadata.TIMESTAMP}

// InitOptions shape a new repository.
type InitOptions struct {
	// Keys is how many keys each role has, Threshold how many of them must
	// sign; unset roles have 1 of 1, except root: 3 keys, 2 to sign.
	Keys, Threshold map[string]int
	Expiry          Expiry // zero: DefaultExpiry
}

// Target is what `micra release sign` adds: one binary for one platform.
type Target struct {
	Version string        // semantic version, "v1.2.3"
	OS      string        // GOOS
	Arch    string        // GOARCH
	Rollout time.Duration // nodes with auto_update = on start within a random delay up to this
}

// Custom is a target's custom metadata: what the binary is, signed with it.
type Custom struct {
	Version string `json:"version"`
	Rollout string `json:"rollout,omitempty"` // a Go duration
}

// TargetName is the target path of the binary for os/arch.
func TargetName(goos, goarch string) string { return "micra-" + goos + "-" + goarch }

// Platform is this binary's os/arch.
func Platform() (goos, goarch string) { return runtime.GOOS, runtime.GOARCH }

// Repo is an operator's repository: private keys and signed metadata.
type Repo struct {
	dir    string
	now    func() time.Time
	expiry Expiry
	keys   map[string][]*Key

	root      *metadata.Metadata[metadata.RootType]
	targets   *metadata.Metadata[metadata.TargetsType]
	snapshot  *metadata.Metadata[metadata.SnapshotType]
	timestamp *metadata.Metadata[metadata.TimestampType]
}

type repoConfig struct {
	Expiry Expiry `json:"expiry"`
}

// Init creates a repository in dir (which must not hold one): fresh keys for
// every role (never a key of the network's other keys: release keys are
// their own files and kind), root version 1 signed by all its keys, empty
// targets, a snapshot and a timestamp.
func Init(dir string, o InitOptions, now func() time.Time) (*Repo, error) {
	if _, err := os.Stat(filepath.Join(dir, configFile)); err == nil {
		return nil, fmt.Errorf("%s already holds a release repository", dir)
	}
	if o.Expiry == (Expiry{}) {
		o.Expiry = DefaultExpiry
	}
	for _, role := range Roles {
		if o.Expiry.of(role) <= 0 {
			return nil, fmt.Errorf("expiry of %s: %v is not a positive duration", role, o.Expiry.of(role))
		}
	}
	for _, d := range []string{keysDir, metaDir, targetsDir} {
		if err := os.MkdirAll(filepath.Join(dir, d), 0o700); err != nil {
			return nil, err
		}
	}
	r := &Repo{dir: dir, now: now, expiry: o.Expiry, keys: map[string][]*Key{}}
	r.root = metadata.Root(r.expires(metadata.ROOT))
	for _, role := range Roles {
		n, t := o.Keys[role], o.Threshold[role]
		if n == 0 {
			n = 1
			if role == metadata.ROOT {
				n = 3
			}
		}
		if t == 0 {
			t = 1
			if role == metadata.ROOT && n >= 2 {
				t = 2
			}
		}
		if t < 1 || t > n {
			return nil, fmt.Errorf("%s: threshold %d of %d keys: want 1 to %d", role, t, n, n)
		}
		for i := 1; i <= n; i++ {
			k, err := newKey(role)
			if err != nil {
				return nil, err
			}
			if err := writeKey(filepath.Join(dir, keysDir, fmt.Sprintf("%s-%d.key", role, i)), k); err != nil {
				return nil, err
			}
			if err := r.root.Signed.AddKey(k.Public, role); err != nil {
				return nil, err
			}
			r.keys[role] = append(r.keys[role], k)
		}
		r.root.Signed.Roles[role].Threshold = t
	}
	cfg, err := json.MarshalIndent(repoConfig{Expiry: o.Expiry}, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := writeAtomic(filepath.Join(dir, configFile), cfg, 0o600); err != nil {
		return nil, err
	}
	r.targets = metadata.Targets(r.expires(metadata.TARGETS))
	if err := r.signRoot(nil); err != nil {
		return nil, err
	}
	if err := r.signTargets(); err != nil {
		return nil, err
	}
	r.snapshot = metadata.Snapshot(r.expires(metadata.SNAPSHOT))
	r.timestamp = metadata.Timestamp(r.expires(metadata.TIMESTAMP))
	if err := r.signOnline(false); err != nil {
		return nil, err
	}
	return r, nil
}

// Open reads the repository in dir with the keys it holds (root keys may be
// absent: they are needed only to change the root).
func Open(dir string, now func() time.Time) (*Repo, error) {
	cfgData, err := os.ReadFile(filepath.Join(dir, configFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s holds no release repository: create one with micra release init --repo %s", dir, dir)
	}
	if err != nil {
		return nil, err
	}
	var cfg repoConfig
	if err := json.Unmarshal(cfgData, &cfg); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(dir, configFile), err)
	}
	r := &Repo{dir: dir, now: now, expiry: cfg.Expiry}
	if r.keys, err = readKeys(filepath.Join(dir, keysDir)); err != nil {
		return nil, err
	}
	md := filepath.Join(dir, metaDir)
	if r.root, err = metadata.Root().FromFile(filepath.Join(md, rootFile)); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(md, rootFile), err)
	}
	if r.targets, err = metadata.Targets().FromFile(filepath.Join(md, targetsFile)); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(md, targetsFile), err)
	}
	if r.snapshot, err = metadata.Snapshot().FromFile(filepath.Join(md, snapFile)); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(md, snapFile), err)
	}
	if r.timestamp, err = metadata.Timestamp().FromFile(filepath.Join(md, tsFile)); err != nil {
		return nil, fmt.Errorf("%s: %w", filepath.Join(md, tsFile), err)
	}
	return r, nil
}

// Dir is the repository's directory.
func (r *Repo) Dir() string { return r.dir }

// RootVersion is the version of the repository's current root.
func (r *Repo) RootVersion() int64 { return r.root.Signed.Version }

// Root is the current root metadata, signed: what a node is set up to trust.
func (r *Repo) Root() ([]byte, error) { return r.root.ToBytes(true) }

func (r *Repo) expires(role string) time.Time {
	return r.now().UTC().Add(r.expiry.of(role)).Truncate(time.Second)
}

// AddTarget copies the binary at path into the repository as the release
// t, replacing the platform's previous release, and signs a new targets
// version. A version not newer than the platform's current one is refused:
// nodes refuse a rollback, so publishing one would only strand them.
func (r *Repo) AddTarget(path string, t Target) (*metadata.TargetFiles, error) {
	if !semver.IsValid(t.Version) || semver.Canonical(t.Version) != t.Version {
		return nil, fmt.Errorf("--version %q: want a semantic version such as v1.2.3", t.Version)
	}
	if t.OS == "" || t.Arch == "" {
		return nil, fmt.Errorf("--os and --arch: both are needed (e.g. linux, amd64)")
	}
	if t.Rollout < 0 {
		return nil, fmt.Errorf("--rollout %v: want 0 or a positive duration", t.Rollout)
	}
	name := TargetName(t.OS, t.Arch)
	if prev, ok := r.targets.Signed.Targets[name]; ok {
		if c, err := customOf(prev); err == nil && semver.Compare(t.Version, c.Version) <= 0 {
			return nil, fmt.Errorf("--version %s: %s already has %s; a release must be newer (nodes refuse rollbacks)", t.Version, name, c.Version)
		}
	}
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("--binary: %w", err)
	}
	if len(data) == 0 {
		return nil, fmt.Errorf("--binary %s: the file is empty", path)
	}
	tf, err := metadata.TargetFile().FromBytes(name, data, "sha256")
	if err != nil {
		return nil, err
	}
	c := Custom{Version: t.Version}
	if t.Rollout > 0 {
		c.Rollout = t.Rollout.String()
	}
	raw, err := json.Marshal(c)
	if err != nil {
		return nil, err
	}
	cr := json.RawMessage(raw)
	tf.Custom = &cr
	sum := hex.EncodeToString(tf.Hashes["sha256"])
	if err := writeAtomic(filepath.Join(r.dir, targetsDir, sum), data, 0o644); err != nil {
		return nil, err
	}
	r.targets.Signed.Targets[name] = tf
	r.targets.Signed.Version++
	r.targets.Signed.Expires = r.expires(metadata.TARGETS)
	return tf, r.signTargets()
}

// Publish signs a new snapshot and timestamp (the timestamp with a fresh
// expiry: run it at least once per timestamp expiry even with no new
// release) and writes the published repository to out: metadata/ (every
// root version, targets, snapshot, timestamp) and targets/ (each binary
// named by its SHA-256). Binaries first, timestamp last, so a reader of out
// never sees metadata naming a binary it lacks.
func (r *Repo) Publish(out string) error {
	if err := r.signOnline(true); err != nil {
		return err
	}
	for _, d := range []string{metaDir, targetsDir} {
		if err := os.MkdirAll(filepath.Join(out, d), 0o755); err != nil {
			return err
		}
	}
	for _, tf := range r.targets.Signed.Targets {
		sum := hex.EncodeToString(tf.Hashes["sha256"])
		data, err := os.ReadFile(filepath.Join(r.dir, targetsDir, sum))
		if err != nil {
			return fmt.Errorf("target %s: %w", sum, err)
		}
		if err := writeAtomic(filepath.Join(out, targetsDir, sum), data, 0o644); err != nil {
			return err
		}
	}
	for v := int64(1); v <= r.root.Signed.Version; v++ {
		if err := copyFile(filepath.Join(r.dir, metaDir, fmt.Sprintf("%d.%s", v, rootFile)), filepath.Join(out, metaDir, fmt.Sprintf("%d.%s", v, rootFile))); err != nil {
			return err
		}
	}
	for _, f := range []string{rootFile, targetsFile, snapFile, tsFile} {
		if err := copyFile(filepath.Join(r.dir, metaDir, f), filepath.Join(out, metaDir, f)); err != nil {
			return err
		}
	}
	return nil
}

// RotateKey replaces every key of role with a fresh one: a new root version
// lists the new keys and is signed by the old root keys (so nodes that trust
// the old root accept it) and, when root itself rotates, by the new ones. The
// old key files move to keys/retired. A rotated targets key re-signs the
// targets at once; the snapshot and timestamp are re-signed at the next
// Publish.
func (r *Repo) RotateKey(role string) error {
	if !isRole(role) {
		return fmt.Errorf("role %q: want one of %s", role, strings.Join(Roles, ", "))
	}
	prevRoot := r.keys[metadata.ROOT]
	n := len(r.root.Signed.Roles[role].KeyIDs)
	for _, id := range append([]string(nil), r.root.Signed.Roles[role].KeyIDs...) {
		if err := r.root.Signed.RevokeKey(id, role); err != nil {
			return err
		}
	}
	if err := os.MkdirAll(filepath.Join(r.dir, retiredDir), 0o700); err != nil {
		return err
	}
	ents, err := os.ReadDir(filepath.Join(r.dir, keysDir))
	if err != nil {
		return err
	}
	for _, e := range ents {
		if strings.HasPrefix(e.Name(), role+"-") && strings.HasSuffix(e.Name(), ".key") {
			retired := fmt.Sprintf("%s.v%d", e.Name(), r.root.Signed.Version)
			if err := os.Rename(filepath.Join(r.dir, keysDir, e.Name()), filepath.Join(r.dir, retiredDir, retired)); err != nil {
				return err
			}
		}
	}
	r.keys[role] = nil
	for i := 1; i <= n; i++ {
		k, err := newKey(role)
		if err != nil {
			return err
		}
		if err := writeKey(filepath.Join(r.dir, keysDir, fmt.Sprintf("%s-%d.key", role, i)), k); err != nil {
			return err
		}
		if err := r.root.Signed.AddKey(k.Public, role); err != nil {
			return err
		}
		r.keys[role] = append(r.keys[role], k)
	}
	r.root.Signed.Version++
	r.root.Signed.Expires = r.expires(metadata.ROOT)
	if err := r.signRoot(prevRoot); err != nil {
		return err
	}
	if role == metadata.TARGETS {
		r.targets.Signed.Version++
		r.targets.Signed.Expires = r.expires(metadata.TARGETS)
		return r.signTargets()
	}
	return nil
}

func isRole(role string) bool {
	for _, r := range Roles {
		if r == role {
			return true
		}
	}
	return false
}

// signRoot signs the root with its current keys and with prev (the keys of
// the version before, which nodes trust), and writes N.root.json and
// root.json.
func (r *Repo) signRoot(prev []*Key) error {
	r.root.ClearSignatures()
	signed := map[string]bool{}
	for _, k := range append(append([]*Key(nil), r.keys[metadata.ROOT]...), prev...) {
		if signed[k.ID()] {
			continue
		}
		signed[k.ID()] = true
		s, err := k.signer()
		if err != nil {
			return err
		}
		if _, err := r.root.Sign(s); err != nil {
			return err
		}
	}
	if need := r.root.Signed.Roles[metadata.ROOT].Threshold; len(r.keys[metadata.ROOT]) < need {
		return fmt.Errorf("root: %d root keys in %s, the threshold is %d", len(r.keys[metadata.ROOT]), filepath.Join(r.dir, keysDir), need)
	}
	data, err := r.root.ToBytes(true)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(r.dir, metaDir, fmt.Sprintf("%d.%s", r.root.Signed.Version, rootFile)), data, 0o644); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(r.dir, metaDir, rootFile), data, 0o644)
}

func (r *Repo) signTargets() error {
	r.targets.ClearSignatures()
	if err := r.needKeys(metadata.TARGETS); err != nil {
		return err
	}
	for _, k := range r.keys[metadata.TARGETS] {
		s, err := k.signer()
		if err != nil {
			return err
		}
		if _, err := r.targets.Sign(s); err != nil {
			return err
		}
	}
	data, err := r.targets.ToBytes(true)
	if err != nil {
		return err
	}
	return writeAtomic(filepath.Join(r.dir, metaDir, targetsFile), data, 0o644)
}

// signOnline signs the snapshot (naming the current targets) and the
// timestamp (naming the snapshot by version, length and hash); bump makes
// them new versions.
func (r *Repo) signOnline(bump bool) error {
	for _, role := range []string{metadata.SNAPSHOT, metadata.TIMESTAMP} {
		if err := r.needKeys(role); err != nil {
			return err
		}
	}
	tdata, err := r.targets.ToBytes(true)
	if err != nil {
		return err
	}
	r.snapshot.Signed.Meta[targetsFile] = metaFile(r.targets.Signed.Version, tdata)
	if bump {
		r.snapshot.Signed.Version++
		r.timestamp.Signed.Version++
	}
	r.snapshot.Signed.Expires = r.expires(metadata.SNAPSHOT)
	r.snapshot.ClearSignatures()
	for _, k := range r.keys[metadata.SNAPSHOT] {
		s, err := k.signer()
		if err != nil {
			return err
		}
		if _, err := r.snapshot.Sign(s); err != nil {
			return err
		}
	}
	sdata, err := r.snapshot.ToBytes(true)
	if err != nil {
		return err
	}
	r.timestamp.Signed.Meta[snapFile] = metaFile(r.snapshot.Signed.Version, sdata)
	r.timestamp.Signed.Expires = r.expires(metadata.TIMESTAMP)
	r.timestamp.ClearSignatures()
	for _, k := range r.keys[metadata.TIMESTAMP] {
		s, err := k.signer()
		if err != nil {
			return err
		}
		if _, err := r.timestamp.Sign(s); err != nil {
			return err
		}
	}
	tsdata, err := r.timestamp.ToBytes(true)
	if err != nil {
		return err
	}
	if err := writeAtomic(filepath.Join(r.dir, metaDir, snapFile), sdata, 0o644); err != nil {
		return err
	}
	return writeAtomic(filepath.Join(r.dir, metaDir, tsFile), tsdata, 0o644)
}

func (r *Repo) needKeys(role string) error {
	if need := r.root.Signed.Roles[role].Threshold; len(r.keys[role]) < need {
		return fmt.Errorf("%s: %d of its keys in %s, its threshold is %d", role, len(r.keys[role]), filepath.Join(r.dir, keysDir), need)
	}
	return nil
}

func metaFile(version int64, data []byte) *metadata.MetaFiles {
	sum := sha256.Sum256(data)
	return &metadata.MetaFiles{Version: version, Length: int64(len(data)), Hashes: metadata.Hashes{"sha256": sum[:]}}
}

func customOf(tf *metadata.TargetFiles) (Custom, error) {
	var c Custom
	if tf.Custom == nil {
		return c, errors.New("no custom metadata")
	}
	if err := json.Unmarshal(*tf.Custom, &c); err != nil {
		return c, err
	}
	return c, nil
}

// writeAtomic writes data to path through a temporary file and a rename.
func writeAtomic(path string, data []byte, mode os.FileMode) error {
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*")
	if err != nil {
		return err
	}
	if _, err := tmp.Write(data); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Chmod(mode); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Sync(); err != nil {
		tmp.Close()
		os.Remove(tmp.Name())
		return err
	}
	if err := tmp.Close(); err != nil {
		os.Remove(tmp.Name())
		return err
	}
	return os.Rename(tmp.Name(), path)
}

func copyFile(from, to string) error {
	f, err := os.Open(from)
	if err != nil {
		return err
	}
	defer f.Close()
	data, err := io.ReadAll(f)
	if err != nil {
		return err
	}
	return writeAtomic(to, data, 0o644)
}
