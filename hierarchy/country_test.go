package hierarchy

import (
	"bytes"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
)

func TestLoadCountryCSV(t *testing.T) {
	rs, rep := mustLoad(t, "testdata/country-ipv4-sample.csv", LoadCountryCSV)
	if rep.Records != 16 || rep.Lines != 16 || len(rs) != 16 {
		t.Fatalf("%d ranges, %+v", len(rs), rep)
	}
	if rs[0].Start != netip.MustParseAddr("1.0.0.0") || rs[0].End != netip.MustParseAddr("1.0.0.255") || rs[0].Country != "AU" {
		t.Errorf("first row %+v", rs[0])
	}
	rs6, _ := mustLoad(t, "testdata/country-ipv6-sample.csv", LoadCountryCSV)
	if len(rs6) != 4 || rs6[3].Country != "IE" || !rs6[3].Start.Is6() {
		t.Errorf("v6: %+v", rs6)
	}
	for _, c := range []struct{ in, want string }{
		{"1.0.0.0,1.0.0.255\n", "c:1: 2 fields, want 3"},
		{"1.0.0.0,1.0.0.255,AU\n1.0.1.0,1.0.0.255,CN\n", "c:2: range 1.0.1.0-1.0.0.255 ends before it starts"},
		{"1.0.0.0,::1,AU\n", "c:1: range 1.0.0.0-::1 mixes"},
		{"16777216,16777471,AU\n16777472,16778239,CN\n", "c:2: numeric address \"16777472\": use the address-form files (geo-whois-asn-country-ipv4.csv"},
		{"1.0.0.0,1.0.0.255,AUS\n", "c:1: bad country code \"AUS\""},
		{"1.0.0.0,1.0.0.255,A1\n", "c:1: bad country code \"A1\""},
		{"1.0.0.0,1.0.0.255,\"AU\n", "c:1: extraneous or missing \" in quoted-field"},
	} {
		_, _, err := LoadCountryCSV(strings.NewReader(c.in), LoadOptions{Name: "c"})
		if err == nil || !strings.HasPrefix(err.Error(), c.want) {
			t.Errorf("%q: got %v, want %s…", c.in, err, c.want)
		}
	}
	rs, rep, err := LoadCountryCSV(strings.NewReader("start,end,cc\n1.0.0.0,1.0.0.255,au\nbad,1.0.0.0,CN\n2.0.0.0,2.0.0.255,ZZ\n3.0.0.0,3.0.0.9,US\n"), LoadOptions{Name: "c", Lenient: true})
	if err != nil || len(rs) != 2 || rs[0].Country != "AU" || rep.Skipped != 1 || rep.Ignored != 2 || rep.Errors[0].Line != 3 || rep.Lines != 5 {
		t.Errorf("lenient: %v %+v %+v", err, rep, rs)
	}
}

// TestCountryFill builds the real fixtures' country rows over a small tree and
// checks the majority rule and the overlap rule on the rows of the real file
// that overlap (a geofeed /32 inside a WHOIS block).
func TestCountryFill(t *testing.T) {
	cc4, _ := mustLoad(t, "testdata/country-ipv4-sample.csv", LoadCountryCSV)
	cc6, _ := mustLoad(t, "testdata/country-ipv6-sample.csv", LoadCountryCSV)
	b := NewBuilder()
	node := func(s, e, country string) {
		t.Helper()
		if err := b.Add(Range{Start: netip.MustParseAddr(s), End: netip.MustParseAddr(e), Country: country, Org: s}); err != nil {
			t.Fatal(err)
		}
	}
	node("2.0.0.0", "2.255.255.255", "")        // mixed /8: no country covers half of it
	node("2.58.196.0", "2.58.197.255", "")      // DE around one BE address
	node("2.58.197.15", "2.58.197.15", "")      // the BE address itself (geofeed inside WHOIS)
	node("2.58.194.0", "2.58.197.255", "")      // NL 512, DE 511, BE 1 of 1024: no majority
	node("3.2.35.0", "3.2.35.127", "")          // DE 48, TR 8, GR 8, BR 64 of 128: BR exactly half, none
	node("3.2.35.0", "3.2.35.63", "")           // DE 48 of 64
	node("41.0.0.0", "41.255.255.255", "ZA")    // own registry country stays
	node("200.7.84.0", "200.7.87.255", "BR")    // own country wins over the table's UY
	node("214.0.0.0", "215.255.255.255", "")    // US
	node("2001:200::", "2001:2ff::", "")        // AU covers 0x19 of 0x100 /32s: none
	node("2a00:1450::", "2a00:1450:ffff::", "") // IE
	for _, r := range append(cc4, cc6...) {
		if err := b.AddCountry(r); err != nil {
			t.Fatal(err)
		}
	}
	tr, st, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	checkTree(t, tr)
	want := map[string]string{
		"2.0.0.0": "", "2.58.196.0": "DE", "2.58.197.15": "BE", "2.58.194.0": "", "3.2.35.0": "",
		"41.0.0.0": "ZA", "200.7.84.0": "BR", "214.0.0.0": "US", "2001:200::": "", "2a00:1450::": "IE",
	}
	for id := NodeID(1); int(id) < tr.Len(); id++ {
		n := tr.Node(id)
		w, ok := want[n.Start.String()]
		if n.Start.String() == "3.2.35.0" && n.End.String() == "3.2.35.63" {
			w, ok = "DE", true
		}
		if !ok {
			t.Fatalf("unexpected node %v", n)
		}
		if n.Country != w {
			t.Errorf("%v: country %q, want %q", n, n.Country, w)
		}
	}
	if st.CountryFilled != 5 || st.WithCountry != 7 || st.CountryRanges != 20 {
		t.Errorf("stats %+v", st)
	}
	// Rebuilding from the tree's own ranges is the identity (countries are
	// now the nodes' own).
	b2 := NewBuilder()
	for _, r := range tr.Ranges() {
		if err := b2.Add(r); err != nil {
			t.Fatal(err)
		}
	}
	tr2, _, _ := b2.Build()
	if tr2.ID() != tr.ID() {
		t.Error("rebuild changed the snapshot")
	}
	if err := b.AddCountry(Range{Start: netip.MustParseAddr("1.0.0.0"), End: netip.MustParseAddr("1.0.0.1")}); err == nil {
		t.Error("country range without a country accepted")
	}
}

// TestFlattenCountriesProperty compares the flattened segments with a
// per-address reference on random small overlapping inputs: the winner of an
// address is the covering range that starts last (then: added last), and the
// segments are disjoint, sorted and maximal.
func TestFlattenCountriesProperty(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	for iter := 0; iter < 500; iter++ {
		var in []crange
		const space = 64
		for k := 0; k < 1+rng.IntN(12); k++ {
			s := uint64(rng.IntN(space))
			e := s + uint64(rng.IntN(space-int(s)))
			in = append(in, crange{fam: fam4, s: u128{0, s}, e: u128{0, e}, cc: [2]byte{'A', byte('A' + rng.IntN(3))}, seq: uint32(k)})
		}
		var ref [space][2]byte
		for a := uint64(0); a < space; a++ {
			best := -1
			for i, r := range in {
				if r.s.lo <= a && a <= r.e.lo && (best < 0 || r.s.lo > in[best].s.lo || (r.s.lo == in[best].s.lo && r.e.lo < in[best].e.lo) ||
					(r.s.lo == in[best].s.lo && r.e.lo == in[best].e.lo && r.seq > in[best].seq)) {
					best = i
				}
			}
			if best >= 0 {
				ref[a] = in[best].cc
			}
		}
		var got [space][2]byte
		segs := flattenCountries(in)
		for i, s := range segs {
			if s.e.less(s.s) || (i > 0 && !segs[i-1].e.less(s.s)) {
				t.Fatalf("segments overlap or unsorted: %+v", segs)
			}
			if i > 0 && segs[i-1].e.add1() == s.s && segs[i-1].cc == s.cc {
				t.Fatalf("adjacent equal segments not merged: %+v", segs)
			}
			for a := s.s.lo; a <= s.e.lo; a++ {
				got[a] = s.cc
			}
		}
		if got != ref {
			t.Fatalf("input %+v\nsegments %+v\ngot %v\nwant %v", in, segs, got, ref)
		}
	}
	// The top of both spaces must not wrap around.
	segs := flattenCountries([]crange{
		{fam: fam4, s: u128{0, 0}, e: max4, cc: [2]byte{'A', 'A'}},
		{fam: fam4, s: max4, e: max4, cc: [2]byte{'B', 'B'}, seq: 1},
		{fam: fam6, s: u128{}, e: max6, cc: [2]byte{'C', 'C'}, seq: 2},
		{fam: fam6, s: u128{1, 0}, e: max6, cc: [2]byte{'D', 'D'}, seq: 3},
	})
	if len(segs) != 4 || segs[1].s != max4 || segs[3].s != (u128{1, 0}) || segs[3].e != max6 {
		t.Errorf("edges: %+v", segs)
	}
}

func FuzzLoadCountryCSV(f *testing.F) {
	addFileSeed(f, "testdata/country-ipv4-sample.csv", 8192)
	addFileSeed(f, "testdata/country-ipv6-sample.csv", 8192)
	f.Add([]byte("start,end,cc\n0.0.0.0,255.255.255.255,US\n::,ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff,ZZ\n::ffff:1.2.3.4,1.2.3.5,de\n"))
	f.Fuzz(func(t *testing.T, data []byte) {
		fuzzLoader(t, LoadCountryCSV, data)
		// As annotations over a fixed tree: the build succeeds and every
		// node either keeps no country or gets one of the input's.
		rs, _, err := LoadCountryCSV(bytes.NewReader(data), LoadOptions{Name: "fuzz", Lenient: true})
		if err != nil {
			return
		}
		b := NewBuilder()
		for _, r := range []Range{
			{Start: netip.MustParseAddr("0.0.0.0"), End: netip.MustParseAddr("127.255.255.255")},
			{Start: netip.MustParseAddr("1.0.0.0"), End: netip.MustParseAddr("1.0.0.255")},
			{Start: netip.MustParseAddr("::"), End: netip.MustParseAddr("ffff::")},
		} {
			if err := b.Add(r); err != nil {
				t.Fatal(err)
			}
		}
		seen := map[string]bool{"": true}
		for _, r := range rs {
			if err := b.AddCountry(r); err != nil {
				t.Fatalf("loader produced a country range AddCountry rejects: %+v: %v", r, err)
			}
			seen[r.Country] = true
		}
		tr, _, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, tr)
		for id := NodeID(1); int(id) < tr.Len(); id++ {
			if c := tr.Node(id).Country; !seen[c] {
				t.Fatalf("node %v got country %q not in the input", tr.Node(id), c)
			}
		}
	})
}
