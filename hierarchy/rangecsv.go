package hierarchy

import (
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// LoadRangeCSV reads a flat range CSV "start,end,asn,organisation" as
// published by the npm package @ip-location-db/asn (asn-ipv4.csv,
// asn-ipv6.csv): inclusive ranges written as IP addresses, organisation
// names quoted when they contain commas. A header line, if present, is
// ignored. Ranges get StatusAnnounced (the data comes from BGP tables and
// RIR ASN data, not from registrations). Overlaps and odd ranges are not
// errors here: the Builder nests or splits them and counts them.
func LoadRangeCSV(r io.Reader, opt LoadOptions) ([]Range, LoadReport, error) {
	rep := LoadReport{File: opt.name()}
	lc := &lineCounter{r: r}
	cr := csv.NewReader(lc)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	var out []Range
	first := true
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		line := 0
		if err != nil {
			var pe *csv.ParseError
			if errors.As(err, &pe) {
				line = pe.Line
			}
			if e := opt.bad(&rep, line, "%v", unwrapCSV(err)); e != nil {
				return nil, rep, e
			}
			continue
		}
		line, _ = cr.FieldPos(0)
		isFirst := first
		first = false
		if len(rec) != 4 {
			if e := opt.bad(&rep, line, "%d fields, want 4 (start,end,asn,organisation)", len(rec)); e != nil {
				return nil, rep, e
			}
			continue
		}
		rg, reason := rangeRecord(rec)
		if reason != "" {
			if isFirst && !strings.ContainsAny(rec[0], ".:") {
				rep.Ignored++ // header line
				continue
			}
			if e := opt.bad(&rep, line, "%s", reason); e != nil {
				return nil, rep, e
			}
			continue
		}
		out = append(out, rg)
		rep.Records++
	}
	rep.Lines = lc.total()
	return out, rep, nil
}

func rangeRecord(rec []string) (Range, string) {
	s, err := netip.ParseAddr(strings.TrimSpace(rec[0]))
	if err != nil || s.Zone() != "" {
		if isDigits(strings.TrimSpace(rec[0])) && rec[0] != "" {
			return Range{}, fmt.Sprintf("numeric address %q: use the address-form files (asn-ipv4.csv, asn-ipv6.csv), not the -num ones", rec[0])
		}
		return Range{}, fmt.Sprintf("bad start address %q", rec[0])
	}
	e, err := netip.ParseAddr(strings.TrimSpace(rec[1]))
	if err != nil || e.Zone() != "" {
		return Range{}, fmt.Sprintf("bad end address %q", rec[1])
	}
	s, e = s.Unmap(), e.Unmap()
	if s.Is4() != e.Is4() {
		return Range{}, fmt.Sprintf("range %v-%v mixes IPv4 and IPv6", s, e)
	}
	if e.Less(s) {
		return Range{}, fmt.Sprintf("range %v-%v ends before it starts", s, e)
	}
	var asn uint64
	if a := strings.TrimSpace(rec[2]); a != "" {
		a = strings.TrimPrefix(strings.ToUpper(a), "AS")
		asn, err = strconv.ParseUint(a, 10, 32)
		if err != nil {
			return Range{}, fmt.Sprintf("bad AS number %q", rec[2])
		}
	}
	return Range{Start: s, End: e, ASN: uint32(asn), Org: clipOrg(rec[3]), Status: StatusAnnounced}, ""
}
