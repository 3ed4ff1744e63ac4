// Package upgrade owns replacing micra's running binary and undoing it:
// installing a verified release over the executable in one rename with the
// previous binary kept beside it, the marker a restarted node writes once
// it is healthy, the staged-wave delay of each node, and the Supervisor
// that restarts the node on the new binary and rolls back one that fails
// its health check or crash-loops.
//
// It verifies nothing: the binary it installs was checked against the
// signed release metadata (node/release) before it reaches this package.
package upgrade

import (
	"crypto/sha256"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"time"
)

// ExitRestart is the exit status of a node that stopped to be restarted on
// a newly installed binary (EX_TEMPFAIL).
const ExitRestart = 75

// EnvSupervised is set in the node's environment by the Supervisor: only a
// supervised node installs releases, since only a supervisor can roll one
// back that does not start.
const EnvSupervised = "MICRA_SUPERVISED"

// The files of a node's release directory this package keeps.
const (
	pendingFile  = "upgrade.json"  // an installed release on trial
	rollbackFile = "rollback.json" // the last release rolled back, and why
	healthyFile  = "healthy.json"  // written by a node once it is ready
)

// Pending is an installed release on trial: written before the node stops
// to restart on it, removed once the new binary proves healthy.
type Pending struct {
	From   string    `json:"from"` // the version replaced
	To     string    `json:"to"`   // the version installed
	SHA256 string    `json:"sha256"`
	Exe    string    `json:"exe"`  // the executable replaced
	Prev   string    `json:"prev"` // where the previous binary is kept
	At     time.Time `json:"at"`
}

// Rollback is a release that was installed and taken back.
type Rollback struct {
	Version string    `json:"version"`
	SHA256  string    `json:"sha256"`
	Reason  string    `json:"reason"`
	At      time.Time `json:"at"`
}

// Install replaces exe with the binary at src: src is copied to exe.new
// (mode 0755, synced), the running binary is kept as exe.prev, and exe.new
// is renamed over exe — one rename, so exe is a whole binary at every
// moment and a crash leaves the old one or the new one. p (with Exe and
// Prev filled in) is written to dir before the swap, so a supervisor that
// sees the node restart knows what is on trial.
func Install(exe, src, dir string, p Pending) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	next, prev := exe+".new", exe+".prev"
	if err := copyFile(src, next, 0o755); err != nil {
		return fmt.Errorf("upgrade: stage %s: %w", next, err)
	}
	if err := copyFile(exe, prev, 0o755); err != nil {
		os.Remove(next)
		return fmt.Errorf("upgrade: keep the previous binary as %s: %w", prev, err)
	}
	p.Exe, p.Prev = exe, prev
	if err := writeJSON(filepath.Join(dir, pendingFile), p); err != nil {
		os.Remove(next)
		return err
	}
	if err := os.Rename(next, exe); err != nil {
		os.Remove(filepath.Join(dir, pendingFile))
		os.Remove(next)
		return fmt.Errorf("upgrade: replace %s: %w", exe, err)
	}
	return syncDir(filepath.Dir(exe))
}

// RollBack puts the previous binary of the release on trial back over its
// executable (a copy renamed into place: exe.prev stays), records why, and
// ends the trial.
func RollBack(dir, reason string, now time.Time) (Rollback, error) {
	p, ok, err := ReadPending(dir)
	if err != nil || !ok {
		return Rollback{}, fmt.Errorf("upgrade: nothing on trial to roll back (%v)", err)
	}
	back := p.Exe + ".back"
	if err := copyFile(p.Prev, back, 0o755); err != nil {
		return Rollback{}, fmt.Errorf("upgrade: restore %s: %w", p.Prev, err)
	}
	if err := os.Rename(back, p.Exe); err != nil {
		os.Remove(back)
		return Rollback{}, fmt.Errorf("upgrade: restore %s: %w", p.Exe, err)
	}
	rb := Rollback{Version: p.To, SHA256: p.SHA256, Reason: reason, At: now.Round(0)}
	if err := writeJSON(filepath.Join(dir, rollbackFile), rb); err != nil {
		return rb, err
	}
	return rb, os.Remove(filepath.Join(dir, pendingFile))
}

// Confirm ends the trial of the pending release: it stays.
func Confirm(dir string) error {
	err := os.Remove(filepath.Join(dir, pendingFile))
	if errors.Is(err, fs.ErrNotExist) {
		return nil
	}
	return err
}

// ReadPending reads the release on trial, if any.
func ReadPending(dir string) (Pending, bool, error) {
	var p Pending
	ok, err := readJSON(filepath.Join(dir, pendingFile), &p)
	return p, ok, err
}

// ReadRollback reads the last release rolled back, if any.
func ReadRollback(dir string) (Rollback, bool, error) {
	var rb Rollback
	ok, err := readJSON(filepath.Join(dir, rollbackFile), &rb)
	return rb, ok, err
}

// Healthy is what a node writes once it is ready.
type Healthy struct {
	Version string    `json:"version"`
	PID     int       `json:"pid"`
	At      time.Time `json:"at"`
}

// WriteHealthy says that this process, running version, is ready.
func WriteHealthy(dir, version string, now time.Time) error {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return err
	}
	return writeJSON(filepath.Join(dir, healthyFile), Healthy{Version: version, PID: os.Getpid(), At: now})
}

// ReadHealthy reads the last healthy marker.
func ReadHealthy(dir string) (Healthy, bool, error) {
	var h Healthy
	ok, err := readJSON(filepath.Join(dir, healthyFile), &h)
	return h, ok, err
}

// WaveDelay is how long a node waits before installing a release once it
// holds the verified binary. The members it knows of (itself included or
// not) are ordered by a hash of their id and the release's hash, and the
// node takes the middle of its own slot of the rollout window: n members
// take their turns window/n apart, so three nodes in an 8 s window are
// 2.7 s apart rather than where independent random draws put them (within
// 2 s of each other one time in six). The order depends on the release,
// so the first wave is not always the same nodes, and a node keeps its
// place as long as its view of the members does. With no members known
// it falls back to its own hash's fraction of the window.
func WaveDelay(nodeID, sha256hex string, window time.Duration, members []string) time.Duration {
	if window <= 0 {
		return 0
	}
	self := waveKey(nodeID, sha256hex)
	rank, n := 0, 1
	seen := map[string]bool{nodeID: true}
	for _, m := range members {
		if seen[m] {
			continue
		}
		seen[m] = true
		n++
		if k := waveKey(m, sha256hex); k < self || (k == self && m < nodeID) {
			rank++
		}
	}
	if n == 1 {
		return time.Duration(float64(window) * (float64(self>>11) / float64(1<<53)))
	}
	return time.Duration(float64(window) * (float64(rank) + 0.5) / float64(n))
}

func waveKey(nodeID, sha256hex string) uint64 {
	// SHA-256, not a fast hash: FNV's high bits hardly move with the last
	// bytes, and the order must change with each release.
	sum := sha256.Sum256([]byte(nodeID + "\x00" + sha256hex))
	return binary.BigEndian.Uint64(sum[:8])
}

func copyFile(from, to string, mode os.FileMode) error {
	in, err := os.Open(from)
	if err != nil {
		return err
	}
	defer in.Close()
	tmp, err := os.CreateTemp(filepath.Dir(to), "."+filepath.Base(to)+".*")
	if err != nil {
		return err
	}
	_, err = io.Copy(tmp, in)
	if err == nil {
		err = tmp.Chmod(mode)
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err == nil {
		err = os.Rename(tmp.Name(), to)
	}
	if err != nil {
		os.Remove(tmp.Name())
	}
	return err
}

func writeJSON(path string, v any) error {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return err
	}
	tmp := path + ".tmp"
	if err := os.WriteFile(tmp, append(data, '\n'), 0o600); err != nil {
		return err
	}
	return os.Rename(tmp, path)
}

func readJSON(path string, v any) (bool, error) {
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return false, nil
	}
	if err != nil {
		return false, err
	}
	if err := json.Unmarshal(data, v); err != nil {
		return false, fmt.Errorf("%s: %w", path, err)
	}
	return true, nil
}

func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
