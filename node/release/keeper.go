package release

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sync"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
)

// The files of a node's release directory (data_dir/release).
const (
	trustedRootFile = "root.json"
	stateFile       = "state.json"
)

// Keeper is a node's side of releases: its trusted root and what it has
// accepted, kept in a directory, and the newest verified release for its
// platform. Bundles are offered to it from wherever they come (a published
// directory, the overlay); it verifies each, remembers what it accepted so
// that an older one is refused later, and follows root rotations.
type Keeper struct {
	dir      string
	os, arch string
	running  string

	mu        sync.Mutex
	root      []byte
	rootVer   int64
	state     State
	available *Release // the newest verified release newer than running
	checked   time.Time
	refusal   error
	refusedAt time.Time
}

// OpenKeeper opens the release directory dir. When it holds no trusted root
// yet, install (the release_root setting) is verified to be a root and
// copied there: from then on the directory's root is the one trusted, and
// it advances only through verified rotations. running is the version this
// binary is (node.Build().Version).
func OpenKeeper(dir, install, goos, goarch, running string) (*Keeper, error) {
	k := &Keeper{dir: dir, os: goos, arch: goarch, running: running}
	path := filepath.Join(dir, trustedRootFile)
	root, err := os.ReadFile(path)
	switch {
	case errors.Is(err, fs.ErrNotExist) && install != "":
		if root, err = os.ReadFile(install); err != nil {
			return nil, fmt.Errorf("release_root: %w", err)
		}
		if _, err := parseRoot(root); err != nil {
			return nil, fmt.Errorf("release_root %s: %w", install, err)
		}
		if err := os.MkdirAll(dir, 0o700); err != nil {
			return nil, err
		}
		if err := writeAtomic(path, root, 0o600); err != nil {
			return nil, err
		}
	case errors.Is(err, fs.ErrNotExist):
		return nil, fmt.Errorf("no trusted release root: set release_root to the network's root.json (micra release init writes it), or auto_update = \"off\"")
	case err != nil:
		return nil, err
	}
	r, err := parseRoot(root)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	k.root, k.rootVer = root, r.Signed.Version
	if data, err := os.ReadFile(filepath.Join(dir, stateFile)); err == nil {
		if err := json.Unmarshal(data, &k.state); err != nil {
			return nil, fmt.Errorf("%s: %w", filepath.Join(dir, stateFile), err)
		}
	} else if !errors.Is(err, fs.ErrNotExist) {
		return nil, err
	}
	return k, nil
}

// parseRoot checks that data is root metadata signed by its own threshold.
func parseRoot(data []byte) (*metadata.Metadata[metadata.RootType], error) {
	if err := checkShape(data, metadata.ROOT); err != nil {
		return nil, err
	}
	r, err := metadata.Root().FromBytes(data)
	if err != nil {
		return nil, fmt.Errorf("not TUF root metadata: %w", err)
	}
	if err := r.VerifyDelegate(metadata.ROOT, r); err != nil {
		return nil, fmt.Errorf("root version %d is not signed by its own root keys: %w", r.Signed.Version, err)
	}
	return r, nil
}

// Offer verifies b at now. An accepted bundle's root and versions are kept
// (on disk before Offer returns), and its release becomes the available one
// when it is newer than the running version; fresh says it was not
// available before (log it once). A refusal is returned and kept for
// Status.
func (k *Keeper) Offer(b Bundle, now time.Time) (rel Release, fresh bool, err error) {
	k.mu.Lock()
	defer k.mu.Unlock()
	k.checked = now
	v := &Verifier{Root: k.root, State: k.state, OS: k.os, Arch: k.arch, Running: k.running}
	rel, err = v.Metadata(b, now)
	if err != nil {
		k.refusal, k.refusedAt = err, now
		return rel, false, err
	}
	if rel.RootVersion > k.rootVer {
		if err := writeAtomic(filepath.Join(k.dir, trustedRootFile), rel.Root, 0o600); err != nil {
			return rel, false, err
		}
		k.root, k.rootVer = rel.Root, rel.RootVersion
	}
	if rel.State != k.state {
		data, err := json.Marshal(rel.State)
		if err != nil {
			return rel, false, err
		}
		if err := writeAtomic(filepath.Join(k.dir, stateFile), data, 0o600); err != nil {
			return rel, false, err
		}
		k.state = rel.State
	}
	if rel.Newer {
		fresh = k.available == nil || k.available.Version != rel.Version || k.available.SHA256 != rel.SHA256
		r := rel
		r.Root = nil
		k.available = &r
	}
	return rel, fresh, nil
}

// Available is the newest verified release newer than the running version.
func (k *Keeper) Available() (Release, bool) {
	k.mu.Lock()
	defer k.mu.Unlock()
	if k.available == nil {
		return Release{}, false
	}
	return *k.available, true
}

// Status is what a node reports of its releases.
type Status struct {
	Running     string    `json:"running"`
	RootVersion int64     `json:"root_version"` // the trusted root's
	Checked     time.Time `json:"checked,omitzero"`
	// Available: the newest verified release newer than the running one.
	Available *Available `json:"available,omitempty"`
	// Refusal: the last bundle refused, and when.
	Refusal   string    `json:"refusal,omitempty"`
	RefusedAt time.Time `json:"refused_at,omitzero"`
}

// Available is a verified release as a node reports it.
type Available struct {
	Version   string    `json:"version"`
	Target    string    `json:"target"`
	SHA256    string    `json:"sha256"`
	Length    int64     `json:"length"`
	RolloutMS int64     `json:"rollout_ms"`
	Expires   time.Time `json:"expires"`
}

// Status reports the keeper's state.
func (k *Keeper) Status() Status {
	k.mu.Lock()
	defer k.mu.Unlock()
	s := Status{Running: k.running, RootVersion: k.rootVer, Checked: k.checked, RefusedAt: k.refusedAt}
	if k.refusal != nil {
		s.Refusal = k.refusal.Error()
	}
	if a := k.available; a != nil {
		s.Available = &Available{Version: a.Version, Target: a.Target, SHA256: a.SHA256, Length: a.Length,
			RolloutMS: a.Rollout.Milliseconds(), Expires: a.Expires}
	}
	return s
}
