//go:build !nodefaultsnapshot

// Package hierarchydata embeds micra's default IP-hierarchy snapshot, so the
// binary works without any download, and holds the registry files it is
// built from. See ATTRIBUTION.md; `make snapshot` rebuilds it.
//
// Building with -tags nodefaultsnapshot leaves the snapshot out (DefaultSnapshot
// is nil): that is how `make snapshot` builds the tool that makes it.
package hierarchydata

import _ "embed"

// DefaultSnapshot is the default hierarchy snapshot, zstd-compressed
// canonical bytes (hierarchy.DecodeFile reads it).
//
//go:embed default.snap.zst
var DefaultSnapshot []byte
