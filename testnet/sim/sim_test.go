package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"log/slog"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func quiet() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func small(seed uint64) Config {
	return Config{Seed: seed, Crawlers: 8, Hosts: 300, Train: 200, Threshold: 50 * time.Millisecond, Logger: quiet()}
}

func TestDeterministic(t *testing.T) {
	ctx := context.Background()
	a, _, err := Run(ctx, small(42), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Run(ctx, small(42), nil)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(a, b) {
		ja, _ := json.Marshal(a)
		jb, _ := json.Marshal(b)
		t.Fatalf("same seed, different reports:\n%s\n%s", ja, jb)
	}
	var ta, tb bytes.Buffer
	if err := a.WriteText(&ta); err != nil {
		t.Fatal(err)
	}
	if err := b.WriteText(&tb); err != nil {
		t.Fatal(err)
	}
	if ta.String() != tb.String() {
		t.Fatal("same seed, different text")
	}
	c, _, err := Run(ctx, small(43), nil)
	if err != nil {
		t.Fatal(err)
	}
	if reflect.DeepEqual(a.Results, c.Results) {
		t.Fatal("different seeds, identical results")
	}
}

// TestPaperPresetSane runs the paper's preset and checks what must hold of
// any sane outcome, not the figures themselves: IPMicra probes far less than
// brute force and lands far more URLs at the optimal crawler than random;
// brute force is optimal but for probe jitter; location-aware crawling is
// much cheaper than random.
func TestPaperPresetSane(t *testing.T) {
	cfg, err := Preset("paper")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet()
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if len(w.Crawlers) != 12 || len(w.Hosts) != 1000 || rep.Train != 650 {
		t.Fatalf("preset: %d crawlers, %d hosts, train %d", len(w.Crawlers), len(w.Hosts), rep.Train)
	}
	got := map[string]Result{}
	for _, r := range rep.Results {
		got[r.Policy] = r
	}
	ip, opt, rnd, hash := got["ipmicra"], got["optimal"], got["random"], got["hash"]
	t.Logf("ipmicra %.1f%% at %.2f probes/URL; optimal %.1f%%; random %.1f%%", ip.OptimalPct, ip.ProbesPerURL, opt.OptimalPct, rnd.OptimalPct)
	if ip.ProbesPerURL <= 0 || ip.ProbesPerURL > 0.6*12 {
		t.Errorf("ipmicra probes/URL %.2f: want well below brute force (12)", ip.ProbesPerURL)
	}
	if opt.ProbesPerURL < 11 || opt.ProbesPerURL > 12 {
		t.Errorf("brute force probes/URL %.2f, want ≈ 12", opt.ProbesPerURL)
	}
	if opt.OptimalPct < 90 {
		t.Errorf("brute force reaches only %.1f%% optimal", opt.OptimalPct)
	}
	if ip.OptimalPct < 50 || ip.OptimalPct < 3*rnd.OptimalPct {
		t.Errorf("ipmicra %.1f%% optimal vs random %.1f%%", ip.OptimalPct, rnd.OptimalPct)
	}
	if ip.CostVsRandom > 0.5 || rnd.CostVsRandom != 1 {
		t.Errorf("crawl cost vs random: ipmicra %.3f, random %.3f", ip.CostVsRandom, rnd.CostVsRandom)
	}
	if hash.ProbesPerURL != 0 || hash.LoadImbalance > 1.6 {
		t.Errorf("hash: %.2f probes/URL, load imbalance %.2f", hash.ProbesPerURL, hash.LoadImbalance)
	}
	if ip.ExcessMeanMs < 0 || ip.ExcessP95Ms < ip.ExcessMeanMs || opt.ExcessMeanMs > ip.ExcessMeanMs {
		t.Errorf("excess latency: ipmicra mean %.1f p95 %.1f, optimal mean %.1f", ip.ExcessMeanMs, ip.ExcessP95Ms, opt.ExcessMeanMs)
	}
	if len(ip.Curve) != 20 {
		t.Errorf("curve has %d points", len(ip.Curve))
	}
	// the JSON carries the fields the issue names
	var buf bytes.Buffer
	if err := rep.WriteJSON(&buf); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != len(rep.Results) {
		t.Fatalf("%d JSON lines for %d policies", len(lines), len(rep.Results))
	}
	var obj map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &obj); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"policy", "optimal_pct", "probes_per_url", "probes_per_url_last50"} {
		if _, ok := obj[k]; !ok {
			t.Errorf("JSON lacks %q: %s", k, lines[0])
		}
	}
	var svg bytes.Buffer
	if err := WriteSVG(&svg, []*Report{rep}); err != nil || !strings.Contains(svg.String(), "<polyline") {
		t.Errorf("SVG: %v", err)
	}
}

// TestOptimalIsExact compares the pruned optimal search with a scan of
// every crawler.
func TestOptimalIsExact(t *testing.T) {
	cfg := Config{Seed: 5, Crawlers: 300, Hosts: 3000, Logger: quiet()}
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.Hosts {
		if want := w.scanAll(&w.Hosts[i]); want != w.Optimal[i] {
			t.Fatalf("host %v: optimal %d, brute force %d", w.Hosts[i].Addr, w.Optimal[i], want)
		}
	}
}

func TestMatrixWorld(t *testing.T) {
	sites, err := world.LoadSites(strings.NewReader(`id,lat,lon,name
ams,52.37,4.90,Amsterdam
iad,38.95,-77.45,Ashburn
sin,1.35,103.82,Singapore
gru,-23.55,-46.63,São Paulo
syd,-33.87,151.21,Sydney
`), "sites.csv")
	if err != nil {
		t.Fatal(err)
	}
	var rtt strings.Builder
	rtt.WriteString("src,dst,rtt_ms\n")
	rng := rand.New(rand.NewPCG(1, 1))
	for _, a := range sites {
		for _, b := range sites {
			if a.ID != b.ID && rng.IntN(4) > 0 { // some pairs missing: formula fallback
				rtt.WriteString(a.ID + "," + b.ID + "," + []string{"40", "90", "150", "250"}[rng.IntN(4)] + "\n")
			}
		}
	}
	mx, err := world.LoadRTT(strings.NewReader(rtt.String()), "rtt.csv", sites)
	if err != nil {
		t.Fatal(err)
	}
	cfg := Config{Seed: 3, Crawlers: 10, Hosts: 400, Matrix: mx, Logger: quiet(), Policies: []string{"ipmicra", "optimal"}}
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for i := range w.Hosts {
		if w.Hosts[i].Site < 0 {
			t.Fatal("host not attached to a site")
		}
		if want := w.scanAll(&w.Hosts[i]); want != w.Optimal[i] {
			t.Fatalf("host %d: optimal %d, brute force %d", i, w.Optimal[i], want)
		}
	}
	if !strings.Contains(rep.Latency, "measured matrix (5 sites") {
		t.Errorf("latency description %q", rep.Latency)
	}
}

func TestPresetsAndPolicies(t *testing.T) {
	for _, p := range []string{"paper", "paper4", "scale"} {
		if _, err := Preset(p); err != nil {
			t.Error(err)
		}
	}
	if _, err := Preset("nope"); err == nil {
		t.Error("unknown preset accepted")
	}
	c := Config{Crawlers: 5000}.withDefaults()
	for _, p := range c.Policies {
		if p == "optimal" {
			t.Error("brute force among the defaults with 5000 crawlers")
		}
	}
	if _, _, err := Run(context.Background(), Config{Policies: []string{"bogus"}, Logger: quiet()}, nil); err == nil {
		t.Error("unknown policy accepted")
	}
}

func TestIPv6Hosts(t *testing.T) {
	cfg := small(9)
	cfg.IPv6Share = 0.5
	cfg.Policies = []string{"ipmicra"}
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	v6 := 0
	for _, h := range w.Hosts {
		if h.Addr.Is6() {
			v6++
			if s := w.Tree.SmallestNonUnary(h.Addr); s == 0 || int(s) >= w.Tree.Len() || !w.Tree.Node(s).Start.Is6() {
				t.Fatalf("IPv6 host %v outside the IPv6 hierarchy", h.Addr)
			}
		}
	}
	if v6 < 100 || v6 > 200 {
		t.Errorf("%d of %d hosts IPv6, want about half", v6, len(w.Hosts))
	}
	if r := rep.Results[0]; r.OptimalPct < 30 || r.ProbesPerURL > 7 {
		t.Errorf("ipmicra with IPv6 hosts: %.1f%% optimal, %.2f probes/URL", r.OptimalPct, r.ProbesPerURL)
	}
}

func TestAverage(t *testing.T) {
	ctx := context.Background()
	a, _, err := Run(ctx, small(1), nil)
	if err != nil {
		t.Fatal(err)
	}
	b, _, err := Run(ctx, small(2), nil)
	if err != nil {
		t.Fatal(err)
	}
	same, err := Average([]*Report{a, a})
	if err != nil {
		t.Fatal(err)
	}
	if same.Seeds != 2 || same.Results[0].OptimalPct != a.Results[0].OptimalPct || same.Results[0].Probes != 2*a.Results[0].Probes {
		t.Fatalf("average of a report with itself: %+v", same.Results[0])
	}
	// counts are summed alike: probes / URLs is the mean probes per URL,
	// and every URL has one stop reason
	reasons := 0
	for _, v := range same.Results[0].Reasons {
		reasons += v
	}
	if same.Results[0].URLs != 2*a.Results[0].URLs || reasons != same.Results[0].URLs {
		t.Fatalf("summed counts: %d URLs (one run: %d), %d reasons", same.Results[0].URLs, a.Results[0].URLs, reasons)
	}
	avg, err := Average([]*Report{a, b})
	if err != nil {
		t.Fatal(err)
	}
	want := round3((a.Results[0].ProbesPerURL + b.Results[0].ProbesPerURL) / 2)
	if got := avg.Results[0].ProbesPerURL; got-want > 0.002 || want-got > 0.002 {
		t.Fatalf("mean probes/URL %v, want %v", got, want)
	}
	if _, err := Average(nil); err == nil {
		t.Fatal("empty average accepted")
	}
}

// TestCurveCoversEveryURL: the probes/URL curve's windows cover every URL,
// the last one possibly shorter (219 hosts in 20 windows of 11: the last
// has 10). Windows of ⌊n/points⌋ once left the last n mod points out.
func TestCurveCoversEveryURL(t *testing.T) {
	cfg := small(3)
	cfg.Hosts, cfg.Train, cfg.Policies = 219, 150, []string{"ipmicra", "micra"}
	rep, _, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.CurveWindow != 11 {
		t.Fatalf("window %d, want 11", rep.CurveWindow)
	}
	for _, x := range rep.Results {
		if len(x.Curve) != 20 {
			t.Fatalf("%s: %d windows, want 20", x.Policy, len(x.Curve))
		}
		var sum float64
		for j, v := range x.Curve {
			sum += v * float64(min((j+1)*11, 219)-j*11)
		}
		if math.Abs(sum-float64(x.Probes)) > 0.01*20 {
			t.Fatalf("%s: the curve holds %.2f probes, the run sent %d", x.Policy, sum, x.Probes)
		}
	}
}

func TestTrace(t *testing.T) {
	var buf bytes.Buffer
	cfg := small(4)
	cfg.Policies = []string{"ipmicra", "hash"}
	cfg.Trace, cfg.TracePolicy, cfg.TraceN = &buf, "ipmicra", 7
	if _, _, err := Run(context.Background(), cfg, nil); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(buf.String()), "\n")
	if len(lines) != 7 {
		t.Fatalf("%d trace lines:\n%s", len(lines), buf.String())
	}
	for _, l := range lines {
		if !strings.HasPrefix(l, "ipmicra #") || !strings.Contains(l, "reason=") || !strings.Contains(l, "optimal ") {
			t.Fatalf("trace line %q", l)
		}
	}
}

// TestProbesDoNotScaleWithCrawlers: with 30× the crawlers IPMicra's probes
// per URL stay of the same order (brute force would grow 30×).
func TestProbesDoNotScaleWithCrawlers(t *testing.T) {
	per := map[int]float64{}
	for _, n := range []int{12, 360} {
		cfg := Config{Seed: 2, Crawlers: n, Hosts: 3000, Logger: quiet(), Policies: []string{"ipmicra"}}
		rep, _, err := Run(context.Background(), cfg, nil)
		if err != nil {
			t.Fatal(err)
		}
		per[n] = rep.Results[0].ProbesPerURL
	}
	t.Logf("ipmicra probes/URL: %v", per)
	if per[360] > 3*per[12] || per[360] > 36 {
		t.Fatalf("probes/URL grew with the crawlers: %v", per)
	}
}

// TestSubnetCeiling: the ceiling bounds every policy that keeps one owner
// per subnet, brute force included; zipf hosts share subnets whose hosts
// have different optimal crawlers, so it is below 100 %, and it is 100 %
// once every host has the same optimal crawler.
func TestSubnetCeiling(t *testing.T) {
	cfg := Config{Seed: 7, Crawlers: 12, Hosts: 1000, HostDist: HostsZipf, Threshold: 50 * time.Millisecond, Logger: quiet()}
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	if rep.SubnetCeilingPct >= 100 || rep.SubnetCeilingPct <= 50 {
		t.Fatalf("zipf hosts: ceiling %.1f %%, want in (50, 100)", rep.SubnetCeilingPct)
	}
	for _, r := range rep.Results {
		if r.OptimalPct > rep.SubnetCeilingPct+1e-9 {
			t.Errorf("%s: %.1f %% optimal above the subnet ceiling %.1f %%", r.Policy, r.OptimalPct, rep.SubnetCeilingPct)
		}
	}
	same := *w
	same.Optimal = make([]int32, len(w.Optimal))
	if c := same.SubnetCeiling(cfg.Train); c != 100 {
		t.Fatalf("one optimal crawler for every host: ceiling %.1f %%, want 100", c)
	}
	// hosts outside the hierarchy (under no node but the root) are hashed
	// one by one, not delegated as one subnet: different optimal crawlers
	// cost them nothing
	out := *w
	out.Hosts = []world.Endpoint{w.Hosts[0], w.Hosts[1]}
	out.Hosts[0].Addr, out.Hosts[1].Addr = netip.MustParseAddr("fc00::1"), netip.MustParseAddr("fc00::2")
	out.Optimal = []int32{0, 1}
	if s := w.Tree.SmallestNonUnary(out.Hosts[0].Addr); s != hierarchy.Root {
		t.Fatalf("fc00::1 is under node %d, want only the root", s)
	}
	if c := out.SubnetCeiling(0); c != 100 {
		t.Fatalf("two hosts outside the hierarchy: ceiling %.1f %%, want 100", c)
	}
	t.Logf("zipf ceiling %.1f %%", rep.SubnetCeilingPct)
}

// Seeds run in parallel give the reports of seeds run one after another,
// in seed order.
func TestRunSeedsParallelSameReports(t *testing.T) {
	cfg := Config{Seed: 5, Crawlers: 12, Hosts: 300, Policies: []string{"micra", "ipmicra"}, Logger: quiet()}
	reports := func(parallel bool) string {
		runs, err := RunSeeds(context.Background(), cfg, make([]*World, 4), parallel)
		if err != nil {
			t.Fatal(err)
		}
		var b strings.Builder
		for _, r := range runs {
			if err := r.WriteJSON(&b); err != nil {
				t.Fatal(err)
			}
		}
		return b.String()
	}
	seq, par := reports(false), reports(true)
	if seq != par {
		t.Fatalf("parallel seeds differ from sequential ones:\n%s\nvs\n%s", par, seq)
	}
	if n := strings.Count(seq, `"seed":`); n != 8 {
		t.Fatalf("%d reports for 4 seeds × 2 policies:\n%s", n, seq)
	}
	last := -1
	for k := range 4 {
		i := strings.Index(seq, fmt.Sprintf(`"seed":%d`, 5+k))
		if i <= last {
			t.Fatalf("the report of seed %d is missing or out of order:\n%s", 5+k, seq)
		}
		last = i
	}
}

// The evaluation URLs split by reason add up to the run's figures: every
// URL in one reason, the probes and the excess of all of them; averaging
// a report with itself doubles the decisions and keeps the means.
func TestEvalByReason(t *testing.T) {
	cfg := small(1)
	rep, _, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	eval := cfg.Hosts - cfg.Train
	for _, x := range rep.Results {
		var n int
		var probes, excess, share float64
		for _, f := range x.EvalByReason {
			n += f.Decisions
			probes += f.ProbesPerURL * float64(f.Decisions)
			excess += f.ExcessMeanMs * float64(f.Decisions)
			share += f.ExcessShare
		}
		if n != eval {
			t.Fatalf("%s: %d decisions by reason, %d evaluation URLs", x.Policy, n, eval)
		}
		if math.Abs(probes/float64(eval)-x.ProbesPerURLEval) > 0.01 {
			t.Errorf("%s: probes by reason %.3f per URL, the run %.3f", x.Policy, probes/float64(eval), x.ProbesPerURLEval)
		}
		if math.Abs(excess/float64(eval)-x.ExcessMeanMs) > 0.01 {
			t.Errorf("%s: excess by reason %.3f ms, the run %.3f", x.Policy, excess/float64(eval), x.ExcessMeanMs)
		}
		if x.ExcessMeanMs > 0 && math.Abs(share-1) > 0.01*float64(len(x.EvalByReason)) {
			t.Errorf("%s: shares of the excess sum to %.3f", x.Policy, share)
		}
	}
	twice, err := Average([]*Report{rep, rep})
	if err != nil {
		t.Fatal(err)
	}
	for i, x := range twice.Results {
		if len(x.EvalByReason) != len(rep.Results[i].EvalByReason) {
			t.Errorf("%s: %d reasons averaged, %d once", x.Policy, len(x.EvalByReason), len(rep.Results[i].EvalByReason))
		}
		for why, f := range x.EvalByReason {
			one := rep.Results[i].EvalByReason[why]
			if f.Decisions != 2*one.Decisions || f.ExcessMeanMs != one.ExcessMeanMs || f.ExcessShare != one.ExcessShare {
				t.Errorf("%s %s: averaged with itself %+v, once %+v", x.Policy, why, f, one)
			}
		}
	}
}

// The subnet floor is a floor: no policy that gives each subnet one owner
// (IPMicra, brute force, hashing, random) has a lower excess, and the
// estimate from the hosts' own optimal crawlers is never below the exact
// floor.
func TestSubnetFloor(t *testing.T) {
	cfg := small(2)
	cfg.Crawlers, cfg.Hosts, cfg.Train = 60, 1500, 1000
	cfg.HostDist, cfg.Policies = "zipf", []string{"ipmicra", "optimal", "hash", "random", "micra"}
	rep, w, err := Run(context.Background(), cfg, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range rep.Results {
		if x.SubnetFloorMs <= 0 {
			t.Fatalf("%s: subnet floor %v", x.Policy, x.SubnetFloorMs)
		}
		if x.Policy != "micra" && x.ExcessMeanMs < x.SubnetFloorMs-0.001 {
			t.Errorf("%s: excess %.3f ms below the subnet floor %.3f", x.Policy, x.ExcessMeanMs, x.SubnetFloorMs)
		}
	}
	subnets := make([]hierarchy.NodeID, len(w.Hosts))
	for i := range w.Hosts {
		subnets[i] = w.Tree.SmallestNonUnary(w.Hosts[i].Addr)
	}
	exact, whole := w.subnetFloorOf(subnets, cfg.Train, true)
	estimate, _ := w.subnetFloorOf(subnets, cfg.Train, false)
	t.Logf("floor: exact %.4f ms, estimate %.4f ms, whole subnets %.4f ms; policies %+v", exact, estimate, whole, rep.Results[0].SubnetFloorMs)
	if exact <= 0 || estimate < exact-1e-9 {
		t.Fatalf("exact floor %.4f, estimate %.4f", exact, estimate)
	}
	if whole < exact-1e-9 {
		t.Fatalf("the owner best for all of a subnet's hosts gives its evaluation hosts %.4f ms, below the floor %.4f", whole, exact)
	}
	if x := rep.Results[0]; x.SubnetFloorMs != round3(exact) || x.SubnetWholeMs != round3(whole) {
		t.Fatalf("reported floor %v and whole %v, computed %.4f and %.4f", x.SubnetFloorMs, x.SubnetWholeMs, exact, whole)
	}
}
