package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"sync"
	"syscall"
	"time"
)

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

// guardError is the dial-time refusal; Fetch turns it into ReasonGuard.
type guardError struct {
	addr netip.Addr
	why  string
}

func (g *guardError) Error() string {
	return fmt.Sprintf("destination %s refused (%s); set AllowPrivate only for testnets", g.addr, g.why)
}

// checkAddr applies the guard to one address.
func (f *Fetcher) checkAddr(a netip.Addr) error {
	if f.cfg.AllowPrivate {
		return nil
	}
	for _, p := range f.cfg.AllowPrefixes {
		if p.Contains(a.Unmap()) {
			return nil
		}
	}
	if bad, why := ForbiddenAddr(a); bad {
		return &guardError{addr: a.Unmap(), why: why}
	}
	return nil
}

// dialControl runs on the socket just before connect: the address actually
// dialled is checked, whatever resolved it (defence in depth).
func (f *Fetcher) dialControl(network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("guard: unparsable dial address %q: %w", address, err)
	}
	return f.checkAddr(ap.Addr())
}

// dnsCache caches resolutions (positive and negative) for DNSTTL.
type dnsCache struct {
	mu      sync.Mutex
	entries map[string]dnsEntry
	max     int
}

type dnsEntry struct {
	addrs   []netip.Addr
	err     error
	expires time.Time
}

// Resolve returns the addresses of host (an IP literal resolves to itself),
// using the fetcher's DNS cache. It does not apply the guard.
func (f *Fetcher) Resolve(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, _, err := f.resolve(ctx, host)
	return addrs, err
}

func (f *Fetcher) resolve(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a.Unmap()}, 0, nil
	}
	now := f.cfg.Now()
	f.dns.mu.Lock()
	e, ok := f.dns.entries[host]
	f.dns.mu.Unlock()
	if ok && now.Before(e.expires) {
		return e.addrs, 0, e.err
	}
	start := time.Now()
	addrs, err := f.cfg.Resolver.LookupNetIP(ctx, "ip", host)
	took := time.Since(start)
	if err != nil && ctx.Err() != nil {
		return nil, took, ctx.Err() // do not cache our own cancellation
	}
	for i := range addrs {
		addrs[i] = addrs[i].Unmap()
	}
	if err == nil && len(addrs) == 0 {
		err = &net.DNSError{Err: "no addresses", Name: host, IsNotFound: true}
	}
	ttl := f.cfg.DNSTTL
	if err != nil {
		ttl = min(ttl, time.Minute) // negative answers are kept briefly
	}
	f.dns.mu.Lock()
	if len(f.dns.entries) >= f.dns.max {
		for k, v := range f.dns.entries { // drop expired, else an arbitrary half
			if now.After(v.expires) || len(f.dns.entries) >= f.dns.max/2 {
				delete(f.dns.entries, k)
			}
		}
	}
	f.dns.entries[host] = dnsEntry{addrs: addrs, err: err, expires: now.Add(ttl)}
	f.dns.mu.Unlock()
	return addrs, took, err
}

// resolveAllowed resolves host and keeps only addresses the guard accepts.
// All refused → a guard error naming the first.
func (f *Fetcher) resolveAllowed(ctx context.Context, host string) ([]netip.Addr, time.Duration, error) {
	addrs, took, err := f.resolve(ctx, host)
	if err != nil {
		return nil, took, err
	}
	var ok []netip.Addr
	var first error
	for _, a := range addrs {
		if gerr := f.checkAddr(a); gerr != nil {
			if first == nil {
				first = gerr
			}
			continue
		}
		ok = append(ok, a)
	}
	if len(ok) == 0 {
		return nil, took, first
	}
	return ok, took, nil
}

// dialContext is the transport's dialer: resolve through the cache, guard,
// then connect to the first address that answers.
func (f *Fetcher) dialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, portStr, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	addrs, took, err := f.resolveAllowed(ctx, host)
	if ht, ok := ctx.Value(hopTimingKey{}).(*hopTiming); ok {
		ht.setDNS(took)
	}
	if err != nil {
		return nil, err
	}
	var errs []error
	for _, a := range addrs {
		c, err := f.dialer.DialContext(ctx, network, net.JoinHostPort(a.String(), portStr))
		if err == nil {
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
