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

// LoadIANA reads the IANA IPv4 address-space registry CSV
// (https://www.iana.org/assignments/ipv4-address-space/ipv4-address-space.csv):
// header "Prefix,Designation,Date,WHOIS,RDAP,Status [1],Note", one record per
// /8 written "NNN/8", quoted fields that may span lines. The IANA IPv6 unicast
// address-assignments CSV has the same columns with CIDR prefixes and is
// read the same way. Each /8 becomes a
// range; the registry comes from the WHOIS server or the designation, the
// organisation is the designation ("Administered by ARIN" legacy blocks have
// no single holder and get none).
func LoadIANA(r io.Reader, opt LoadOptions) ([]Range, LoadReport, error) {
	rep := LoadReport{File: opt.name()}
	var out []Range
	header := true
	var col struct{ prefix, desig, whois, status int }
	err := eachCSVRecord(r, &opt, &rep, func(rec []string, line int) error {
		if header {
			header = false
			col.prefix, col.desig, col.whois, col.status = -1, -1, -1, -1
			for i, h := range rec {
				h = strings.ToLower(strings.TrimSpace(strings.TrimPrefix(h, "\ufeff")))
				switch {
				case h == "prefix":
					col.prefix = i
				case h == "designation":
					col.desig = i
				case h == "whois":
					col.whois = i
				case strings.HasPrefix(h, "status"):
					col.status = i
				}
			}
			if col.prefix < 0 || col.desig < 0 || col.status < 0 {
				return &LineError{File: opt.name(), Line: line, Reason: "header lacks Prefix, Designation or Status column"}
			}
			rep.Ignored++
			return nil
		}
		if len(rec) <= max(col.prefix, col.desig, col.status) {
			return opt.bad(&rep, line, "%d fields, want at least %d", len(rec), max(col.prefix, col.desig, col.status)+1)
		}
		r, reason := ianaRecord(rec, col.prefix, col.desig, col.whois, col.status)
		if reason != "" {
			return opt.bad(&rep, line, "%s", reason)
		}
		out = append(out, r)
		rep.Records++
		return nil
	})
	if err != nil {
		return nil, rep, err
	}
	return out, rep, nil
}

// eachCSVRecord reads r as CSV (quoted fields may span lines, rows may have
// any number of fields) and calls fn with every record and the line it
// starts on. Malformed CSV is reported through opt.bad (fatal unless
// lenient); an error from fn stops the read. rep.Lines counts the lines read.
func eachCSVRecord(r io.Reader, opt *LoadOptions, rep *LoadReport, fn func(rec []string, line int) error) error {
	lc := &lineCounter{r: r}
	cr := csv.NewReader(lc)
	cr.FieldsPerRecord = -1
	cr.ReuseRecord = true
	for {
		rec, err := cr.Read()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			var pe *csv.ParseError
			if !errors.As(err, &pe) {
				// a read error (a truncated gzip stream): it comes back on
				// every read, so it ends the file even when lenient
				return fmt.Errorf("%s:%d: read: %w", opt.name(), lc.total()+1, err)
			}
			// the line the bad record starts on, not where csv gave up
			if e := opt.bad(rep, pe.StartLine, "%v", unwrapCSV(err)); e != nil {
				return e
			}
			continue
		}
		line, _ := cr.FieldPos(0)
		if err := fn(rec, line); err != nil {
			return err
		}
	}
	rep.Lines = lc.total()
	return nil
}

// loadRangeRows reads a flat CSV of address ranges with want fields per row
// (columns names them for errors). parse turns a row into a range, or gives
// the reason it is bad, or skip for a row the source marks as unknown. A
// first row that is not an address is a header and is ignored.
func loadRangeRows(r io.Reader, opt LoadOptions, want int, columns string, parse func(rec []string) (rg Range, reason string, skip bool)) ([]Range, LoadReport, error) {
	rep := LoadReport{File: opt.name()}
	var out []Range
	first := true
	err := eachCSVLine(r, &opt, &rep, func(rec []string, line int) error {
		isFirst := first
		first = false
		if len(rec) != want {
			return opt.bad(&rep, line, "%d fields, want %d (%s)", len(rec), want, columns)
		}
		rg, reason, skip := parse(rec)
		switch {
		case skip:
			rep.Ignored++
		case reason != "" && isFirst && !strings.ContainsAny(rec[0], ".:"):
			rep.Ignored++ // header line
		case reason != "":
			return opt.bad(&rep, line, "%s", reason)
		default:
			out = append(out, rg)
			rep.Records++
		}
		return nil
	})
	if err != nil {
		return nil, rep, err
	}
	return out, rep, nil
}

func unwrapCSV(err error) error {
	var pe *csv.ParseError
	if errors.As(err, &pe) {
		return pe.Err
	}
	return err
}

func ianaRecord(rec []string, cp, cd, cw, cs int) (Range, string) {
	start, end, reason := ianaPrefix(strings.TrimSpace(rec[cp]))
	if reason != "" {
		return Range{}, reason
	}
	desig := strings.TrimSpace(rec[cd])
	reg, _ := ParseRegistry(desig)
	if cw >= 0 && cw < len(rec) && reg == RegistryUnknown {
		w := strings.ToLower(strings.TrimSpace(rec[cw]))
		w = strings.TrimSuffix(strings.TrimPrefix(w, "whois."), ".net")
		reg, _ = ParseRegistry(w)
	}
	var st Status
	switch strings.ToUpper(strings.TrimSpace(rec[cs])) {
	case "ALLOCATED":
		st = StatusAllocated
	case "LEGACY":
		st = StatusLegacy
	case "RESERVED":
		st = StatusReserved
	case "UNALLOCATED", "UNASSIGNED":
		st = StatusAvailable
	default:
		return Range{}, "unknown status " + strconv.Quote(rec[cs])
	}
	if reg == RegistryUnknown && (strings.HasPrefix(desig, "IANA") || st == StatusReserved) {
		reg = RegistryIANA // reserved space (multicast, future use, …) stays with IANA
	}
	org := desig
	if strings.HasPrefix(strings.ToLower(desig), "administered by ") {
		org = ""
	}
	return Range{Start: start, End: end, Org: clipOrg(org), Registry: reg, Status: st}, ""
}

// ianaPrefix parses the Prefix column: "NNN/8" (IPv4 registry, first octet
// with leading zeros) or a CIDR prefix (IPv6 registry, "2001:0200::/23").
func ianaPrefix(p string) (netip.Addr, netip.Addr, string) {
	if num, bitsStr, ok := strings.Cut(p, "/"); ok && bitsStr == "8" && isDigits(num) && num != "" {
		n, err := strconv.ParseUint(num, 10, 8)
		if err != nil {
			return netip.Addr{}, netip.Addr{}, "prefix " + strconv.Quote(p) + ": first octet not 0-255"
		}
		return netip.AddrFrom4([4]byte{byte(n), 0, 0, 0}), netip.AddrFrom4([4]byte{byte(n), 255, 255, 255}), ""
	}
	pf, err := netip.ParsePrefix(p)
	if err != nil || pf.Addr().Zone() != "" {
		return netip.Addr{}, netip.Addr{}, "prefix " + strconv.Quote(p) + " is neither NNN/8 nor a CIDR prefix"
	}
	if pf.Masked() != pf {
		return netip.Addr{}, netip.Addr{}, "prefix " + strconv.Quote(p) + " has host bits set"
	}
	if end := lastAddr(pf); pf.Addr().Is6() && (pf.Addr().Is4In6() || end.Is4In6()) {
		return netip.Addr{}, netip.Addr{}, "prefix " + strconv.Quote(p) + " lies in the IPv4-mapped space ::ffff:0:0/96"
	}
	return pf.Addr(), lastAddr(pf), ""
}

// eachCSVLine is eachCSVRecord for files of one record per line (range and
// country CSVs): each line is parsed on its own, so a bad line — an
// unterminated quote, a line over 1 MiB — is reported at its line and
// costs only itself, and a UTF-8 byte-order mark does not spoil the first
// row.
func eachCSVLine(r io.Reader, opt *LoadOptions, rep *LoadReport, fn func(rec []string, line int) error) error {
	sc := newLineReader(r, maxLine)
	line := 0
	for sc.Scan() {
		line++
		if sc.TooLong() {
			if e := opt.bad(rep, line, "line longer than %d bytes", maxLine); e != nil {
				return e
			}
			continue
		}
		text := sc.Text()
		if line == 1 {
			text = strings.TrimPrefix(text, "\ufeff")
		}
		if strings.TrimSpace(text) == "" {
			continue
		}
		cr := csv.NewReader(strings.NewReader(text))
		cr.FieldsPerRecord = -1
		rec, err := cr.Read()
		if err != nil {
			if e := opt.bad(rep, line, "%v", unwrapCSV(err)); e != nil {
				return e
			}
			continue
		}
		if err := fn(rec, line); err != nil {
			return err
		}
	}
	rep.Lines = line
	if err := sc.Err(); err != nil {
		return fmt.Errorf("%s:%d: read: %w", opt.name(), line+1, err)
	}
	return nil
}
