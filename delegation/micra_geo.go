package delegation

import (
	"math"
)

// crawlerPos is the position a crawler states for itself, and as a unit
// vector (x, y, z): the chord between two positions orders pairs as the
// great-circle distance does, at a dot product instead of a haversine —
// the nearest neighbours among 10,000 crawlers are a scan of all of them.
type crawlerPos struct {
	lat, lon float64
	x, y, z  float64
	ok       bool
}

func newCrawlerPos(lat, lon float64) crawlerPos {
	p, l := lat*math.Pi/180, lon*math.Pi/180
	return crawlerPos{lat: lat, lon: lon, x: math.Cos(p) * math.Cos(l), y: math.Cos(p) * math.Sin(l), z: math.Sin(p), ok: true}
}

// chord2 is the squared chord between two stated positions on the unit
// sphere: monotone in their great-circle distance.
func chord2(a, b *crawlerPos) float64 {
	dx, dy, dz := a.x-b.x, a.y-b.y, a.z-b.z
	return dx*dx + dy*dy + dz*dz
}

// geoKm0 keeps ln(distance) finite for co-located pairs: below a few
// hundred km, access delays dominate the RTT.
const geoKm0 = 100

// validPos reports whether lat, lon is a place on the globe.
func validPos(lat, lon float64) bool {
	return lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180 // false for NaN
}

// geoX is the distance feature between a subnet's country and crawler ci,
// ok false when either position is unknown.
func (m *micraChooser) geoX(cc string, ci uint32) (float64, bool) {
	if m.cfg.NoGeo || int(ci) >= len(m.pos) || !m.pos[ci].ok {
		return 0, false
	}
	if len(cc) != 2 {
		return 0, false
	}
	// crawlers state their position once: cache the features per country
	// and crawler (a row per country, kept until a crawler may have moved);
	// NaN marks "not computed yet"
	if cc != m.geoCC || len(m.geoRow) < len(m.pos) {
		if m.geoTab == nil {
			m.geoTab = make(map[string][]float64)
		}
		row := m.geoTab[cc]
		if len(row) < len(m.pos) {
			for len(row) < len(m.pos) {
				row = append(row, math.NaN())
			}
			m.geoTab[cc] = row
		}
		m.geoCC, m.geoRow = cc, row
	}
	if x := m.geoRow[ci]; !math.IsNaN(x) {
		return x, !math.IsInf(x, -1)
	}
	x := math.Inf(-1) // no centroid for cc
	if c, ok := countryCentroids[cc]; ok {
		x = math.Log(greatCircleKm(c[0], c[1], m.pos[ci].lat, m.pos[ci].lon) + geoKm0)
	}
	m.geoRow[ci] = x
	return x, !math.IsInf(x, -1)
}

// geoPrior is the learned prediction of ln RTT at distance feature x and its
// variance (residual + parameter uncertainty); ok false until GeoAfter
// observations.
func (m *micraChooser) geoPrior(x float64) (mu, vr float64, ok bool) {
	g := &m.geo
	if g.n < m.cfg.GeoAfter {
		return 0, 0, false
	}
	// the fit changes only with new observations (n counts them): once
	// per decision, not per candidate
	f := &m.geoFit
	if !f.valid || f.n != g.n {
		mx, my := g.sx/g.n, g.sy/g.n
		vx := g.sxx/g.n - mx*mx
		*f = geoFit{valid: true, n: g.n, ok: vx > 1e-9, mx: mx, vx: vx}
		if f.ok {
			b := (g.sxy/g.n - mx*my) / vx
			f.a, f.b = my-b*mx, b
			f.resid = math.Max(g.syy/g.n-my*my-b*b*vx, 0.01) * g.n / (g.n - 2)
		}
	}
	if !f.ok {
		return 0, 0, false
	}
	dx := x - f.mx
	return f.a + f.b*x, f.resid * (1 + 1/g.n + dx*dx/(g.n*f.vx)), true
}

// geoSums are the running sums of the distance prior's least squares (x:
// distance feature, y: ln RTT).
type geoSums struct{ n, sx, sy, sxx, sxy, syy float64 }

func (g *geoSums) add(x, y float64) {
	g.n++
	g.sx += x
	g.sy += y
	g.sxx += x * x
	g.sxy += x * y
	g.syy += y * y
}

// line is the least-squares line y = a + b·x of the sums, ok false with
// fewer than GeoAfter-like support (3 points) or no spread in x.
func (g *geoSums) line() (a, b float64, ok bool) {
	if g.n < 3 {
		return 0, 0, false
	}
	mx, my := g.sx/g.n, g.sy/g.n
	vx := g.sxx/g.n - mx*mx
	if !(vx > 1e-9) {
		return 0, 0, false
	}
	b = (g.sxy/g.n - mx*my) / vx
	return my - b*mx, b, true
}

// geoFit is the distance prior's least-squares fit at n observations.
type geoFit struct {
	valid, ok              bool
	n, mx, vx, a, b, resid float64
}

func greatCircleKm(lat1, lon1, lat2, lon2 float64) float64 {
	const r = 6371.0
	p1, p2 := lat1*math.Pi/180, lat2*math.Pi/180
	dp, dl := p2-p1, (lon2-lon1)*math.Pi/180
	h := math.Sin(dp/2)*math.Sin(dp/2) + math.Cos(p1)*math.Cos(p2)*math.Sin(dl/2)*math.Sin(dl/2)
	return 2 * r * math.Asin(math.Min(1, math.Sqrt(h)))
}

// nbList is how many neighbours are kept per crawler (Neighbours takes the
// nearest of them that are not candidates yet).
const nbList = 8

// addNeighbours adds to cands up to Neighbours of the live crawlers nearest
// (by stated position) to crawler a, whose answer was xa (ln ms), that are
// not candidates yet (mark[ci] == epoch marks candidates), each predicted by
// the distance fit (neighbourMu) with the fit's residual spread.
func (m *micraChooser) addNeighbours(cands []micraCand, a uint32, xa float64, mark []uint32, epoch uint32, s uint64) []micraCand {
	if _, _, ok := m.geoPrior(0); !ok { // (refreshes the fit)
		return cands
	}
	f := &m.geoFit
	if !f.ok || !(f.b > 0) {
		return cands
	}
	nbrs := m.neighboursOf(a)
	if len(nbrs) == 0 {
		return cands
	}
	pa := m.pos[a]
	sd := math.Sqrt(f.resid)
	added := 0
	for _, ci := range nbrs {
		if added == m.cfg.Neighbours {
			break
		}
		if int(ci) >= len(m.liveCi) || !m.liveCi[ci] || mark[ci] == epoch || (m.noRoom != nil && m.noRoom(ci)) {
			continue
		}
		d := greatCircleKm(pa.lat, pa.lon, m.pos[ci].lat, m.pos[ci].lon)
		mark[ci] = epoch
		added++
		cands = append(cands, micraCand{id: m.crawler.ids[ci], ci: ci, mu: f.neighbourMu(xa, d), sd: sd, from: "neighbour", anchored: true,
			tie: m.crawler.tieKey(ci, s)})
	}
	return cands
}

// maxSurfaceKm is the longest great-circle distance on Earth (half its
// circumference): no host lies farther than that from any crawler.
const maxSurfaceKm = math.Pi * 6371

// neighbourMu predicts, in ln ms, the answer of a crawler d km from the
// crawler that answered xa: the host lies about dh, the fit inverted at xa,
// from the answering crawler, so about sqrt(dh² + d²) from the other one
// whichever way it lies; the prediction is xa moved by the fit's
// difference between the two distances. The inverted distance is held to
// the globe: a fit nearly flat in distance (measured latencies that hardly
// depend on it) would otherwise overflow it to +Inf and the prediction to
// NaN.
func (f *geoFit) neighbourMu(xa, d float64) float64 {
	dh := math.Exp((xa - f.a) / f.b) // +Inf when the fit is flat: clamped below
	dh = min(max(dh-geoKm0, 0), maxSurfaceKm)
	ga := f.a + f.b*math.Log(dh+geoKm0)
	gb := f.a + f.b*math.Log(math.Sqrt(dh*dh+d*d)+geoKm0)
	return xa + gb - ga
}

// neighboursOf returns the nbList live crawlers nearest to crawler a by
// stated position (ties by the crawler's hash and name: the same on every
// peer), none when a states no position; cached until locate runs again.
func (m *micraChooser) neighboursOf(a uint32) []uint32 {
	if int(a) >= len(m.pos) || !m.pos[a].ok {
		return nil
	}
	for int(a) >= len(m.nbrs) {
		m.nbrs = append(m.nbrs, nil)
		m.nbFor = append(m.nbFor, 0)
	}
	if m.nbFor[a] == m.locGen {
		return m.nbrs[a]
	}
	type near struct {
		ci uint32
		d  float64
	}
	closer := func(x, y near) bool {
		if x.d != y.d {
			return x.d < y.d
		}
		hx, hy := m.crawler.hash[x.ci], m.crawler.hash[y.ci]
		if hx != hy {
			return hx < hy
		}
		return m.crawler.ids[x.ci] < m.crawler.ids[y.ci]
	}
	var buf [nbList]near
	best := buf[:0]
	pa := &m.pos[a]
	for _, ci := range m.liveOrd {
		if ci == a || int(ci) >= len(m.pos) || !m.pos[ci].ok {
			continue
		}
		n := near{ci, chord2(pa, &m.pos[ci])}
		if len(best) == nbList && !closer(n, best[len(best)-1]) {
			continue
		}
		if len(best) < nbList {
			best = append(best, n)
		} else {
			best[len(best)-1] = n
		}
		for i := len(best) - 1; i > 0 && closer(best[i], best[i-1]); i-- { // insertion
			best[i], best[i-1] = best[i-1], best[i]
		}
	}
	out := m.nbrs[a][:0]
	for _, n := range best {
		out = append(out, n.ci)
	}
	m.nbrs[a], m.nbFor[a] = out, m.locGen
	return out
}
