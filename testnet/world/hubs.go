package world

import (
	"fmt"
	"math"
	"math/rand/v2"
	"strings"

	"github.com/micra-crawler/micra/data/geo"
)

// HubMatrix builds a site-to-site RTT matrix whose structure is unlike the
// formula's (distance × an independent per-pair stretch), to check that a
// policy does not lean on geography more than real routing allows. Results
// are to be checked on measured matrices; this is the stand-in the tests and
// docs/simulator.md use. 90 sites sit at large cities; traffic between
// regions goes site → regional transit hub → hub → site (hubs: Ashburn, San
// Jose, Miami, Frankfurt, Marseille, Moscow, Mumbai, Singapore, Tokyo,
// Sydney), so two sites can be near on the map and far on the network — and
// inside Africa and Latin America most pairs trombone through the region's
// hub (Marseille, Miami) as much of their traffic does. Each site adds its
// own delay (lognormal, median 2 ms), each direction its own congestion
// (× 0.95…1.10), and a share missing of the directed pairs is left out (the
// loader then uses the other direction, or the formula when both are
// missing). It is a pure function of seed.
func HubMatrix(seed uint64, missing float64) (*Matrix, error) {
	sitesCSV, rttCSV := HubMatrixCSV(seed, missing)
	sites, err := LoadSites(strings.NewReader(sitesCSV), "hub-sites.csv")
	if err != nil {
		return nil, err
	}
	mx, err := LoadRTT(strings.NewReader(rttCSV), "hub-rtt.csv", sites)
	if err != nil {
		return nil, err
	}
	mx.Label = "synthetic hub-routed matrix"
	return mx, nil
}

// HubMatrixCSV is HubMatrix as the two CSV files micra sim --sites/--rtt
// read, so the generated matrix goes through the same loader as a measured
// one.
func HubMatrixCSV(seed uint64, missing float64) (sitesCSV, rttCSV string) {
	rng := rand.New(rand.NewPCG(seed, 0x68756273))
	byID := make(map[string]int, len(hubSites))
	for i, s := range hubSites {
		byID[s.id] = i
	}
	extra := make([]float64, len(hubSites))
	for i := range extra {
		extra[i] = 2 * math.Exp(0.5*rng.NormFloat64())
	}
	fibre := func(a, b int, stretch float64) float64 {
		pa, pb := hubSites[a], hubSites[b]
		return geo.DistanceKm(geo.Point{Lat: pa.lat, Lon: pa.lon}, geo.Point{Lat: pb.lat, Lon: pb.lon}) * 2 / 200 * stretch
	}
	viaHubs := func(a, b int) float64 {
		ha, hb := byID[hubRegions[hubSites[a].region].hub], byID[hubRegions[hubSites[b].region].hub]
		return fibre(a, ha, 1.6) + fibre(ha, hb, 1.25) + fibre(hb, b, 1.6)
	}
	var sb, rb strings.Builder
	sb.WriteString("id,lat,lon,name\n")
	for _, s := range hubSites {
		fmt.Fprintf(&sb, "%s,%.2f,%.2f,%s\n", s.id, s.lat, s.lon, s.name)
	}
	rb.WriteString("src,dst,rtt_ms\n")
	for a, sa := range hubSites {
		for b, sd := range hubSites {
			if a == b {
				continue
			}
			// every draw happens whether or not the pair is kept, so
			// missing only removes pairs
			skip := rng.Float64() < missing
			direct := fibre(a, b, 1.3+0.9*rng.Float64())
			trombone := rng.Float64()
			congestion := 0.95 + 0.15*rng.Float64()
			var ms float64
			switch {
			case sa.region != sd.region:
				ms = viaHubs(a, b)
			case trombone < hubRegions[sa.region].trombone:
				ms = viaHubs(a, b) // both ends reach the same hub
			default:
				ms = direct
			}
			ms = (ms + extra[a] + extra[b]) * congestion
			if !skip {
				fmt.Fprintf(&rb, "%s,%s,%.1f\n", sa.id, sd.id, ms)
			}
		}
	}
	return sb.String(), rb.String()
}

type hubRegion struct {
	hub      string  // site id of the region's transit hub
	trombone float64 // share of pairs inside the region routed through the hub
}

var hubRegions = map[string]hubRegion{
	"na-e": {"iad", 0}, "na-w": {"sjc", 0}, "la": {"mia", 0.5},
	"eu": {"fra", 0}, "af": {"mrs", 0.7}, "me": {"fra", 0.3}, "ru": {"mow", 0},
	"in": {"bom", 0}, "as": {"sin", 0}, "ea": {"nrt", 0}, "oc": {"syd", 0},
}

// hubSites: large cities (public coordinates), each in a routing region.
var hubSites = []struct {
	id, name string
	lat, lon float64
	region   string
}{
	{"ams", "Amsterdam", 52.37, 4.90, "eu"}, {"lon", "London", 51.51, -0.13, "eu"}, {"fra", "Frankfurt", 50.11, 8.68, "eu"},
	{"par", "Paris", 48.86, 2.35, "eu"}, {"mad", "Madrid", 40.42, -3.70, "eu"}, {"mil", "Milan", 45.46, 9.19, "eu"},
	{"sto", "Stockholm", 59.33, 18.07, "eu"}, {"war", "Warsaw", 52.23, 21.01, "eu"}, {"ist", "Istanbul", 41.01, 28.98, "eu"},
	{"ath", "Athens", 37.98, 23.73, "eu"}, {"buc", "Bucharest", 44.43, 26.10, "eu"}, {"kie", "Kyiv", 50.45, 30.52, "eu"},
	{"hel", "Helsinki", 60.17, 24.94, "eu"}, {"dub", "Dublin", 53.35, -6.26, "eu"}, {"lis", "Lisbon", 38.72, -9.14, "eu"},
	{"vie", "Vienna", 48.21, 16.37, "eu"}, {"zrh", "Zurich", 47.38, 8.54, "eu"}, {"mrs", "Marseille", 43.30, 5.37, "eu"},
	{"prg", "Prague", 50.08, 14.44, "eu"},
	{"mow", "Moscow", 55.76, 37.62, "ru"}, {"kzn", "Kazan", 55.80, 49.11, "ru"}, {"nsk", "Novosibirsk", 55.03, 82.92, "ru"},
	{"vvo", "Vladivostok", 43.12, 131.89, "ru"}, {"alm", "Almaty", 43.24, 76.89, "ru"}, {"tas", "Tashkent", 41.30, 69.24, "ru"},
	{"nyc", "New York", 40.71, -74.01, "na-e"}, {"iad", "Ashburn", 38.95, -77.45, "na-e"}, {"atl", "Atlanta", 33.75, -84.39, "na-e"},
	{"chi", "Chicago", 41.88, -87.63, "na-e"}, {"dfw", "Dallas", 32.78, -96.80, "na-e"}, {"yyz", "Toronto", 43.65, -79.38, "na-e"},
	{"yul", "Montreal", 45.50, -73.57, "na-e"},
	{"den", "Denver", 39.74, -104.99, "na-w"}, {"lax", "Los Angeles", 34.05, -118.24, "na-w"}, {"sjc", "San Jose", 37.34, -121.89, "na-w"},
	{"sea", "Seattle", 47.61, -122.33, "na-w"}, {"yvr", "Vancouver", 49.28, -123.12, "na-w"},
	{"mia", "Miami", 25.76, -80.19, "la"}, {"mex", "Mexico City", 19.43, -99.13, "la"}, {"gdl", "Guadalajara", 20.67, -103.35, "la"},
	{"bog", "Bogota", 4.71, -74.07, "la"}, {"lim", "Lima", -12.05, -77.04, "la"}, {"scl", "Santiago", -33.45, -70.67, "la"},
	{"gru", "Sao Paulo", -23.55, -46.63, "la"}, {"gig", "Rio de Janeiro", -22.91, -43.17, "la"}, {"eze", "Buenos Aires", -34.60, -58.38, "la"},
	{"for", "Fortaleza", -3.73, -38.52, "la"}, {"ccs", "Caracas", 10.48, -66.90, "la"}, {"uio", "Quito", -0.18, -78.47, "la"},
	{"pty", "Panama City", 8.98, -79.52, "la"},
	{"jnb", "Johannesburg", -26.20, 28.05, "af"}, {"cpt", "Cape Town", -33.92, 18.42, "af"}, {"los", "Lagos", 6.52, 3.38, "af"},
	{"nbo", "Nairobi", -1.29, 36.82, "af"}, {"cai", "Cairo", 30.04, 31.24, "af"}, {"cmn", "Casablanca", 33.57, -7.59, "af"},
	{"acc", "Accra", 5.60, -0.19, "af"}, {"dar", "Dar es Salaam", -6.79, 39.21, "af"}, {"add", "Addis Ababa", 9.01, 38.75, "af"},
	{"tun", "Tunis", 36.81, 10.18, "af"},
	{"dxb", "Dubai", 25.20, 55.27, "me"}, {"ruh", "Riyadh", 24.71, 46.68, "me"}, {"tlv", "Tel Aviv", 32.09, 34.78, "me"},
	{"thr", "Tehran", 35.69, 51.39, "me"},
	{"khi", "Karachi", 24.86, 67.01, "in"}, {"bom", "Mumbai", 19.08, 72.88, "in"}, {"del", "Delhi", 28.61, 77.21, "in"},
	{"blr", "Bangalore", 12.97, 77.59, "in"}, {"maa", "Chennai", 13.08, 80.27, "in"}, {"dac", "Dhaka", 23.81, 90.41, "in"},
	{"sin", "Singapore", 1.35, 103.82, "as"}, {"kul", "Kuala Lumpur", 3.14, 101.69, "as"}, {"bkk", "Bangkok", 13.76, 100.50, "as"},
	{"sgn", "Ho Chi Minh City", 10.82, 106.63, "as"}, {"han", "Hanoi", 21.03, 105.85, "as"}, {"cgk", "Jakarta", -6.21, 106.85, "as"},
	{"mnl", "Manila", 14.60, 120.98, "as"}, {"hkg", "Hong Kong", 22.32, 114.17, "as"},
	{"tpe", "Taipei", 25.03, 121.57, "ea"}, {"pvg", "Shanghai", 31.23, 121.47, "ea"}, {"pek", "Beijing", 39.90, 116.41, "ea"},
	{"can", "Guangzhou", 23.13, 113.26, "ea"}, {"icn", "Seoul", 37.57, 126.98, "ea"}, {"nrt", "Tokyo", 35.68, 139.69, "ea"},
	{"kix", "Osaka", 34.69, 135.50, "ea"},
	{"syd", "Sydney", -33.87, 151.21, "oc"}, {"mel", "Melbourne", -37.81, 144.96, "oc"}, {"per", "Perth", -31.95, 115.86, "oc"},
	{"bne", "Brisbane", -27.47, 153.03, "oc"}, {"akl", "Auckland", -36.85, 174.76, "oc"},
}
