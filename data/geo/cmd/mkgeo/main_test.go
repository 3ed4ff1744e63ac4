package main

import (
	"math"
	"reflect"
	"testing"

	"github.com/micra-crawler/micra/data/geo"
)

func TestMajorityAndRuns(t *testing.T) {
	paris, lyon, oslo := geo.Point{Lat: 48.85, Lon: 2.35}, geo.Point{Lat: 45.75, Lon: 4.85}, geo.Point{Lat: 59.9, Lon: 10.75}
	q := 0.25
	// blocks of 256 addresses (shift 8)
	nets := []network{
		{first: 0x100, last: 0x17f, loc: paris, addrs: 128}, // block 1: half Paris …
		{first: 0x180, last: 0x1bf, loc: lyon, addrs: 64},   // … a quarter Lyon
		{first: 0x1c0, last: 0x1ff, loc: lyon, addrs: 64},   // … a quarter Lyon: tie → smaller grid point
		{first: 0x200, last: 0x4ff, loc: oslo, addrs: 768},  // blocks 2–4 whole
		{first: 0x500, last: 0x5ff, loc: oslo, addrs: 256},  // block 5 whole, same place: merges
		{first: 0x800, last: 0x83f, loc: paris, addrs: 64},  // block 8 partly; 6–7 have no data
	}
	blocks := majority(nets, 8, q)
	want := []block{
		{1, 1, geo.Quantise(lyon, q)},
		{2, 4, geo.Quantise(oslo, q)},
		{5, 5, geo.Quantise(oslo, q)},
		{8, 8, geo.Quantise(paris, q)},
	}
	if !reflect.DeepEqual(blocks, want) {
		t.Fatalf("majority:\n got %+v\nwant %+v", blocks, want)
	}
	rs := runs(blocks, 16)
	wantRuns := []geo.Run{
		{Start: 0},
		{Start: 1, Loc: geo.Quantise(lyon, q), Known: true},
		{Start: 2, Loc: geo.Quantise(oslo, q), Known: true},
		{Start: 6},
		{Start: 8, Loc: geo.Quantise(paris, q), Known: true},
		{Start: 9},
	}
	if !reflect.DeepEqual(rs, wantRuns) {
		t.Fatalf("runs:\n got %+v\nwant %+v", rs, wantRuns)
	}
}

// TestMajorityHugeNetwork: a network covering 2^40 blocks must cost one
// row, not a loop per block (IPv6 has such networks).
func TestMajorityHugeNetwork(t *testing.T) {
	nets := []network{{first: 0, last: math.MaxUint64, loc: geo.Point{Lat: 1, Lon: 2}, addrs: math.Ldexp(1, 64)}}
	blocks := majority(nets, 24, 0.25)
	if len(blocks) != 1 || blocks[0].first != 0 || blocks[0].last != math.MaxUint64>>24 {
		t.Fatalf("blocks %+v", blocks)
	}
	nets = []network{{first: 0x10, last: 0x3ff_ffff_ffff, loc: geo.Point{Lat: 1, Lon: 2}, addrs: 1}}
	blocks = majority(nets, 8, 0.25)
	if len(blocks) != 2 || blocks[0] != (block{0, 0, geo.Quantise(geo.Point{Lat: 1, Lon: 2}, 0.25)}) || blocks[1].first != 1 || blocks[1].last != 0x3ff_ffff_ffff>>8 {
		t.Fatalf("blocks %+v", blocks)
	}
}
