//go:build !nodefaultsnapshot

// Package hierarchydata embeds micra's default IP-hierarchy snapshot, so the
// binary works without any download, together with its attribution and
// licence (CC BY 4.0 requires both to travel with the data), and holds the
// registry files it is built from. `make snapshot` rebuilds it.
//
// Building with -tags nodefaultsnapshot leaves the snapshot out (DefaultSnapshot
// is nil, Attribution and Licence are empty): that is how `make snapshot`
// builds the tool that makes it.
package hierarchydata

import _ "embed"

// DefaultSnapshot is the default hierarchy snapshot, zstd-compressed
// canonical bytes (hierarchy.DecodeFile reads it).
//
//go:embed default.snap.zst
var DefaultSnapshot []byte

// The attribution and licence are embedded under the same build tag as the
// snapshot, so a binary carrying the data always carries them too.
var (
	//go:embed ATTRIBUTION.md
	attribution string
	//go:embed LICENCE-CC-BY-4.0.txt
	licence string
)

// Attribution is ATTRIBUTION.md: the snapshot's sources, their licences and
// attributions, and the changes made (empty when the snapshot is left out).
func Attribution() string { return attribution }

// Licence is the full text of CC BY 4.0, the snapshot's licence (empty when
// the snapshot is left out).
func Licence() string { return licence }
