package emu

import (
	"context"
	"errors"
	"net/netip"
	"path/filepath"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/sim"
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
