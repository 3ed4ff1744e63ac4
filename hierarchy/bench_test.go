package hierarchy

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/gaissmai/bart"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
)

// cpuTime returns the process's user+system CPU time: unlike wall time it
// does not grow when other processes compete for the cores.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

func reportCPU(b *testing.B, start time.Duration) {
	b.ReportMetric(float64((cpuTime()-start).Milliseconds())/float64(b.N), "cpu-ms/op")
}

func defaultTree(b *testing.B) *Tree {
	b.Helper()
	t, err := Default()
	if err != nil {
		b.Fatal(err)
	}
	return t
}

// BenchmarkBuildDefault rebuilds the full default hierarchy (IPv4 + IPv6)
// from its ranges with a fresh Builder: sorting, nesting, org interning and
// the lookup index. Budget: 3 s (reported as budget-fraction).
func BenchmarkBuildDefault(b *testing.B) {
	rs := defaultTree(b).Ranges()
	var c0 time.Duration
	for b.Loop() {
		if c0 == 0 {
			c0 = cpuTime()
		}
		bl := NewBuilder()
		for _, r := range rs {
			if err := bl.Add(r); err != nil {
				b.Fatal(err)
			}
		}
		if _, _, err := bl.Build(); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, c0)
	per := b.Elapsed().Seconds() / float64(b.N)
	b.ReportMetric(float64(len(rs)), "ranges")
	b.ReportMetric(per/3, "budget-fraction")
}

// BenchmarkBuildFromSources runs the whole pipeline of `make snapshot`
// (parse every source file, derive aggregates, fill countries, build) when
// MICRA_ASN_DIR names a directory holding asn-ipv4.csv and asn-ipv6.csv of
// @ip-location-db/asn 2.3.2026061719 and MICRA_COUNTRY_DIR one holding
// geo-whois-asn-country-ipv4.csv and -ipv6.csv of
// @ip-location-db/geo-whois-asn-country 2.3.2026061719.
func BenchmarkBuildFromSources(b *testing.B) {
	dir, ccDir := os.Getenv("MICRA_ASN_DIR"), os.Getenv("MICRA_COUNTRY_DIR")
	if dir == "" || ccDir == "" {
		b.Skip("set MICRA_ASN_DIR and MICRA_COUNTRY_DIR to the unpacked @ip-location-db/asn and geo-whois-asn-country packages")
	}
	d := "../data/hierarchy/"
	src := Sources{
		IANA:      []string{d + "iana-ipv4-address-space.csv", d + "iana-ipv6-unicast-address-assignments.csv"},
		RIR:       []string{d + "delegated-afrinic-extended-20230323.gz", d + "delegated-lacnic-extended-20230323.gz"},
		Ranges:    []string{dir + "/asn-ipv4.csv", dir + "/asn-ipv6.csv"},
		Countries: []string{ccDir + "/geo-whois-asn-country-ipv4.csv", ccDir + "/geo-whois-asn-country-ipv6.csv"},
		Logger:    discardLogger(),
	}
	want := defaultTree(b).ID()
	c0 := cpuTime()
	for b.Loop() {
		t, _, err := BuildSources(context.Background(), src)
		if err != nil {
			b.Fatal(err)
		}
		if t.ID() != want {
			b.Fatal("sources do not rebuild the embedded default snapshot")
		}
	}
	reportCPU(b, c0)
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/3, "budget-fraction")
}

// BenchmarkDecodeDefault decodes the embedded snapshot (zstd + full
// validation + index). Budget: 300 ms.
func BenchmarkDecodeDefault(b *testing.B) {
	c0 := cpuTime()
	for b.Loop() {
		if _, err := DecodeFile(hierarchydata.DefaultSnapshot); err != nil {
			b.Fatal(err)
		}
	}
	reportCPU(b, c0)
	b.ReportMetric(float64(len(hierarchydata.DefaultSnapshot)), "file-bytes")
	b.ReportMetric(b.Elapsed().Seconds()/float64(b.N)/0.3, "budget-fraction")
}

// BenchmarkDecodeCanonical decodes the uncompressed canonical bytes.
func BenchmarkDecodeCanonical(b *testing.B) {
	enc := defaultTree(b).Encode()
	b.SetBytes(int64(len(enc)))
	for b.Loop() {
		if _, err := Decode(enc); err != nil {
			b.Fatal(err)
		}
	}
	b.ReportMetric(float64(len(enc)), "canonical-bytes")
}

// BenchmarkLoadedMemory reports the memory held by one decoded default tree
// (live heap after GC) and the process RSS with it loaded. Budget: 300 MB.
func BenchmarkLoadedMemory(b *testing.B) {
	var keep *Tree
	var heapMB float64
	for b.Loop() {
		runtime.GC()
		var m0, m1 runtime.MemStats
		runtime.ReadMemStats(&m0)
		t, err := DecodeFile(hierarchydata.DefaultSnapshot)
		if err != nil {
			b.Fatal(err)
		}
		runtime.GC()
		runtime.ReadMemStats(&m1)
		keep = t
		heapMB = float64(int64(m1.HeapAlloc)-int64(m0.HeapAlloc)) / (1 << 20)
	}
	b.ReportMetric(heapMB, "tree-heap-MB")
	b.ReportMetric(rssMB(), "process-rss-MB")
	b.ReportMetric(300, "budget-MB")
	runtime.KeepAlive(keep)
}

func rssMB() float64 {
	s, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(s), "\n") {
		if strings.HasPrefix(l, "VmRSS:") {
			f := strings.Fields(l)
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

// rangePrefixes splits an inclusive range into CIDR prefixes.
func rangePrefixes(n Node) []netip.Prefix {
	f, s, _ := fromAddr(n.Start)
	_, e, _ := fromAddr(n.End)
	total := uint(128)
	if f == fam4 {
		total = 32
	}
	var out []netip.Prefix
	for {
		// largest aligned block starting at s that does not pass e
		host := s.trailingZeros()
		if host > total {
			host = total
		}
		for host > 0 {
			last, _ := s.add(max6.shr(128 - host))
			if !e.less(last) {
				break
			}
			host--
		}
		out = append(out, netip.PrefixFrom(toAddr(f, s), int(total-host)))
		last, _ := s.add(max6.shr(128 - host))
		if host == 0 {
			last = s
		}
		if last == e {
			return out
		}
		s = last.add1()
	}
}

// lookupAddrs draws n addresses: kind "v4" uniform over the IPv4 space,
// "v6" uniform inside random IPv6 nodes of t, "mixed" 3:1 of both.
func lookupAddrs(t *Tree, kind string, n int) []netip.Addr {
	rng := rand.New(rand.NewPCG(1, 2))
	var v6 []NodeID
	for id := 1; id < t.Len(); id++ {
		if t.fam(NodeID(id)) == fam6 {
			v6 = append(v6, NodeID(id))
		}
	}
	out := make([]netip.Addr, n)
	for i := range out {
		if kind == "v4" || (kind == "mixed" && i%4 != 0) {
			out[i] = a4(rng.Uint32())
			continue
		}
		rs, re := t.bounds(v6[rng.IntN(len(v6))])
		span := re.sub(rs)
		off := u128{rng.Uint64(), rng.Uint64()}
		if span.hi == 0 {
			off.hi = 0
			if span.lo != ^uint64(0) {
				off.lo %= span.lo + 1
			}
		} else {
			off.hi %= span.hi
		}
		a, _ := rs.add(off)
		out[i] = toAddr(fam6, a)
	}
	return out
}

// BenchmarkSmallestNonUnaryVsBart compares SmallestNonUnary with
// gaissmai/bart Table.Lookup over the same ranges (as CIDR prefixes, valued
// with the same answer) on the same random addresses, timed side by side in
// the same run. The metric micra/bart must stay ≤ 2.
func BenchmarkSmallestNonUnaryVsBart(b *testing.B) {
	t := defaultTree(b)
	var tbl bart.Table[NodeID]
	prefixes := 0
	for id := 1; id < t.Len(); id++ { // preorder: a node's prefixes overwrite its ancestors'
		n := t.Node(NodeID(id))
		val := NodeID(id)
		if n.Unary() {
			val = n.Parent
		}
		for _, p := range rangePrefixes(n) {
			tbl.Insert(p, val)
			prefixes++
		}
	}
	for _, kind := range []string{"v4", "v6", "mixed"} {
		addrs := lookupAddrs(t, kind, 1<<20)
		for _, ip := range addrs[:4096] { // same answers
			want := t.SmallestNonUnary(ip)
			got, ok := tbl.Lookup(ip)
			if !ok {
				got = Root
			}
			if got != want {
				b.Fatalf("%v: bart %d, micra %d", ip, got, want)
			}
		}
		b.Run(kind, func(b *testing.B) {
			var micraT, bartT time.Duration
			var sink NodeID
			const chunk = 4096
			done := 0
			for done < b.N {
				k := min(chunk, b.N-done)
				base := done % len(addrs)
				if base+k > len(addrs) {
					base = 0
				}
				batch := addrs[base : base+k]
				t0 := time.Now()
				for _, ip := range batch {
					sink += t.SmallestNonUnary(ip)
				}
				t1 := time.Now()
				for _, ip := range batch {
					v, _ := tbl.Lookup(ip)
					sink += v
				}
				t2 := time.Now()
				micraT += t1.Sub(t0)
				bartT += t2.Sub(t1)
				done += k
			}
			_ = sink
			m, br := float64(micraT.Nanoseconds())/float64(b.N), float64(bartT.Nanoseconds())/float64(b.N)
			b.ReportMetric(m, "micra-ns/lookup")
			b.ReportMetric(br, "bart-ns/lookup")
			b.ReportMetric(m/br, "micra/bart")
			b.ReportMetric(float64(prefixes), "bart-prefixes")
		})
	}
}
