package hierarchy

import (
	"errors"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"strings"
)

// LoadCountryCSV reads a country-range CSV "start,end,cc" as published by
// the npm package @ip-location-db/geo-whois-asn-country
// (geo-whois-asn-country-ipv4.csv, -ipv6.csv): inclusive ranges written as IP
// addresses and an ISO 3166-1 alpha-2 code taken from the five RIRs' WHOIS
// databases and operators' RFC 8805 geofeeds. The ranges carry only Start,
// End and Country; they are not nodes but annotations, given to
// Builder.AddCountry. A header line, if present, is ignored, and so are rows
// whose code is the "unknown" placeholder ZZ. Overlapping rows are a known
// data bug of the package (a geofeed range inside a WHOIS one): Build resolves
// them, the loader keeps them.
func LoadCountryCSV(r io.Reader, opt LoadOptions) ([]Range, LoadReport, error) {
	return loadRangeRows(r, opt, 3, "start,end,country", func(rec []string) (Range, string, bool) {
		rg, reason := countryRecord(rec)
		return rg, reason, reason == "" && rg.Country == "" // ZZ: the source does not know
	})
}

func countryRecord(rec []string) (Range, string) {
	s, e, reason := addrPair(rec[0], rec[1], "geo-whois-asn-country-ipv4.csv, -ipv6.csv")
	if reason != "" {
		return Range{}, reason
	}
	c := strings.TrimSpace(rec[2])
	if len(c) != 2 || !validCountry(strings.ToUpper(c)) {
		return Range{}, fmt.Sprintf("bad country code %q (want ISO 3166-1 alpha-2)", rec[2])
	}
	return Range{Start: s, End: e, Country: NormalizeCountry(c)}, ""
}

// addrPair parses the inclusive range of a CSV row (start, end as text
// addresses of one family); files names the address-form files to suggest
// when the numeric form is given.
func addrPair(start, end, files string) (netip.Addr, netip.Addr, string) {
	st := strings.TrimSpace(start)
	s, err := netip.ParseAddr(st)
	if err != nil || s.Zone() != "" {
		if st != "" && isDigits(st) {
			return s, s, fmt.Sprintf("numeric address %q: use the address-form files (%s), not the -num ones", start, files)
		}
		return s, s, fmt.Sprintf("bad start address %q", start)
	}
	e, err := netip.ParseAddr(strings.TrimSpace(end))
	if err != nil || e.Zone() != "" {
		return s, s, fmt.Sprintf("bad end address %q", end)
	}
	s, e = s.Unmap(), e.Unmap()
	if s.Is4() != e.Is4() {
		return s, e, fmt.Sprintf("range %v-%v mixes IPv4 and IPv6", s, e)
	}
	if e.Less(s) {
		return s, e, fmt.Sprintf("range %v-%v ends before it starts", s, e)
	}
	return s, e, ""
}

// crange is a country annotation inside the Builder.
type crange struct {
	fam  uint8
	s, e u128
	cc   [2]byte
	seq  uint32
}

// AddCountry adds a country annotation: r's Start, End and Country (required)
// are used, everything else is ignored. Build gives every node that has no
// country of its own the country covering more than half of its addresses
// (see fillCountries).
func (b *Builder) AddCountry(r Range) error {
	fs, s, ok1 := fromAddr(r.Start)
	fe, e, ok2 := fromAddr(r.End)
	if !ok1 || !ok2 || r.Start.Zone() != "" || r.End.Zone() != "" {
		return errors.New("hierarchy: country range with invalid address")
	}
	if fs != fe {
		return fmt.Errorf("hierarchy: country range %v-%v mixes IPv4 and IPv6", r.Start, r.End)
	}
	if e.less(s) {
		return fmt.Errorf("hierarchy: country range %v-%v ends before it starts", r.Start, r.End)
	}
	if !validCountry(r.Country) {
		return fmt.Errorf("hierarchy: country %q is not an upper-case ISO-2 code", r.Country)
	}
	if len(b.countries) >= 1<<31 {
		return errors.New("hierarchy: too many country ranges")
	}
	b.countries = append(b.countries, crange{fam: fs, s: s, e: e, cc: [2]byte{r.Country[0], r.Country[1]}, seq: uint32(len(b.countries))})
	return nil
}

// flattenCountries turns possibly overlapping country ranges into disjoint,
// sorted segments. Where ranges overlap, the one that starts later wins the
// addresses they share (for nested ranges: the innermost, the more specific
// statement — a geofeed entry inside a WHOIS block); identical ranges: the
// one added last.
func flattenCountries(in []crange) []crange {
	rs := slices.Clone(in)
	slices.SortFunc(rs, func(a, b crange) int {
		if a.fam != b.fam {
			return int(a.fam) - int(b.fam)
		}
		if c := a.s.cmp(b.s); c != 0 {
			return c
		}
		if c := a.e.cmp(b.e); c != 0 {
			return -c
		}
		return int(a.seq) - int(b.seq)
	})
	var out []crange
	emit := func(fam uint8, s, e u128, cc [2]byte) {
		if n := len(out); n > 0 && out[n-1].fam == fam && out[n-1].cc == cc && out[n-1].e.add1() == s && !out[n-1].e.isMax(fam) {
			out[n-1].e = e
			return
		}
		out = append(out, crange{fam: fam, s: s, e: e, cc: cc})
	}
	var stack []crange
	var cur u128  // next address not yet emitted
	done := false // every address of the family up to its maximum is emitted
	var fam uint8 // family of the open stack
	// drain emits the stack's coverage from cur up to limit (inclusive);
	// all=true drains everything that remains open.
	drain := func(limit u128, all bool) {
		for len(stack) > 0 && !done {
			top := stack[len(stack)-1]
			if top.e.less(cur) {
				stack = stack[:len(stack)-1]
				continue
			}
			if !all && limit.less(cur) {
				return
			}
			end := top.e
			if !all && limit.less(end) {
				end = limit
			}
			emit(fam, cur, end, top.cc)
			if end.isMax(fam) {
				done = true
				break
			}
			cur = end.add1()
		}
		if all {
			stack = stack[:0]
		}
	}
	for _, r := range rs {
		if r.fam != fam {
			drain(u128{}, true)
			fam, done = r.fam, false
			cur = r.s
		}
		if done {
			continue // the family's top address was reached by a range ending there
		}
		if cur.less(r.s) {
			if !r.s.isZero() {
				drain(r.s.sub1(), false)
			}
			if cur.less(r.s) {
				cur = r.s
			}
		}
		if r.e.less(cur) {
			continue // entirely covered by later-starting ranges already emitted
		}
		stack = append(stack, r)
	}
	drain(u128{}, true)
	return out
}

func (a u128) isMax(fam uint8) bool { return a == famMax(fam) }

// fillCountries gives every node of out (preorder, out[0] = Root) without a
// country the country that covers more than half of its addresses according
// to segs (disjoint, sorted). It returns how many nodes it filled.
func fillCountries(out []brange, segs []crange) int {
	filled := 0
	var acc [26 * 26]u128
	var touched []int
	for k := 1; k < len(out); k++ {
		n := &out[k]
		if n.cc != ([2]byte{}) {
			continue
		}
		// first segment of n's family whose end reaches n's start
		i, _ := slices.BinarySearchFunc(segs, n, func(c crange, n *brange) int {
			if c.fam != n.fam {
				return int(c.fam) - int(n.fam)
			}
			if c.e.less(n.s) {
				return -1
			}
			return 1
		})
		touched = touched[:0]
		for ; i < len(segs) && segs[i].fam == n.fam && !n.e.less(segs[i].s); i++ {
			c := &segs[i]
			s, e := c.s, c.e
			if s.less(n.s) {
				s = n.s
			}
			if n.e.less(e) {
				e = n.e
			}
			x := int(c.cc[0]-'A')*26 + int(c.cc[1]-'A')
			if acc[x].isZero() {
				touched = append(touched, x)
			}
			sum, over := acc[x].add(e.sub(s).add1())
			if over || sum.isZero() { // only the whole IPv6 space overflows
				sum = max6
			}
			acc[x] = sum
		}
		span := n.e.sub(n.s)
		half := span.shr(1) // floor(size/2), size = span+1
		if span.lo&1 == 1 {
			half = half.add1()
		}
		for _, x := range touched {
			if half.less(acc[x]) {
				n.cc = [2]byte{byte('A' + x/26), byte('A' + x%26)}
				filled++
			}
			acc[x] = u128{}
		}
	}
	return filled
}
