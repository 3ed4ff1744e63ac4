package delegation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// locateChooser is a micraChooser over a grid of crawlers every 2° from
// 30–50°N, 0–30°E, stating their positions, with a distance fit learned
// from answers of RTT = 5 ms + 0.02 ms/km, as if measured.
func locateChooser(t *testing.T) *micraChooser {
	t.Helper()
	m := &micraChooser{cfg: MicraConfig{}.withDefaults(), crawler: newCrawlerIndex(), scopes: map[scopeKey]*scopeStats{}}
	for lat := 30.0; lat <= 50; lat += 2 {
		for lon := 0.0; lon <= 30; lon += 2 {
			ci := m.crawler.id(CrawlerID(fmt.Sprintf("c%02.0f%02.0f", lat, lon)))
			m.pos = append(m.pos, newCrawlerPos(lat, lon))
			m.liveCi = append(m.liveCi, true)
			m.liveOrd = append(m.liveOrd, ci)
		}
	}
	m.locGen = 1
	rtt := func(km float64) float64 { return 5 + 0.02*km }
	for km := 0.0; km <= 3000; km += 50 {
		m.lin.add(km, rtt(km))
		m.geo.add(math.Log(km+geoKm0), math.Log(rtt(km)))
	}
	return m
}

// TestLocateFindsHostRegion: answers from three far crawlers, each at the
// RTT its distance to a host at 41°N 21°E gives, place the host there:
// the located candidates are the crawlers nearest it, unprobed ones only,
// and every candidate with a position is predicted anew from its distance
// to the place — the one sitting at the host lowest of all.
func TestLocateFindsHostRegion(t *testing.T) {
	m := locateChooser(t)
	hlat, hlon := 41.0, 21.0
	rttTo := func(ci uint32) time.Duration {
		km := greatCircleKm(hlat, hlon, m.pos[ci].lat, m.pos[ci].lon)
		return time.Duration((5 + 0.02*km) * float64(time.Millisecond))
	}
	id := func(lat, lon int) uint32 { return m.crawler.idx[CrawlerID(fmt.Sprintf("c%02d%02d", lat, lon))] }
	far := []uint32{id(30, 0), id(50, 30), id(30, 30)}
	var all []ProbeResult
	var cands []micraCand
	mark := make([]uint32, len(m.liveCi))
	for _, ci := range far {
		all = append(all, ProbeResult{Crawler: m.crawler.ids[ci], RTT: rttTo(ci), OK: true})
		cands = append(cands, micraCand{id: m.crawler.ids[ci], ci: ci, mu: math.Log(50), sd: 0.9, probed: true})
		mark[ci] = 1
	}
	// a learned candidate far from the host, not probed yet
	learned := id(50, 0)
	cands = append(cands, micraCand{id: m.crawler.ids[learned], ci: learned, mu: math.Log(8), sd: 0.9})
	mark[learned] = 1
	sortRanked(all)
	out := m.addLocated(cands, all, mark, 1, 7)
	if len(out) != len(cands)+m.cfg.Locate {
		t.Fatalf("%d candidates after locating, want %d + %d located", len(out), len(cands), m.cfg.Locate)
	}
	var got []string
	for _, c := range out[len(cands):] {
		km := greatCircleKm(hlat, hlon, m.pos[c.ci].lat, m.pos[c.ci].lon)
		if km > 200 {
			t.Errorf("located candidate %s is %.0f km from the host", c.id, km)
		}
		if c.from != "located" || !c.anchored || mark[c.ci] != 1 {
			t.Errorf("located candidate %+v: not marked as such", c)
		}
		got = append(got, string(c.id))
	}
	// the four grid points around the host are equally near it
	if nearest := "c4020 c4022 c4220 c4222"; !strings.Contains(nearest, got[0]) {
		t.Errorf("located %v first: want one of %s, the crawlers nearest the host", got, nearest)
	}
	if l := out[len(cands)-1]; !l.hasLoc || l.mu <= out[len(cands)].mu {
		t.Errorf("the far learned candidate is predicted %.2f (placed %v), not above the located one's %.2f", l.mu, l.hasLoc, out[len(cands)].mu)
	}
	for _, c := range out[:len(far)] {
		if c.hasLoc {
			t.Errorf("probed candidate %s predicted anew", c.id)
		}
	}
}

// addCluster adds n live crawlers stating position lat, lon to m (a city
// of volunteers) and returns their indexes.
func addCluster(m *micraChooser, name string, n int, lat, lon float64) []uint32 {
	var cis []uint32
	for k := range n {
		ci := m.crawler.id(CrawlerID(fmt.Sprintf("%s%d", name, k)))
		m.pos = append(m.pos, newCrawlerPos(lat, lon))
		m.liveCi = append(m.liveCi, true)
		m.liveOrd = append(m.liveOrd, ci)
		cis = append(cis, ci)
	}
	return cis
}

// TestLocateFromOneAnswer: a single far answer puts the host on a ring
// around the answering crawler; of the places on it, the one with the most
// crawlers around is taken — a city on the ring wins over the grid, a
// larger city off the ring does not — its crawlers join the candidates,
// the learned candidate is predicted anew from its distance to it, and
// those predictions' errors are learned apart from placements on two
// answers or more.
func TestLocateFromOneAnswer(t *testing.T) {
	m := locateChooser(t)
	hlat, hlon := 41.0, 21.0
	onRing := addCluster(m, "ring", 12, hlat, hlon)
	offRing := addCluster(m, "near", 20, 31.0, 1.0) // beside the answering crawler
	from := m.crawler.idx["c3000"]
	// the path is longer than the map's distance, as paths are: the ring
	// passes 10 % beyond the host, through grid crawlers, not through it
	km := 1.1 * greatCircleKm(hlat, hlon, 30, 0)
	all := []ProbeResult{{Crawler: "c3000", RTT: time.Duration((5 + 0.02*km) * float64(time.Millisecond)), OK: true}}
	learned := m.crawler.idx["c5030"]
	cands := []micraCand{{id: "c3000", ci: from, probed: true}, {id: "c5030", ci: learned, mu: math.Log(8), sd: 0.9}}
	mark := make([]uint32, len(m.liveCi))
	mark[from], mark[learned] = 1, 1
	out := m.addLocated(cands, all, mark, 1, 7)
	if len(out) != len(cands)+m.cfg.Locate {
		t.Fatalf("%d candidates after one answer, want %d + %d located", len(out), len(cands), m.cfg.Locate)
	}
	for _, c := range out[len(cands):] {
		if !slices.Contains(onRing, c.ci) || slices.Contains(offRing, c.ci) {
			t.Errorf("located candidate %s at %.1f, %.1f: want the city on the ring at %.0f, %.0f", c.id, m.pos[c.ci].lat, m.pos[c.ci].lon, hlat, hlon)
		}
		if !c.locOne || !c.hasLoc {
			t.Errorf("located candidate %s not marked as placed from one answer", c.id)
		}
	}
	if l := out[1]; !l.hasLoc || !l.locOne || l.mu <= out[len(cands)].mu {
		t.Errorf("the far learned candidate is predicted %.2f (placed %v), not above the located one's %.2f", l.mu, l.hasLoc, out[len(cands)].mu)
	}
	m.locAnswer(&out[len(cands)], math.Log(6))
	if m.locErr1.n != 1 || m.locErr.n != 0 {
		t.Errorf("an answer to a one-answer placement was learned as %v (one answer) and %v (more)", m.locErr1.n, m.locErr.n)
	}
}

// TestRingPlaceCellsExact: ringPlace through the cells finds what a scan of
// every place finds with the same densities — the densest place within
// the band, the least misfit, the lowest index — and the place nearest the
// ring when none lies within it.
func TestRingPlaceCellsExact(t *testing.T) {
	r := rand.New(rand.NewPCG(7, 8))
	ch0 := 2 * math.Sin(locateKm0/(2*6371.0))
	for _, n := range []int{placeIndexFrom, 2000} {
		pl := randomPlaces(r, n)
		pc := buildPlaceCells(pl)
		placeDensity(pl, &pc)
		for q := range 300 {
			t1 := randomTargets(r, pl, 1, ch0)[0]
			if q%10 == 0 { // beyond every place: no place on the ring
				t1.ch, t1.inv = 2.5, 1/(2.5+ch0)
			}
			want := ringPlace(pl, &placeCells{}, &t1, ch0)
			if got := ringPlace(pl, &pc, &t1, ch0); got != want || got < 0 {
				t.Fatalf("%d places, query %d: cells give place %d, the scan %d", n, q, got, want)
			}
		}
	}
}

// TestPlaceDensityCounts: a place's density counts the crawlers around it,
// its own included, through the cells or without them.
func TestPlaceDensityCounts(t *testing.T) {
	pl := []placeGroup{
		{pos: newCrawlerPos(48, 2), cis: []uint32{0, 1, 2}},
		{pos: newCrawlerPos(48.1, 2.1), cis: []uint32{3}},
		{pos: newCrawlerPos(-33, 151), cis: []uint32{4}},
	}
	placeDensity(pl, &placeCells{})
	if pl[0].dens != 4 || pl[1].dens != 4 || pl[2].dens != 1 {
		t.Fatalf("densities %d %d %d, want 4 4 1", pl[0].dens, pl[1].dens, pl[2].dens)
	}
	r := rand.New(rand.NewPCG(9, 10))
	many := randomPlaces(r, 1000)
	pc := buildPlaceCells(many)
	placeDensity(many, &pc)
	total := int32(0)
	for _, k := range pc.byDens {
		total += pc.cells[k].n
	}
	if total != 1000 {
		t.Fatalf("the cells count %d crawlers, want 1000", total)
	}
	for i := 1; i < len(pc.byDens); i++ {
		if pc.cells[pc.byDens[i]].n > pc.cells[pc.byDens[i-1]].n {
			t.Fatalf("cells not by crawlers, most first, at %d", i)
		}
	}
}

// locateRun delegates 600 hosts among 40 crawlers that state their
// positions (more crawlers than candidates: hosts are placed), each cached
// host reviewed with its owner's timing as the simulator does, and returns
// the decisions and reviews.
func locateRun(t *testing.T) (decided, reviewed []Decision) {
	t.Helper()
	ctx := context.Background()
	w := newSynthWorld(t, 6, 40, 600)
	members := NewMemMembership()
	// (MaxProbes 8: reviews place hosts among more than 4 × MaxProbes)
	p := NewMicra(synthDeps(w, NewMemDirectory(w.tree, members), members, 1), Config{Self: "d", Micra: MicraConfig{GeoAfter: 10, MaxProbes: 8}})
	for _, c := range w.crawlers {
		l := w.addrLoc(c.Addr)
		c.Lat, c.Lon, c.HasPos = l[0], l[1], true
		members.Add(c)
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	rv := p.(Reviewer)
	for _, h := range w.hosts {
		d, err := p.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if d.Cached && d.Reason == ReasonCached {
			took := time.Duration(w.meanRTT(w.crawler(d.Owner), h) * float64(time.Millisecond))
			if d, err = rv.Review(ctx, h, d.Owner, took); err != nil {
				t.Fatal(err)
			}
			reviewed = append(reviewed, d)
			continue
		}
		decided = append(decided, d)
	}
	return decided, reviewed
}

// locatedAdded is the number of located candidates d's explanation reports.
func locatedAdded(d Decision) int {
	for _, s := range d.Steps {
		if i := strings.Index(s.Note, " near the located host"); i > 0 {
			j := strings.LastIndexByte(s.Note[:i], '+')
			if n, err := strconv.Atoi(s.Note[j+1 : i]); err == nil {
				return n
			}
		}
	}
	return 0
}

// TestLocateEveryAnswer: the host is placed after every answer, not only
// on a new best — decisions add more located candidates than Locate per
// new best could — and a review places it from the owner's timing before
// any probe.
func TestLocateEveryAnswer(t *testing.T) {
	decided, reviewed := locateRun(t)
	loc := MicraConfig{}.withDefaults().Locate
	beyond := 0
	for _, d := range decided {
		bests, best := 0, time.Duration(math.MaxInt64)
		for _, s := range d.Steps {
			for _, p := range s.Probes {
				if p.OK && p.RTT > 0 && p.RTT < best {
					best, bests = p.RTT, bests+1
				}
			}
		}
		if locatedAdded(d) > loc*bests {
			beyond++
		}
	}
	if beyond < 20 {
		t.Fatalf("%d of %d decisions added more located candidates than their new best answers allow", beyond, len(decided))
	}
	// a review placed from the owner's timing adds more located
	// candidates than its own probes' answers allow
	placed := 0
	for _, d := range reviewed {
		if locatedAdded(d) > loc*d.Probes {
			placed++
		}
	}
	if placed < 3 {
		t.Fatalf("%d of %d reviews added more located candidates than their probes allow", placed, len(reviewed))
	}
}
