package geo

import (
	"math"
	"net/netip"
	"testing"
)

func TestEncodeDecodeRoundTrip(t *testing.T) {
	in := &Table{
		Source: "test", Quantum: 0.5, V4Bits: 8, V6Bits: 16,
		V4:        []Run{{Start: 0}, {Start: 1, Loc: GridPoint{10, 20}, Known: true}, {Start: 5, Loc: GridPoint{-3, -300}, Known: true}, {Start: 200}},
		V6:        []Run{{Start: 0}, {Start: 0x2001, Loc: GridPoint{10, 20}, Known: true}, {Start: 0x2002}},
		Countries: []Country{{Code: "NZ", Loc: Point{-41, 174}}},
	}
	b, err := in.Encode()
	if err != nil {
		t.Fatal(err)
	}
	out, err := Decode(b)
	if err != nil {
		t.Fatal(err)
	}
	if out.Source != "test" || out.Quantum != 0.5 || out.V4Bits != 8 || out.V6Bits != 16 {
		t.Fatalf("header mismatch: %+v", out)
	}
	for _, c := range []struct {
		addr string
		want Point
		ok   bool
	}{
		{"0.1.2.3", Point{}, false},
		{"1.2.3.4", Point{5, 10}, true},
		{"4.255.255.255", Point{5, 10}, true},
		{"5.0.0.0", Point{-1.5, -150}, true},
		{"199.0.0.1", Point{-1.5, -150}, true},
		{"200.0.0.1", Point{}, false},
		{"::ffff:1.2.3.4", Point{5, 10}, true},
		{"2001:db8::1", Point{5, 10}, true},
		{"2002::1", Point{}, false},
	} {
		got, ok := out.Locate(netip.MustParseAddr(c.addr))
		if ok != c.ok || got != c.want {
			t.Errorf("Locate(%s) = %v,%v; want %v,%v", c.addr, got, ok, c.want, c.ok)
		}
	}
	if p, ok := out.CountryCentroid("NZ"); !ok || p != (Point{-41, 174}) {
		t.Errorf("NZ centroid = %v,%v", p, ok)
	}
}

func TestDecodeRejectsGarbage(t *testing.T) {
	if _, err := Decode([]byte("not zstd")); err == nil {
		t.Fatal("garbage decoded")
	}
	good, err := (&Table{Source: "x", Quantum: 1, V4Bits: 8, V6Bits: 8, V4: []Run{{Start: 0}}, V6: []Run{{Start: 0}}}).Encode()
	if err != nil {
		t.Fatal(err)
	}
	if _, err := Decode(good); err != nil {
		t.Fatalf("good table: %v", err)
	}
}

func TestDistanceKm(t *testing.T) {
	// Paris–New York is about 5837 km.
	d := DistanceKm(Point{48.8566, 2.3522}, Point{40.7128, -74.0060})
	if math.Abs(d-5837) > 15 {
		t.Fatalf("Paris–New York = %.0f km", d)
	}
	if d := DistanceKm(Point{10, 10}, Point{10, 10}); d != 0 {
		t.Fatalf("zero distance = %v", d)
	}
}

// TestDefaultTable checks the embedded DB-IP table against places whose
// registries and operators are not in doubt.
func TestDefaultTable(t *testing.T) {
	tab, err := Default()
	if err != nil {
		t.Fatal(err)
	}
	if len(tab.V4) < 100000 || len(tab.V6) < 10000 || len(tab.Countries) < 200 {
		t.Fatalf("table too small: %d v4 runs, %d v6 runs, %d countries", len(tab.V4), len(tab.V6), len(tab.Countries))
	}
	type box struct{ latMin, latMax, lonMin, lonMax float64 }
	in := func(p Point, b box) bool {
		return p.Lat >= b.latMin && p.Lat <= b.latMax && p.Lon >= b.lonMin && p.Lon <= b.lonMax
	}
	europe := box{35, 72, -25, 45}
	for _, c := range []struct {
		addr string
		b    box
	}{
		{"193.0.6.139", europe},                // RIPE NCC, Amsterdam
		{"2001:67c:2e8::1", europe},            // RIPE NCC IPv6
		{"202.12.29.1", box{-45, 40, 90, 180}}, // APNIC, Brisbane
		{"200.7.84.1", box{-56, 15, -90, -30}}, // LACNIC, Montevideo
		{"196.216.2.1", box{-36, 38, -20, 55}}, // AFRINIC, Mauritius/Africa
	} {
		p, ok := tab.Locate(netip.MustParseAddr(c.addr))
		if !ok || !in(p, c.b) {
			t.Errorf("Locate(%s) = %v,%v; want inside %+v", c.addr, p, ok, c.b)
		}
	}
	if _, ok := tab.Locate(netip.MustParseAddr("10.1.2.3")); ok {
		t.Log("note: private 10/8 has a location in the source data")
	}
	for cc, b := range map[string]box{"AU": {-45, -10, 110, 155}, "FR": {41, 52, -5, 9}, "BR": {-34, 5, -74, -34}} {
		p, ok := tab.CountryCentroid(cc)
		if !ok || !in(p, b) {
			t.Errorf("centroid %s = %v,%v", cc, p, ok)
		}
	}
}
