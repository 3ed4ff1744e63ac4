// Package hierarchydata embeds micra's default IP-hierarchy source data and
// snapshot, so the binary works without any download. See ATTRIBUTION.md.
package hierarchydata

import _ "embed"

// IANAIPv4 is the IANA IPv4 address-space registry (CSV).
//
//go:embed iana-ipv4-address-space.csv
var IANAIPv4 []byte
