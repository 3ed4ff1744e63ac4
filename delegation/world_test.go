package delegation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// synthWorld is a small synthetic Internet for the engine's own property
// tests and benchmarks (the real simulator lives in testnet/sim): countries
// with a centre and a spread, registry /8 blocks, LIR /16 allocations per
// country, customer /24s of other organisations, and an RTT model with
// great-circle fibre time × a stable per-pair stretch (lognormal, median 2)
// + access delays + jitter. The policies never see it: they get a Prober.
type synthWorld struct {
	tree     *hierarchy.Tree
	crawlers []Crawler
	hosts    []netip.Addr
	loc      map[netip.Addr][2]float64 // lat, lon of each /24 (and crawler)
	access   map[netip.Addr]float64    // ms
	jitter   float64
	rng      *rand.Rand // jitter source
	probes   int
}

type synthCountry struct {
	cc           string
	lat, lon, km float64
	weight       float64
	blocks       []netip.Prefix // /16s
}

func newSynthWorld(tb testing.TB, seed uint64, nCrawlers, nHosts int) *synthWorld {
	rng := rand.New(rand.NewPCG(seed, 99))
	w := &synthWorld{loc: map[netip.Addr][2]float64{}, access: map[netip.Addr]float64{}, jitter: 0.05, rng: rand.New(rand.NewPCG(seed, 100))}
	b := hierarchy.NewBuilder()
	var countries []*synthCountry
	nCountries := 60
	for i := range nCountries {
		c := &synthCountry{
			cc:     fmt.Sprintf("%c%c", 'A'+i/26, 'A'+i%26),
			lat:    math.Asin(2*rng.Float64()-1) * 180 / math.Pi * 0.8,
			lon:    rng.Float64()*360 - 180,
			km:     100 + rng.ExpFloat64()*500,
			weight: 1 / math.Pow(float64(i+1), 0.9),
		}
		countries = append(countries, c)
	}
	// /8 blocks: 1.0.0.0/8 … 60.0.0.0/8, each shared by a few countries
	next16 := 0
	for blk := 1; blk <= 40; blk++ {
		p8 := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(blk), 0, 0, 0}), 8)
		add(tb, b, p8, "", "")
		for j := 0; j < 60; j++ {
			c := countries[rng.IntN(nCountries)]
			p16 := netip.PrefixFrom(netip.AddrFrom4([4]byte{byte(blk), byte(j), 0, 0}), 16)
			c.blocks = append(c.blocks, p16)
			add(tb, b, p16, fmt.Sprintf("lir-%d-%d", blk, j), c.cc)
			next16++
		}
	}
	w.tree = func() *hierarchy.Tree {
		// customer /24s: every third /24 of a /16, owned by customers
		for _, c := range countries {
			for _, p16 := range c.blocks {
				a := p16.Addr().As4()
				for k := 0; k < 256; k += 3 {
					p24 := netip.PrefixFrom(netip.AddrFrom4([4]byte{a[0], a[1], byte(k), 0}), 24)
					org := fmt.Sprintf("cust-%d", rng.IntN(4000))
					add(tb, b, p24, org, c.cc)
				}
			}
		}
		t, _, err := b.Build()
		if err != nil {
			tb.Fatal(err)
		}
		return t
	}()
	weights := make([]float64, nCountries)
	total := 0.0
	for i, c := range countries {
		total += c.weight
		weights[i] = total
	}
	pick := func() *synthCountry {
		for {
			x := rng.Float64() * total
			i, _ := slices.BinarySearch(weights, x)
			if len(countries[i].blocks) > 0 {
				return countries[i]
			}
		}
	}
	place := func(c *synthCountry) netip.Addr {
		p16 := c.blocks[rng.IntN(len(c.blocks))]
		a := p16.Addr().As4()
		a[2], a[3] = byte(rng.IntN(256)), byte(1+rng.IntN(254))
		ip := netip.AddrFrom4(a)
		k24 := netip.AddrFrom4([4]byte{a[0], a[1], a[2], 0})
		if _, ok := w.loc[k24]; !ok {
			// an allocation (/16) serves a city of its country; most of its
			// /24s sit there, the others anywhere in the country
			k16 := netip.AddrFrom4([4]byte{a[0], a[1], 255, 255})
			city, ok := w.loc[k16]
			if !ok {
				city = jitterLoc(rng, c.lat, c.lon, c.km)
				w.loc[k16] = city
			}
			if rng.Float64() < 0.75 {
				w.loc[k24] = jitterLoc(rng, city[0], city[1], 30)
			} else {
				w.loc[k24] = jitterLoc(rng, c.lat, c.lon, c.km)
			}
		}
		w.access[ip] = 1 + rng.ExpFloat64()*4
		return ip
	}
	// crawlers in distinct countries spread world-wide (farthest first)
	used := map[*synthCountry]bool{}
	for i := range nCrawlers {
		var c *synthCountry
		if i == 0 || i >= nCountries {
			c = pick()
		} else {
			bestD := -1.0
			for k := 0; k < 20; k++ {
				cand := pick()
				if used[cand] {
					continue
				}
				dmin := math.Inf(1)
				for u := range used {
					dmin = math.Min(dmin, greatCircleKm(cand.lat, cand.lon, u.lat, u.lon))
				}
				if dmin > bestD {
					bestD, c = dmin, cand
				}
			}
			if c == nil {
				c = pick()
			}
		}
		used[c] = true
		w.crawlers = append(w.crawlers, Crawler{ID: CrawlerID(fmt.Sprintf("crawler-%03d", i)), Addr: place(c)})
	}
	for range nHosts {
		w.hosts = append(w.hosts, place(pick()))
	}
	return w
}

func jitterLoc(rng *rand.Rand, lat, lon, km float64) [2]float64 {
	d := rng.ExpFloat64() * km
	br := rng.Float64() * 2 * math.Pi
	return [2]float64{lat + d/111*math.Cos(br), lon + d/111*math.Sin(br)/math.Max(0.2, math.Cos(lat*math.Pi/180))}
}

func add(tb testing.TB, b *hierarchy.Builder, p netip.Prefix, org, cc string) {
	r := hierarchy.Range{Start: p.Addr(), End: lastAddr(p), Org: org, Country: cc, Registry: hierarchy.RegistryRIPENCC, Status: hierarchy.StatusAllocated}
	if err := b.Add(r); err != nil {
		tb.Fatal(err)
	}
}

func (w *synthWorld) addrLoc(a netip.Addr) [2]float64 {
	b := a.As4()
	return w.loc[netip.AddrFrom4([4]byte{b[0], b[1], b[2], 0})]
}

// meanRTT is the model's RTT without jitter, in ms.
func (w *synthWorld) meanRTT(c Crawler, h netip.Addr) float64 {
	l1, l2 := w.addrLoc(c.Addr), w.addrLoc(h)
	km := greatCircleKm(l1[0], l1[1], l2[0], l2[1])
	hb := h.As16()
	z := mix64(hashString(string(c.ID)) ^ hashBytes(hb[:]))
	u := (float64(z>>11) + 0.5) / (1 << 53)
	stretch := 2 * math.Exp(0.32*normInv(u))
	return 2*km/200*stretch + w.access[c.Addr] + w.access[h]
}

func normInv(p float64) float64 { return -math.Sqrt2 * math.Erfcinv(2*p) }

func (w *synthWorld) crawler(id CrawlerID) Crawler {
	for _, c := range w.crawlers {
		if c.ID == id {
			return c
		}
	}
	return Crawler{}
}

// Probe implements Prober with jitter.
func (w *synthWorld) Probe(_ context.Context, target netip.Addr, cs []CrawlerID) []ProbeResult {
	out := make([]ProbeResult, len(cs))
	for i, id := range cs {
		w.probes++
		m := w.meanRTT(w.crawler(id), target)
		m *= 1 + w.jitter*w.rng.ExpFloat64()
		out[i] = ProbeResult{Crawler: id, RTT: time.Duration(m * float64(time.Millisecond)), OK: true}
	}
	return out
}

func (w *synthWorld) optimal(h netip.Addr) CrawlerID {
	best, bd := CrawlerID(""), math.Inf(1)
	for _, c := range w.crawlers {
		if d := w.meanRTT(c, h); d < bd {
			best, bd = c.ID, d
		}
	}
	return best
}

type simResult struct {
	name                string
	optPct, probes      float64 // evaluation part
	probesAll, excessMs float64
}

// runSynth runs policy mk on w: join all crawlers, delegate every host; the
// first train fraction trains, the rest is evaluated.
func runSynth(tb testing.TB, w *synthWorld, seed uint64, cfg Config, mk func(Deps, Config) Policy) simResult {
	members := NewMemMembership(w.crawlers...)
	dir := NewMemDirectory(w.tree, members)
	deps := Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(seed, 1))}
	p := mk(deps, cfg)
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			tb.Fatal(err)
		}
	}
	train := len(w.hosts) * 65 / 100
	var r simResult
	r.name = p.Name()
	nEval, opt, probes, probesAll, excess := 0, 0, 0, 0, 0.0
	for i, h := range w.hosts {
		d, err := p.Delegate(ctx, h)
		if err != nil {
			tb.Fatal(err)
		}
		probesAll += d.Probes
		if i < train {
			continue
		}
		nEval++
		probes += d.Probes
		o := w.optimal(h)
		if d.Owner == o {
			opt++
		}
		excess += w.meanRTT(w.crawler(d.Owner), h) - w.meanRTT(w.crawler(o), h)
	}
	r.optPct = 100 * float64(opt) / float64(nEval)
	r.probes = float64(probes) / float64(nEval)
	r.probesAll = float64(probesAll) / float64(len(w.hosts))
	r.excessMs = excess / float64(nEval)
	return r
}

func TestSynthPolicies(t *testing.T) {
	w := newSynthWorld(t, 1, 12, 1000)
	for _, mk := range []func(Deps, Config) Policy{NewRandom, NewConsistentHash, NewOptimal, NewIPMicra, NewMicra} {
		w.probes = 0
		r := runSynth(t, w, 1, Config{}, mk)
		t.Logf("%-8s optimal %5.1f%%  probes/URL eval %.2f all %.2f  excess %.1f ms", r.name, r.optPct, r.probes, r.probesAll, r.excessMs)
	}
}
