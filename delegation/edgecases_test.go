package delegation

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"math/rand/v2"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// flatWorld: 10.0.0.0/8 (DE) with n /24s under 10.x.y.0; crawlers sit outside
// the hierarchy (no placement), RTT(crawler i) = base(i) for every host.
type flatWorld struct {
	tree    *hierarchy.Tree
	members *MemMembership
	dir     *MemDirectory
	rtt     map[CrawlerID]time.Duration
	probes  int
}

func newFlatWorld(t testing.TB, nSubnets int) *flatWorld {
	rs := []hierarchy.Range{pfx(t, "10.0.0.0/8", "A", "DE")}
	for i := range nSubnets {
		rs = append(rs, pfx(t, fmt.Sprintf("10.%d.%d.0/24", 1+i/250, i%250), fmt.Sprintf("O%d", i), "DE"))
	}
	tr := mustBuild(t, rs...)
	w := &flatWorld{tree: tr, members: NewMemMembership(), rtt: map[CrawlerID]time.Duration{}}
	w.dir = NewMemDirectory(tr, w.members)
	return w
}

func (w *flatWorld) host(i int) netip.Addr {
	return netip.MustParseAddr(fmt.Sprintf("10.%d.%d.7", 1+i/250, i%250))
}

func (w *flatWorld) Probe(_ context.Context, _ netip.Addr, cs []CrawlerID) []ProbeResult {
	out := make([]ProbeResult, len(cs))
	for i, c := range cs {
		w.probes++
		d, ok := w.rtt[c]
		out[i] = ProbeResult{Crawler: c, RTT: d, OK: ok}
	}
	return out
}

func (w *flatWorld) deps() Deps {
	return Deps{Tree: w.tree, Dir: w.dir, Prober: w, Members: w.members,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(1, 2))}
}

func crawlerAt(i int) Crawler {
	return Crawler{ID: CrawlerID(fmt.Sprintf("c%03d", i)), Addr: netip.MustParseAddr(fmt.Sprintf("30.0.%d.%d", i/200, 1+i%200))}
}

// A prober answer with a negative RTT is no answer. Taken as one, it made
// every probability NaN, so the stop rule never fired and the decision
// probed up to MaxProbes, and the negative answer won the subnet.
func TestNegativeRTTIsNoAnswer(t *testing.T) {
	run := func(bad time.Duration) (Decision, int) {
		w := newFlatWorld(t, 20)
		for i := range 30 {
			c := crawlerAt(i)
			w.members.Add(c)
			w.rtt[c.ID] = time.Duration(40+i) * time.Millisecond
		}
		p := NewMicra(w.deps(), Config{Micra: MicraConfig{Blind: -1}})
		// learn: crawler c000 is fastest everywhere (train via Delegate)
		for i := range 10 {
			if _, err := p.Delegate(context.Background(), w.host(i)); err != nil {
				t.Fatal(err)
			}
		}
		w.rtt[crawlerAt(0).ID] = bad
		before := w.probes
		d, err := p.Delegate(context.Background(), w.host(16))
		if err != nil {
			t.Fatal(err)
		}
		return d, w.probes - before
	}
	dOK, nOK := run(1 * time.Millisecond)
	dNeg, nNeg := run(-1 * time.Millisecond)
	t.Logf("RTT +1ms: %d probes, %v", nOK, dOK)
	t.Logf("RTT -1ms: %d probes, %v", nNeg, dNeg)
	if dNeg.Owner == crawlerAt(0).ID || dNeg.OwnerRTT < 0 {
		t.Errorf("a negative RTT won the subnet: owner %s at %v", dNeg.Owner, dNeg.OwnerRTT)
	}
	// no answer from c000: the next candidate answers and the stop rule
	// holds (NaN statistics probed all 12)
	if nNeg > nOK+1 {
		t.Errorf("a negative RTT made the decision probe %d times (%d with a positive one)", nNeg, nOK)
	}
}

// After the 16 fastest crawlers leave, the live crawler known to be the
// fastest left is still a candidate and wins as often as when the departed
// ones were never seen (their places in the top lists once hid it, and
// decisions fell to 16 random live crawlers).
func TestDepartedCrawlersLeaveTopLists(t *testing.T) {
	for _, blind := range []float64{0, -1} {
		t.Run(fmt.Sprintf("blind=%v", blind), func(t *testing.T) { departedCrawlersLeaveTopLists(t, blind) })
	}
}

func departedCrawlersLeaveTopLists(t *testing.T, blind float64) {
	const n = 100
	mk := func(withGone bool) (Policy, *flatWorld) {
		w := newFlatWorld(t, 300)
		for i := range n {
			c := crawlerAt(i)
			w.rtt[c.ID] = time.Duration(10+i) * time.Millisecond
			w.members.Add(c)
		}
		p := NewMicra(w.deps(), Config{Micra: MicraConfig{Blind: blind}})
		l := p.(Learner)
		// records decided elsewhere (e.g. brute force), all answers
		for s := range 100 {
			sub := w.tree.SmallestNonUnary(w.host(s))
			var ps []ProbeResult
			for i := range n {
				if i < 16 && !withGone {
					continue
				}
				c := crawlerAt(i).ID
				ps = append(ps, ProbeResult{Crawler: c, RTT: w.rtt[c], OK: true})
			}
			l.Learn(Record{Subnet: sub, Snapshot: w.tree.ID(), Owner: ps[0].Crawler, OwnerRTT: ps[0].RTT, Probes: ps, Epoch: 1, DecidedBy: "x"})
		}
		for i := range 16 { // the 16 fastest leave
			w.members.Remove(crawlerAt(i).ID)
		}
		return p, w
	}
	count := func(p Policy, w *flatWorld) (hits int, probes int) {
		for s := 150; s < 250; s++ {
			d, err := p.Delegate(context.Background(), w.host(s))
			if err != nil {
				t.Fatal(err)
			}
			probes += d.Probes
			if d.Owner == crawlerAt(16).ID {
				hits++
			}
		}
		return
	}
	pc, wc := mk(false)
	hc, prc := count(pc, wc)
	pg, wg := mk(true)
	hg, prg := count(pg, wg)
	t.Logf("control (departed crawlers never seen): %d/100 to the fastest live crawler, %d probes", hc, prc)
	t.Logf("after the 16 fastest departed:         %d/100 to the fastest live crawler, %d probes", hg, prg)
	if hg < hc-10 {
		t.Errorf("departed crawlers in the top lists cost %d of 100 decisions", hc-hg)
	}
}

// MinCandidates above topK is honoured by the cold start (it stopped at
// topK).
func TestMinCandidatesAboveTopK(t *testing.T) {
	w := newFlatWorld(t, 5)
	for i := range 40 {
		c := crawlerAt(i)
		w.members.Add(c)
		w.rtt[c.ID] = time.Duration(40+i) * time.Millisecond
	}
	p := NewMicra(w.deps(), Config{Micra: MicraConfig{MinCandidates: 32}})
	d, err := p.Delegate(context.Background(), w.host(1))
	if err != nil {
		t.Fatal(err)
	}
	note := d.Steps[len(d.Steps)-1].Note
	if !strings.HasPrefix(note, "32 ") {
		t.Errorf("MinCandidates 32 with 40 live crawlers: %q", note)
	}
}

// A calibration event's Redelegate probes: the statistics that made a
// blind guess are unchanged by the event, so a blind re-decision
// republished the slow owner without a single probe.
func TestRedelegateNeverBlind(t *testing.T) {
	ctx := context.Background()
	w := newFlatWorld(t, 300)
	for i := range 20 {
		c := crawlerAt(i)
		w.members.Add(c)
		w.rtt[c.ID] = time.Duration(10+i) * time.Millisecond
	}
	p := NewMicra(w.deps(), Config{})
	l := p.(Learner)
	for s := range 100 {
		var ps []ProbeResult
		for i := range 20 {
			c := crawlerAt(i).ID
			ps = append(ps, ProbeResult{Crawler: c, RTT: w.rtt[c], OK: true})
		}
		l.Learn(Record{Subnet: w.tree.SmallestNonUnary(w.host(s)), Snapshot: w.tree.ID(), Owner: ps[0].Crawler, Probes: ps, Epoch: 1, DecidedBy: "x"})
	}
	h := w.host(200)
	d, err := p.Delegate(ctx, h)
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("first: %v", d)
	w.rtt[d.Owner] = 900 * time.Millisecond // the owner's path got slow
	cal := NewCalibrator(w.tree, Config{})
	var ev CalibrationEvent
	var fired bool
	for _, took := range []time.Duration{20, 20, 900, 900} {
		ev, fired = cal.Observe("http://x/", h, took*time.Millisecond, time.Time{})
	}
	if !fired {
		t.Fatal("no calibration event")
	}
	for range 3 {
		d2, err := p.Redelegate(ctx, ev.IP)
		if err != nil {
			t.Fatal(err)
		}
		t.Logf("redelegate: %v", d2)
		if d2.Owner == d.Owner && d2.Probes == 0 {
			t.Errorf("calibration re-delegation kept the slow owner %s without probing (reason %v)", d2.Owner, d2.Reason)
		}
	}
}

// Parallel > 1 keeps to MaxProbes in its last round.
func TestParallelKeepsMaxProbes(t *testing.T) {
	w := newFlatWorld(t, 5)
	for i := range 30 {
		w.members.Add(crawlerAt(i)) // nobody answers
	}
	p := NewMicra(w.deps(), Config{Micra: MicraConfig{Parallel: 5, MaxProbes: 12}})
	d, err := p.Delegate(context.Background(), w.host(1))
	if err != nil {
		t.Fatal(err)
	}
	if d.Probes > 12 {
		t.Errorf("MaxProbes 12, Parallel 5: %d probes", d.Probes)
	}
}

// learnedKey's decider hash is FNV-1a, as hash/fnv computes it.
func TestLearnedKeyHash(t *testing.T) {
	for _, s := range []CrawlerID{"", "c1", "12D3KooWGVBkxQsSRdEyWSLqHD7uqgJ7Z9wf9U2Hf4uqSNAz3otW"} {
		h := fnv.New64a()
		h.Write([]byte(s))
		if got, want := fnv64a(s), h.Sum64(); got != want {
			t.Errorf("fnv64a(%q) = %x, want %x", s, got, want)
		}
	}
}

// A crawler stating an impossible position (NaN, off the globe) has no
// position: its NaN distance once entered the shared distance fit, whose
// sums stayed NaN for good and switched the distance prior off for every
// crawler. The overlay filters such positions (plausiblePos); the engine
// must not depend on it.
func TestImpossiblePositionIgnored(t *testing.T) {
	for _, bad := range [][2]float64{{math.NaN(), 10}, {48, math.Inf(1)}, {91, 0}, {0, -181}} {
		w := newSmallWorld(t)
		cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
		cs[0].Lat, cs[0].Lon, cs[0].HasPos = bad[0], bad[1], true // c1 in 10.1, states nonsense
		cs[1].Lat, cs[1].Lon, cs[1].HasPos = 48.8, 2.3, true
		cs[2].Lat, cs[2].Lon, cs[2].HasPos = 38.9, -77.0, true
		p := NewMicra(w.deps(1), Config{})
		w.join(t, p, cs...)
		for _, h := range []string{"10.1.0.1", "10.2.0.1", "20.1.0.9", "20.2.0.1", "10.1.2.1", "10.2.2.1"} {
			if _, err := p.Delegate(context.Background(), ip(h)); err != nil {
				t.Fatal(err)
			}
		}
		g := p.(learningEngine).ch.(*micraChooser).geo
		if g.n == 0 {
			t.Fatalf("%v: the distance fit learned nothing from the positioned crawlers", bad)
		}
		for _, v := range []float64{g.sx, g.sy, g.sxx, g.sxy, g.syy} {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				t.Fatalf("position %v poisoned the distance fit: %+v", bad, g)
			}
		}
	}
}
