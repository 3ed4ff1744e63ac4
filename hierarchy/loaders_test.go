package hierarchy

import (
	"context"
	"errors"
	"io"
	"net/netip"
	"os"
	"strings"
	"testing"
)

const dataDir = "../data/hierarchy/"

func mustLoad(t *testing.T, path string, load func(r io.Reader, o LoadOptions) ([]Range, LoadReport, error)) ([]Range, LoadReport) {
	t.Helper()
	rs, rep, err := LoadFile(path, load, false)
	if err != nil {
		t.Fatal(err)
	}
	return rs, rep
}

func pfx(s string) (netip.Addr, netip.Addr) {
	p := netip.MustParsePrefix(s)
	return p.Addr(), lastAddr(p)
}

func findRange(rs []Range, start, end netip.Addr) *Range {
	for i := range rs {
		if rs[i].Start == start && rs[i].End == end {
			return &rs[i]
		}
	}
	return nil
}

func TestLoadIANARealFiles(t *testing.T) {
	rs, rep := mustLoad(t, dataDir+"iana-ipv4-address-space.csv", LoadIANA)
	if len(rs) != 256 || rep.Records != 256 || rep.Skipped != 0 {
		t.Fatalf("IPv4 registry: %d ranges, report %+v", len(rs), rep)
	}
	// 256 records + header over 374 physical lines: quoted RDAP fields span lines.
	if rep.Lines != 374 {
		t.Errorf("lines = %d, want 374", rep.Lines)
	}
	for i, r := range rs {
		if r.Start != netip.AddrFrom4([4]byte{byte(i)}) || r.End != netip.AddrFrom4([4]byte{byte(i), 255, 255, 255}) {
			t.Fatalf("record %d: %v-%v", i, r.Start, r.End)
		}
	}
	check := func(i int, org string, reg Registry, st Status) {
		t.Helper()
		if rs[i].Org != org || rs[i].Registry != reg || rs[i].Status != st {
			t.Errorf("%d/8: got %q %v %v, want %q %v %v", i, rs[i].Org, rs[i].Registry, rs[i].Status, org, reg, st)
		}
	}
	check(1, "APNIC", RegistryAPNIC, StatusAllocated)
	check(2, "RIPE NCC", RegistryRIPENCC, StatusAllocated)
	check(3, "", RegistryARIN, StatusLegacy) // "Administered by ARIN"
	check(6, "Army Information Systems Center", RegistryARIN, StatusLegacy)
	check(10, "IANA - Private Use", RegistryIANA, StatusReserved)
	check(41, "AFRINIC", RegistryAFRINIC, StatusAllocated)
	check(200, "LACNIC", RegistryLACNIC, StatusAllocated)
	check(224, "Multicast", RegistryIANA, StatusReserved)

	rs6, rep6 := mustLoad(t, dataDir+"iana-ipv6-unicast-address-assignments.csv", LoadIANA)
	if rep6.Skipped != 0 || len(rs6) < 40 {
		t.Fatalf("IPv6 registry: %d ranges, %+v", len(rs6), rep6)
	}
	s, e := pfx("2c00::/12")
	if r := findRange(rs6, s, e); r == nil || r.Registry != RegistryAFRINIC || r.Org != "AFRINIC" {
		t.Errorf("2c00::/12: %+v", r)
	}
	s, e = pfx("2002::/16")
	if r := findRange(rs6, s, e); r == nil || r.Org != "6to4" {
		t.Errorf("2002::/16: %+v", r)
	}
}

func TestLoadIANAErrors(t *testing.T) {
	in := "Prefix,Designation,Date,WHOIS,RDAP,Status [1],Note\n" +
		"001/8,APNIC,2010-01,whois.apnic.net,\"https://a\nhttps://b\",ALLOCATED,\n" +
		"999/8,APNIC,2010-01,,,ALLOCATED,\n" +
		"002/8,RIPE NCC,2009-09,,,WEIRD,\n" +
		"005/8,RIPE NCC,2010-11,,,ALLOCATED,\n"
	_, _, err := LoadIANA(strings.NewReader(in), LoadOptions{Name: "iana.csv"})
	var le *LineError
	if !errors.As(err, &le) || err.Error() != `iana.csv:4: prefix "999/8": first octet not 0-255` {
		t.Fatalf("strict: %v", err)
	}
	rs, rep, err := LoadIANA(strings.NewReader(in), LoadOptions{Name: "iana.csv", Lenient: true})
	if err != nil || len(rs) != 2 || rep.Skipped != 2 || len(rep.Errors) != 2 || rep.Errors[1].Line != 5 {
		t.Fatalf("lenient: %v %d %+v", err, len(rs), rep)
	}
	if !strings.Contains(rep.Errors[1].Error(), "iana.csv:5: unknown status") {
		t.Fatalf("lenient error: %v", rep.Errors[1])
	}
	if _, _, err := LoadIANA(strings.NewReader("a,b\n1,2\n"), LoadOptions{Name: "x"}); err == nil {
		t.Fatal("missing columns accepted")
	}
}

func TestLoadRIRStatsRealFiles(t *testing.T) {
	for _, c := range []struct {
		file        string
		v4, v6, asn int
		reg         Registry
	}{
		{"delegated-afrinic-extended-20230323.gz", 5089, 6604, 3326, RegistryAFRINIC},
		{"delegated-lacnic-extended-20230323.gz", 19618, 52498, 14121, RegistryLACNIC},
	} {
		rs, rep := mustLoad(t, dataDir+c.file, LoadRIRStats)
		v4, v6 := 0, 0
		byOrg := map[string]int{}
		nonCIDR := 0
		for _, r := range rs {
			if r.Registry != c.reg {
				t.Fatalf("%s: registry %v", c.file, r.Registry)
			}
			if r.Start.Is4() {
				v4++
				if _, ok := (Node{Start: r.Start, End: r.End}).Prefix(); !ok {
					nonCIDR++
				}
			} else {
				v6++
			}
			byOrg[r.Org]++
		}
		if v4 != c.v4 || v6 != c.v6 || rep.Ignored != c.asn+4 || rep.Skipped != 0 {
			t.Errorf("%s: v4 %d v6 %d, report %+v", c.file, v4, v6, rep)
		}
		if nonCIDR == 0 && c.reg == RegistryAFRINIC {
			t.Errorf("%s: no non-CIDR IPv4 counts seen", c.file)
		}
		// The opaque-id groups one holder's resources.
		multi := 0
		for org, n := range byOrg {
			if org != "" && n > 1 {
				multi++
			}
		}
		if multi == 0 {
			t.Errorf("%s: no organisation holds more than one range", c.file)
		}
		t.Logf("%s: %d IPv4 (%d not CIDR), %d IPv6, %d orgs, %d with several ranges", c.file, v4, nonCIDR, v6, len(byOrg), multi)
	}
	// One AFRINIC holder, F36B9F4B, appears in the first records.
	rs, _ := mustLoad(t, dataDir+"delegated-afrinic-extended-20230323.gz", LoadRIRStats)
	s, e := pfx("2001:4200::/32")
	if r := findRange(rs, s, e); r == nil || r.Org != "afrinic:F36B9F4B" || r.Country != "ZA" || r.Status != StatusAllocated {
		t.Errorf("2001:4200::/32: %+v", r)
	}
}

func TestLoadRIRStatsErrors(t *testing.T) {
	head := "2.3|lacnic|20230323|3|19870101|20230322|-0300\nlacnic|*|ipv4|*|2|summary\nlacnic|*|ipv6|*|1|summary\n"
	good := "lacnic|BR|ipv4|24.152.0.0|1280|20200310|allocated|310248\n" +
		"lacnic|BR|ipv6|2801:80::|32|20200310|allocated|310248\n" +
		"lacnic||ipv4|177.39.96.0|1024||available\n"
	rs, rep, err := LoadRIRStats(strings.NewReader(head+good), LoadOptions{Name: "d"})
	if err != nil || len(rs) != 3 || rep.Ignored != 3 {
		t.Fatalf("%v %d %+v", err, len(rs), rep)
	}
	if rs[0].End != netip.MustParseAddr("24.152.4.255") || rs[0].Org != "lacnic:310248" || rs[0].Org != rs[1].Org {
		t.Errorf("non-CIDR count / grouping: %+v %+v", rs[0], rs[1])
	}
	if rs[2].Org != "" || rs[2].Status != StatusAvailable {
		t.Errorf("available block: %+v", rs[2])
	}
	for _, c := range []struct{ body, want string }{
		{"lacnic|BR|ipv4|24.152.0.0|0|20200310|allocated|1\n", "d:4: count 0 out of range"},
		{"lacnic|BR|ipv4|255.255.255.0|512|20200310|allocated|1\n", "d:4: count 512 out of range"},
		{"lacnic|BR|ipv6|2801:80::1|32|20200310|allocated|1\n", "d:4: 2801:80::1 is not the first address of a /32"},
		{"lacnic|BR|ipv4|24.152.0.0|256|2020|allocated|1\n", "d:4: bad date"},
		{"lacnic|BR|ipv4|24.152.0.0|256|20200310|stolen|1\n", "d:4: unknown status"},
		{"lacnic|BR|ipv4\n", "d:4: 3 fields"},
		{"lacnic|BR|ipv4|24.152.0.0|256|20200310|allocated|1\n", "d:1: header announces 3 records, file has 1"},
	} {
		_, _, err := LoadRIRStats(strings.NewReader(head+c.body), LoadOptions{Name: "d"})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s…", c.body, err, c.want)
		}
	}
	_, rep, err = LoadRIRStats(strings.NewReader(head+"lacnic|BR|ipv4|x|256|20200310|allocated|1\n"+good), LoadOptions{Name: "d", Lenient: true})
	if err != nil || rep.Skipped != 3 || rep.Records != 3 { // the bad line, and the now-wrong header and ipv4 summary
		t.Errorf("lenient: %v %+v", err, rep)
	}
	if _, _, err := LoadRIRStats(strings.NewReader("lacnic|BR|ipv4|24.152.0.0|256|20200310|allocated|1\n"), LoadOptions{Name: "d"}); err == nil {
		t.Error("missing header accepted")
	}
}

func TestLoadRPSLFixtures(t *testing.T) {
	rs, rep := mustLoad(t, "testdata/ripe.db.sample", LoadRPSL)
	if len(rs) != 5 || rep.Ignored != 2 { // organisation + route
		t.Fatalf("ripe: %d ranges, %+v", len(rs), rep)
	}
	const ripeName = "Reseaux IP Europeens Network Coordination Centre (RIPE NCC)"
	want := []struct {
		rng, org string
		st       Status
		cc       string
	}{
		{"193.0.0.0-193.0.23.255", ripeName, StatusAllocated, "NL"},
		{"193.0.0.0/21", ripeName, StatusAssigned, "NL"},
		{"193.0.8.0/21", "Example hosting customer block, continued on a second line and a third", StatusSubAllocated, "NL"},
		{"193.0.10.0/24", "Example Customer B.V.", StatusAssigned, "NL"},
		{"2001:67c:2e8::/48", ripeName, StatusAssigned, "NL"},
	}
	for i, w := range want {
		r := rs[i]
		got := Node{Start: r.Start, End: r.End}.String()
		if got != w.rng || r.Org != w.org || r.Status != w.st || r.Country != w.cc || r.Registry != RegistryRIPENCC {
			t.Errorf("ripe %d: %s %q %v %q %v", i, got, r.Org, r.Status, r.Country, r.Registry)
		}
	}
	rs, _ = mustLoad(t, "testdata/apnic.db.sample", LoadRPSL)
	if len(rs) != 3 || rs[0].Org != "ORG-ARAD1-AP" || rs[0].Status != StatusAssigned || rs[1].Registry != RegistryAPNIC ||
		rs[1].Org != "WIDE Project" || rs[1].Status != StatusAllocated {
		t.Errorf("apnic: %+v", rs)
	}
	rs, _ = mustLoad(t, "testdata/afrinic.db.sample", LoadRPSL)
	if len(rs) != 2 || rs[0].Country != "" || rs[1].Country != "ZA" || rs[1].Registry != RegistryAFRINIC {
		t.Errorf("afrinic: %+v", rs)
	}
	// The fixtures nest into a proper tree.
	b := NewBuilder()
	for _, f := range []string{"ripe", "apnic", "afrinic"} {
		rs, _ := mustLoad(t, "testdata/"+f+".db.sample", LoadRPSL)
		for _, r := range rs {
			if err := b.Add(r); err != nil {
				t.Fatal(err)
			}
		}
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, tr)
	id := tr.Lookup(netip.MustParseAddr("193.0.10.1"))
	if got := len(tr.Ancestors(id)); got != 3 {
		t.Errorf("193.0.10.1 at depth %d, want 3 (allocation → sub-allocation → assignment)", got)
	}
}

func TestLoadRPSLErrors(t *testing.T) {
	for _, c := range []struct{ in, want string }{
		{"inetnum: 10.0.0.10 - 10.0.0.1\nnetname: X\n", "r:1: inetnum \"10.0.0.10 - 10.0.0.1\": range ends before it starts"},
		{"inetnum: 10.0.0.0 - 10.0.0.255\nnetname X\n", "r:2: not an attribute line"},
		{"   continued\n", "r:1: continuation line outside an object"},
		{"\n\ninet6num: 2001:db8::1/32\n", "r:3: inet6num \"2001:db8::1/32\": 2001:db8::1/32 has host bits set"},
		{"inetnum: banana\n", "r:1: inetnum \"banana\": range not of the form"},
	} {
		_, _, err := LoadRPSL(strings.NewReader(c.in), LoadOptions{Name: "r"})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s…", c.in, err, c.want)
		}
	}
	rs, rep, err := LoadRPSL(strings.NewReader("inetnum: banana\n\ninetnum: 10.0.0.0/8\nnetname: TEN\n"), LoadOptions{Name: "r", Lenient: true})
	if err != nil || len(rs) != 1 || rep.Skipped != 1 || rs[0].Org != "TEN" {
		t.Errorf("lenient: %v %+v %+v", err, rs, rep)
	}
}

func TestLoadRangeCSV(t *testing.T) {
	rs, rep := mustLoad(t, "testdata/asn-ipv4-sample.csv", LoadRangeCSV)
	if rep.Records != 20 || rep.Lines != 20 || len(rs) != 20 {
		t.Fatalf("%d ranges, %+v", len(rs), rep)
	}
	if rs[0].Org != "Cloudflare, Inc." || rs[0].ASN != 13335 || rs[0].Status != StatusAnnounced {
		t.Errorf("quoted org: %+v", rs[0])
	}
	if rs[12].Org != `LLC "SPUTNIK"` {
		t.Errorf("doubled quotes: %q", rs[12].Org)
	}
	rs6, _ := mustLoad(t, "testdata/asn-ipv6-sample.csv", LoadRangeCSV)
	if len(rs6) != 6 || rs6[3].Org != "Google LLC" || !rs6[3].Start.Is6() {
		t.Errorf("v6: %+v", rs6)
	}
	// The real overlap (214.95.0.0-215.0.255.255 vs 215.0.0.0-…) and /8 crossing
	// are nested by the Builder, counted, and lose no address.
	iana, _ := mustLoad(t, dataDir+"iana-ipv4-address-space.csv", LoadIANA)
	b := NewBuilder()
	for _, r := range append(append(iana, DeriveAggregates(rs)...), rs...) {
		if err := b.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	tr, st, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, tr)
	// 214.95.0.0-215.0.255.255 crosses into 215/8: split at 214.255.255.255;
	// its rest 215.0.0.0-215.0.255.255 then nests inside 215.0.0.0-215.1.3.255,
	// which resolves the overlap too.
	if st.PartialOverlaps != 1 || st.SplitPieces != 1 {
		t.Errorf("partial overlaps %d (%d pieces), want 1 (1)", st.PartialOverlaps, st.SplitPieces)
	}
	rest := tr.Node(tr.Lookup(netip.MustParseAddr("215.0.255.255")))
	if rest.Start != netip.MustParseAddr("215.0.0.0") || rest.End != netip.MustParseAddr("215.0.255.255") || rest.ASN != 749 {
		t.Errorf("rest piece %v AS%d", rest, rest.ASN)
	}
	for _, ip := range []string{"214.255.0.1", "215.0.255.255", "215.1.3.255"} {
		n := tr.Node(tr.Lookup(netip.MustParseAddr(ip)))
		if !strings.Contains(tr.OrgName(n.Org), "DoD") || n.Depth < 2 {
			t.Errorf("%s → %v %q depth %d", ip, n, tr.OrgName(n.Org), n.Depth)
		}
	}
	for _, c := range []struct{ in, want string }{
		{"1.0.0.0,1.0.0.255,13335\n", "c:1: 3 fields"},
		{"1.0.0.0,1.0.0.255,13335,x\n1.0.1.0,1.0.0.255,1,y\n", "c:2: range 1.0.1.0-1.0.0.255 ends before it starts"},
		{"1.0.0.0,::1,1,x\n", "c:1: range 1.0.0.0-::1 mixes"},
		{"16777216,16777471,13335,x\n2,3,4,y\n", "c:2: numeric address"},
		{"1.0.0.0,1.0.0.255,ASx,x\n", "c:1: bad AS number"},
		{"1.0.0.0,1.0.0.255,1,\"x\n", "c:1: extraneous or missing \" in quoted-field"},
	} {
		_, _, err := LoadRangeCSV(strings.NewReader(c.in), LoadOptions{Name: "c"})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s…", c.in, err, c.want)
		}
	}
	rs, rep, err = LoadRangeCSV(strings.NewReader("start,end,asn,org\n1.0.0.0,1.0.0.255,1,a\nbad,1.0.0.0,1,b\n2.0.0.0,2.0.0.255,2,c\n"), LoadOptions{Name: "c", Lenient: true})
	if err != nil || len(rs) != 2 || rep.Skipped != 1 || rep.Ignored != 1 || rep.Errors[0].Line != 3 {
		t.Errorf("lenient: %v %+v", err, rep)
	}
}

func TestDeriveAggregates(t *testing.T) {
	r := func(s, e, org string) Range {
		return Range{Start: netip.MustParseAddr(s), End: netip.MustParseAddr(e), Org: org, Country: "DE"}
	}
	in := []Range{
		r("10.0.0.0", "10.0.0.255", "A"),
		r("10.0.1.0", "10.0.1.255", "A"),
		r("10.0.2.0", "10.0.2.255", "A"),
		r("10.0.3.0", "10.0.3.255", "B"),
		r("10.0.5.0", "10.0.5.255", "B"), // gap: no aggregate with the previous B
		r("10.255.255.0", "10.255.255.255", "C"),
		r("11.0.0.0", "11.0.0.255", "C"), // crosses a /8 boundary: no aggregate
		r("2001:db8::", "2001:db8::ffff", "D"),
		r("2001:db8::1:0", "2001:db8::1:ffff", "D"),
	}
	got := DeriveAggregates(in)
	if len(got) != 2 {
		t.Fatalf("%d aggregates: %+v", len(got), got)
	}
	if got[0].Start != in[0].Start || got[0].End != in[2].End || got[0].Org != "A" || got[0].Status != StatusAggregate || got[0].Country != "DE" {
		t.Errorf("A: %+v", got[0])
	}
	if got[1].Start != in[7].Start || got[1].End != in[8].End {
		t.Errorf("D: %+v", got[1])
	}
}

func TestBuildSourcesSmall(t *testing.T) {
	tr, rep, err := BuildSources(context.Background(), Sources{
		IANA:   []string{dataDir + "iana-ipv4-address-space.csv", dataDir + "iana-ipv6-unicast-address-assignments.csv"},
		RIR:    []string{dataDir + "delegated-afrinic-extended-20230323.gz"},
		RPSL:   []string{"testdata/afrinic.db.sample"},
		Ranges: []string{"testdata/asn-ipv4-sample.csv", "testdata/asn-ipv6-sample.csv"},
		Logger: discardLogger(),
	})
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, tr)
	if len(rep.Loads) != 6 || rep.Stats.Nodes != tr.Len() || rep.Aggregates == 0 {
		t.Errorf("%+v", rep)
	}
	// 196.216.2.1: IANA /8 → AFRINIC stats → RPSL allocation … → RPSL assignment.
	path := tr.Ancestors(tr.Lookup(netip.MustParseAddr("196.216.2.1")))
	if len(path) < 3 {
		t.Errorf("196.216.2.1 path %v", path)
	}
	if _, _, err := BuildSources(context.Background(), Sources{IANA: []string{"testdata/nope.csv"}}); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
}
