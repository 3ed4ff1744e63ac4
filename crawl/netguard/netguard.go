// Package netguard owns the rules of which network destinations a
// volunteer's node never contacts on the open web: private, loopback,
// link-local, multicast, reserved and documentation ranges (also when
// embedded in 6to4 or NAT64 IPv6 forms), and the ports of protocols an HTTP
// request could be smuggled into. The crawler's fetcher and the overlay's
// prober both apply them, so a node is never a weapon against its own
// network or a port scanner for others.
package netguard

import "net/netip"

// reservedPrefixes are special-purpose ranges (RFC 6890 and successors) that
// netip's predicates do not cover: none of them is a public web server.
var reservedPrefixes = func() []netip.Prefix {
	var ps []netip.Prefix
	for _, s := range []string{
		"0.0.0.0/8",       // "this network"
		"100.64.0.0/10",   // carrier-grade NAT
		"192.0.0.0/24",    // IETF protocol assignments
		"192.0.2.0/24",    // TEST-NET-1
		"192.88.99.0/24",  // 6to4 relay anycast (deprecated)
		"198.18.0.0/15",   // benchmarking
		"198.51.100.0/24", // TEST-NET-2
		"203.0.113.0/24",  // TEST-NET-3
		"240.0.0.0/4",     // reserved, includes broadcast
		"64:ff9b:1::/48",  // local-use NAT64
		"100::/64",        // discard-only
		"2001::/23",       // IETF protocol assignments (Teredo, ORCHID …)
		"2001:db8::/32",   // documentation
		"3fff::/20",       // documentation
		"5f00::/16",       // SRv6 SIDs
		"fec0::/10",       // deprecated site-local
	} {
		ps = append(ps, netip.MustParsePrefix(s))
	}
	return ps
}()

var (
	globalUnicast6 = netip.MustParsePrefix("2000::/3")
	nat64WellKnown = netip.MustParsePrefix("64:ff9b::/96")
)

// badPorts is the WHATWG Fetch "bad port" list: ports of protocols that an
// HTTP request could be smuggled into (SMTP, IRC, …). A crawler never
// connects to them on the open web.
var badPorts = func() map[int]bool {
	m := map[int]bool{}
	for _, p := range []int{1, 7, 9, 11, 13, 15, 17, 19, 20, 21, 22, 23, 25, 37, 42, 43, 53, 69, 77, 79, 87, 95,
		101, 102, 103, 104, 109, 110, 111, 113, 115, 117, 119, 123, 135, 137, 139, 143, 161, 179, 389, 427, 465,
		512, 513, 514, 515, 526, 530, 531, 532, 540, 548, 554, 556, 563, 587, 601, 636, 989, 990, 993, 995,
		1719, 1720, 1723, 2049, 3659, 4045, 4190, 5060, 5061, 6000, 6566, 6665, 6666, 6667, 6668, 6669, 6679,
		6697, 10080} {
		m[p] = true
	}
	return m
}()

// BadPort reports whether port is on the WHATWG Fetch bad-port list.
func BadPort(port int) bool { return badPorts[port] }

// ForbiddenAddr reports whether a is a destination the guard refuses by
// default, and names its range.
func ForbiddenAddr(a netip.Addr) (bool, string) {
	a = a.Unmap()
	switch {
	case !a.IsValid():
		return true, "invalid"
	case a.IsLoopback():
		return true, "loopback"
	case a.IsPrivate():
		return true, "private"
	case a.IsLinkLocalUnicast():
		return true, "link-local"
	case a.IsLinkLocalMulticast(), a.IsInterfaceLocalMulticast(), a.IsMulticast():
		return true, "multicast"
	case a.IsUnspecified():
		return true, "unspecified"
	}
	if a.Is6() {
		b := a.As16()
		// 6to4 (2002::/16) embeds an IPv4 address: judge that.
		if b[0] == 0x20 && b[1] == 0x02 {
			if bad, why := ForbiddenAddr(netip.AddrFrom4([4]byte{b[2], b[3], b[4], b[5]})); bad {
				return true, "6to4 of " + why
			}
		}
		// NAT64 well-known prefix 64:ff9b::/96 embeds an IPv4 address.
		if nat64WellKnown.Contains(a) {
			if bad, why := ForbiddenAddr(netip.AddrFrom4([4]byte{b[12], b[13], b[14], b[15]})); bad {
				return true, "NAT64 of " + why
			}
		}
	}
	for _, p := range reservedPrefixes {
		if p.Contains(a) {
			return true, "reserved " + p.String()
		}
	}
	// IPv6 web servers live in global unicast 2000::/3 (and, through NAT64,
	// 64:ff9b::/96, judged above by its embedded IPv4 address). Everything
	// else — notably 0000::/8 with the IPv4-compatible ::a.b.c.d and the SIIT
	// ::ffff:0:a.b.c.d forms that embed loopback and private addresses — is
	// refused.
	if a.Is6() && !globalUnicast6.Contains(a) && !nat64WellKnown.Contains(a) {
		return true, "outside IPv6 global unicast 2000::/3"
	}
	return false, ""
}
