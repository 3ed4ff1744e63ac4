package world

import (
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/data/geo"
)

func newModel(t testing.TB, seed uint64) *Model {
	t.Helper()
	m, err := New(nil, Config{Seed: seed})
	if err != nil {
		t.Fatal(err)
	}
	return m
}

func quantile(xs []float64, q float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	return s[int(q*float64(len(s)-1))]
}

// randomLocatedV4 draws n distinct public IPv4 addresses that the geo table
// places on the map.
func randomLocatedV4(m *Model, rng *rand.Rand, n int) []Endpoint {
	var out []Endpoint
	for len(out) < n {
		a := netip.AddrFrom4([4]byte{byte(rng.IntN(223) + 1), byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(254) + 1)})
		if a.IsPrivate() || a.IsLoopback() {
			continue
		}
		if e, ok := m.Endpoint(a, ""); ok {
			out = append(out, e)
		}
	}
	return out
}

func TestStretchQuantiles(t *testing.T) {
	m := newModel(t, 7)
	rng := rand.New(rand.NewPCG(1, 2))
	var s []float64
	for range 200000 {
		a := m.EndpointAt(netip.AddrFrom4([4]byte{byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), 1}), geo.Point{})
		b := m.EndpointAt(netip.AddrFrom4([4]byte{byte(rng.IntN(256)), byte(rng.IntN(256)), byte(rng.IntN(256)), 1}), geo.Point{})
		s = append(s, m.Stretch(&a, &b))
	}
	for _, c := range []struct{ q, want, tol float64 }{{0.1, 1.5, 0.03}, {0.5, 2.0, 0.03}, {0.9, 3.4, 0.07}} {
		if got := quantile(s, c.q); math.Abs(got-c.want) > c.tol {
			t.Errorf("stretch p%.0f = %.3f, want %.2f ± %.2f", c.q*100, got, c.want, c.tol)
		}
	}
	if mn := slices.Min(s); mn < 1 {
		t.Errorf("stretch below 1: %v", mn)
	}
}

func TestStretchStableAndSymmetric(t *testing.T) {
	m := newModel(t, 7)
	a := m.EndpointAt(netip.MustParseAddr("192.0.2.10"), geo.Point{Lat: 10, Lon: 10})
	a2 := m.EndpointAt(netip.MustParseAddr("192.0.2.200"), geo.Point{Lat: 10, Lon: 10})
	b := m.EndpointAt(netip.MustParseAddr("198.51.100.7"), geo.Point{Lat: 40, Lon: -70})
	if m.Stretch(&a, &b) != m.Stretch(&b, &a) {
		t.Error("stretch not symmetric")
	}
	if m.Stretch(&a, &b) != m.Stretch(&a2, &b) {
		t.Error("addresses of one /24 route differently")
	}
	if m.FloorRTT(&a, &b) != m.FloorRTT(&b, &a) {
		t.Error("RTT not symmetric")
	}
	other := newModel(t, 8)
	b8 := other.EndpointAt(b.Addr, b.Loc)
	a8 := other.EndpointAt(a.Addr, a.Loc)
	if other.FloorRTT(&a8, &b8) == m.FloorRTT(&a, &b) {
		t.Error("seed does not change the model")
	}
	again := newModel(t, 7)
	a7 := again.EndpointAt(a.Addr, a.Loc)
	b7 := again.EndpointAt(b.Addr, b.Loc)
	if again.FloorRTT(&a7, &b7) != m.FloorRTT(&a, &b) {
		t.Error("same seed, different RTT")
	}
}

// TestRealAddressesStatistics checks the model on real addresses placed by
// the embedded DB-IP table: ≈12 ms median RTT under 500 km, a sane
// intercontinental RTT, and triangle-inequality violations.
func TestRealAddressesStatistics(t *testing.T) {
	m := newModel(t, 3)
	rng := rand.New(rand.NewPCG(5, 6))
	eps := randomLocatedV4(m, rng, 6000)
	pts := make([]geo.Point, len(eps))
	for i, e := range eps {
		pts[i] = e.Loc
	}
	ix := NewIndex(pts)
	var near []float64
	for i := range eps {
		n := 0
		ix.Within(eps[i].Loc, 500, func(j int, _ float64) {
			if j != i && n < 5 && eps[j].path != eps[i].path {
				near = append(near, m.FloorRTT(&eps[i], &eps[j]))
				n++
			}
		})
	}
	if len(near) < 1000 {
		t.Fatalf("only %d pairs under 500 km", len(near))
	}
	med := quantile(near, 0.5)
	t.Logf("median RTT under 500 km: %.1f ms over %d pairs", med, len(near))
	if med < 10 || med > 14 {
		t.Errorf("median RTT under 500 km = %.1f ms, want ≈ 12", med)
	}
	// Frankfurt–Sydney: RTTs of 250–400 ms are what the Internet shows.
	fra := m.EndpointAt(netip.MustParseAddr("192.0.2.1"), geo.Point{Lat: 50.11, Lon: 8.68})
	syd := m.EndpointAt(netip.MustParseAddr("198.51.100.1"), geo.Point{Lat: -33.87, Lon: 151.21})
	if d := m.FloorRTT(&fra, &syd); d < 165 || d > 900 {
		t.Errorf("Frankfurt–Sydney RTT = %.0f ms", d)
	}
	viol, triples := 0, 0
	for range 20000 {
		a, b, c := &eps[rng.IntN(len(eps))], &eps[rng.IntN(len(eps))], &eps[rng.IntN(len(eps))]
		if a.path == b.path || b.path == c.path || a.path == c.path {
			continue
		}
		triples++
		if m.FloorRTT(a, c) > m.FloorRTT(a, b)+m.FloorRTT(b, c) {
			viol++
		}
	}
	t.Logf("triangle inequality violated in %d of %d triples", viol, triples)
	if viol == 0 || viol > triples/4 {
		t.Errorf("triangle violations: %d of %d", viol, triples)
	}
}

func TestJitter(t *testing.T) {
	m := newModel(t, 1)
	a := m.EndpointAt(netip.MustParseAddr("192.0.2.1"), geo.Point{Lat: 48.85, Lon: 2.35})
	b := m.EndpointAt(netip.MustParseAddr("198.51.100.1"), geo.Point{Lat: 40.71, Lon: -74})
	r := rand.New(rand.NewPCG(1, 1))
	floor, mean := m.FloorRTT(&a, &b), m.MeanRTT(&a, &b)
	var sum float64
	const n = 100000
	for range n {
		s := m.SampleRTT(&a, &b, r)
		if s < floor {
			t.Fatalf("sample %.2f below floor %.2f", s, floor)
		}
		sum += s
	}
	if got := sum / n; math.Abs(got-mean) > 0.01*mean {
		t.Errorf("mean of samples %.2f, model mean %.2f", got, mean)
	}
}

func TestIndexMatchesBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(9, 9))
	var pts []geo.Point
	for range 3000 {
		pts = append(pts, geo.Point{Lat: math.Asin(2*rng.Float64()-1) * 180 / math.Pi, Lon: rng.Float64()*360 - 180})
	}
	ix := NewIndex(pts)
	for range 300 {
		q := geo.Point{Lat: rng.Float64()*180 - 90, Lon: rng.Float64()*360 - 180}
		best, bestD := -1, math.Inf(1)
		for i, p := range pts {
			if d := geo.DistanceKm(q, p); d < bestD {
				best, bestD = i, d
			}
		}
		got, gotD := ix.Nearest(q)
		if got != best || math.Abs(gotD-bestD) > 1e-6*math.Max(1, bestD) {
			t.Fatalf("Nearest(%v) = %d (%.3f km), brute force %d (%.3f km)", q, got, gotD, best, bestD)
		}
		r := rng.Float64() * 3000
		var want, have []int
		for i, p := range pts {
			if geo.DistanceKm(q, p) <= r*(1-1e-9) {
				want = append(want, i)
			}
		}
		ix.Within(q, r, func(i int, _ float64) { have = append(have, i) })
		var searched []int
		ix.Search(q, r, func(i int, _ float64) float64 { searched = append(searched, i); return r })
		slices.Sort(have)
		slices.Sort(searched)
		if !slices.Equal(have, searched) {
			t.Fatalf("Search and Within disagree at %v, %.0f km", q, r)
		}
		for _, w := range want {
			if _, ok := slices.BinarySearch(have, w); !ok {
				t.Fatalf("Within(%v, %.0f) misses %d", q, r, w)
			}
		}
	}
}

const sitesCSV = `id,lat,lon,name
fra,50.11,8.68,Frankfurt
nyc,40.71,-74.0,New York
syd,-33.87,151.21,Sydney
`

func TestMatrix(t *testing.T) {
	sites, err := LoadSites(strings.NewReader(sitesCSV), "sites.csv")
	if err != nil {
		t.Fatal(err)
	}
	mx, err := LoadRTT(strings.NewReader("src,dst,rtt_ms\nfra,nyc,80\nnyc,fra,90\nsyd,fra,300\n"), "rtt.csv", sites)
	if err != nil {
		t.Fatal(err)
	}
	m := newModel(t, 1).WithMatrix(mx)
	at := func(s string, lat, lon float64) Endpoint {
		return m.EndpointAt(netip.MustParseAddr(s), geo.Point{Lat: lat, Lon: lon})
	}
	paris := at("192.0.2.1", 48.85, 2.35)    // → fra
	boston := at("192.0.2.2", 42.36, -71.06) // → nyc
	perth := at("192.0.2.3", -31.95, 115.86) // → syd
	if paris.Site != 0 || boston.Site != 1 || perth.Site != 2 {
		t.Fatalf("sites: paris %d boston %d perth %d", paris.Site, boston.Site, perth.Site)
	}
	acc := paris.AccessMs + boston.AccessMs
	if got := m.FloorRTT(&paris, &boston); math.Abs(got-(80+acc)) > 1e-9 {
		t.Errorf("fra→nyc = %v, want %v", got, 80+acc)
	}
	if got := m.FloorRTT(&boston, &paris); math.Abs(got-(90+acc)) > 1e-9 {
		t.Errorf("nyc→fra = %v, want %v (directed)", got, 90+acc)
	}
	if got := m.FloorRTT(&paris, &perth); math.Abs(got-(300+paris.AccessMs+perth.AccessMs)) > 1e-9 {
		t.Errorf("fra→syd = %v, want the syd→fra measurement", got)
	}
	// nyc–syd is not measured: the formula between the sites applies.
	d := geo.DistanceKm(sites[1].Loc, sites[2].Loc)
	got := m.FloorRTT(&boston, &perth) - boston.AccessMs - perth.AccessMs
	if got < d/100 || got > d/100*20 {
		t.Errorf("nyc–syd fallback = %.1f ms for %.0f km", got, d)
	}
}

// TestCSVColumnsAnyOrder: columns are found by name; extra ones are ignored.
func TestCSVColumnsAnyOrder(t *testing.T) {
	sites, err := LoadSites(strings.NewReader("name,lon,country,id,lat\nParis,2.35,FR,par,48.85\nOslo,10.75,NO,osl,59.91\n"), "s.csv")
	if err != nil {
		t.Fatal(err)
	}
	if sites[0].ID != "par" || sites[0].Name != "Paris" || sites[1].Loc != (geo.Point{Lat: 59.91, Lon: 10.75}) {
		t.Fatalf("sites %+v", sites)
	}
	mx, err := LoadRTT(strings.NewReader("rtt_ms,src,dst,probes\n25.5,par,osl,10\n"), "r.csv", sites)
	if err != nil {
		t.Fatal(err)
	}
	if v, ok := mx.RTT(1, 0); !ok || v != 25.5 {
		t.Fatalf("osl→par = %v, %v", v, ok)
	}
}

func TestCSVErrors(t *testing.T) {
	for _, c := range []struct{ sites, rtt, want string }{
		{"", "", "sites.csv:1: empty file"},
		{"id,lat\n", "", `sites.csv:1: header "id,lat" lacks column "lon" (want "id,lat,lon,name")`},
		{"id,lat,lat,lon\n", "", `sites.csv:1: header names column "lat" twice`},
		{"id,lat,lon\na,1,2\nb,95,2\n", "", `sites.csv:3: latitude "95" is not a number in [-90, 90]`},
		{"id,lat,lon\na,1,x\n", "", `sites.csv:2: longitude "x" is not a number in [-180, 180]`},
		{"id,lat,lon\na,1,2\n\na,3,4\n", "", `sites.csv:4: duplicate site id "a" (first on line 2)`},
		{"id,lat,lon\na,1\n", "", "sites.csv:2: want at least 3 fields"},
		{"id,lat,lon\n,1,2\n", "", "sites.csv:2: empty site id"},
		{"id,lat,lon\n", "", "sites.csv:2: no sites"},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst\n", `rtt.csv:1: header "src,dst" lacks column "rtt_ms" (want "src,dst,rtt_ms")`},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst,rtt_ms\na,c,5\n", `rtt.csv:2: unknown site "c"`},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst,rtt_ms\na,b,-5\n", `rtt.csv:2: rtt_ms "-5" is not a non-negative number`},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst,rtt_ms\na,b,NaN\n", `rtt.csv:2: rtt_ms "NaN"`},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst,rtt_ms\na,b,5\nb,a,6\na,b,7\n", "rtt.csv:4: duplicate measurement a→b (first on line 2)"},
		{"id,lat,lon\na,1,2\nb,3,4\n", "src,dst,rtt_ms\na,\"b,5\n", "rtt.csv:2:"},
	} {
		sites, err := LoadSites(strings.NewReader(c.sites), "sites.csv")
		if err == nil {
			_, err = LoadRTT(strings.NewReader(c.rtt), "rtt.csv", sites)
		}
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("sites %q rtt %q: error %v, want prefix %q", c.sites, c.rtt, err, c.want)
		}
	}
}

func BenchmarkFloorRTT(b *testing.B) {
	m := newModel(b, 1)
	eps := randomLocatedV4(m, rand.New(rand.NewPCG(1, 1)), 1024)
	b.ResetTimer()
	var sink float64
	for i := range b.N {
		sink += m.FloorRTT(&eps[i&1023], &eps[(i*7+3)&1023])
	}
	_ = sink
}

func TestStats(t *testing.T) {
	sites, err := LoadSites(strings.NewReader(sitesCSV), "sites.csv")
	if err != nil {
		t.Fatal(err)
	}
	// fra–nyc 6200 km: 124 ms is stretch 2; a fast nyc–syd and slow fra–syd
	// make fra→nyc→syd beat fra→syd directly (a violation).
	mx, err := LoadRTT(strings.NewReader("src,dst,rtt_ms\nfra,nyc,124\nnyc,syd,200\nfra,syd,400\n"), "rtt.csv", sites)
	if err != nil {
		t.Fatal(err)
	}
	st := mx.Stats(200)
	if st.Pairs != 3 || st.FarPairs != 3 || st.TriangleViolations == 0 {
		t.Fatalf("matrix stats %+v", st)
	}
	if d := geo.DistanceKm(sites[0].Loc, sites[1].Loc); math.Abs(st.StretchP50-124/(d/100)) > 1e-9 {
		t.Fatalf("median implied stretch %v, want fra–nyc %v", st.StretchP50, 124/(d/100))
	}
	m := newModel(t, 11)
	eps := randomLocatedV4(m, rand.New(rand.NewPCG(3, 4)), 600)
	ms := m.SampleStats(eps)
	var buf strings.Builder
	ms.WriteText(&buf, "model")
	t.Log(buf.String())
	// access delays add to the fibre stretch: a little above 2.0
	if ms.StretchP50 < 2 || ms.StretchP50 > 2.5 || ms.TriangleViolations == 0 {
		t.Fatalf("model stats %+v", ms)
	}
}

// A missing pair's fallback stretch depends on the sites and the seed, not
// on the order of the rows in the sites file.
func TestMatrixFallbackIndependentOfRowOrder(t *testing.T) {
	sites := "id,lat,lon\nams,52.37,4.90\nnyc,40.71,-74.01\nsin,1.35,103.82\n"
	reversed := "id,lat,lon\nsin,1.35,103.82\nnyc,40.71,-74.01\nams,52.37,4.90\n"
	rtt := "src,dst,rtt_ms\nams,nyc,80\n" // ams–sin and nyc–sin missing
	floor := func(sitesCSV string, seed uint64) float64 {
		ss, err := LoadSites(strings.NewReader(sitesCSV), "sites.csv")
		if err != nil {
			t.Fatal(err)
		}
		mx, err := LoadRTT(strings.NewReader(rtt), "rtt.csv", ss)
		if err != nil {
			t.Fatal(err)
		}
		m := newModel(t, seed).WithMatrix(mx)
		a, b := m.EndpointAt(netip.MustParseAddr("192.0.2.1"), geo.Point{Lat: 52.37, Lon: 4.90}), m.EndpointAt(netip.MustParseAddr("198.51.100.1"), geo.Point{Lat: 1.35, Lon: 103.82})
		return m.FloorRTT(&a, &b) - a.AccessMs - b.AccessMs // the path part: access delays vary with the seed anyway
	}
	if x, y := floor(sites, 1), floor(reversed, 1); x != y {
		t.Fatalf("ams–sin floor %v ms, %v ms with the rows reversed", x, y)
	}
	if x, y := floor(sites, 1), floor(sites, 2); x == y {
		t.Fatalf("ams–sin floor %v ms under seeds 1 and 2: the fallback stretch ignores the seed", x)
	}
}

func TestMatrixRTTBound(t *testing.T) {
	ss, err := LoadSites(strings.NewReader("id,lat,lon\na,0,0\nb,1,1\n"), "s.csv")
	if err != nil {
		t.Fatal(err)
	}
	_, err = LoadRTT(strings.NewReader("src,dst,rtt_ms\na,b,5\nb,a,1e300\n"), "r.csv", ss)
	if err == nil || !strings.Contains(err.Error(), "r.csv:3:") {
		t.Fatalf("an RTT of 1e300 ms: %v", err)
	}
}
