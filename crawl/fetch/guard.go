package fetch

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/micra-crawler/micra/crawl/netguard"
)

// BadPort reports whether port is on the WHATWG Fetch bad-port list.
func BadPort(port int) bool { return netguard.BadPort(port) }

// ForbiddenAddr reports whether a is a destination the guard refuses by
// default, and names its range (netguard.ForbiddenAddr).
func ForbiddenAddr(a netip.Addr) (bool, string) { return netguard.ForbiddenAddr(a) }

// guardError is the dial-time refusal; Fetch turns it into ReasonGuard.
type guardError struct {
	addr netip.Addr
	why  string
}

func (g *guardError) Error() string {
	if !g.addr.IsValid() {
		return fmt.Sprintf("refused (%s): crawled only with --allow-private (Config.AllowPrivate), on testnets", g.why)
	}
	return fmt.Sprintf("destination %s refused (%s): private, loopback and reserved addresses are crawled only "+
		"with --allow-private (Config.AllowPrivate), on testnets", g.addr, g.why)
}

// Is makes errors.Is(err, ErrGuard) match a refusal before it is wrapped
// in an *Error (CheckURL).
func (g *guardError) Is(target error) bool { return target == error(ErrGuard) }

// CheckURL reports whether the guard lets a fetch of u through: its port
// and at least one address of its host (resolved through the fetcher's
// cache). It returns nil when allowed, an error matching ErrGuard when
// refused, or the resolution's error.
func (f *Fetcher) CheckURL(ctx context.Context, u *url.URL) error {
	if !f.cfg.AllowPrivate && u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err == nil && BadPort(p) {
			return &guardError{why: "port " + u.Port() + " is on the bad-port list (protocol smuggling)"}
		}
	}
	_, _, err := f.resolveAllowed(ctx, u.Hostname())
	return err
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
// dialled is checked, whatever resolved it (defence in depth). An emulated
// network's connect round trip is waited here, inside the connect the
// request's timing measures.
func (f *Fetcher) dialControl(ctx context.Context, network, address string, _ syscall.RawConn) error {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return fmt.Errorf("guard: unparsable dial address %q: %w", address, err)
	}
	if err := f.checkAddr(ap.Addr()); err != nil {
		return err
	}
	if f.cfg.Emulator != nil {
		return sleepCtx(ctx, f.cfg.Emulator.RTT(ap.Addr().Unmap()))
	}
	return nil
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

// pinKey carries a hop's pinned address (Request.Addr) to the dialer.
type pinKey struct{}

type pin struct {
	host string
	addr netip.Addr
}

// ResolveAllowed returns the addresses of host the guard accepts, through
// the fetcher's DNS cache: the resolution a fetch of host would use. A
// crawler routes by the first (crawl.Route.Addr) and pins its fetch to it
// (Request.Addr), so router and fetcher resolve a host once per DNSTTL
// between them.
func (f *Fetcher) ResolveAllowed(ctx context.Context, host string) ([]netip.Addr, error) {
	addrs, _, err := f.resolveAllowed(ctx, host)
	return addrs, err
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
	var addrs []netip.Addr
	var took time.Duration
	addrs, took, err = f.resolveAllowed(ctx, host)
	if pn, ok := ctx.Value(pinKey{}).(pin); ok && strings.EqualFold(pn.host, host) {
		// the routed address first (guarded by hop; dialControl checks
		// again), then the host's others should it not answer: a host
		// down on one address is still fetched (Timing.Remote says where)
		rest := addrs
		addrs, err = []netip.Addr{pn.addr}, nil
		for _, a := range rest {
			if a != pn.addr {
				addrs = append(addrs, a)
			}
		}
	}
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
			if f.cfg.Emulator != nil {
				c = newEmulatedConn(c, f.cfg.Emulator.RTT(a))
			}
			return c, nil
		}
		errs = append(errs, err)
		if ctx.Err() != nil {
			break
		}
	}
	return nil, errors.Join(errs...)
}
