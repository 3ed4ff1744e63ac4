package release

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"time"

	"github.com/theupdateframework/go-tuf/v2/metadata"
	"github.com/theupdateframework/go-tuf/v2/metadata/trustedmetadata"
	"golang.org/x/mod/semver"
)

// The reasons a node refuses a release. A refusal (*Refused) wraps one of
// them, so callers can tell them apart with errors.Is.
var (
	// ErrForeign: the metadata is signed by keys this node's trusted root
	// does not name — most likely a release of another network.
	ErrForeign = errors.New("signed by keys this node's trusted root does not name (a retired key, or a release of another network)")
	// ErrThreshold: fewer valid signatures than the role's threshold.
	ErrThreshold = errors.New("signed by fewer keys than its role's threshold")
	// ErrExpired: the metadata's expiry is past (a frozen or replayed repository).
	ErrExpired = errors.New("expired")
	// ErrRollback: metadata or a release older than what this node already
	// accepted or runs.
	ErrRollback = errors.New("a rollback")
	// ErrHash: the binary's hash or length differs from the targets metadata.
	ErrHash = errors.New("the binary differs from the targets metadata")
	// ErrNoTarget: the release has no binary for this node's platform.
	ErrNoTarget = errors.New("no binary for this platform")
	// ErrMalformed: metadata that does not parse or is inconsistent.
	ErrMalformed = errors.New("malformed metadata")
)

// Refused is a release a node will not take: the role (or "binary") at
// fault, the reason (one of the Err values) and what was seen.
type Refused struct {
	Role   string
	Reason error
	Detail string
}

func (e *Refused) Error() string {
	s := "release refused: " + e.Role + ": " + e.Reason.Error()
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

func (e *Refused) Unwrap() error { return e.Reason }

func refuse(role string, reason error, format string, a ...any) error {
	return &Refused{Role: role, Reason: reason, Detail: fmt.Sprintf(format, a...)}
}

// State is what a node remembers of the releases it accepted, so that older
// metadata or an older release handed to it later is refused.
type State struct {
	Timestamp int64  `json:"timestamp"`
	Snapshot  int64  `json:"snapshot"`
	Targets   int64  `json:"targets"`
	Version   string `json:"version,omitempty"` // the newest release version accepted
}

// Verifier checks bundles and binaries against one trusted root.
type Verifier struct {
	Root     []byte // the trusted root metadata (root.json)
	State    State  // versions accepted so far
	OS, Arch string // the platform whose binary is wanted
	Running  string // the version this node runs ("devel" or unset: any release is newer)
}

// Release is a verified release for the verifier's platform.
type Release struct {
	Version string
	Target  string // target name, micra-OS-ARCH
	Length  int64
	SHA256  string // hex
	Rollout time.Duration
	Expires time.Time // the timestamp's expiry: the metadata's validity
	// Newer: the release is newer than the running version (false: it is
	// the version running).
	Newer bool
	// Root is the newest root the bundle led to (the trusted one when no
	// rotation happened): the node trusts it from now on.
	Root        []byte
	RootVersion int64
	// State is the verifier's state after accepting this release.
	State State
}

// Metadata verifies b at time now, following root rotations from the
// trusted root, and returns the release for the verifier's platform.
func (v *Verifier) Metadata(b Bundle, now time.Time) (rel Release, err error) {
	// go-tuf's parsers assert the JSON's shape without checking it (a
	// "signed" that is not an object panics): bundles come from peers, so
	// their shape is checked first, and a panic left in the library is a
	// refusal, not a crashed node.
	defer func() {
		if p := recover(); p != nil {
			rel, err = Release{}, refuse("bundle", ErrMalformed, "%v", p)
		}
	}()
	for i, raw := range b.Roots {
		if err := checkShape(raw, metadata.ROOT); err != nil {
			return rel, refuse("root", ErrMalformed, "root %d of the bundle: %v", i+1, err)
		}
	}
	for role, raw := range map[string][]byte{metadata.TIMESTAMP: b.Timestamp, metadata.SNAPSHOT: b.Snapshot, metadata.TARGETS: b.Targets} {
		if err := checkShape(raw, role); err != nil {
			return rel, refuse(role, ErrMalformed, "%v", err)
		}
	}
	tm, err := trustedmetadata.New(v.Root)
	if err != nil {
		return rel, refuse("root", ErrMalformed, "the trusted root: %v", err)
	}
	tm.RefTime = now.UTC()
	state := v.State
	for _, raw := range b.Roots {
		r, err := metadata.Root().FromBytes(raw)
		if err != nil {
			return rel, refuse("root", ErrMalformed, "%v", err)
		}
		if r.Signed.Version <= tm.Root.Signed.Version {
			continue
		}
		prev := tm.Root
		if _, err := tm.UpdateRoot(raw); err != nil {
			return rel, classify("root", prev, metadata.ROOT, r.Signatures, err)
		}
		// a rotated online key: versions signed by the old key say nothing
		// of the new key's (TUF's fast-forward recovery)
		if !sameKeys(prev, tm.Root, metadata.TIMESTAMP) {
			state.Timestamp, state.Snapshot = 0, 0
		}
		if !sameKeys(prev, tm.Root, metadata.SNAPSHOT) {
			state.Snapshot = 0
		}
		if !sameKeys(prev, tm.Root, metadata.TARGETS) {
			state.Targets = 0
		}
	}
	if tm.Root.Signed.IsExpired(tm.RefTime) {
		return rel, refuse("root", ErrExpired, "version %d expired %s", tm.Root.Signed.Version, tm.Root.Signed.Expires.Format(time.RFC3339))
	}

	ts, err := metadata.Timestamp().FromBytes(b.Timestamp)
	if err != nil {
		return rel, refuse("timestamp", ErrMalformed, "%v", err)
	}
	if _, err := tm.UpdateTimestamp(b.Timestamp); err != nil {
		if errors.Is(err, &metadata.ErrExpiredMetadata{}) {
			return rel, refuse("timestamp", ErrExpired, "version %d expired %s", ts.Signed.Version, ts.Signed.Expires.Format(time.RFC3339))
		}
		return rel, classify("timestamp", tm.Root, metadata.TIMESTAMP, ts.Signatures, err)
	}
	if ts.Signed.Version < state.Timestamp {
		return rel, refuse("timestamp", ErrRollback, "version %d, this node accepted version %d", ts.Signed.Version, state.Timestamp)
	}
	snap, err := metadata.Snapshot().FromBytes(b.Snapshot)
	if err != nil {
		return rel, refuse("snapshot", ErrMalformed, "%v", err)
	}
	if _, err := tm.UpdateSnapshot(b.Snapshot, false); err != nil {
		return rel, classify("snapshot", tm.Root, metadata.SNAPSHOT, snap.Signatures, err)
	}
	if snap.Signed.Version < state.Snapshot {
		return rel, refuse("snapshot", ErrRollback, "version %d, this node accepted version %d", snap.Signed.Version, state.Snapshot)
	}
	tg, err := metadata.Targets().FromBytes(b.Targets)
	if err != nil {
		return rel, refuse("targets", ErrMalformed, "%v", err)
	}
	if _, err := tm.UpdateTargets(b.Targets); err != nil {
		return rel, classify("targets", tm.Root, metadata.TARGETS, tg.Signatures, err)
	}
	if tg.Signed.Version < state.Targets {
		return rel, refuse("targets", ErrRollback, "version %d, this node accepted version %d", tg.Signed.Version, state.Targets)
	}

	name := TargetName(v.OS, v.Arch)
	tf, ok := tm.Targets[metadata.TARGETS].Signed.Targets[name]
	if !ok {
		return rel, refuse("targets", ErrNoTarget, "no %s among %d targets", name, len(tm.Targets[metadata.TARGETS].Signed.Targets))
	}
	c, err := customOf(tf)
	if err != nil || !semver.IsValid(c.Version) {
		return rel, refuse("targets", ErrMalformed, "%s: custom metadata without a semantic version", name)
	}
	sum, ok := tf.Hashes["sha256"]
	if !ok || len(sum) != sha256.Size || tf.Length <= 0 {
		return rel, refuse("targets", ErrMalformed, "%s: no sha256 hash or length", name)
	}
	if state.Version != "" && semver.Compare(c.Version, state.Version) < 0 {
		return rel, refuse("targets", ErrRollback, "release %s, this node already accepted %s", c.Version, state.Version)
	}
	running := semver.IsValid(v.Running)
	if running && semver.Compare(c.Version, v.Running) < 0 {
		return rel, refuse("targets", ErrRollback, "release %s, this node runs %s", c.Version, v.Running)
	}
	var rollout time.Duration
	if c.Rollout != "" {
		if rollout, err = time.ParseDuration(c.Rollout); err != nil || rollout < 0 {
			return rel, refuse("targets", ErrMalformed, "%s: rollout %q is not a duration", name, c.Rollout)
		}
	}
	root, err := tm.Root.ToBytes(true)
	if err != nil {
		return rel, err
	}
	state.Timestamp, state.Snapshot, state.Targets = ts.Signed.Version, snap.Signed.Version, tg.Signed.Version
	if state.Version == "" || semver.Compare(c.Version, state.Version) > 0 {
		state.Version = c.Version
	}
	return Release{
		Version: c.Version, Target: name, Length: tf.Length, SHA256: hex.EncodeToString(sum), Rollout: rollout,
		Expires: ts.Signed.Expires, Newer: !running || semver.Compare(c.Version, v.Running) > 0,
		Root: root, RootVersion: tm.Root.Signed.Version, State: state,
	}, nil
}

// Check reads the binary from r and refuses it unless its length and
// SHA-256 are the release's. It reads at most one byte more than the
// release's length.
func (rel Release) Check(r io.Reader) error {
	h := sha256.New()
	n, err := io.Copy(h, io.LimitReader(r, rel.Length+1))
	if err != nil {
		return err
	}
	if n != rel.Length {
		return refuse("binary", ErrHash, "%s: %d bytes, the targets metadata says %d", rel.Target, n, rel.Length)
	}
	if got := hex.EncodeToString(h.Sum(nil)); got != rel.SHA256 {
		return refuse("binary", ErrHash, "%s: sha256 %s, the targets metadata says %s", rel.Target, got[:16], rel.SHA256[:16])
	}
	return nil
}

// Verify is Metadata then Check: a node's whole decision on a bundle and
// the binary it names.
func (v *Verifier) Verify(b Bundle, binary io.Reader, now time.Time) (Release, error) {
	rel, err := v.Metadata(b, now)
	if err != nil {
		return rel, err
	}
	return rel, rel.Check(binary)
}

// classify turns go-tuf's error for role into a refusal: too few valid
// signatures is ErrForeign when none of the signatures is by a key the
// delegating root names for the role, else ErrThreshold.
func classify(role string, root *metadata.Metadata[metadata.RootType], tufRole string, sigs []metadata.Signature, err error) error {
	switch {
	case errors.Is(err, &metadata.ErrUnsignedMetadata{}):
		known := 0
		if r, ok := root.Signed.Roles[tufRole]; ok {
			for _, s := range sigs {
				if slices.Contains(r.KeyIDs, s.KeyID) {
					known++
				}
			}
		}
		if known == 0 {
			return refuse(role, ErrForeign, "%d signatures, none by the %s keys of root version %d", len(sigs), tufRole, root.Signed.Version)
		}
		return refuse(role, ErrThreshold, "%v", err)
	case errors.Is(err, &metadata.ErrExpiredMetadata{}):
		return refuse(role, ErrExpired, "%v", err)
	case errors.Is(err, &metadata.ErrBadVersionNumber{}):
		return refuse(role, ErrRollback, "%v", err)
	case errors.Is(err, &metadata.ErrLengthOrHashMismatch{}):
		return refuse(role, ErrMalformed, "does not match the hash its parent role signed: %v", err)
	}
	return refuse(role, ErrMalformed, "%v", err)
}

// checkShape checks that data is a JSON object whose "signed" is an object
// of _type role, with "signatures" a list: what go-tuf assumes.
func checkShape(data []byte, role string) error {
	var m struct {
		Signed *struct {
			Type string `json:"_type"`
		} `json:"signed"`
		Signatures []json.RawMessage `json:"signatures"`
	}
	if err := json.Unmarshal(data, &m); err != nil {
		return fmt.Errorf("not JSON metadata: %w", err)
	}
	if m.Signed == nil || m.Signed.Type != role {
		return fmt.Errorf("not %s metadata", role)
	}
	return nil
}

func sameKeys(a, b *metadata.Metadata[metadata.RootType], role string) bool {
	ra, rb := a.Signed.Roles[role], b.Signed.Roles[role]
	if ra == nil || rb == nil {
		return false
	}
	x, y := slices.Clone(ra.KeyIDs), slices.Clone(rb.KeyIDs)
	slices.Sort(x)
	slices.Sort(y)
	return slices.Equal(x, y)
}
