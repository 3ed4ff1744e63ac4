package delegation

import (
	"math"
	"math/rand/v2"
	"testing"
)

// randomPlaces returns n places clustered like volunteers' machines: most
// around a few dozen cities, some anywhere, some sharing a position.
func randomPlaces(r *rand.Rand, n int) []placeGroup {
	type city struct{ lat, lon float64 }
	cities := make([]city, 40)
	for i := range cities {
		cities[i] = city{r.Float64()*140 - 60, r.Float64()*360 - 180}
	}
	pl := make([]placeGroup, 0, n)
	for len(pl) < n {
		var lat, lon float64
		switch k := r.IntN(10); {
		case k == 0:
			lat, lon = r.Float64()*180-90, r.Float64()*360-180
		case k == 1 && len(pl) > 0: // the same position as an earlier place
			p := pl[r.IntN(len(pl))].pos
			lat, lon = p.lat, p.lon
		default:
			c := cities[r.IntN(len(cities))]
			lat, lon = c.lat+r.NormFloat64()*2, c.lon+r.NormFloat64()*3
			lat = max(-90, min(90, lat))
			lon = math.Mod(lon+540, 360) - 180
		}
		pl = append(pl, placeGroup{pos: newCrawlerPos(lat, lon), cis: []uint32{uint32(len(pl))}})
	}
	return pl
}

// randomTargets returns k answers from random places of pl at chords
// their distance to a random host gives, with noise.
func randomTargets(r *rand.Rand, pl []placeGroup, k int, ch0 float64) []locatedTarget {
	host := newCrawlerPos(r.Float64()*140-60, r.Float64()*360-180)
	ts := make([]locatedTarget, k)
	for j := range ts {
		p := pl[r.IntN(len(pl))].pos
		ch := math.Sqrt(chord2(&p, &host)) * math.Exp(r.NormFloat64()*0.3)
		ts[j] = locatedTarget{p: p, ch: ch, inv: 1 / (ch + ch0)}
	}
	return ts
}

// TestBestPlaceCellsExact: with cells, bestPlace finds the place the full
// scan finds — least score, lowest index among ties — over clustered
// places, duplicate positions and 2–6 answers.
func TestBestPlaceCellsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	ch0 := 2 * math.Sin(locateKm0/(2*6371.0))
	m := &micraChooser{}
	for _, n := range []int{placeIndexFrom, 1000, 5000} {
		pl := randomPlaces(r, n)
		pc := buildPlaceCells(pl)
		if len(pc.cells) == 0 || len(pc.cells) >= n || len(pc.groups) == 0 || len(pc.groups) >= len(pc.cells) {
			t.Fatalf("%d places: %d cells in %d groups", n, len(pc.cells), len(pc.groups))
		}
		for q := range 300 {
			ts := randomTargets(r, pl, 2+q%5, ch0)
			want := m.bestPlace(pl, nil, ts, ch0, -1)
			if got := m.bestPlace(pl, &pc, ts, ch0, -1); got != want {
				t.Fatalf("%d places, query %d: cells give place %d (score %v), the full scan %d (score %v)",
					n, q, got, placeScore(&pl[got].pos, ts, ch0, math.Inf(1)), want, placeScore(&pl[want].pos, ts, ch0, math.Inf(1)))
			}
			// a warm start anywhere (the last placement of a decision)
			// finds the same place, with cells and without
			warm := r.IntN(n)
			if got, got2 := m.bestPlace(pl, &pc, ts, ch0, warm), m.bestPlace(pl, nil, ts, ch0, warm); got != want || got2 != want {
				t.Fatalf("%d places, query %d: warm from %d, cells give %d, the scan %d; want %d", n, q, warm, got, got2, want)
			}
		}
	}
}

// TestBestPlaceTiesLowestIndex: places at one position score alike; the
// lowest index wins with cells as without.
func TestBestPlaceTiesLowestIndex(t *testing.T) {
	r := rand.New(rand.NewPCG(3, 4))
	pl := randomPlaces(r, 400)
	ch0 := 2 * math.Sin(locateKm0/(2*6371.0))
	// the host sits exactly at place 300, which three later places share
	for i := 390; i < 393; i++ {
		pl[i].pos = pl[300].pos
	}
	var ts []locatedTarget
	for _, j := range []int{5, 50, 100} {
		ch := math.Sqrt(chord2(&pl[j].pos, &pl[300].pos))
		ts = append(ts, locatedTarget{p: pl[j].pos, ch: ch, inv: 1 / (ch + ch0)})
	}
	first := 300 // the lowest index at that position (randomPlaces repeats positions)
	for i := range pl {
		if pl[i].pos == pl[300].pos {
			first = i
			break
		}
	}
	m := &micraChooser{}
	pc := buildPlaceCells(pl)
	if got, want := m.bestPlace(pl, &pc, ts, ch0, -1), m.bestPlace(pl, nil, ts, ch0, -1); got != first || want != first {
		t.Fatalf("cells: place %d, full scan: %d; want %d", got, want, first)
	}
	// warm from a later place at the same position: the lowest index still
	for _, warm := range []int{390, 392} {
		if got, got2 := m.bestPlace(pl, &pc, ts, ch0, warm), m.bestPlace(pl, nil, ts, ch0, warm); got != first || got2 != first {
			t.Fatalf("warm from %d: cells: place %d, full scan: %d; want %d", warm, got, got2, first)
		}
	}
}

// BenchmarkBestPlace: one placement among 5,000 clustered places, with
// the cells and by the full scan beside it.
func BenchmarkBestPlace(b *testing.B) {
	r := rand.New(rand.NewPCG(5, 6))
	pl := randomPlaces(r, 5000)
	ch0 := 2 * math.Sin(locateKm0/(2*6371.0))
	qs := make([][]locatedTarget, 64)
	for i := range qs {
		qs[i] = randomTargets(r, pl, 6, ch0)
	}
	m := &micraChooser{}
	for _, bc := range []struct {
		name  string
		cells *placeCells
	}{{"cells", func() *placeCells { pc := buildPlaceCells(pl); return &pc }()}, {"full-scan", nil}} {
		b.Run(bc.name, func(b *testing.B) {
			i := 0
			for b.Loop() {
				m.bestPlace(pl, bc.cells, qs[i%len(qs)], ch0, -1)
				i++
			}
		})
	}
}

// TestPlaceScoreBounded: the bound spares a place only when its score is
// above stop; otherwise the score is placeScore's, bit for bit — stops at,
// just below and just above the place's own score included.
func TestPlaceScoreBounded(t *testing.T) {
	r := rand.New(rand.NewPCG(5, 6))
	ch0 := 2 * math.Sin(locateKm0/(2*6371.0))
	pl := randomPlaces(r, 500)
	spared := 0
	for q := range 200 {
		ts := randomTargets(r, pl, 2+q%5, ch0)
		for i := range pl {
			p := &pl[i].pos
			full := placeScore(p, ts, ch0, math.Inf(1))
			for _, stop := range []float64{full, math.Nextafter(full, 0), math.Nextafter(full, math.Inf(1)), full * 0.5, full * 2, r.Float64() * 4, math.Inf(1)} {
				got := placeScoreBounded(p, ts, ch0, stop)
				want := placeScore(p, ts, ch0, stop)
				switch {
				case got == want:
				case got > stop && full > stop:
					spared++
				default:
					t.Fatalf("place %d, stop %v (score %v): %v, placeScore %v", i, stop, full, got, want)
				}
			}
		}
	}
	if spared == 0 {
		t.Fatal("the bound spared no place: the test exercises nothing")
	}
}
