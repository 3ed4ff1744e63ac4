package hierarchy

import (
	"fmt"
	"net/netip"
	"strings"
)

// Registry names who administers a range: IANA or one of the five RIRs.
type Registry uint8

// Registries. The numeric values are part of the snapshot format: append only.
const (
	RegistryUnknown Registry = iota
	RegistryIANA
	RegistryAFRINIC
	RegistryAPNIC
	RegistryARIN
	RegistryLACNIC
	RegistryRIPENCC
	numRegistries
)

var registryNames = [numRegistries]string{"", "iana", "afrinic", "apnic", "arin", "lacnic", "ripencc"}

func (r Registry) String() string {
	if r < numRegistries {
		return registryNames[r]
	}
	return fmt.Sprintf("registry(%d)", uint8(r))
}

// ParseRegistry accepts the spellings found in RIR and IANA files
// ("ripencc", "RIPE NCC", "ripe", "afrinic", "Administered by ARIN", …).
func ParseRegistry(s string) (Registry, bool) {
	// Normalise without allocating in the common case: lower case, no
	// spaces, dashes or underscores, "administered by " dropped.
	var buf [32]byte
	k := buf[:0]
	s = strings.TrimSpace(s)
	if len(s) > 16 && strings.EqualFold(s[:16], "administered by ") {
		s = s[16:]
	}
	for i := 0; i < len(s); i++ {
		c := s[i]
		switch {
		case c == ' ' || c == '-' || c == '_':
			continue
		case c >= 'A' && c <= 'Z':
			c += 'a' - 'A'
		}
		if len(k) == cap(k) {
			return RegistryUnknown, false
		}
		k = append(k, c)
	}
	switch string(k) {
	case "iana":
		return RegistryIANA, true
	case "afrinic":
		return RegistryAFRINIC, true
	case "apnic":
		return RegistryAPNIC, true
	case "arin":
		return RegistryARIN, true
	case "lacnic":
		return RegistryLACNIC, true
	case "ripencc", "ripe":
		return RegistryRIPENCC, true
	}
	return RegistryUnknown, false
}

// Status is the registration status of a range.
type Status uint8

// Statuses. The numeric values are part of the snapshot format: append only.
const (
	StatusUnknown      Status = iota
	StatusReserved            // IANA/RIR reserved, special purpose
	StatusAllocated           // allocated to a registry or LIR (may be sub-divided)
	StatusAssigned            // assigned to an end user
	StatusAvailable           // free pool of a registry
	StatusLegacy              // IANA legacy space (pre-RIR)
	StatusSubAllocated        // sub-allocated by an LIR (RPSL SUB-ALLOCATED PA, AGGREGATED-BY-LIR…)
	StatusAggregate           // derived by micra: contiguous pieces of one organisation
	StatusAnnounced           // seen announced in BGP (range CSV), registration status unknown
	numStatuses
)

var statusNames = [numStatuses]string{"", "reserved", "allocated", "assigned", "available", "legacy", "sub-allocated", "aggregate", "announced"}

func (s Status) String() string {
	if s < numStatuses {
		return statusNames[s]
	}
	return fmt.Sprintf("status(%d)", uint8(s))
}

// Range is one input record for the Builder: an inclusive address range, not
// necessarily CIDR-aligned, with what the source says about it.
type Range struct {
	Start, End netip.Addr
	Org        string // registering organisation (name or registry handle); "" if unknown
	Registry   Registry
	Status     Status
	Country    string // ISO 3166-1 alpha-2 (upper case) or ""
	ASN        uint32 // origin AS where the source gives one (range CSV), else 0
}

// Node is one node of a Tree, as returned by Tree.Node.
type Node struct {
	Start, End netip.Addr // inclusive; both zero for Root
	Parent     NodeID     // None for Root
	Depth      uint8      // Root is 0, top-level ranges are 1
	Org        OrgID      // 0: unknown
	Registry   Registry
	Status     Status
	Country    string // ISO-2 or ""
	ASN        uint32
}

// Unary reports whether the node holds exactly one address.
func (n Node) Unary() bool { return n.Start.IsValid() && n.Start == n.End }

// Prefix returns the node's range as a single CIDR prefix when it is one.
func (n Node) Prefix() (netip.Prefix, bool) {
	f, s, ok := fromAddr(n.Start)
	if !ok {
		return netip.Prefix{}, false
	}
	_, e, _ := fromAddr(n.End)
	span := e.sub(s)
	size := span.add1()
	if size.isZero() { // the whole IPv6 space
		return netip.PrefixFrom(n.Start, 0), true
	}
	tz := size.trailingZeros()
	if size.bitLen() != tz+1 || s.trailingZeros() < tz {
		return netip.Prefix{}, false
	}
	bitsLen := 128
	if f == fam4 {
		bitsLen = 32
	}
	return netip.PrefixFrom(n.Start, bitsLen-int(tz)), true
}

// String renders the range as a prefix when it is one, else as start-end.
func (n Node) String() string {
	if !n.Start.IsValid() {
		return "root"
	}
	if p, ok := n.Prefix(); ok {
		return p.String()
	}
	return n.Start.String() + "-" + n.End.String()
}

func validCountry(c string) bool {
	return len(c) == 2 && c[0] >= 'A' && c[0] <= 'Z' && c[1] >= 'A' && c[1] <= 'Z'
}

// NormalizeCountry returns c as an upper-case ISO-2 code, or "" when c is not
// a two-letter code (registries use "", "ZZ" and other placeholders).
func NormalizeCountry(c string) string {
	c = strings.ToUpper(strings.TrimSpace(c))
	if !validCountry(c) || c == "ZZ" {
		return ""
	}
	return c
}
