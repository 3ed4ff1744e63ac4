//go:build nodefaultsnapshot

package hierarchydata

// DefaultSnapshot is nil in builds tagged nodefaultsnapshot.
var DefaultSnapshot []byte
