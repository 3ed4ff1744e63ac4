package delegation_test

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// fixedProber answers every probe from a latency function: a deterministic
// stand-in for the simulator's prober or the overlay's HTTP/TCP probes.
type fixedProber func(c delegation.CrawlerID, target netip.Addr) time.Duration

func (p fixedProber) Probe(_ context.Context, target netip.Addr, cs []delegation.CrawlerID) []delegation.ProbeResult {
	out := make([]delegation.ProbeResult, len(cs))
	for i, c := range cs {
		out[i] = delegation.ProbeResult{Crawler: c, RTT: p(c, target), OK: true}
	}
	return out
}

// Three networks on three continents, a crawler in each, and micra deciding
// which crawler crawls a host: the crawler next to it.
func ExampleNewMicra() {
	// A small hierarchy: an /8 per network, two /16s in each.
	b := hierarchy.NewBuilder()
	for _, r := range []struct{ prefix, org, country string }{
		{"10.0.0.0/8", "Rhein Net", "DE"}, {"10.1.0.0/16", "Rhein Net", "DE"}, {"10.2.0.0/16", "Rhein Net", "DE"},
		{"20.0.0.0/8", "Hudson Net", "US"}, {"20.1.0.0/16", "Hudson Net", "US"}, {"20.2.0.0/16", "Hudson Net", "US"},
		{"30.0.0.0/8", "Kanto Net", "JP"}, {"30.1.0.0/16", "Kanto Net", "JP"}, {"30.2.0.0/16", "Kanto Net", "JP"},
	} {
		p := netip.MustParsePrefix(r.prefix)
		if err := b.Add(hierarchy.Range{Start: p.Masked().Addr(), End: lastAddr(p), Org: r.org, Country: r.country,
			Registry: hierarchy.RegistryRIPENCC, Status: hierarchy.StatusAssigned}); err != nil {
			panic(err)
		}
	}
	tree, _, err := b.Build()
	if err != nil {
		panic(err)
	}

	// One crawler in each network's first /16, stating where it runs.
	crawlers := []delegation.Crawler{
		{ID: "frankfurt", Addr: netip.MustParseAddr("10.1.0.1"), Lat: 50.1, Lon: 8.7, HasPos: true},
		{ID: "new-york", Addr: netip.MustParseAddr("20.1.0.1"), Lat: 40.7, Lon: -74.0, HasPos: true},
		{ID: "tokyo", Addr: netip.MustParseAddr("30.1.0.1"), Lat: 35.7, Lon: 139.7, HasPos: true},
	}
	// Latency: 5 ms to a host in the crawler's own /8, 90 ms to the next
	// continent, 160 ms beyond.
	home := map[delegation.CrawlerID]byte{"frankfurt": 10, "new-york": 20, "tokyo": 30}
	prober := fixedProber(func(c delegation.CrawlerID, target netip.Addr) time.Duration {
		d := int(target.As4()[0]) - int(home[c])
		switch {
		case d == 0:
			return 5 * time.Millisecond
		case d == 10 || d == -10:
			return 90 * time.Millisecond
		}
		return 160 * time.Millisecond
	})

	members := delegation.NewMemMembership(crawlers...)
	pol := delegation.NewMicra(delegation.Deps{
		Tree:    tree,
		Dir:     delegation.NewMemDirectory(tree, members),
		Prober:  prober,
		Members: members,
		Clock:   &delegation.FixedClock{T: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC)},
		Rand:    rand.New(rand.NewPCG(1, 0)),
	}, delegation.Config{})

	ctx := context.Background()
	for _, c := range crawlers {
		if _, err := pol.Join(ctx, c); err != nil { // each crawler owns its own subnet
			panic(err)
		}
	}
	// (The second host is in the subnet the first one delegated: no probe.)
	for _, host := range []string{"20.2.7.9", "20.2.8.1", "30.2.0.5"} {
		dec, err := pol.Delegate(ctx, netip.MustParseAddr(host))
		if err != nil {
			panic(err)
		}
		fmt.Printf("%s → %s (%d probes, %s)\n", host, dec.Owner, dec.Probes, dec.Reason)
	}
	// Output:
	// 20.2.7.9 → new-york (3 probes, confident)
	// 20.2.8.1 → new-york (0 probes, cached)
	// 30.2.0.5 → tokyo (2 probes, confident)
}

// lastAddr is the last address of an IPv4 prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	a := p.Masked().Addr().As4()
	for i := p.Bits(); i < 32; i++ {
		a[i/8] |= 1 << (7 - i%8)
	}
	return netip.AddrFrom4(a)
}
