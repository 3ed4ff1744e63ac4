package hierarchy

import (
	"errors"
	"net/netip"
	"strings"
	"testing"
)

// An IPv4 count so large that start+count-1 wraps uint64 passes the range
// check in rirRecord and yields End < Start: the loader must reject the line
// with file:line instead of handing the Builder a reversed range.
func TestRIRIPv4CountPastTheTopIsAnError(t *testing.T) {
	in := "2|arin|20230323|1|19870101|20230322|-0500\n" +
		"arin|US|ipv4|1.0.0.0|18446744073692774401|20200101|allocated\n" // 2^64 - 2^24 + 1
	rs, _, err := LoadRIRStats(strings.NewReader(in), LoadOptions{Name: "d"})
	var le *LineError
	if err == nil || !errors.As(err, &le) || le.Line != 2 {
		t.Fatalf("want d:2 error, got err=%v ranges=%+v", err, rs)
	}
}

// In lenient mode one over-long line (> 1 MiB) stops bufio.Scanner: every
// valid record after it is silently lost.
func TestRIRLenientLongLineSkipsOnlyIt(t *testing.T) {
	in := "2|lacnic|20230323|3|19870101|20230322|-0300\n" +
		"lacnic|BR|ipv4|24.152.0.0|256|20200310|allocated|1\n" +
		"lacnic|BR|ipv4|24.152.1.0|256|20200310|allocated|" + strings.Repeat("x", maxLine+10) + "\n" +
		"lacnic|BR|ipv4|24.152.2.0|256|20200310|allocated|3\n"
	rs, rep, err := LoadRIRStats(strings.NewReader(in), LoadOptions{Name: "d", Lenient: true})
	if err != nil || len(rs) != 2 {
		t.Fatalf("lenient: want the 2 good records, got %d (err %v, report %+v)", len(rs), err, rep)
	}
}

func TestRPSLLenientLongLineSkipsOnlyIt(t *testing.T) {
	in := "inetnum: 10.0.0.0 - 10.0.0.255\nnetname: A\n\n" +
		"inetnum: 10.0.1.0 - 10.0.1.255\nremarks: " + strings.Repeat("x", maxLine+10) + "\n\n" +
		"inetnum: 10.0.2.0 - 10.0.2.255\nnetname: C\n"
	rs, rep, err := LoadRPSL(strings.NewReader(in), LoadOptions{Name: "d", Lenient: true})
	found := false
	for _, r := range rs {
		found = found || r.Start == netip.MustParseAddr("10.0.2.0")
	}
	if err != nil || !found {
		t.Fatalf("lenient: object C (10.0.2.0) after the long line lost: %d ranges, err %v, skipped %d, errors %v", len(rs), err, rep.Skipped, rep.Errors)
	}
}

// The IPv6 prefix ::/80 ends at ::ffff:255.255.255.255, an IPv4-mapped
// address. The loaders accept it; Builder.Add unmaps the end and rejects
// the range as "mixes IPv4 and IPv6", so BuildSources aborts with an error
// that names no line (also in lenient mode).
func TestIPv6PrefixEndingInMappedSpaceIsALineError(t *testing.T) {
	in := "2|ripencc|20230323|1|19870101|20230322|+0100\n" +
		"ripencc|ZZ|ipv6|::|80|20200101|reserved\n"
	rs, _, err := LoadRIRStats(strings.NewReader(in), LoadOptions{Name: "d"})
	if err != nil {
		return // rejected with file:line: fine
	}
	b := NewBuilder()
	for _, r := range rs {
		if err := b.Add(r); err != nil {
			t.Fatalf("loader accepted %v-%v but Builder.Add rejects it: %v", r.Start, r.End, err)
		}
	}
}

// Decode accepts an IPv6 node whose start lies in ::ffff:0:0/96. The Builder
// can never produce it (mapped endpoints become IPv4), Lookup of the node's
// own start goes to the IPv4 index (Root), and Ranges() cannot be rebuilt.
func TestDecodeRefusesIPv6NodeInMappedSpace(t *testing.T) {
	ms := u128{0, 0xffff_0102_0304} // ::ffff:1.2.3.4 as an IPv6 integer
	tr := treeOf([]nodeRec{{parent: None}, {fam: fam6, s: ms, e: u128{1, 0}, parent: Root, depth: 1}},
		[]string{""}, []string{""})
	d, err := Decode(tr.Encode())
	if err != nil {
		return // rejected: fine
	}
	n := d.Node(1)
	if got := d.Lookup(n.Start); got != 1 {
		t.Errorf("Decode accepted node %v; Lookup(its own start) = %d, want 1", n, got)
	}
	b := NewBuilder()
	for _, r := range d.Ranges() {
		if err := b.Add(r); err != nil {
			t.Errorf("Decode accepted a tree whose Ranges() the Builder rejects: %v", err)
		}
	}
}
