package hierarchy

import (
	"fmt"
	"io"
	"net/netip"
	"strconv"
	"strings"
)

// maxLine bounds a single input line of the line-oriented loaders.
const maxLine = 1 << 20

// LoadRIRStats reads an RIR statistics exchange file (delegated-<rir>-…),
// plain or extended (https://www.nro.net/wp-content/uploads/nro-extended-stats-readme5.txt):
//
//	version|registry|serial|records|startdate|enddate|UTCoffset   (header)
//	registry|*|type|*|count|summary                              (summaries)
//	registry|cc|type|start|value|date|status[|opaque-id[|…]]     (records)
//
// IPv4 records give an address count that need not be a power of two; IPv6
// records give a prefix length. ASN records are counted as ignored. In the
// extended form the opaque-id groups all resources of one holder: it becomes
// the organisation "<registry>:<opaque-id>". Summary counts are checked
// against the records actually present.
func LoadRIRStats(r io.Reader, opt LoadOptions) ([]Range, LoadReport, error) {
	rep := LoadReport{File: opt.name()}
	sc := newLineReader(r, maxLine)
	var out []Range
	sawHeader := false
	headerLine, headerCount, records := 0, -1, 0
	type summary struct {
		typ         string
		line, count int
	}
	var summaries []summary // in file order, so errors are reported deterministically
	seen := map[string]int{}
	line := 0
	fail := func(format string, a ...any) error { return opt.bad(&rep, line, format, a...) }
	for sc.Scan() {
		line++
		if sc.TooLong() {
			if err := fail("line longer than %d bytes", maxLine); err != nil {
				return nil, rep, err
			}
			records++ // (a record line, most likely: the header's count stays checked)
			continue
		}
		text := strings.TrimRight(sc.Text(), "\r")
		if t := strings.TrimSpace(text); t == "" || t[0] == '#' {
			rep.Ignored++
			continue
		}
		f := strings.Split(text, "|")
		if !sawHeader {
			sawHeader = true
			if isVersion(f[0]) {
				if len(f) < 7 {
					if err := fail("header has %d fields, want 7", len(f)); err != nil {
						return nil, rep, err
					}
				} else if n, err := strconv.Atoi(strings.TrimSpace(f[3])); err == nil && n >= 0 {
					headerLine, headerCount = line, n
				}
				rep.Ignored++
				continue
			}
			if err := fail("missing version header line"); err != nil {
				return nil, rep, err
			}
		}
		if len(f) >= 6 && f[1] == "*" && f[3] == "*" && strings.TrimSpace(f[5]) == "summary" {
			n, err := strconv.Atoi(strings.TrimSpace(f[4]))
			if err != nil || n < 0 {
				if err := fail("summary count %q is not a number", f[4]); err != nil {
					return nil, rep, err
				}
				continue
			}
			summaries = append(summaries, summary{f[2], line, n})
			rep.Ignored++
			continue
		}
		if len(f) < 7 {
			if err := fail("%d fields, want at least 7 (registry|cc|type|start|value|date|status)", len(f)); err != nil {
				return nil, rep, err
			}
			continue
		}
		typ := f[2]
		seen[typ]++
		records++
		if typ == "asn" {
			rep.Ignored++
			continue
		}
		rg, reason := rirRecord(f)
		if reason != "" {
			if err := fail("%s", reason); err != nil {
				return nil, rep, err
			}
			continue
		}
		out = append(out, rg)
		rep.Records++
	}
	if err := sc.Err(); err != nil {
		line++
		if e := fail("%v", err); e != nil {
			return nil, rep, e
		}
	}
	rep.Lines = line
	if headerCount >= 0 && headerCount != records {
		line = headerLine
		if err := fail("header announces %d records, file has %d", headerCount, records); err != nil {
			return nil, rep, err
		}
	}
	for _, s := range summaries {
		if seen[s.typ] != s.count {
			line = s.line
			if err := fail("summary announces %d %s records, file has %d", s.count, s.typ, seen[s.typ]); err != nil {
				return nil, rep, err
			}
		}
	}
	return out, rep, nil
}

func isVersion(s string) bool {
	if s == "" {
		return false
	}
	for _, c := range s {
		if (c < '0' || c > '9') && c != '.' {
			return false
		}
	}
	return true
}

func rirRecord(f []string) (Range, string) {
	reg, ok := ParseRegistry(f[0])
	if !ok {
		return Range{}, fmt.Sprintf("unknown registry %q", f[0])
	}
	var st Status
	switch strings.ToLower(strings.TrimSpace(f[6])) {
	case "allocated":
		st = StatusAllocated
	case "assigned":
		st = StatusAssigned
	case "available", "ianapool":
		st = StatusAvailable
	case "reserved":
		st = StatusReserved
	default:
		return Range{}, fmt.Sprintf("unknown status %q", f[6])
	}
	cc := strings.TrimSpace(f[1])
	if cc != "" && NormalizeCountry(cc) == "" && cc != "ZZ" {
		return Range{}, fmt.Sprintf("bad country code %q", cc)
	}
	if d := strings.TrimSpace(f[5]); d != "" && (len(d) != 8 || !isDigits(d)) {
		return Range{}, fmt.Sprintf("bad date %q", d)
	}
	start, err := netip.ParseAddr(strings.TrimSpace(f[3]))
	if err != nil || start.Zone() != "" {
		return Range{}, fmt.Sprintf("bad start address %q", f[3])
	}
	val, err := strconv.ParseUint(strings.TrimSpace(f[4]), 10, 64)
	if err != nil {
		return Range{}, fmt.Sprintf("bad value %q", f[4])
	}
	var end netip.Addr
	switch f[2] {
	case "ipv4":
		if !start.Is4() {
			return Range{}, fmt.Sprintf("ipv4 record with address %v", start)
		}
		_, s, _ := fromAddr(start)
		if val == 0 || val > 1<<32-s.lo { // (s.lo+val-1 could wrap)
			return Range{}, fmt.Sprintf("count %d out of range for start %v", val, start)
		}
		end = toAddr(fam4, u128{0, s.lo + val - 1})
	case "ipv6":
		if !start.Is6() || start.Is4In6() {
			return Range{}, fmt.Sprintf("ipv6 record with address %v", start)
		}
		if val > 128 {
			return Range{}, fmt.Sprintf("prefix length %d out of range", val)
		}
		p := netip.PrefixFrom(start, int(val))
		if p.Masked().Addr() != start {
			return Range{}, fmt.Sprintf("%v is not the first address of a /%d", start, val)
		}
		_, s, _ := fromAddr(start)
		host := u128{^uint64(0), ^uint64(0)}.shr(uint(val))
		if val == 0 {
			host = max6
		}
		e, _ := s.add(host)
		end = toAddr(fam6, e)
		if end.Is4In6() {
			return Range{}, fmt.Sprintf("%v/%d ends in the IPv4-mapped space ::ffff:0:0/96", start, val)
		}
	default:
		return Range{}, fmt.Sprintf("unknown resource type %q", f[2])
	}
	org := ""
	if len(f) >= 8 {
		if id := strings.TrimSpace(f[7]); id != "" {
			org = clipOrg(reg.String() + ":" + id)
		}
	}
	return Range{Start: start, End: end, Org: org, Registry: reg, Status: st, Country: NormalizeCountry(cc)}, ""
}

func isDigits(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] < '0' || s[i] > '9' {
			return false
		}
	}
	return true
}
