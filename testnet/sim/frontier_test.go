package sim

import (
	"bytes"
	"context"
	"encoding/json"
	"encoding/xml"
	"io"
	"math"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

func TestFrontierCrossings(t *testing.T) {
	pt := func(probes, pct float64) FrontierPoint { return FrontierPoint{ProbesEval: probes, OptimalPct: pct} }
	for _, c := range []struct {
		name      string
		ps        []FrontierPoint
		at, for95 float64 // NaN: not reached
	}{
		// given loosest first, as swept
		{"both crossed", []FrontierPoint{pt(1.2, 90), pt(1.8, 96), pt(2.4, 98)}, 93, 1.7},
		{"order of the sweep does not matter", []FrontierPoint{pt(2.4, 98), pt(1.2, 90), pt(1.8, 96)}, 93, 1.7},
		{"1.5 probes beyond the sweep", []FrontierPoint{pt(1.8, 90), pt(2.4, 96)}, math.NaN(), 2.3},
		{"95 % beyond the sweep", []FrontierPoint{pt(1.0, 80), pt(2.0, 90)}, 85, math.NaN()},
		{"the loosest point already reaches 95 %", []FrontierPoint{pt(1.0, 96), pt(2.0, 97)}, 96.5, 1.0},
		{"the loosest point reaches 95 %, then a dip", []FrontierPoint{pt(1.0, 96), pt(1.2, 94), pt(1.4, 97)}, math.NaN(), 1.0},
		// accuracy need not rise with probes: the first crossing counts
		{"non-monotone", []FrontierPoint{pt(1.0, 94), pt(1.4, 96), pt(1.6, 94.5), pt(2.0, 97)}, 95.25, 1.2},
	} {
		at, for95 := frontierCrossings(c.ps)
		same := func(a, b float64) bool { return math.IsNaN(a) && math.IsNaN(b) || math.Abs(a-b) < 1e-9 }
		if !same(at, c.at) || !same(for95, c.for95) {
			t.Errorf("%s: at 1.5 probes %v (want %v), probes for 95 %% %v (want %v)", c.name, at, c.at, for95, c.for95)
		}
	}
}

// defaultRun runs policy with its defaults on two small worlds and
// returns the configuration, the placed worlds (for a sweep to reuse) and
// the averaged report.
func defaultRun(t *testing.T, policy string) (Config, []*World, *Report) {
	t.Helper()
	cfg := Config{Seed: 3, Crawlers: 12, Hosts: 300, Policies: []string{policy}, Logger: quiet()}
	worlds := make([]*World, 2)
	runs, err := RunSeeds(context.Background(), cfg, worlds, true)
	if err != nil {
		t.Fatal(err)
	}
	plain, err := Average(runs)
	if err != nil {
		t.Fatal(err)
	}
	return cfg, worlds, plain
}

// The frontier's point at micra's default risks is micra's default run on
// the same worlds; looser risks probe less; the JSON carries NaN read-offs
// as null.
func TestMicraFrontier(t *testing.T) {
	ctx := context.Background()
	cfg, worlds, plain := defaultRun(t, "micra")
	fr, err := MicraFrontier(ctx, cfg, worlds, []float64{0.5, 0.06, 0.01})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Points) != 3 || fr.Seeds != 2 {
		t.Fatalf("frontier %+v", fr)
	}
	def, loose, tight := fr.Points[1], fr.Points[0], fr.Points[2]
	m := plain.Results[0]
	if m.Policy != "micra" || def.OptimalPct != m.OptimalPct || def.ProbesEval != m.ProbesPerURLEval || def.ProbesPerURL != m.ProbesPerURL {
		t.Fatalf("default point %+v differs from the default run %+v", def, m)
	}
	if def.MissFirst != 0.1 {
		t.Fatalf("default point's MissFirst %v, want the default 0.1", def.MissFirst)
	}
	if !(loose.ProbesEval < def.ProbesEval && def.ProbesEval < tight.ProbesEval) {
		t.Fatalf("probes do not grow as the risk tightens: %+v", fr.Points)
	}
	// missfirst=-1 keeps MissFirst at Miss along the sweep
	cfg.Engine.Micra.MissFirst = -1
	eq, err := MicraFrontier(ctx, cfg, worlds, []float64{0.2})
	if err != nil || eq.Points[0].MissFirst != 0.2 {
		t.Fatalf("missfirst=-1: %+v, %v", eq, err)
	}
	var b bytes.Buffer
	fr.AtTargetPct = math.NaN()
	if err := fr.WriteJSON(&b); err != nil {
		t.Fatal(err)
	}
	var o map[string]any
	if err := json.Unmarshal(b.Bytes(), &o); err != nil {
		t.Fatalf("%v: %s", err, b.String())
	}
	if v, ok := o["optimal_pct_at_1_5_probes"]; !ok || v != nil || o["frontier"] != "micra" || len(o["points"].([]any)) != 3 {
		t.Fatalf("JSON %s", b.String())
	}
	b.Reset()
	if err := fr.WriteText(&b); err != nil || !strings.Contains(b.String(), "not reached by the sweep") {
		t.Fatalf("text: %v\n%s", err, b.String())
	}
}

// IPMicra's frontier: a lower threshold walks further, so it probes more;
// the point at the preset's threshold is IPMicra's default run.
func TestIPMicraFrontier(t *testing.T) {
	ctx := context.Background()
	cfg, worlds, plain := defaultRun(t, "ipmicra")
	fr, err := IPMicraFrontier(ctx, cfg, worlds, []time.Duration{200 * time.Millisecond, 50 * time.Millisecond, 10 * time.Millisecond})
	if err != nil {
		t.Fatal(err)
	}
	if len(fr.Points) != 3 || fr.Policy != "ipmicra" || fr.Points[1].ThresholdMs != 50 {
		t.Fatalf("frontier %+v", fr)
	}
	if p, r := fr.Points[1], plain.Results[0]; r.Policy != "ipmicra" || p.OptimalPct != r.OptimalPct || p.ProbesEval != r.ProbesPerURLEval {
		t.Fatalf("50 ms point %+v differs from the default run %+v", p, r)
	}
	if !(fr.Points[0].ProbesEval < fr.Points[1].ProbesEval && fr.Points[1].ProbesEval < fr.Points[2].ProbesEval) {
		t.Fatalf("probes do not grow as the threshold falls: %+v", fr.Points)
	}
	var b bytes.Buffer
	if err := fr.WriteText(&b); err != nil || !strings.Contains(b.String(), "IPMICRA FRONTIER") || !strings.Contains(b.String(), "threshold ms") {
		t.Fatalf("text: %v\n%s", err, b.String())
	}
}

// The sweep's worlds run in parallel; hooks every world would call at once
// (a trace writer, micra's OnRound) keep them one at a time, and a sweep
// traces nothing (run with -race: it caught both).
func TestFrontierHooksNotShared(t *testing.T) {
	ctx := context.Background()
	var b bytes.Buffer
	cfg := Config{Seed: 3, Crawlers: 12, Hosts: 200, Logger: quiet(), Trace: &b, TracePolicy: "micra", TraceN: 50}
	if _, err := MicraFrontier(ctx, cfg, make([]*World, 2), []float64{0.06}); err != nil {
		t.Fatal(err)
	}
	if b.Len() != 0 {
		t.Fatalf("the sweep traced:\n%s", b.String())
	}
	rounds := 0
	cfg = Config{Seed: 3, Crawlers: 12, Hosts: 200, Logger: quiet(), Policies: []string{"micra"}}
	cfg.Engine.Micra.OnRound = func(delegation.RoundRisk) { rounds++ }
	if _, err := RunSeeds(ctx, cfg, make([]*World, 2), true); err != nil {
		t.Fatal(err)
	}
	if rounds == 0 {
		t.Fatal("OnRound never called")
	}
}

// MissFirst's ratio to Miss follows MicraConfig's reading of MissFirst:
// unset → the defaults' ratio, negative or NaN → equal to Miss.
func TestMicraFrontierMissFirstRatio(t *testing.T) {
	ctx := context.Background()
	worlds := make([]*World, 1)
	for _, c := range []struct{ missFirst, want float64 }{{0, 0.2 * 0.1 / 0.06}, {-1, 0.2}, {math.NaN(), 0.2}, {0.3, 0.2 * 0.3 / 0.06}} {
		cfg := Config{Seed: 3, Crawlers: 12, Hosts: 100, Logger: quiet()}
		cfg.Engine.Micra.MissFirst = c.missFirst
		fr, err := MicraFrontier(ctx, cfg, worlds, []float64{0.2})
		if err != nil {
			t.Fatal(err)
		}
		if got := fr.Points[0].MissFirst; math.Abs(got-c.want) > 1e-12 {
			t.Errorf("MissFirst %v: the sweep's 0.2 point ran with MissFirst %v, want %v", c.missFirst, got, c.want)
		}
	}
}

// The frontier plot is well-formed SVG with one line and one legend entry
// per policy, every point drawn.
func TestWriteFrontierSVG(t *testing.T) {
	pt := func(probes, pct float64) FrontierPoint { return FrontierPoint{ProbesEval: probes, OptimalPct: pct} }
	frs := []*FrontierReport{
		{Policy: "micra", Seeds: 2, Points: []FrontierPoint{pt(1.8, 90), pt(1.2, 80), pt(2.4, 97)}},
		{Policy: "ipmicra", Seeds: 2, Points: []FrontierPoint{pt(1, 20), pt(7.5, 95)}},
	}
	var b bytes.Buffer
	if err := WriteFrontierSVG(&b, frs); err != nil {
		t.Fatal(err)
	}
	d := xml.NewDecoder(bytes.NewReader(b.Bytes()))
	for {
		if _, err := d.Token(); err == io.EOF {
			break
		} else if err != nil {
			t.Fatalf("not well-formed: %v\n%s", err, b.String())
		}
	}
	svg := b.String()
	if n := strings.Count(svg, "<polyline"); n != 2 {
		t.Fatalf("%d polylines", n)
	}
	if n := strings.Count(svg, "<circle"); n != 5 {
		t.Fatalf("%d points drawn, want 5", n)
	}
	for _, want := range []string{"micra (2 seed(s))", "ipmicra (2 seed(s))", "goal: ≥ 95 % at ≤ 1.5"} {
		if !strings.Contains(svg, want) {
			t.Fatalf("no %q in\n%s", want, svg)
		}
	}
}
