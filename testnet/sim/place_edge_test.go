package sim

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

func smallTree(t *testing.T, rs ...hierarchy.Range) *hierarchy.Tree {
	t.Helper()
	b := hierarchy.NewBuilder()
	for _, r := range rs {
		if err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	tree, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tree
}

func leafRange(s, e, cc string) hierarchy.Range {
	return hierarchy.Range{Start: netip.MustParseAddr(s), End: netip.MustParseAddr(e), Country: cc}
}

// placerOn is a placer over tree with the default latency model (seed 1).
func placerOn(t *testing.T, tree *hierarchy.Tree) *placer {
	t.Helper()
	m, err := world.New(nil, world.Config{Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	p, err := newPlacer(tree, m)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// More crawlers than the hierarchy has subnets: placeCrawlers never returns
// (every fresh candidate lands in a taken subnet, sum stays 0, draw again…).
// Bad input must get an error. The goroutine keeps spinning if the bug is
// present (it cannot be stopped from outside).
func TestPlaceCrawlersTooFewSubnetsIsAnError(t *testing.T) {
	tree := smallTree(t,
		leafRange("8.8.8.0", "8.8.8.255", "US"),
		leafRange("1.1.1.0", "1.1.1.255", "AU"))
	p := placerOn(t, tree)
	done := make(chan error, 1)
	go func() {
		_, err := p.placeCrawlers(context.Background(), rand.New(rand.NewPCG(1, 2)), 3)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("3 crawlers placed in 2 subnets")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("placeCrawlers(k=3) over a hierarchy with 2 subnets did not return in 5 s (infinite loop)")
	}
}

// More hosts than distinct placeable addresses: placeHosts loops forever on
// duplicates.
func TestPlaceHostsTooFewAddressesIsAnError(t *testing.T) {
	tree := smallTree(t, leafRange("8.8.8.0", "8.8.8.3", "US"))
	p := placerOn(t, tree)
	done := make(chan error, 1)
	go func() {
		_, err := p.placeHosts(context.Background(), rand.New(rand.NewPCG(1, 2)), 10, HostsUniform, 0)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("10 distinct hosts placed in 4 addresses")
		}
	case <-time.After(5 * time.Second):
		t.Fatal("placeHosts(n=10) over a hierarchy with 4 addresses did not return in 5 s (infinite loop)")
	}
}

// draw6 must draw an address uniformly inside the leaf; for a leaf inside
// one /64 (sHi == eHi) it clamps a uniform 64-bit low half to the range's
// ends, so nearly every draw is the first or the last address.
func TestDraw6UniformInLeafBelowSlash64(t *testing.T) {
	tree := smallTree(t,
		leafRange("8.8.8.0", "8.8.8.255", "US"),
		leafRange("2a01:4f8::", "2a01:4f8::ffff:ffff", "DE")) // a /96
	p := placerOn(t, tree)
	rng := rand.New(rand.NewPCG(1, 2))
	seen := map[netip.Addr]int{}
	for range 200 {
		ep, _, err := p.draw6(rng)
		if err != nil {
			t.Fatal(err)
		}
		seen[ep.Addr]++
	}
	if len(seen) < 150 {
		t.Fatalf("200 draws in a /96 (2^32 addresses) gave %d distinct addresses: %v", len(seen), seen)
	}
}

// 100.0.0.0/8 is public except 100.64.0.0/10 (shared CGN space, RFC 6598);
// publicV4 refuses all of it, so the hierarchy's 100.0.0.0/10 and
// 100.128.0.0/9 leaves (66 in the default tree, US carriers) never get a
// crawler or host.
func TestPublicV4RefusesOnly100_64Slash10(t *testing.T) {
	for _, s := range []string{"100.4.1.2", "100.128.0.1", "100.200.3.4"} {
		if !publicV4(netip.MustParseAddr(s)) {
			t.Errorf("publicV4(%s) = false: public unicast address refused", s)
		}
	}
	if publicV4(netip.MustParseAddr("100.64.0.1")) {
		t.Error("publicV4(100.64.0.1) = true: CGN space accepted")
	}
}
