package emu

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

func testSpec(n int) Spec {
	s := Spec{Seed: 3, Crawlers: 4}
	for i := range n {
		s.Hosts = append(s.Hosts, Host{Name: "w" + string(rune('a'+i%26)) + string(rune('a'+i/26)) + ".synth.test",
			Loopback: netip.AddrFrom4([4]byte{127, 77, 0, byte(i + 1)})})
	}
	return s
}

// TestWorldIsTheSimulatorsWorld: the emulated world is `micra sim`'s for
// the same seed — the same host addresses and nearest crawlers — so a
// testnet's figures can be read beside the simulator's.
func TestWorldIsTheSimulatorsWorld(t *testing.T) {
	tree, err := hierarchy.Default()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(60)
	w, err := spec.Build(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	cfg, err := spec.SimConfig(tree)
	if err != nil {
		t.Fatal(err)
	}
	sw, err := sim.NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range spec.Hosts {
		if w.Sim.Hosts[i].Addr != sw.Hosts[i].Addr || w.Optimal(i) != int(sw.Optimal[i]) {
			t.Fatalf("host %d: emu %v (nearest %d), sim %v (nearest %d)", i, w.Sim.Hosts[i].Addr, w.Optimal(i), sw.Hosts[i].Addr, sw.Optimal[i])
		}
	}
	pl, err := w.At(1)
	if err != nil {
		t.Fatal(err)
	}
	if pl.Self().Addr != sw.Crawlers[1].Addr {
		t.Fatalf("peer 1 at %v, the simulator's crawler 1 at %v", pl.Self().Addr, sw.Crawlers[1].Addr)
	}
	// A host's loopback address maps to its place; its probe and its
	// fetch round trip are the model's; others stay as they are.
	lb := spec.Hosts[7].Loopback
	if got := pl.MapAddr(lb); got != sw.Hosts[7].Addr {
		t.Fatalf("MapAddr(%v) = %v, want %v", lb, got, sw.Hosts[7].Addr)
	}
	other := netip.MustParseAddr("127.0.0.1")
	if pl.MapAddr(other) != other || pl.RTT(other) != 0 {
		t.Fatal("an address outside the world is neither mapped nor delayed")
	}
	mean := w.MeanRTT(1, 7)
	if rtt := pl.RTT(lb); rtt < mean/2 || rtt > 3*mean {
		t.Fatalf("fetch RTT %v far from the model's mean %v", rtt, mean)
	}
	d, err := pl.Measure(context.Background(), overlay.ProbeTarget{Addr: sw.Hosts[7].Addr})
	if err != nil || d < mean/2 || d > 3*mean {
		t.Fatalf("probe %v, %v: want near the model's mean %v", d, err, mean)
	}
	if pl.Guard(sw.Hosts[7].Addr) != nil || pl.Guard(lb) != nil || !errors.Is(pl.Guard(other), overlay.ErrGuard) {
		t.Fatal("the probe guard lets through the world's hosts only")
	}
	if _, err := pl.Measure(context.Background(), overlay.ProbeTarget{Addr: other}); err == nil {
		t.Fatal("a probe to an address outside the world answered")
	}
	a, err := pl.LookupNetIP(context.Background(), "ip", spec.Hosts[7].Name)
	if err != nil || len(a) != 1 || a[0] != lb {
		t.Fatalf("resolve %s: %v %v", spec.Hosts[7].Name, a, err)
	}
	if _, err := pl.LookupNetIP(context.Background(), "ip", "elsewhere.example"); err == nil {
		t.Fatal("a name outside the world resolved")
	}
	if _, err := w.At(4); err == nil {
		t.Fatal("peer 4 of a 4-crawler world accepted")
	}

	// A node rebuilds the same world from the placed Spec the supervisor
	// writes, without placing it again.
	p := filepath.Join(t.TempDir(), "world.json")
	if err := w.Spec.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	placed, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if !placed.Placed() || spec.Placed() {
		t.Fatal("Build's Spec is placed, the one it was given is not")
	}
	pw, err := placed.BuildPlaced()
	if err != nil {
		t.Fatal(err)
	}
	for i := range spec.Hosts {
		if pw.hosts[i] != sw.Hosts[i] || pw.Optimal(i) != int(sw.Optimal[i]) {
			t.Fatalf("host %d: placed world %+v (nearest %d), sim %+v (nearest %d)", i, pw.hosts[i], pw.Optimal(i), sw.Hosts[i], sw.Optimal[i])
		}
	}
	for c := range sw.Crawlers {
		if pw.Crawler(c) != sw.Crawlers[c] || pw.crawlerE[c] != sw.CrawlerE[c] {
			t.Fatalf("crawler %d: placed world %+v, sim %+v", c, pw.Crawler(c), sw.Crawlers[c])
		}
		for h := range spec.Hosts {
			if pw.MeanRTT(c, h) != w.MeanRTT(c, h) {
				t.Fatalf("crawler %d, host %d: mean RTT %v, built %v", c, h, pw.MeanRTT(c, h), w.MeanRTT(c, h))
			}
		}
	}
	pp, err := pw.At(1)
	if err != nil {
		t.Fatal(err)
	}
	pl2, _ := w.At(1)
	for h := range spec.Hosts {
		if a, b := pp.RTT(spec.Hosts[h].Loopback), pl2.RTT(spec.Hosts[h].Loopback); a != b {
			t.Fatalf("host %d: sampled RTT %v in the placed world, %v in the built one", h, a, b)
		}
		if pp.MapAddr(spec.Hosts[h].Loopback) != sw.Hosts[h].Addr {
			t.Fatalf("host %d maps to %v in the placed world", h, pp.MapAddr(spec.Hosts[h].Loopback))
		}
		// the console's view: the host's own position, its nearest
		// crawler's address (by name, any case)
		lat, lon, near, ok := pp.HostPlace(strings.ToUpper(spec.Hosts[h].Name))
		if !ok || lat != sw.Hosts[h].Loc.Lat || lon != sw.Hosts[h].Loc.Lon || near != sw.Crawlers[sw.Optimal[h]].Addr {
			t.Fatalf("host %d: HostPlace %v %v %v %v; sim at %+v, nearest %v", h, lat, lon, near, ok, sw.Hosts[h].Loc, sw.Crawlers[sw.Optimal[h]].Addr)
		}
	}
	if _, _, _, ok := pp.HostPlace("not-a-host.example"); ok || pp.HostCount() != len(spec.Hosts) {
		t.Fatalf("HostPlace of an unknown name: %v; HostCount %d of %d", ok, pp.HostCount(), len(spec.Hosts))
	}
	if _, err := spec.BuildPlaced(); err == nil {
		t.Fatal("BuildPlaced of an unplaced spec")
	}
	bad := placed
	bad.Places = bad.Places[:2]
	if _, err := bad.BuildPlaced(); err == nil || !strings.Contains(err.Error(), "crawler_places") {
		t.Fatalf("BuildPlaced with 2 places for 4 crawlers: %v", err)
	}
}

func TestSpecFileRoundTripAndErrors(t *testing.T) {
	dir := t.TempDir()
	spec := testSpec(3)
	spec.Latency, spec.Sites, spec.RTT = "matrix", "sites.csv", "rtt.csv"
	p := filepath.Join(dir, "world.json")
	if err := spec.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	got, err := Load(p)
	if err != nil {
		t.Fatal(err)
	}
	if got.Sites != filepath.Join(dir, "sites.csv") || len(got.Hosts) != 3 || got.Hosts[2] != spec.Hosts[2] {
		t.Fatalf("loaded %+v", got)
	}
	bad := Spec{Latency: "warp", HostDist: "pareto"}
	if err := bad.WriteFile(p); err != nil {
		t.Fatal(err)
	}
	_, err = Load(p)
	for _, want := range []string{"crawlers", "hosts: none", `latency "warp"`, `host_dist "pareto"`, p} {
		if err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("Load of a bad spec: %v, want it to name %q", err, want)
		}
	}
}

// TestPlacedWorldHubs: the placed world is the built one under the
// hub-routed matrix too (endpoints attach to the same sites).
func TestPlacedWorldHubs(t *testing.T) {
	tree, err := hierarchy.Default()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(40)
	spec.Latency = "hubs"
	w, err := spec.Build(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	pw, err := w.Spec.BuildPlaced()
	if err != nil {
		t.Fatal(err)
	}
	for h := range spec.Hosts {
		if pw.hosts[h] != w.hosts[h] {
			t.Fatalf("host %d: placed %+v, built %+v", h, pw.hosts[h], w.hosts[h])
		}
		for c := range spec.Crawlers {
			if pw.MeanRTT(c, h) != w.MeanRTT(c, h) {
				t.Fatalf("crawler %d, host %d: mean RTT %v, built %v", c, h, pw.MeanRTT(c, h), w.MeanRTT(c, h))
			}
		}
	}
}

// Peers know each other on the wire by their loopback addresses: the round
// trip between two peers is the model's between their places, the same
// both ways; a peer's own address and the sink's cost nothing.
func TestWireRTTBetweenPeers(t *testing.T) {
	tree, err := hierarchy.Default()
	if err != nil {
		t.Fatal(err)
	}
	spec := testSpec(20)
	spec.WireScale = 1
	w, err := spec.Build(context.Background(), tree)
	if err != nil {
		t.Fatal(err)
	}
	p0, _ := w.At(0)
	p2, _ := w.At(2)
	rtt := p0.WireRTT(PeerLoopback(2))
	if rtt <= 0 || rtt != p2.WireRTT(PeerLoopback(0)) {
		t.Fatalf("0→2 %v, 2→0 %v: want the same positive round trip", rtt, p2.WireRTT(PeerLoopback(0)))
	}
	want := world.Duration(w.model.MeanRTT(&w.crawlerE[0], &w.crawlerE[2]))
	if rtt != want {
		t.Errorf("0→2 %v, the model's mean %v", rtt, want)
	}
	for _, a := range []netip.Addr{PeerLoopback(0), PeerLoopback(spec.Crawlers), netip.MustParseAddr("127.0.0.1"), spec.Hosts[0].Loopback} {
		if d := p0.WireRTT(a); d != 0 {
			t.Errorf("WireRTT(%v) = %v: want 0 (itself, no such peer, the sink, a web host)", a, d)
		}
	}
	w.Spec.WireScale = 0.25
	if d := p0.WireRTT(PeerLoopback(2)); d != time.Duration(0.25*float64(rtt)) {
		t.Errorf("at wire scale 0.25: %v, want a quarter of %v", d, rtt)
	}
	// the audit's round trip between peers is the world's, whatever the wire's scale
	if d, ok := p0.PeerRTT(PeerLoopback(2)); !ok || d != want {
		t.Errorf("PeerRTT at wire scale 0.25: %v %v, want the model's mean %v", d, ok, want)
	}
	if _, ok := p0.PeerRTT(netip.MustParseAddr("127.0.0.1")); ok {
		t.Error("PeerRTT of the sink's address answered")
	}
	w.Spec.WireScale = 0
	if d := p0.WireRTT(PeerLoopback(2)); d != 0 {
		t.Errorf("at wire scale 0: %v, want no delay", d)
	}
	if PeerLoopback(251) != netip.MustParseAddr("127.88.1.2") {
		t.Errorf("peer 251 at %v", PeerLoopback(251))
	}
	if i, ok := w.peerAt(PeerLoopback(3)); !ok || i != 3 {
		t.Errorf("peerAt(PeerLoopback(3)) = %d, %v", i, ok)
	}
}
