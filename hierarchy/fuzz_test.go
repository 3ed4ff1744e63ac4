package hierarchy

import (
	"bytes"
	"encoding/binary"
	"errors"
	"hash/crc32"
	"io"
	"math/rand/v2"
	"os"
	"testing"
)

// fuzzLoader checks a loader on arbitrary input: it never panics, errors
// always carry file:line, lenient mode only fails on unusable headers, and
// whatever it accepts builds into a valid tree whose snapshot round-trips.
func fuzzLoader(t *testing.T, load func(io.Reader, LoadOptions) ([]Range, LoadReport, error), data []byte) {
	for _, lenient := range []bool{false, true} {
		rs, rep, err := load(bytes.NewReader(data), LoadOptions{Name: "fuzz", Lenient: lenient})
		if err != nil {
			var le *LineError
			if !errors.As(err, &le) || le.File != "fuzz" || le.Line < 0 {
				t.Fatalf("error without file:line: %v", err)
			}
			continue
		}
		if rep.Records != len(rs) || rep.Skipped < len(rep.Errors) {
			t.Fatalf("report %+v for %d ranges", rep, len(rs))
		}
		if !lenient && rep.Skipped != 0 {
			t.Fatalf("strict mode skipped %d lines", rep.Skipped)
		}
		b := NewBuilder()
		for _, r := range rs {
			if err := b.Add(r); err != nil {
				t.Fatalf("loader produced a range the Builder rejects: %+v: %v", r, err)
			}
		}
		tr, _, err := b.Build()
		if err != nil {
			t.Fatal(err)
		}
		checkTree(t, tr)
		enc := tr.Encode()
		tr2, err := Decode(enc)
		if err != nil || !bytes.Equal(tr2.Encode(), enc) {
			t.Fatalf("round trip: %v", err)
		}
	}
}

func addFileSeed(f *testing.F, path string, limit int) {
	b, err := os.ReadFile(path)
	if err != nil {
		f.Fatal(err)
	}
	if len(b) > limit {
		b = b[:limit]
	}
	f.Add(b)
}

func FuzzLoadIANA(f *testing.F) {
	addFileSeed(f, dataDir+"iana-ipv4-address-space.csv", 4096)
	addFileSeed(f, dataDir+"iana-ipv6-unicast-address-assignments.csv", 4096)
	f.Add([]byte("Prefix,Designation,Date,WHOIS,RDAP,Status [1],Note\n003/8,Administered by ARIN,1994-05,whois.arin.net,\"https://a\nhttp://b\",LEGACY,\n"))
	f.Add([]byte("Prefix,Designation,Status\n2001:db8::/32,IANA,RESERVED\n999/8,x,ALLOCATED\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLoader(t, LoadIANA, data) })
}

func FuzzLoadRIRStats(f *testing.F) {
	f.Add([]byte("2|afrinic|20230323|15019|00000000|20230323|00000\nafrinic|*|asn|*|1|summary\nafrinic|*|ipv4|*|1|summary\n" +
		"afrinic|ZA|asn|1228|1|19910301|allocated|F36B9F4B\nafrinic|ZA|ipv4|196.0.0.0|1280|19940101|allocated|F36B9F4B\n"))
	f.Add([]byte("2.3|lacnic|20230323|2|19870101|20230322|-0300\nlacnic|BR|ipv6|2801:80::|32|20200310|allocated|310248\n" +
		"lacnic||ipv4|24.152.20.0|1024||reserved|\n# comment\n\n"))
	f.Add([]byte("2|ripencc|1|1|0|0|0\nripencc|EU|ipv4|255.255.255.0|256|20000101|assigned\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLoader(t, LoadRIRStats, data) })
}

func FuzzLoadRPSL(f *testing.F) {
	for _, n := range []string{"ripe", "apnic", "afrinic"} {
		addFileSeed(f, "testdata/"+n+".db.sample", 8192)
	}
	f.Add([]byte("inetnum: 0.0.0.0 - 255.255.255.255\nnetname: ALL\n\ninet6num: ::/0\n+ x\n\ninetnum: 10.0.0.0/8\norg: O\n\norganisation: O\norg-name: Zero\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLoader(t, LoadRPSL, data) })
}

func FuzzLoadRangeCSV(f *testing.F) {
	addFileSeed(f, "testdata/asn-ipv4-sample.csv", 8192)
	addFileSeed(f, "testdata/asn-ipv6-sample.csv", 8192)
	f.Add([]byte("start,end,asn,org\n0.0.0.0,255.255.255.255,0,\"a,\"\"b\"\"\"\n::,ffff:ffff:ffff:ffff:ffff:ffff:ffff:ffff,AS1,x\n::ffff:1.2.3.4,1.2.3.5,1,m\n"))
	f.Fuzz(func(t *testing.T, data []byte) { fuzzLoader(t, LoadRangeCSV, data) })
}

// withCRC replaces the last four bytes of b by the checksum of the rest, so
// the fuzzer reaches past the checksum test.
func withCRC(b []byte) []byte {
	if len(b) < 4 {
		return b
	}
	out := bytes.Clone(b)
	binary.LittleEndian.PutUint32(out[len(out)-4:], crc32.Checksum(out[:len(out)-4], castagnoli))
	return out
}

// FuzzDecode feeds hostile bytes to the decoder: it must never panic, and
// anything it accepts is a valid tree whose encoding is exactly the input.
func FuzzDecode(f *testing.F) {
	rng := rand.New(rand.NewPCG(3, 4))
	for i := 0; i < 4; i++ {
		b := NewBuilder()
		for _, r := range randomRanges(rng, 3+i*5) {
			if err := b.Add(r); err != nil {
				f.Fatal(err)
			}
		}
		tr, _, err := b.Build()
		if err != nil {
			f.Fatal(err)
		}
		f.Add(tr.Encode())
	}
	f.Add([]byte(snapMagic))
	f.Add(withCRC([]byte("MICRAHIE\x01\x00\x00\x00\x02\x00\x00\x00\x01\x00\x00\x00\x01\x00\x00\x00\x00\x01\x00\x80\x00\x00\x00\x00\x00\x00\x00\x00\x00")))
	f.Fuzz(func(t *testing.T, data []byte) {
		for _, in := range [][]byte{data, withCRC(data)} {
			tr, err := Decode(in)
			if err != nil {
				if !errors.Is(err, ErrSnapshot) {
					t.Fatalf("error not wrapping ErrSnapshot: %v", err)
				}
				continue
			}
			checkTree(t, tr)
			if !bytes.Equal(tr.Encode(), in) {
				t.Fatalf("accepted a non-canonical encoding")
			}
			for id := 0; id < tr.Len(); id++ {
				tr.Children(NodeID(id))
				tr.SameOrg(NodeID(id))
				n := tr.Node(NodeID(id))
				if id > 0 && tr.Lookup(n.Start) == Root {
					t.Fatalf("node %d start not found", id)
				}
			}
		}
	})
}
