package sim

import (
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// FrontierMisses are the stop-rule risks (MicraConfig.Miss) MicraFrontier
// sweeps, loosest first; 0.06 is the default.
var FrontierMisses = []float64{1, 0.5, 0.3, 0.2, 0.12, 0.06, 0.03, 0.015, 0.008}

// FrontierThresholds are the probing thresholds IPMicraFrontier sweeps,
// loosest first: the paper's own trade of accuracy for probes (75 % at
// about 3 probes/URL, 90 % at 6.5).
var FrontierThresholds = []time.Duration{400 * time.Millisecond, 200 * time.Millisecond, 125 * time.Millisecond,
	100 * time.Millisecond, 75 * time.Millisecond, 50 * time.Millisecond, 25 * time.Millisecond, 10 * time.Millisecond}

// The goal for our policy, read off the frontier: this share of
// evaluation URLs at their optimal crawler, at this many probes per
// evaluation URL.
const (
	FrontierTargetPct    = 95
	FrontierTargetProbes = 1.5
)

// FrontierPoint is a policy at one setting of its knob (micra's stop-rule
// risk, IPMicra's probing threshold), averaged over the seeds.
type FrontierPoint struct {
	Miss         float64 `json:"miss,omitempty"`
	MissFirst    float64 `json:"missfirst,omitempty"`
	ThresholdMs  float64 `json:"threshold_ms,omitempty"`
	OptimalPct   float64 `json:"optimal_pct"`
	ProbesPerURL float64 `json:"probes_per_url"`
	ProbesEval   float64 `json:"probes_per_url_eval"`
	ExcessMeanMs float64 `json:"excess_mean_ms"`
}

// FrontierReport is a policy's accuracy/probes frontier on one set of
// worlds: how much accuracy its knob buys with each probe, so a goal such as
// "95 % at 1.5 probes/URL" can be read off on any latency data (a measured
// matrix included). AtTargetPct and ProbesForTarget are interpolated
// linearly between neighbouring points on evaluation probes; NaN when the
// sweep does not reach them.
type FrontierReport struct {
	Policy          string          `json:"frontier"`
	Seeds           int             `json:"seeds"`
	Points          []FrontierPoint `json:"points"`
	AtTargetPct     float64         `json:"optimal_pct_at_1_5_probes"`
	ProbesForTarget float64         `json:"probes_for_95_pct"`
}

// MicraFrontier runs micra (tuned by cfg.Engine.Micra) at each of misses
// on the seeds' worlds (placing those still nil), with MissFirst at the
// ratio to Miss that cfg sets: the defaults' 0.1 : 0.06 when cfg leaves
// MissFirst unset (even if it sets Miss, so a run with only miss set is
// not a point of the sweep), 1 when MissFirst is negative or NaN (as
// MicraConfig reads it: MissFirst = Miss).
func MicraFrontier(ctx context.Context, cfg Config, worlds []*World, misses []float64) (*FrontierReport, error) {
	def := delegation.DefaultConfig().Micra
	user := cfg.Engine.Micra
	miss0 := def.Miss
	if user.Miss > 0 {
		miss0 = user.Miss
	}
	ratio := def.MissFirst / def.Miss
	switch {
	case user.MissFirst == 0:
	case !(user.MissFirst > 0): // negative, NaN: MissFirst = Miss
		ratio = 1
	default:
		ratio = user.MissFirst / miss0
	}
	rep := &FrontierReport{Policy: "micra", Seeds: len(worlds)}
	for _, miss := range misses {
		c := cfg
		c.Engine.Micra.Miss, c.Engine.Micra.MissFirst = miss, miss*ratio
		if err := rep.add(ctx, c, worlds, FrontierPoint{Miss: miss, MissFirst: miss * ratio}); err != nil {
			return nil, err
		}
	}
	rep.AtTargetPct, rep.ProbesForTarget = frontierCrossings(rep.Points)
	return rep, nil
}

// IPMicraFrontier runs the faithful IPMicra at each of thresholds on the
// seeds' worlds (placing those still nil): the frontier the paper's own
// figures lie on, printed beside micra's.
func IPMicraFrontier(ctx context.Context, cfg Config, worlds []*World, thresholds []time.Duration) (*FrontierReport, error) {
	rep := &FrontierReport{Policy: "ipmicra", Seeds: len(worlds)}
	for _, th := range thresholds {
		c := cfg
		c.Threshold = th
		if err := rep.add(ctx, c, worlds, FrontierPoint{ThresholdMs: float64(th.Microseconds()) / 1000}); err != nil {
			return nil, err
		}
	}
	rep.AtTargetPct, rep.ProbesForTarget = frontierCrossings(rep.Points)
	return rep, nil
}

// add runs the report's policy with cfg on the worlds and appends the
// averaged figures to pt as a point. A sweep traces nothing: Trace is for
// the policies' own runs.
func (r *FrontierReport) add(ctx context.Context, cfg Config, worlds []*World, pt FrontierPoint) error {
	cfg.Policies = []string{r.Policy}
	cfg.Trace, cfg.TraceN = nil, 0
	runs, err := RunSeeds(ctx, cfg, worlds, true)
	if err != nil {
		return err
	}
	avg, err := Average(runs)
	if err != nil {
		return err
	}
	for _, x := range avg.Results {
		if x.Policy == r.Policy {
			pt.OptimalPct, pt.ProbesPerURL, pt.ProbesEval, pt.ExcessMeanMs = x.OptimalPct, x.ProbesPerURL, x.ProbesPerURLEval, x.ExcessMeanMs
			r.Points = append(r.Points, pt)
			return nil
		}
	}
	return fmt.Errorf("sim: no %s result in the frontier's run", r.Policy)
}

// frontierCrossings interpolates the accuracy at FrontierTargetProbes and
// the probes for FrontierTargetPct along the points ordered by evaluation
// probes (the first crossing: accuracy need not rise monotonically).
func frontierCrossings(ps []FrontierPoint) (pctAt, probesFor float64) {
	pctAt, probesFor = math.NaN(), math.NaN()
	byProbes := byProbes(ps)
	if len(byProbes) > 0 && byProbes[0].OptimalPct >= FrontierTargetPct {
		probesFor = byProbes[0].ProbesEval // the loosest point already reaches it: at most that
	}
	for i := 1; i < len(byProbes); i++ {
		a, b := byProbes[i-1], byProbes[i]
		if math.IsNaN(pctAt) && a.ProbesEval <= FrontierTargetProbes && FrontierTargetProbes <= b.ProbesEval {
			pctAt = lerp(a.ProbesEval, a.OptimalPct, b.ProbesEval, b.OptimalPct, FrontierTargetProbes)
		}
		if math.IsNaN(probesFor) && a.OptimalPct < FrontierTargetPct && FrontierTargetPct <= b.OptimalPct {
			probesFor = lerp(a.OptimalPct, a.ProbesEval, b.OptimalPct, b.ProbesEval, FrontierTargetPct)
		}
	}
	return round3(pctAt), round3(probesFor)
}

// lerp is the y at x on the line through (x0, y0) and (x1, y1).
func lerp(x0, y0, x1, y1, x float64) float64 {
	if x1 == x0 {
		return (y0 + y1) / 2
	}
	return y0 + (y1-y0)*(x-x0)/(x1-x0)
}

// WriteText prints the frontier as a table and the two read-offs.
func (r *FrontierReport) WriteText(out io.Writer) error {
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	const cols = "optimal %\tprobes/URL eval\tprobes/URL all\texcess mean ms\t"
	if r.Policy == "micra" {
		fmt.Fprintf(out, "MICRA FRONTIER: the stop rule's risk swept (%d seed(s); optimal %% and probes over the evaluation URLs)\n", r.Seeds)
		fmt.Fprintln(tw, "miss\tmissfirst\t"+cols)
	} else {
		fmt.Fprintf(out, "%s FRONTIER: the probing threshold swept (%d seed(s); optimal %% and probes over the evaluation URLs)\n", strings.ToUpper(r.Policy), r.Seeds)
		fmt.Fprintln(tw, "threshold ms\t"+cols)
	}
	for _, p := range r.Points {
		if r.Policy == "micra" {
			fmt.Fprintf(tw, "%g\t%.3g\t", p.Miss, p.MissFirst)
		} else {
			fmt.Fprintf(tw, "%g\t", p.ThresholdMs)
		}
		fmt.Fprintf(tw, "%.1f\t%.3f\t%.3f\t%.2f\t\n", p.OptimalPct, p.ProbesEval, p.ProbesPerURL, p.ExcessMeanMs)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	say := func(v float64, f string) string {
		if math.IsNaN(v) {
			return "not reached by the sweep"
		}
		return fmt.Sprintf(f, v)
	}
	forTarget := say(r.ProbesForTarget, "%.2f probes per evaluation URL (interpolated)")
	if ps := byProbes(r.Points); len(ps) > 0 && ps[0].OptimalPct >= FrontierTargetPct {
		forTarget = fmt.Sprintf("at most %.2f probes per evaluation URL (the loosest point already reaches it)", r.ProbesForTarget)
	}
	_, err := fmt.Fprintf(out, "at %g probes per evaluation URL: %s\nfor %d %% optimal: %s\n", FrontierTargetProbes,
		say(r.AtTargetPct, "%.1f %% optimal (interpolated)"), FrontierTargetPct, forTarget)
	return err
}

// byProbes returns a copy of ps ordered by probes per evaluation URL,
// loosest first (ties in sweep order).
func byProbes(ps []FrontierPoint) []FrontierPoint {
	out := slices.Clone(ps)
	slices.SortStableFunc(out, func(a, b FrontierPoint) int { return cmp.Compare(a.ProbesEval, b.ProbesEval) })
	return out
}

// WriteJSON prints the frontier as one JSON object (NaN read-offs as null).
func (r *FrontierReport) WriteJSON(out io.Writer) error {
	type alias FrontierReport
	v := struct {
		*alias
		AtTargetPct     *float64 `json:"optimal_pct_at_1_5_probes"`
		ProbesForTarget *float64 `json:"probes_for_95_pct"`
	}{alias: (*alias)(r)}
	if !math.IsNaN(r.AtTargetPct) {
		v.AtTargetPct = &r.AtTargetPct
	}
	if !math.IsNaN(r.ProbesForTarget) {
		v.ProbesForTarget = &r.ProbesForTarget
	}
	b, err := json.Marshal(v)
	if err != nil {
		return err
	}
	_, err = fmt.Fprintf(out, "%s\n", b)
	return err
}

// WriteFrontierSVG plots the frontiers as optimal % (evaluation URLs)
// against probes per evaluation URL, one polyline per policy through its
// points in probe order, with the goal's two lines (FrontierTargetProbes,
// FrontierTargetPct) dashed.
func WriteFrontierSVG(out io.Writer, frs []*FrontierReport) error {
	const W, H, L, R, T, B = 760.0, 420.0, 60.0, 150.0, 30.0, 50.0
	pw, ph := W-L-R, H-T-B
	maxX, minY := FrontierTargetProbes, float64(FrontierTargetPct)
	for _, fr := range frs {
		for _, p := range fr.Points {
			maxX = math.Max(maxX, p.ProbesEval)
			minY = math.Min(minY, p.OptimalPct)
		}
	}
	maxX = niceCeil(maxX)
	step := 10.0 // y ticks
	if 100-minY > 50 {
		step = 20
	}
	minY = math.Max(0, math.Floor(minY/step)*step)
	x := func(v float64) float64 { return L + pw*v/maxX }
	y := func(v float64) float64 { return T + ph*(100-v)/(100-minY) }
	colors := []string{"#d62728", "#1f77b4", "#2ca02c", "#ff7f0e"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="18" font-size="14">accuracy against probes: each policy's knob swept (evaluation URLs)</text>`+"\n", L)
	// the goal's corner: at most FrontierTargetProbes, at least FrontierTargetPct
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%.1f" height="%.1f" fill="#e6f4e6"/>`+"\n", L, T, x(FrontierTargetProbes)-L, y(FrontierTargetPct)-T)
	for v := minY; v <= 100; v += step {
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%.0f %%</text>`+"\n", L, y(v), L+pw, y(v), L-6, y(v)+4, v)
	}
	for k := 0; k <= 5; k++ {
		u := maxX * float64(k) / 5
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%.3g</text>`+"\n", x(u), T+ph+16, u)
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">probes per evaluation URL</text>`+"\n", L+pw/2, H-10)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", L, T, pw, ph)
	fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#888" stroke-dasharray="4 3"/>`+"\n", x(FrontierTargetProbes), T, x(FrontierTargetProbes), T+ph)
	fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#888" stroke-dasharray="4 3"/><text x="%g" y="%.1f" fill="#555">goal: ≥ %d %% at ≤ %g</text>`+"\n",
		L, y(FrontierTargetPct), L+pw, y(FrontierTargetPct), L+pw-150, y(FrontierTargetPct)+14, FrontierTargetPct, FrontierTargetProbes)
	for k, fr := range frs {
		c := colors[k%len(colors)]
		var pts []string
		for _, p := range byProbes(fr.Points) {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(p.ProbesEval), y(p.OptimalPct)))
			fmt.Fprintf(&b, `<circle cx="%.1f" cy="%.1f" r="3" fill="%s"/>`+"\n", x(p.ProbesEval), y(p.OptimalPct), c)
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := T + 10 + 18*float64(k)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/><text x="%g" y="%g">%s (%d seed(s))</text>`+"\n",
			L+pw+10, ly, L+pw+30, ly, c, L+pw+36, ly+4, xmlEscape(fr.Policy), fr.Seeds)
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}
