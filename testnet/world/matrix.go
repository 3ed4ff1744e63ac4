package world

import (
	"bufio"
	"encoding/csv"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"strings"

	"github.com/micra-crawler/micra/data/geo"
)

// Site is a measurement site of a latency matrix.
type Site struct {
	ID   string
	Name string
	Loc  geo.Point
	v    vec
	key  uint64 // hash of ID: the fallback stretch of a missing pair is drawn from it
}

// Matrix is a measured site-to-site RTT matrix. RTTs are directed (src
// measured towards dst); a missing direction uses the other one, and a
// missing pair falls back to the formula between the two sites' positions.
type Matrix struct {
	Sites []Site
	// Label names the matrix in reports; empty: a measured one.
	Label string
	byID  map[string]int
	rtt   map[uint64]float64 // src<<32 | dst → ms
}

// LineError is an input error with its position.
type LineError struct {
	File   string
	Line   int
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// Site returns the index of site id.
func (mx *Matrix) Site(id string) (int, bool) {
	i, ok := mx.byID[id]
	return i, ok
}

// Pairs is the number of directed measurements held.
func (mx *Matrix) Pairs() int { return len(mx.rtt) }

// RTT returns the measured RTT from site src to site dst in ms, using the
// reverse direction when only that was measured.
func (mx *Matrix) RTT(src, dst int) (float64, bool) {
	if v, ok := mx.rtt[uint64(src)<<32|uint64(dst)]; ok {
		return v, true
	}
	v, ok := mx.rtt[uint64(dst)<<32|uint64(src)]
	return v, ok
}

// csvReader wraps encoding/csv with line tracking and header checking.
type csvReader struct {
	name string
	r    *csv.Reader
}

func newCSV(r io.Reader, name string) *csvReader {
	// a UTF-8 byte-order mark goes before encoding/csv sees it: before a
	// quoted header ("id",…) it would be a bare quote
	br := bufio.NewReader(r)
	if b, err := br.Peek(3); err == nil && string(b) == "\ufeff" {
		br.Discard(3)
	}
	cr := csv.NewReader(br)
	cr.FieldsPerRecord = -1
	cr.TrimLeadingSpace = true
	cr.Comment = '#'
	cr.ReuseRecord = true
	return &csvReader{name: name, r: cr}
}

// next returns the next record and its line; io.EOF at the end.
func (c *csvReader) next() ([]string, int, error) {
	rec, err := c.r.Read()
	if err != nil {
		if err == io.EOF {
			return nil, 0, io.EOF
		}
		var pe *csv.ParseError
		if errors.As(err, &pe) {
			return nil, 0, &LineError{c.name, pe.Line, pe.Err.Error()}
		}
		return nil, 0, fmt.Errorf("%s: %w", c.name, err)
	}
	line, _ := c.r.FieldPos(0)
	for i := range rec {
		rec[i] = strings.TrimSpace(rec[i])
	}
	return rec, line, nil
}

// header reads the header line and returns the column of each wanted name
// (-1 for a missing optional one). Columns may come in any order; extra
// columns are ignored, so richer exports load as they are.
func (c *csvReader) header(required, optional []string) (map[string]int, error) {
	rec, line, err := c.next()
	want := strings.Join(append(slices.Clone(required), optional...), ",")
	if err == io.EOF {
		return nil, &LineError{c.name, 1, fmt.Sprintf("empty file: want header %q", want)}
	}
	if err != nil {
		return nil, err
	}
	cols := map[string]int{}
	for _, n := range append(slices.Clone(required), optional...) {
		cols[n] = -1
	}
	for i, f := range rec {
		f = strings.ToLower(strings.TrimPrefix(f, "\ufeff"))
		if j, ok := cols[f]; ok {
			if j >= 0 {
				return nil, &LineError{c.name, line, fmt.Sprintf("header names column %q twice", f)}
			}
			cols[f] = i
		}
	}
	for _, n := range required {
		if cols[n] < 0 {
			return nil, &LineError{c.name, line, fmt.Sprintf("header %q lacks column %q (want %q)", strings.Join(rec, ","), n, want)}
		}
	}
	return cols, nil
}

// field returns column col of rec, or "" when the record is too short.
func field(rec []string, col int) string {
	if col < 0 || col >= len(rec) {
		return ""
	}
	return rec[col]
}

func parseFloat(s string) (float64, bool) {
	v, err := strconv.ParseFloat(s, 64)
	return v, err == nil && !math.IsNaN(v) && !math.IsInf(v, 0)
}

// LoadSites reads a sites CSV (header id,lat,lon[,name]). name labels errors.
func LoadSites(r io.Reader, name string) ([]Site, error) {
	c := newCSV(r, name)
	cols, err := c.header([]string{"id", "lat", "lon"}, []string{"name"})
	if err != nil {
		return nil, err
	}
	need := max(cols["id"], cols["lat"], cols["lon"]) + 1
	var sites []Site
	seen := map[string]int{}
	for {
		rec, line, err := c.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) < need {
			return nil, &LineError{name, line, fmt.Sprintf("want at least %d fields (id,lat,lon[,name]), got %d", need, len(rec))}
		}
		id, latS, lonS := field(rec, cols["id"]), field(rec, cols["lat"]), field(rec, cols["lon"])
		if id == "" {
			return nil, &LineError{name, line, "empty site id"}
		}
		if prev, dup := seen[id]; dup {
			return nil, &LineError{name, line, fmt.Sprintf("duplicate site id %q (first on line %d)", id, prev)}
		}
		lat, ok := parseFloat(latS)
		if !ok || lat < -90 || lat > 90 {
			return nil, &LineError{name, line, fmt.Sprintf("latitude %q is not a number in [-90, 90]", latS)}
		}
		lon, ok := parseFloat(lonS)
		if !ok || lon < -180 || lon > 180 {
			return nil, &LineError{name, line, fmt.Sprintf("longitude %q is not a number in [-180, 180]", lonS)}
		}
		s := Site{ID: id, Loc: geo.Point{Lat: lat, Lon: lon}, Name: field(rec, cols["name"])}
		s.v = toVec(s.Loc)
		seen[s.ID] = line
		sites = append(sites, s)
	}
	if len(sites) == 0 {
		return nil, &LineError{name, 2, "no sites"}
	}
	return sites, nil
}

// maxRTTMs bounds a measured RTT: a minute is far beyond any real path,
// and larger values overflowed the prober's time.Duration into "no answer".
const maxRTTMs = 60_000

// LoadRTT reads an RTT CSV (header src,dst,rtt_ms) over sites. name labels
// errors.
func LoadRTT(r io.Reader, name string, sites []Site) (*Matrix, error) {
	mx := &Matrix{Sites: sites, byID: make(map[string]int, len(sites)), rtt: map[uint64]float64{}}
	for i, s := range sites {
		mx.byID[s.ID] = i
		mx.Sites[i].v = toVec(s.Loc)
		mx.Sites[i].key = siteKey(s.ID)
	}
	c := newCSV(r, name)
	cols, err := c.header([]string{"src", "dst", "rtt_ms"}, nil)
	if err != nil {
		return nil, err
	}
	need := max(cols["src"], cols["dst"], cols["rtt_ms"]) + 1
	seen := map[uint64]int{}
	for {
		rec, line, err := c.next()
		if err == io.EOF {
			break
		}
		if err != nil {
			return nil, err
		}
		if len(rec) < need {
			return nil, &LineError{name, line, fmt.Sprintf("want at least %d fields (src,dst,rtt_ms), got %d", need, len(rec))}
		}
		srcS, dstS, msS := field(rec, cols["src"]), field(rec, cols["dst"]), field(rec, cols["rtt_ms"])
		src, ok := mx.byID[srcS]
		if !ok {
			return nil, &LineError{name, line, fmt.Sprintf("unknown site %q (not in the sites file)", srcS)}
		}
		dst, ok := mx.byID[dstS]
		if !ok {
			return nil, &LineError{name, line, fmt.Sprintf("unknown site %q (not in the sites file)", dstS)}
		}
		ms, ok := parseFloat(msS)
		if !ok || ms < 0 {
			return nil, &LineError{name, line, fmt.Sprintf("rtt_ms %q is not a non-negative number", msS)}
		}
		if ms > maxRTTMs {
			return nil, &LineError{name, line, fmt.Sprintf("rtt_ms %q is over %g ms: no path on Earth is that slow (a unit in µs?)", msS, float64(maxRTTMs))}
		}
		k := uint64(src)<<32 | uint64(dst)
		if prev, dup := seen[k]; dup {
			return nil, &LineError{name, line, fmt.Sprintf("duplicate measurement %s→%s (first on line %d)", srcS, dstS, prev)}
		}
		seen[k] = line
		mx.rtt[k] = ms
	}
	return mx, nil
}

// LoadMatrixFiles reads a sites file and an RTT file.
func LoadMatrixFiles(sitesPath, rttPath string) (*Matrix, error) {
	f, err := os.Open(sitesPath)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	sites, err := LoadSites(f, sitesPath)
	if err != nil {
		return nil, err
	}
	g, err := os.Open(rttPath)
	if err != nil {
		return nil, err
	}
	defer g.Close()
	return LoadRTT(g, rttPath, sites)
}

// siteKey is a site's key for drawing stretches: FNV-1a of its ID, so a
// missing pair's stretch depends on the sites, not on the rows' order.
func siteKey(id string) uint64 {
	h := fnv.New64a()
	h.Write([]byte(id))
	return h.Sum64()
}
