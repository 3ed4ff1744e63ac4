package hierarchy

import (
	"fmt"
	"io"
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
	return loadRangeRows(r, opt, 4, "start,end,asn,organisation", func(rec []string) (Range, string, bool) {
		rg, reason := rangeRecord(rec)
		return rg, reason, false
	})
}

func rangeRecord(rec []string) (Range, string) {
	s, e, reason := addrPair(rec[0], rec[1], "asn-ipv4.csv, asn-ipv6.csv")
	if reason != "" {
		return Range{}, reason
	}
	var asn uint64
	if a := strings.TrimSpace(rec[2]); a != "" {
		a = strings.TrimPrefix(strings.ToUpper(a), "AS")
		var err error
		asn, err = strconv.ParseUint(a, 10, 32)
		if err != nil {
			return Range{}, fmt.Sprintf("bad AS number %q", rec[2])
		}
	}
	return Range{Start: s, End: e, ASN: uint32(asn), Org: clipOrg(rec[3]), Status: StatusAnnounced}, ""
}
