// Package world owns micra's emulated Internet geography: where an IP address
// is (from the committed DB-IP City Lite table in data/geo, with the
// registry's country as a fallback) and what round-trip time separates two
// addresses.
//
// The latency model is the one measurement studies support: RTT = great-circle
// fibre time (200 km/ms, both ways) × a path stretch drawn once per pair of
// routing blocks (lognormal-like: median 2.0, p10 1.5, p90 3.4 — so triangle
// inequality can be violated, as on the real Internet) + an access delay at
// each end (per address, lognormal; about 12 ms median RTT between addresses
// under 500 km apart) + jitter per measurement (exponential, so a sample is
// never below the path's floor). Alternatively a measured site-to-site RTT
// matrix replaces the formula between sites (see LoadSites, LoadRTT).
//
// Everything is a pure function of the seed and the addresses: no state, no
// I/O, safe for concurrent use. testnet/sim builds the delegation simulator on
// it, and the testnet reuses it to emulate latency on the wire.
package world

import (
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"sync"
	"time"

	"github.com/micra-crawler/micra/data/geo"
)

// Config holds the latency model's parameters. Zero fields take the defaults
// of DefaultConfig.
type Config struct {
	// Seed makes every drawn quantity (stretch, access delay) reproducible.
	Seed uint64
	// FibreKmPerMs is the one-way propagation speed in fibre. Default 200.
	FibreKmPerMs float64
	// StretchP10, StretchMedian, StretchP90 are the quantiles of the per-pair
	// path stretch (route length / great-circle length). Defaults 1.5, 2.0,
	// 3.4 (measured Internet paths). Stretch never goes below 1.
	StretchP10, StretchMedian, StretchP90 float64
	// AccessMedianMs and AccessSigma shape each address's access delay (its
	// contribution to any RTT it is part of): lognormal with this median and
	// log-space sigma. Defaults 2.5 ms and 0.6, which give ≈12 ms median RTT
	// between addresses under 500 km apart.
	AccessMedianMs, AccessSigma float64
	// JitterFrac and JitterMinMs set the mean of the per-measurement jitter:
	// JitterFrac × floor RTT + JitterMinMs (exponentially distributed).
	// Defaults 0.05 and 0.3 ms.
	JitterFrac, JitterMinMs float64
	// PathBitsV4 and PathBitsV6 are the prefix lengths of a "routing block":
	// addresses in the same block share their paths (same stretch to any
	// other block). Defaults 24 and 48.
	PathBitsV4, PathBitsV6 int
}

// DefaultConfig returns the documented defaults with seed 1.
func DefaultConfig() Config { return Config{Seed: 1}.withDefaults() }

func (c Config) withDefaults() Config {
	def := func(v *float64, d float64) {
		if *v <= 0 { // unset (New refuses NaN and ±Inf)
			*v = d
		}
	}
	def(&c.FibreKmPerMs, 200)
	def(&c.StretchP10, 1.5)
	def(&c.StretchMedian, 2.0)
	def(&c.StretchP90, 3.4)
	def(&c.AccessMedianMs, 2.5)
	def(&c.AccessSigma, 0.6)
	def(&c.JitterFrac, 0.05)
	def(&c.JitterMinMs, 0.3)
	if c.PathBitsV4 <= 0 || c.PathBitsV4 > 32 {
		c.PathBitsV4 = 24
	}
	if c.PathBitsV6 <= 0 || c.PathBitsV6 > 128 {
		c.PathBitsV6 = 48
	}
	return c
}

// z10 is the standard normal's 90th percentile.
const z10 = 1.2815515655446004

// Model is the latency model over a geolocation table, optionally with a
// measured site matrix.
type Model struct {
	cfg        Config
	geo        *geo.Table
	sigmaLo    float64 // log-space sigma of stretch below the median
	sigmaHi    float64 // … and above it
	logStretch float64 // log(median stretch)
	matrix     *Matrix
	siteIndex  *Index
	// stretchQ is the stretch's quantile function on the cells of
	// normalTable, so a pair's stretch is a table interpolation.
	stretchQ []float64
}

// New returns a model over table (geo.Default() when nil) with cfg.
func New(table *geo.Table, cfg Config) (*Model, error) {
	if table == nil {
		t, err := geo.Default()
		if err != nil {
			return nil, err
		}
		table = t
	}
	cfg = cfg.withDefaults()
	for _, v := range []float64{cfg.FibreKmPerMs, cfg.StretchP10, cfg.StretchMedian, cfg.StretchP90, cfg.AccessMedianMs, cfg.AccessSigma, cfg.JitterFrac, cfg.JitterMinMs} {
		if math.IsNaN(v) || math.IsInf(v, 0) {
			return nil, fmt.Errorf("world: a latency parameter is %v", v)
		}
	}
	if !(1 <= cfg.StretchP10 && cfg.StretchP10 <= cfg.StretchMedian && cfg.StretchMedian <= cfg.StretchP90) {
		return nil, fmt.Errorf("world: stretch quantiles %v ≤ %v ≤ %v must be ordered and at least 1 (p10, median, p90)", cfg.StretchP10, cfg.StretchMedian, cfg.StretchP90)
	}
	m := &Model{cfg: cfg, geo: table}
	m.logStretch = math.Log(cfg.StretchMedian)
	m.sigmaLo = math.Max(0, (m.logStretch-math.Log(cfg.StretchP10))/z10)
	m.sigmaHi = math.Max(0, (math.Log(cfg.StretchP90)-m.logStretch)/z10)
	nt := normalTable()
	m.stretchQ = make([]float64, len(nt))
	for i, z := range nt {
		m.stretchQ[i] = m.stretchFromNormal(z)
	}
	return m, nil
}

// WithMatrix returns a copy of m that uses the measured site matrix mx
// between sites: every address is attached to its nearest site.
func (m *Model) WithMatrix(mx *Matrix) *Model {
	c := *m
	c.matrix = mx
	pts := make([]geo.Point, len(mx.Sites))
	for i, s := range mx.Sites {
		pts[i] = s.Loc
	}
	c.siteIndex = NewIndex(pts)
	return &c
}

// Config returns the effective configuration.
func (m *Model) Config() Config { return m.cfg }

// Matrix returns the measured matrix in use, or nil.
func (m *Model) Matrix() *Matrix { return m.matrix }

// Geo returns the geolocation table.
func (m *Model) Geo() *geo.Table { return m.geo }

// Endpoint is an address resolved once for fast RTT evaluation.
type Endpoint struct {
	Addr     netip.Addr
	Loc      geo.Point
	AccessMs float64 // this address's access delay
	Site     int     // attached site in matrix mode, else -1
	v        vec
	path     uint64 // routing-block key (stretch)
}

// Locate returns the position of a: its DB-IP block, else the centroid of
// country (the registry's ISO-2 code, may be ""). ok is false when neither
// is known.
func (m *Model) Locate(a netip.Addr, country string) (geo.Point, bool) {
	if p, ok := m.geo.Locate(a); ok {
		return p, true
	}
	if country != "" {
		return m.geo.CountryCentroid(country)
	}
	return geo.Point{}, false
}

// Endpoint resolves a (see Locate for country); ok is false when a cannot
// be placed on the map.
func (m *Model) Endpoint(a netip.Addr, country string) (Endpoint, bool) {
	p, ok := m.Locate(a, country)
	if !ok {
		return Endpoint{}, false
	}
	return m.EndpointAt(a, p), true
}

// EndpointAt resolves a at an explicit position p (tests, synthetic worlds).
func (m *Model) EndpointAt(a netip.Addr, p geo.Point) Endpoint {
	a = a.Unmap()
	e := Endpoint{Addr: a, Loc: p, v: toVec(p), Site: -1}
	e.path = m.pathKey(a)
	e.AccessMs = m.access(a)
	if m.matrix != nil {
		e.Site, _ = m.siteIndex.Nearest(p)
	}
	return e
}

func (m *Model) pathKey(a netip.Addr) uint64 {
	bits := m.cfg.PathBitsV4
	if a.Is6() {
		bits = m.cfg.PathBitsV6
	}
	p, _ := a.Prefix(bits)
	b := p.Addr().As16()
	h := mix(m.cfg.Seed ^ 0x9e3779b97f4a7c15)
	h = mix(h ^ beUint64(b[:8]))
	h = mix(h ^ beUint64(b[8:]))
	return mix(h ^ uint64(bits))
}

// access is a's access delay: lognormal, drawn from a hash of the address.
func (m *Model) access(a netip.Addr) float64 {
	b := a.As16()
	h := mix(m.cfg.Seed ^ 0xa0761d6478bd642f)
	h = mix(h ^ beUint64(b[:8]))
	h = mix(h ^ beUint64(b[8:]))
	z := normal(h)
	return m.cfg.AccessMedianMs * math.Exp(m.cfg.AccessSigma*z)
}

// Stretch is the stable path stretch between the routing blocks of a and b
// (symmetric).
func (m *Model) Stretch(a, b *Endpoint) float64 { return m.stretchKeys(a.path, b.path) }

func (m *Model) stretchKeys(ka, kb uint64) float64 {
	if ka > kb {
		ka, kb = kb, ka
	}
	h := mix(mix(ka^0x5851f42d4c957f2d) ^ kb)
	i := h >> 48
	f := float64((h>>16)&0xffffffff) / (1 << 32)
	return m.stretchQ[i] + f*(m.stretchQ[i+1]-m.stretchQ[i])
}

// stretchFromNormal maps a standard normal deviate to a stretch: lognormal
// with different spreads below and above the median, never below 1.
func (m *Model) stretchFromNormal(z float64) float64 {
	s := m.logStretch
	if z < 0 {
		s += m.sigmaLo * z
	} else {
		s += m.sigmaHi * z
	}
	return math.Max(1, math.Exp(s))
}

// FloorRTT is the RTT between a and b without jitter, in ms: what a
// measurement approaches on an idle path.
func (m *Model) FloorRTT(a, b *Endpoint) float64 {
	if m.matrix != nil {
		if ms, ok := m.matrix.RTT(a.Site, b.Site); ok {
			return ms + a.AccessMs + b.AccessMs
		}
		sa, sb := &m.matrix.Sites[a.Site], &m.matrix.Sites[b.Site]
		d := kmFromChord2(sa.v.chord2(sb.v))
		// keyed by the sites' IDs and the seed, like every drawn quantity
		// (the rows' indexes once made it depend on the file's order)
		st := m.stretchKeys(mix(m.cfg.Seed^sa.key), mix(m.cfg.Seed^sb.key))
		return d*2/m.cfg.FibreKmPerMs*st + a.AccessMs + b.AccessMs
	}
	d := kmFromChord2(a.v.chord2(b.v))
	return d*2/m.cfg.FibreKmPerMs*m.Stretch(a, b) + a.AccessMs + b.AccessMs
}

// MeanRTT is the expected measured RTT between a and b, in ms (floor plus
// mean jitter). "Optimal" crawlers are ranked by it.
func (m *Model) MeanRTT(a, b *Endpoint) float64 {
	f := m.FloorRTT(a, b)
	return f + f*m.cfg.JitterFrac + m.cfg.JitterMinMs
}

// SampleRTT is one measurement between a and b in ms: the floor plus an
// exponential jitter drawn from r.
func (m *Model) SampleRTT(a, b *Endpoint, r *rand.Rand) float64 {
	return m.SampleAbove(m.FloorRTT(a, b), r)
}

// SampleAbove is SampleRTT for a pair whose FloorRTT is floor (callers
// that keep floors of pairs they probe often).
func (m *Model) SampleAbove(floor float64, r *rand.Rand) float64 {
	return floor + r.ExpFloat64()*(floor*m.cfg.JitterFrac+m.cfg.JitterMinMs)
}

// LowerBoundMs is a lower bound of FloorRTT(a, b) for any b whose access delay is at
// least bAccess and which lies distKm from a (stretch ≥ 1). In matrix mode
// there is no such bound beyond the access delays.
func (m *Model) LowerBoundMs(a *Endpoint, distKm, bAccess float64) float64 {
	if m.matrix != nil {
		return a.AccessMs + bAccess
	}
	return distKm*2/m.cfg.FibreKmPerMs + a.AccessMs + bAccess
}

// Duration converts ms to a time.Duration.
func Duration(ms float64) time.Duration { return time.Duration(ms * float64(time.Millisecond)) }

func beUint64(b []byte) uint64 {
	_ = b[7]
	return uint64(b[0])<<56 | uint64(b[1])<<48 | uint64(b[2])<<40 | uint64(b[3])<<32 |
		uint64(b[4])<<24 | uint64(b[5])<<16 | uint64(b[6])<<8 | uint64(b[7])
}

// mix is SplitMix64's finaliser: a cheap, well-distributed 64-bit hash.
func mix(z uint64) uint64 {
	z += 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

// normalTable holds the standard normal's inverse CDF at the midpoints of
// 2^16 equal-probability cells; normal interpolates it (Erfinv per call
// would dominate the cost of an RTT). It is built on first use: every micra
// process links this package, and only those with a world model need the
// table (512 KiB and 65,536 Erfinv calls).
var normalTable = sync.OnceValue(func() []float64 {
	const n = 1 << 16
	t := make([]float64, n+1)
	for i := range n {
		u := (float64(i) + 0.5) / n
		t[i] = math.Sqrt2 * math.Erfinv(2*u-1)
	}
	t[n] = t[n-1]
	return t
})

// normal maps a hash to a standard normal deviate.
func normal(h uint64) float64 {
	i := h >> 48
	f := float64((h>>16)&0xffffffff) / (1 << 32)
	t := normalTable()
	return t[i] + f*(t[i+1]-t[i])
}

// StretchQuantile is the u-quantile (0 < u < 1) of the distribution every
// pair's path stretch is drawn from; StretchCDF is P(stretch ≤ s), including
// the mass clamped at 1, and StretchPDF its density above 1. They describe
// the distribution, never a pair's draw: the simulator's oracle bound may
// know them but not Stretch.
func (m *Model) StretchQuantile(u float64) float64 {
	return m.stretchFromNormal(math.Sqrt2 * math.Erfinv(2*u-1))
}

// StretchCDF is P(stretch ≤ s) (see StretchQuantile).
func (m *Model) StretchCDF(s float64) float64 {
	if s < 1 {
		return 0
	}
	z, ok := m.stretchZ(s)
	if !ok {
		return 1
	}
	return 0.5 * math.Erfc(-z/math.Sqrt2)
}

// StretchPDF is the density of the stretch at s > 1 (see StretchQuantile).
func (m *Model) StretchPDF(s float64) float64 {
	if s <= 1 {
		return 0
	}
	z, ok := m.stretchZ(s)
	sigma := m.sigmaHi
	if z < 0 {
		sigma = m.sigmaLo
	}
	if !ok || sigma == 0 {
		return 0
	}
	return math.Exp(-z*z/2) / math.Sqrt(2*math.Pi) / (s * sigma)
}

// stretchZ inverts stretchFromNormal; ok is false above a degenerate
// (zero-spread) upper side.
func (m *Model) stretchZ(s float64) (float64, bool) {
	l := math.Log(s) - m.logStretch
	switch {
	case l < 0 && m.sigmaLo > 0:
		return l / m.sigmaLo, true
	case l < 0:
		return math.Inf(-1), true
	case m.sigmaHi > 0:
		return l / m.sigmaHi, true
	default:
		return 0, false
	}
}

// DistanceKm is the great-circle distance between a and b.
func (m *Model) DistanceKm(a, b *Endpoint) float64 { return kmFromChord2(a.v.chord2(b.v)) }
