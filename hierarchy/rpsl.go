package hierarchy

import (
	"fmt"
	"io"
	"net/netip"
	"strings"
)

// LoadRPSL reads RPSL objects as found in RIPE, APNIC and AFRINIC database
// dumps (ripe.db.inetnum, apnic.db.inet6num, …): objects separated by blank
// lines, "attribute: value" lines, continuation lines starting with white
// space or '+', comments starting with '#' or '%'. It turns inetnum
// ("a.b.c.d - e.f.g.h") and inet6num (prefix) objects into ranges; other
// object classes are ignored, except organisation objects, whose org-name
// names the organisation handles that inetnums reference with "org:".
//
// Organisation of a range: its org handle (resolved to the org-name when the
// organisation object is in the same input), else the first descr line, else
// the netname. Registry: the source attribute. Status: mapped from the
// registry's status vocabulary (ALLOCATED PA, ASSIGNED PI, SUB-ALLOCATED PA,
// LIR-PARTITIONED PA, ALLOCATED PORTABLE, LEGACY, …).
func LoadRPSL(r io.Reader, opt LoadOptions) ([]Range, LoadReport, error) {
	rep := LoadReport{File: opt.name()}
	sc := newLineReader(r, maxLine)
	type pending struct {
		rg     Range
		orgRef string
		line   int
	}
	var objs []pending
	orgNames := map[string]string{}
	var attrs [][2]string
	objLine, line := 0, 0
	flush := func() error {
		defer func() { attrs = attrs[:0] }()
		if len(attrs) == 0 {
			return nil
		}
		class := attrs[0][0]
		switch class {
		case "organisation":
			for _, a := range attrs[1:] {
				if a[0] == "org-name" {
					orgNames[strings.ToUpper(attrs[0][1])] = a[1]
				}
			}
			rep.Ignored++
			return nil
		case "inetnum", "inet6num":
		default:
			rep.Ignored++
			return nil
		}
		rg, orgRef, reason := rpslObject(attrs)
		if reason != "" {
			return opt.bad(&rep, objLine, "%s %q: %s", class, attrs[0][1], reason)
		}
		objs = append(objs, pending{rg, orgRef, objLine})
		return nil
	}
	for sc.Scan() {
		line++
		if sc.TooLong() {
			// the attribute is lost, not the object or the rest of the file
			if err := opt.bad(&rep, line, "line longer than %d bytes", maxLine); err != nil {
				return nil, rep, err
			}
			continue
		}
		text := strings.TrimRight(sc.Text(), "\r")
		switch {
		case strings.TrimSpace(text) == "":
			if err := flush(); err != nil {
				return nil, rep, err
			}
			continue
		case text[0] == '#' || text[0] == '%':
			continue
		case text[0] == ' ' || text[0] == '\t' || text[0] == '+':
			if len(attrs) == 0 {
				if err := opt.bad(&rep, line, "continuation line outside an object"); err != nil {
					return nil, rep, err
				}
				continue
			}
			v := strings.TrimSpace(strings.TrimPrefix(text, "+"))
			last := &attrs[len(attrs)-1]
			if v != "" {
				if last[1] != "" {
					last[1] += " "
				}
				last[1] += v
			}
			continue
		}
		k, v, ok := strings.Cut(text, ":")
		k = strings.ToLower(strings.TrimSpace(k))
		if !ok || k == "" || strings.ContainsAny(k, " \t") {
			if err := opt.bad(&rep, line, "not an attribute line (want \"name: value\")"); err != nil {
				return nil, rep, err
			}
			continue
		}
		if len(attrs) == 0 {
			objLine = line
		}
		if i := strings.Index(v, "#"); i >= 0 && k != "descr" && k != "org-name" && k != "remarks" {
			v = v[:i] // end-of-line comments (RIPE "source: RIPE # Filtered")
		}
		attrs = append(attrs, [2]string{k, strings.TrimSpace(v)})
	}
	if err := sc.Err(); err != nil {
		if e := opt.bad(&rep, line+1, "%v", err); e != nil {
			return nil, rep, e
		}
	}
	if err := flush(); err != nil {
		return nil, rep, err
	}
	rep.Lines = line
	out := make([]Range, 0, len(objs))
	for _, p := range objs {
		if p.orgRef != "" {
			if name, ok := orgNames[strings.ToUpper(p.orgRef)]; ok {
				p.rg.Org = clipOrg(name)
			}
		}
		out = append(out, p.rg)
	}
	rep.Records = len(out)
	return out, rep, nil
}

func rpslObject(attrs [][2]string) (Range, string, string) {
	var rg Range
	class, key := attrs[0][0], attrs[0][1]
	if class == "inetnum" {
		a, b, ok := strings.Cut(key, "-")
		if !ok {
			p, err := netip.ParsePrefix(strings.TrimSpace(key)) // some dumps use CIDR
			if err != nil || !p.Addr().Is4() {
				return rg, "", "range not of the form \"a.b.c.d - e.f.g.h\""
			}
			a, b = p.Masked().Addr().String(), lastAddr(p.Masked()).String()
		}
		s, err1 := netip.ParseAddr(strings.TrimSpace(a))
		e, err2 := netip.ParseAddr(strings.TrimSpace(b))
		if err1 != nil || err2 != nil || !s.Is4() || !e.Is4() {
			return rg, "", "bad IPv4 range"
		}
		if e.Less(s) {
			return rg, "", "range ends before it starts"
		}
		rg.Start, rg.End = s, e
	} else {
		p, err := netip.ParsePrefix(strings.TrimSpace(key))
		if err != nil || !p.Addr().Is6() || p.Addr().Is4In6() || p.Addr().Zone() != "" {
			return rg, "", "bad IPv6 prefix"
		}
		if p.Masked() != p {
			return rg, "", fmt.Sprintf("%v has host bits set", p)
		}
		rg.Start, rg.End = p.Addr(), lastAddr(p)
		if rg.End.Is4In6() {
			return rg, "", fmt.Sprintf("%v ends in the IPv4-mapped space ::ffff:0:0/96", p)
		}
	}
	var netname, descr, orgRef string
	for _, a := range attrs[1:] {
		switch a[0] {
		case "netname":
			netname = a[1]
		case "descr":
			if descr == "" {
				descr = a[1]
			}
		case "org":
			orgRef = a[1]
		case "country":
			if rg.Country == "" {
				rg.Country = NormalizeCountry(a[1])
			}
		case "status":
			rg.Status = rpslStatus(a[1])
		case "source":
			src := strings.ToUpper(strings.Fields(a[1] + " x")[0])
			if reg, ok := ParseRegistry(src); ok {
				rg.Registry = reg
			} else if reg, ok := nirRegistry[src]; ok {
				rg.Registry = reg
			}
		}
	}
	switch {
	case orgRef != "":
		rg.Org = orgRef
	case descr != "":
		rg.Org = descr
	default:
		rg.Org = netname
	}
	rg.Org = clipOrg(rg.Org)
	return rg, orgRef, ""
}

// nirRegistry maps National Internet Registries that publish their own
// RPSL sources to the RIR above them.
var nirRegistry = map[string]Registry{
	"JPNIC": RegistryAPNIC, "KRNIC": RegistryAPNIC, "TWNIC": RegistryAPNIC, "CNNIC": RegistryAPNIC,
	"IDNIC": RegistryAPNIC, "IRINN": RegistryAPNIC, "VNNIC": RegistryAPNIC,
	"NICBR": RegistryLACNIC, "NICMX": RegistryLACNIC,
}

func rpslStatus(s string) Status {
	u := strings.ToUpper(strings.TrimSpace(s))
	switch {
	case strings.Contains(u, "SUB-ALLOCATED"), strings.Contains(u, "LIR-PARTITIONED"),
		strings.Contains(u, "AGGREGATED-BY-LIR"), strings.Contains(u, "ALLOCATED-BY-LIR"):
		return StatusSubAllocated
	case strings.HasPrefix(u, "ALLOCATED"):
		return StatusAllocated
	case strings.HasPrefix(u, "ASSIGNED"):
		return StatusAssigned
	case u == "LEGACY", u == "EARLY-REGISTRATION":
		return StatusLegacy
	case strings.HasPrefix(u, "RESERVED"):
		return StatusReserved
	case strings.HasPrefix(u, "AVAILABLE"), u == "UNALLOCATED":
		return StatusAvailable
	}
	return StatusUnknown
}

// lastAddr returns the last address of a masked prefix.
func lastAddr(p netip.Prefix) netip.Addr {
	f, s, _ := fromAddr(p.Addr())
	total := uint(128)
	if f == fam4 {
		total = 32
	}
	host := uint(total) - uint(p.Bits())
	var m u128
	if host > 0 {
		m = max6.shr(128 - host)
	}
	e, _ := s.add(m)
	return toAddr(f, e)
}
