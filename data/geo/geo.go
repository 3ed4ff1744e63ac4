// Package geo owns micra's committed geolocation data: a compact table that
// gives an IP address the position (latitude/longitude) of the block it lies
// in, derived from DB-IP's "IP to City Lite" database (CC BY 4.0, attribution
// in ATTRIBUTION.md beside this file), plus per-country centroids as a
// fallback. The testnet world model builds its latency model on it.
//
// The table is rebuilt with `make geo` (cmd/mkgeo); it is embedded here so the
// simulator needs no files at run time, and so are its attribution and DB-IP's
// licence notice, which CC BY 4.0 requires to travel with it (Attribution,
// Licence; `micra licenses` prints them).
package geo

import (
	"bytes"
	_ "embed"
	"encoding/binary"
	"errors"
	"fmt"
	"math"
	"net/netip"
	"sort"
	"sync"

	"github.com/klauspost/compress/zstd"
)

//go:embed dbip-city-lite.bin.zst
var embedded []byte

var (
	//go:embed ATTRIBUTION.md
	attribution string
	//go:embed DBIP-LICENSE
	licence string
)

// Attribution is ATTRIBUTION.md: the embedded table's source, licence,
// DB-IP's attribution and the changes made.
func Attribution() string { return attribution }

// Licence is DBIP-LICENSE, the licence notice shipped with DB-IP's database.
func Licence() string { return licence }

// EarthRadiusKm is the mean Earth radius used for great-circle distances.
const EarthRadiusKm = 6371.0088

// Point is a position on Earth in degrees.
type Point struct{ Lat, Lon float64 }

// Unit returns p as a unit vector (for averaging positions on the sphere).
func (p Point) Unit() (x, y, z float64) {
	la, lo := p.Lat*math.Pi/180, p.Lon*math.Pi/180
	return math.Cos(la) * math.Cos(lo), math.Cos(la) * math.Sin(lo), math.Sin(la)
}

// FromUnit is the inverse of Unit for any non-zero vector.
func FromUnit(x, y, z float64) Point {
	return Point{
		Lat: math.Atan2(z, math.Hypot(x, y)) * 180 / math.Pi,
		Lon: math.Atan2(y, x) * 180 / math.Pi,
	}
}

// DistanceKm is the great-circle (haversine) distance between a and b.
func DistanceKm(a, b Point) float64 {
	la1, la2 := a.Lat*math.Pi/180, b.Lat*math.Pi/180
	dla := la2 - la1
	dlo := (b.Lon - a.Lon) * math.Pi / 180
	h := math.Sin(dla/2)*math.Sin(dla/2) + math.Cos(la1)*math.Cos(la2)*math.Sin(dlo/2)*math.Sin(dlo/2)
	return 2 * EarthRadiusKm * math.Asin(math.Min(1, math.Sqrt(h)))
}

// GridPoint is a Point quantised to multiples of a table's quantum.
type GridPoint struct{ Lat, Lon int32 }

// Less orders grid points (for deterministic tie-breaking).
func (g GridPoint) Less(o GridPoint) bool {
	return g.Lat < o.Lat || (g.Lat == o.Lat && g.Lon < o.Lon)
}

// Quantise snaps p to the nearest grid point of size quantum degrees.
func Quantise(p Point, quantum float64) GridPoint {
	return GridPoint{int32(math.Round(p.Lat / quantum)), int32(math.Round(p.Lon / quantum))}
}

// Run is one row of a block table: blocks from Start up to the next run's
// Start share Loc (or have no known location when Known is false).
type Run struct {
	Start uint64
	Loc   GridPoint
	Known bool
}

// Country is a country's address-weighted centroid.
type Country struct {
	Code string // ISO 3166-1 alpha-2
	Loc  Point
}

// Table is the decoded geolocation table.
type Table struct {
	Source    string  // provenance (database, package, version)
	Quantum   float64 // grid size in degrees
	V4Bits    int     // IPv4 block prefix length
	V6Bits    int     // IPv6 block prefix length
	V4, V6    []Run   // sorted by Start, first Start is 0
	Countries []Country

	countryIndex map[string]Point
}

const magic = "MICRAGEO\x01"

// Encode serialises t (zstd-compressed). Locations are interned and numbered
// by frequency so the common ones get one-byte varints.
func (t *Table) Encode() ([]byte, error) {
	freq := map[GridPoint]int{}
	for _, rs := range [][]Run{t.V4, t.V6} {
		for _, r := range rs {
			if r.Known {
				freq[r.Loc]++
			}
		}
	}
	locs := make([]GridPoint, 0, len(freq))
	for g := range freq {
		locs = append(locs, g)
	}
	sort.Slice(locs, func(i, j int) bool {
		if freq[locs[i]] != freq[locs[j]] {
			return freq[locs[i]] > freq[locs[j]]
		}
		return locs[i].Less(locs[j])
	})
	id := make(map[GridPoint]uint64, len(locs))
	for i, g := range locs {
		id[g] = uint64(i)
	}
	var b []byte
	b = append(b, magic...)
	b = binary.AppendUvarint(b, uint64(len(t.Source)))
	b = append(b, t.Source...)
	b = binary.BigEndian.AppendUint64(b, math.Float64bits(t.Quantum))
	b = binary.AppendUvarint(b, uint64(t.V4Bits))
	b = binary.AppendUvarint(b, uint64(t.V6Bits))
	b = binary.AppendUvarint(b, uint64(len(locs)))
	for _, g := range locs {
		b = binary.AppendVarint(b, int64(g.Lat))
		b = binary.AppendVarint(b, int64(g.Lon))
	}
	b = binary.AppendUvarint(b, uint64(len(t.Countries)))
	for _, c := range t.Countries {
		if len(c.Code) != 2 {
			return nil, fmt.Errorf("geo: country code %q is not two letters", c.Code)
		}
		g := Quantise(c.Loc, t.Quantum)
		b = append(b, c.Code...)
		b = binary.AppendVarint(b, int64(g.Lat))
		b = binary.AppendVarint(b, int64(g.Lon))
	}
	for _, rs := range [][]Run{t.V4, t.V6} {
		b = binary.AppendUvarint(b, uint64(len(rs)))
		prev := uint64(0)
		for i, r := range rs {
			if i > 0 && r.Start <= prev {
				return nil, fmt.Errorf("geo: runs not increasing at %d", i)
			}
			b = binary.AppendUvarint(b, r.Start-prev)
			prev = r.Start
			if r.Known {
				b = binary.AppendUvarint(b, id[r.Loc]+1)
			} else {
				b = binary.AppendUvarint(b, 0)
			}
		}
	}
	enc, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBestCompression), zstd.WithEncoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer enc.Close()
	return enc.EncodeAll(b, nil), nil
}

// errShort reports a truncated table.
var errShort = errors.New("geo: table truncated")

type reader struct {
	b   []byte
	err error
}

func (r *reader) uvarint() uint64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Uvarint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) varint() int64 {
	if r.err != nil {
		return 0
	}
	v, n := binary.Varint(r.b)
	if n <= 0 {
		r.err = errShort
		return 0
	}
	r.b = r.b[n:]
	return v
}

func (r *reader) bytes(n uint64) []byte {
	if r.err != nil {
		return nil
	}
	if uint64(len(r.b)) < n {
		r.err = errShort
		return nil
	}
	v := r.b[:n]
	r.b = r.b[n:]
	return v
}

// Decode parses a table produced by Encode.
func Decode(data []byte) (*Table, error) {
	dec, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1))
	if err != nil {
		return nil, err
	}
	defer dec.Close()
	raw, err := dec.DecodeAll(data, nil)
	if err != nil {
		return nil, fmt.Errorf("geo: decompress: %w", err)
	}
	if !bytes.HasPrefix(raw, []byte(magic)) {
		return nil, errors.New("geo: not a micra geo table (bad magic)")
	}
	r := &reader{b: raw[len(magic):]}
	t := &Table{}
	t.Source = string(r.bytes(r.uvarint()))
	if q := r.bytes(8); q != nil {
		t.Quantum = math.Float64frombits(binary.BigEndian.Uint64(q))
	}
	t.V4Bits = int(r.uvarint())
	t.V6Bits = int(r.uvarint())
	if r.err == nil && (t.V4Bits < 1 || t.V4Bits > 32 || t.V6Bits < 1 || t.V6Bits > 64 || !(t.Quantum > 0)) {
		return nil, fmt.Errorf("geo: bad header (v4 /%d, v6 /%d, quantum %v)", t.V4Bits, t.V6Bits, t.Quantum)
	}
	nlocs := r.uvarint()
	if nlocs > uint64(len(r.b)) {
		return nil, errShort
	}
	locs := make([]GridPoint, nlocs)
	for i := range locs {
		locs[i] = GridPoint{int32(r.varint()), int32(r.varint())}
	}
	ncc := r.uvarint()
	if ncc > uint64(len(r.b)) {
		return nil, errShort
	}
	for range ncc {
		code := string(r.bytes(2))
		g := GridPoint{int32(r.varint()), int32(r.varint())}
		t.Countries = append(t.Countries, Country{Code: code, Loc: t.point(g)})
	}
	for k, dst := range []*[]Run{&t.V4, &t.V6} {
		n := r.uvarint()
		if n > uint64(len(r.b)) {
			return nil, errShort
		}
		bits := uint(t.V4Bits)
		if k == 1 {
			bits = uint(t.V6Bits)
		}
		rs := make([]Run, n)
		prev := uint64(0)
		for i := range rs {
			// strictly increasing from 0 within the key space, as Encode
			// writes them: Locate's binary search relies on it
			d := r.uvarint()
			if (i == 0 && d != 0) || (i > 0 && (d == 0 || prev+d < prev)) || (bits < 64 && prev+d >= 1<<bits) {
				return nil, fmt.Errorf("geo: run %d does not follow run %d in order", i, i-1)
			}
			prev += d
			rs[i].Start = prev
			if l := r.uvarint(); l > 0 {
				if l > uint64(len(locs)) {
					return nil, fmt.Errorf("geo: location index %d out of range", l)
				}
				rs[i].Loc, rs[i].Known = locs[l-1], true
			}
		}
		*dst = rs
	}
	if r.err != nil {
		return nil, r.err
	}
	t.countryIndex = make(map[string]Point, len(t.Countries))
	for _, c := range t.Countries {
		t.countryIndex[c.Code] = c.Loc
	}
	return t, nil
}

func (t *Table) point(g GridPoint) Point {
	return Point{Lat: float64(g.Lat) * t.Quantum, Lon: float64(g.Lon) * t.Quantum}
}

// Locate returns the position of the block holding a, and false when the
// source database has no location for it (unallocated, private, reserved).
func (t *Table) Locate(a netip.Addr) (Point, bool) {
	a = a.Unmap()
	var key uint64
	var runs []Run
	switch {
	case a.Is4():
		b := a.As4()
		key = uint64(binary.BigEndian.Uint32(b[:])) >> (32 - t.V4Bits)
		runs = t.V4
	case a.Is6():
		b := a.As16()
		key = binary.BigEndian.Uint64(b[:8]) >> (64 - t.V6Bits)
		runs = t.V6
	default:
		return Point{}, false
	}
	i := sort.Search(len(runs), func(i int) bool { return runs[i].Start > key }) - 1
	if i < 0 || !runs[i].Known {
		return Point{}, false
	}
	return t.point(runs[i].Loc), true
}

// CountryCentroid returns the centroid of country code cc (ISO 3166-1
// alpha-2, upper case), if the source database has addresses there.
func (t *Table) CountryCentroid(cc string) (Point, bool) {
	p, ok := t.countryIndex[cc]
	return p, ok
}

var (
	defaultOnce  sync.Once
	defaultTable *Table
	defaultErr   error
)

// Default returns the embedded table, decoded once (≈ 100 ms) and shared;
// callers must not modify it.
func Default() (*Table, error) {
	defaultOnce.Do(func() { defaultTable, defaultErr = Decode(embedded) })
	return defaultTable, defaultErr
}
