package delegation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// tableProber answers from a latency function; it counts probes.
type tableProber struct {
	rtt   func(c CrawlerID, ip netip.Addr) (time.Duration, bool)
	count int
}

func (p *tableProber) Probe(_ context.Context, ip netip.Addr, cs []CrawlerID) []ProbeResult {
	out := make([]ProbeResult, len(cs))
	for i, c := range cs {
		p.count++
		d, ok := p.rtt(c, ip)
		out[i] = ProbeResult{Crawler: c, RTT: d, OK: ok}
	}
	return out
}

func mustBuild(t testing.TB, rs ...hierarchy.Range) *hierarchy.Tree {
	t.Helper()
	b := hierarchy.NewBuilder()
	for _, r := range rs {
		if err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

func pfx(t testing.TB, s, org, cc string) hierarchy.Range {
	t.Helper()
	p := netip.MustParsePrefix(s)
	return hierarchy.Range{Start: p.Addr(), End: lastAddr(p), Org: org, Country: cc, Registry: hierarchy.RegistryRIPENCC, Status: hierarchy.StatusAssigned}
}

func lastAddr(p netip.Prefix) netip.Addr {
	b := p.Addr().As16()
	bits := p.Bits()
	if p.Addr().Is4() {
		bits += 96
	}
	for i := bits; i < 128; i++ {
		b[i/8] |= 1 << (7 - i%8)
	}
	a := netip.AddrFrom16(b)
	if p.Addr().Is4() {
		return a.Unmap()
	}
	return a
}

func ip(s string) netip.Addr { return netip.MustParseAddr(s) }

// smallWorld is the hand-built tree used by the explanation tests:
//
//	10.0.0.0/8 A (DE)
//	  10.1.0.0/16 B        10.1.1.0/24 B   10.1.2.0/24 C
//	  10.2.0.0/16 D (FR)   10.2.1.0/24 D   10.2.2.0/24 X
//	20.0.0.0/8 E (US)
//	  20.1.0.0/16 E        20.2.0.0/16 F
type smallWorld struct {
	tree    *hierarchy.Tree
	members *MemMembership
	dir     *MemDirectory
	prober  *tableProber
	rtt     map[CrawlerID]map[string]time.Duration // crawler → /16 of the target → RTT
}

func newSmallWorld(t testing.TB) *smallWorld {
	tr := mustBuild(t,
		pfx(t, "10.0.0.0/8", "A", "DE"),
		pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.1.1.0/24", "B", "DE"), pfx(t, "10.1.2.0/24", "C", "DE"),
		pfx(t, "10.2.0.0/16", "D", "FR"), pfx(t, "10.2.1.0/24", "D", "FR"), pfx(t, "10.2.2.0/24", "X", "FR"),
		pfx(t, "20.0.0.0/8", "E", "US"), pfx(t, "20.1.0.0/16", "E", "US"), pfx(t, "20.2.0.0/16", "F", "US"),
	)
	w := &smallWorld{tree: tr, members: NewMemMembership()}
	w.dir = NewMemDirectory(tr, w.members)
	w.rtt = map[CrawlerID]map[string]time.Duration{
		"c1": {"10.1": 5 * time.Millisecond, "10.2": 30 * time.Millisecond, "20.1": 120 * time.Millisecond, "20.2": 130 * time.Millisecond},
		"c2": {"10.1": 25 * time.Millisecond, "10.2": 4 * time.Millisecond, "20.1": 110 * time.Millisecond, "20.2": 115 * time.Millisecond},
		"c3": {"10.1": 120 * time.Millisecond, "10.2": 115 * time.Millisecond, "20.1": 6 * time.Millisecond, "20.2": 70 * time.Millisecond},
	}
	w.prober = &tableProber{rtt: func(c CrawlerID, a netip.Addr) (time.Duration, bool) {
		b := a.As4()
		key := itoa16(b[0], b[1])
		d, ok := w.rtt[c][key]
		return d, ok
	}}
	return w
}

func itoa16(a, b byte) string { return fmt.Sprintf("%d.%d", a, b) }

var smallCrawlers = []Crawler{
	{ID: "c1", Addr: netip.MustParseAddr("10.1.1.5")},
	{ID: "c2", Addr: netip.MustParseAddr("10.2.1.5")},
	{ID: "c3", Addr: netip.MustParseAddr("20.1.0.5")},
}

func (w *smallWorld) deps(seed uint64) Deps {
	return Deps{Tree: w.tree, Dir: w.dir, Prober: w.prober, Members: w.members,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(seed, 7))}
}

func (w *smallWorld) join(t testing.TB, p Policy, cs ...Crawler) {
	t.Helper()
	for _, c := range cs {
		w.members.Add(c)
		if _, err := p.Join(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
}
