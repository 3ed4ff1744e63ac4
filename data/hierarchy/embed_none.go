//go:build nodefaultsnapshot

package hierarchydata

// DefaultSnapshot is nil in builds tagged nodefaultsnapshot.
var DefaultSnapshot []byte

// Attribution is empty: there is no embedded data to attribute.
func Attribution() string { return "" }

// Licence is empty: there is no embedded data to license.
func Licence() string { return "" }
