package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"maps"
	"math"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"

	"github.com/micra-crawler/micra/hierarchy"
)

// Result is one policy's row of the paper's table.
type Result struct {
	Policy      string  `json:"policy"`
	ThresholdMs float64 `json:"threshold_ms"`
	// OptimalPct is the share of evaluation URLs (after the training ones)
	// delegated to their optimal crawler.
	OptimalPct float64 `json:"optimal_pct"`
	// OptimalPctAll is the same over every URL.
	OptimalPctAll float64 `json:"optimal_pct_all"`
	// ProbesPerURL is over every URL; Last50 over the last 50; Eval over
	// the evaluation URLs.
	ProbesPerURL       float64 `json:"probes_per_url"`
	ProbesPerURLLast50 float64 `json:"probes_per_url_last50"`
	ProbesPerURLEval   float64 `json:"probes_per_url_eval"`
	// Excess latency of the chosen crawler over the optimal one (mean RTT,
	// ms) on the evaluation URLs.
	ExcessMeanMs float64 `json:"excess_mean_ms"`
	ExcessP95Ms  float64 `json:"excess_p95_ms"`
	// CostVsRandom is Σ modelled download time over every URL relative to
	// the random policy in the same run (1 = random; lower is better). A
	// page costs a fixed number of round trips, so the download time is
	// the pair's mean RTT times a constant that cancels in the ratio.
	CostVsRandom float64 `json:"crawl_cost_vs_random"`
	// CostVsOptimal is the same relative to every URL at its optimal crawler.
	CostVsOptimal float64 `json:"crawl_cost_vs_optimal"`
	// CostVsMinCost is Σ download time relative to the exact min-cost
	// assignment of every URL within the crawlers' capacities
	// (delegation.MinCostAssign); 0 where the world is too large for it
	// (MinCostLimit). A policy that ignores capacity can go below 1.
	CostVsMinCost float64 `json:"crawl_cost_vs_mincost,omitempty"`
	// Excess latency over the nearest crawler with room (mean RTT, ms, on
	// the evaluation URLs): the host's optimal crawler, or when that one
	// ends the run full, the nearest crawler that still has room (or the
	// host's own crawler if it is nearer). With many crawlers a few ms
	// apart, this says more than OptimalPct.
	ExcessRoomMeanMs float64 `json:"excess_room_mean_ms"`
	ExcessRoomP95Ms  float64 `json:"excess_room_p95_ms"`
	// LoadImbalance is the most loaded crawler's URL count over the mean
	// (1 = perfectly even); LoadCV is the coefficient of variation.
	LoadImbalance float64 `json:"load_imbalance"`
	LoadCV        float64 `json:"load_cv"`
	// UtilImbalance is the same for load over capacity (the measure that
	// means something when capacities differ): the highest utilisation
	// over the mean one, which is pages / Σ capacity.
	UtilImbalance float64 `json:"util_imbalance"`
	// OverCapacity counts crawlers holding more pages than their capacity;
	// OverPages is the pages above capacity summed over them (means over
	// seeds when averaged).
	OverCapacity float64 `json:"over_capacity"`
	OverPages    float64 `json:"over_capacity_pages"`
	URLs         int     `json:"urls"`
	Probes       int64   `json:"probes"`
	// Reasons counts decisions by why they stopped.
	Reasons map[string]int `json:"reasons"`
	// SubnetFloorMs is the mean excess over the optimal crawler the
	// evaluation URLs would have if every subnet the policy delegated went
	// to the one crawler best for its evaluation hosts, capacity ignored:
	// what delegating by subnet costs whatever the owners (block
	// delegations, Record.Blocks, can go below it). Exact up to
	// subnetFloorExactLimit, else an upper estimate (see there). 0 when
	// the policy delegates no subnets.
	SubnetFloorMs float64 `json:"subnet_floor_ms,omitempty"`
	// SubnetWholeMs is the same with each subnet's crawler chosen for all
	// its hosts, the training ones too (one owner serves them all): the
	// evaluation URLs' excess under the best static owner per subnet
	// (above subnetFloorExactLimit, under one that can be had).
	SubnetWholeMs float64 `json:"subnet_whole_ms,omitempty"`
	// EvalByReason splits the evaluation URLs by why their decision
	// stopped: where the probes and the excess over the optimal crawler go.
	EvalByReason map[string]ReasonFigures `json:"eval_by_reason,omitempty"`
	// Curve is probes per URL in consecutive windows of CurveWindow URLs.
	Curve []float64 `json:"probes_curve"`
}

// Report is the outcome of one simulation at one threshold.
type Report struct {
	Seed        uint64   `json:"seed"`
	Seeds       int      `json:"seeds"` // runs averaged (seed, seed+1, …)
	Crawlers    int      `json:"crawlers"`
	Hosts       int      `json:"hosts"`
	Train       int      `json:"train"`
	ThresholdMs float64  `json:"threshold_ms"`
	Latency     string   `json:"latency"`
	HostDist    string   `json:"host_dist"`
	IPv6Share   float64  `json:"ipv6_share"`
	CurveWindow int      `json:"curve_window"`
	Results     []Result `json:"policies"`
	// OptimalMeanMs is the mean RTT of hosts to their optimal crawler.
	OptimalMeanMs float64 `json:"optimal_mean_rtt_ms"`
	// SubnetCeilingPct is the most any policy can reach on OptimalPct when
	// every subnet keeps one owner (World.SubnetCeiling).
	SubnetCeilingPct float64 `json:"subnet_ceiling_pct"`
	// Capacity describes the crawlers' capacities (pages per day).
	Capacity string `json:"capacity"`
	// Balance is the engine's load-balancing mode.
	Balance string `json:"balance"`
}

func (w *World) score(cfg Config, runs []*run) *Report {
	n := len(w.Hosts)
	// windows of ⌈n/points⌉ URLs, the last one possibly shorter: every URL
	// is in the curve (n/points once left the last n mod points out)
	win := max(1, (n+cfg.CurvePoints-1)/cfg.CurvePoints)
	rep := &Report{
		Seed: cfg.Seed, Seeds: 1, Crawlers: len(w.Crawlers), Hosts: n, Train: cfg.Train,
		ThresholdMs: float64(cfg.Threshold.Microseconds()) / 1000, CurveWindow: win,
		Latency:  "formula (DB-IP positions, fibre × stretch + access + jitter)",
		HostDist: cmp.Or(cfg.HostDist, HostsUniform), IPv6Share: cfg.IPv6Share,
	}
	if mx := w.Model.Matrix(); mx != nil {
		rep.Latency = fmt.Sprintf("%s (%d sites, %d directed pairs; formula for missing pairs)", cmp.Or(mx.Label, "measured matrix"), len(mx.Sites), mx.Pairs())
	}
	var optCost float64
	for i := range w.Hosts {
		optCost += w.OptimalRTT[i]
		rep.OptimalMeanMs += w.OptimalRTT[i]
	}
	rep.OptimalMeanMs /= float64(max(1, n))
	rep.SubnetCeilingPct = round3(w.SubnetCeiling(cfg.Train))
	rep.Capacity, rep.Balance = w.capacityText(cfg), cfg.Engine.Balance.String()
	minCost, minOK := w.minCost()
	cost := make([]float64, len(runs))
	randomCost := 0.0
	for k, r := range runs {
		for i := range w.Hosts {
			cost[k] += w.Model.MeanRTT(&w.CrawlerE[r.owner[i]], &w.Hosts[i])
		}
		if r.spec.Name == "random" {
			randomCost = cost[k]
		}
	}
	for k, r := range runs {
		if !slices.Contains(cfg.Policies, r.spec.Name) {
			continue // the random baseline run only for the cost column
		}
		res := Result{Policy: r.spec.Name, ThresholdMs: rep.ThresholdMs, URLs: n, Probes: r.total, Reasons: r.reasons}
		var hitAll, hitEval int
		var excess []float64
		var probesEval, probesLast int64
		for i := range w.Hosts {
			hit := r.owner[i] == w.Optimal[i]
			if hit {
				hitAll++
			}
			if i >= cfg.Train {
				if hit {
					hitEval++
				}
				excess = append(excess, w.Model.MeanRTT(&w.CrawlerE[r.owner[i]], &w.Hosts[i])-w.OptimalRTT[i])
				probesEval += int64(r.probes[i])
			}
			if i >= n-50 {
				probesLast += int64(r.probes[i])
			}
		}
		eval := n - cfg.Train
		res.OptimalPct = pct(hitEval, eval)
		res.OptimalPctAll = pct(hitAll, n)
		res.ProbesPerURL = float64(r.total) / float64(max(1, n))
		res.ProbesPerURLLast50 = float64(probesLast) / float64(min(50, max(1, n)))
		res.ProbesPerURLEval = float64(probesEval) / float64(max(1, eval))
		if len(excess) > 0 {
			res.EvalByReason = byReason(r.reason, r.probes, excess, cfg.Train)
			res.SubnetFloorMs, res.SubnetWholeMs = w.subnetFloor(r.subnet, cfg.Train)
			var s float64
			for _, e := range excess {
				s += e
			}
			res.ExcessMeanMs = s / float64(len(excess))
			sort.Float64s(excess)
			res.ExcessP95Ms = excess[int(math.Ceil(0.95*float64(len(excess))))-1]
		}
		if randomCost > 0 {
			res.CostVsRandom = cost[k] / randomCost
		}
		if optCost > 0 {
			res.CostVsOptimal = cost[k] / optCost
		}
		if minOK && minCost > 0 {
			res.CostVsMinCost = cost[k] / minCost
		}
		load := make([]float64, len(w.Crawlers))
		for i := range w.Hosts {
			load[r.owner[i]]++
		}
		mean := float64(n) / float64(len(load))
		var sq, capSum, maxUtil float64
		for c, l := range load {
			sq += (l - mean) * (l - mean)
			capc := float64(max(1, w.Crawlers[c].Capacity))
			capSum += capc
			maxUtil = max(maxUtil, l/capc)
			if l > capc {
				res.OverCapacity++
				res.OverPages += l - capc
			}
		}
		res.LoadImbalance = slices.Max(load) / mean
		res.LoadCV = math.Sqrt(sq/float64(len(load))) / mean
		if n > 0 {
			res.UtilImbalance = maxUtil / (float64(n) / capSum)
		}
		res.ExcessRoomMeanMs, res.ExcessRoomP95Ms = w.excessOverRoom(cfg.Train, r.owner, load)
		for lo := 0; lo < n; lo += win {
			hi := min(lo+win, n)
			var s int64
			for i := lo; i < hi; i++ {
				s += int64(r.probes[i])
			}
			res.Curve = append(res.Curve, round3(float64(s)/float64(hi-lo)))
		}
		rep.Results = append(rep.Results, roundResult(res))
	}
	return rep
}

func pct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func round3(x float64) float64 { return math.Round(x*1000) / 1000 }

// subnetFloorExactLimit: up to this many crawlers × hosts the subnet
// figures try every crawler for every subnet; above it, the subnet's
// hosts' own optimal crawlers (the floor is then an upper estimate — a
// crawler between spread hosts can beat all of theirs — and the whole
// figure the excess of an owner that can be had, not the least).
const subnetFloorExactLimit = 500_000_000

// subnetFloor is Result.SubnetFloorMs and Result.SubnetWholeMs for the
// subnets by host, in one pass over the crawlers tried.
func (w *World) subnetFloor(subnet []hierarchy.NodeID, from int) (floor, whole float64) {
	exact := len(w.Crawlers)*len(w.Hosts) <= subnetFloorExactLimit
	return w.subnetFloorOf(subnet, from, exact)
}

// subnetFloorOf returns the evaluation hosts' mean excess when each subnet
// has the crawler with the least excess summed over its evaluation hosts
// (floor), and when it has the one with the least excess over all its
// hosts, the training ones too (whole).
func (w *World) subnetFloorOf(subnet []hierarchy.NodeID, from int, exact bool) (floor, whole float64) {
	if subnet == nil || from >= len(w.Hosts) {
		return 0, 0
	}
	groups := map[hierarchy.NodeID][]int{}
	for i := from; i < len(w.Hosts); i++ {
		if subnet[i] != hierarchy.None {
			groups[subnet[i]] = append(groups[subnet[i]], i)
		}
	}
	if len(groups) == 0 {
		return 0, 0
	}
	for i := range from { // the training hosts follow each group's evaluation ones
		if g, ok := groups[subnet[i]]; ok {
			groups[subnet[i]] = append(g, i)
		}
	}
	var floorSum, wholeSum float64
	// sorted: the sums come out the same to the last bit in every run
	for _, s := range slices.Sorted(maps.Keys(groups)) {
		hosts := groups[s]
		bestEval, bestAll, evalAtAll := math.Inf(1), math.Inf(1), 0.0
		try := func(c int32) {
			var eval, all float64
			for _, x := range hosts {
				e := w.Model.MeanRTT(&w.CrawlerE[c], &w.Hosts[x]) - w.OptimalRTT[x]
				all += e
				if x >= from {
					eval += e
				}
			}
			bestEval = min(bestEval, eval)
			if all < bestAll {
				bestAll, evalAtAll = all, eval
			}
		}
		if exact {
			for c := range w.Crawlers {
				try(int32(c))
			}
		} else {
			tried := map[int32]bool{}
			for _, h := range hosts {
				if c := w.Optimal[h]; !tried[c] {
					tried[c] = true
					try(c)
				}
			}
		}
		floorSum += bestEval
		wholeSum += evalAtAll
	}
	// hosts outside any subnet count at their optimal crawler (0)
	n := float64(len(w.Hosts) - from)
	return floorSum / n, wholeSum / n
}

// ReasonFigures are the evaluation URLs whose decision stopped for one
// reason: their number, their probes per URL, their mean excess RTT over
// the optimal crawler (of the crawler that crawls them at the end) and
// their share of all the evaluation URLs' excess.
type ReasonFigures struct {
	Decisions    int     `json:"decisions"`
	ProbesPerURL float64 `json:"probes_per_url"`
	ExcessMeanMs float64 `json:"excess_mean_ms"`
	ExcessShare  float64 `json:"excess_share"`
}

// byReason sums the evaluation URLs' probes and excess by reason.
func byReason(reason []string, probes []uint32, excess []float64, from int) map[string]ReasonFigures {
	out := map[string]ReasonFigures{}
	var total float64
	for i := from; i < len(reason); i++ {
		e := excess[i-from]
		f := out[reason[i]]
		f.Decisions++
		f.ProbesPerURL += float64(probes[i])
		f.ExcessMeanMs += e
		total += e
		out[reason[i]] = f
	}
	for why, f := range out {
		f.ExcessShare = round3(f.ExcessMeanMs / max(total, 1e-9))
		f.ProbesPerURL = round3(f.ProbesPerURL / float64(f.Decisions))
		f.ExcessMeanMs = round3(f.ExcessMeanMs / float64(f.Decisions))
		out[why] = f
	}
	return out
}

// mergeByReason adds b's figures to a's, weighting means by decisions
// (shares are averaged over the n reports).
func mergeByReason(a map[string]ReasonFigures, b map[string]ReasonFigures, n float64) {
	for why, y := range b {
		x := a[why]
		d := float64(x.Decisions + y.Decisions)
		x.ProbesPerURL = (x.ProbesPerURL*float64(x.Decisions) + y.ProbesPerURL*float64(y.Decisions)) / d
		x.ExcessMeanMs = (x.ExcessMeanMs*float64(x.Decisions) + y.ExcessMeanMs*float64(y.Decisions)) / d
		x.ExcessShare += y.ExcessShare / n
		x.Decisions += y.Decisions
		a[why] = x
	}
}

// roundResult keeps JSON output stable and readable.
func roundResult(r Result) Result {
	for _, p := range []*float64{&r.OptimalPct, &r.OptimalPctAll, &r.ProbesPerURL, &r.ProbesPerURLLast50, &r.ProbesPerURLEval,
		&r.ExcessMeanMs, &r.ExcessP95Ms, &r.CostVsRandom, &r.CostVsOptimal, &r.LoadImbalance, &r.LoadCV,
		&r.CostVsMinCost, &r.ExcessRoomMeanMs, &r.ExcessRoomP95Ms, &r.UtilImbalance, &r.OverCapacity, &r.OverPages, &r.SubnetFloorMs, &r.SubnetWholeMs} {
		*p = round3(*p)
	}
	for why, f := range r.EvalByReason {
		f.ProbesPerURL, f.ExcessMeanMs, f.ExcessShare = round3(f.ProbesPerURL), round3(f.ExcessMeanMs), round3(f.ExcessShare)
		r.EvalByReason[why] = f
	}
	return r
}

// WriteText prints the paper's table and the probes/URL curve.
func (r *Report) WriteText(out io.Writer) error {
	fmt.Fprintf(out, "micra sim: %d crawlers, %d hosts (%s over the hierarchy; first %d train, last %d evaluate), threshold %g ms, seed %d\n",
		r.Crawlers, r.Hosts, r.HostDist, r.Train, r.Hosts-r.Train, r.ThresholdMs, r.Seed)
	if r.Seeds > 1 {
		fmt.Fprintf(out, "mean over %d seeds (%d … %d)\n", r.Seeds, r.Seed, r.Seed+uint64(r.Seeds)-1)
	}
	if r.IPv6Share > 0 {
		fmt.Fprintf(out, "hosts at IPv6 addresses: %.0f %%\n", 100*r.IPv6Share)
	}
	fmt.Fprintf(out, "latency: %s; mean RTT to the optimal crawler %.1f ms\n", r.Latency, r.OptimalMeanMs)
	fmt.Fprintf(out, "subnet ceiling: %.1f %% (no policy that gives each subnet one owner can put more evaluation URLs at their optimal crawler)\n", r.SubnetCeilingPct)
	fmt.Fprintf(out, "capacity: %s; balance %s\n\n", r.Capacity, r.Balance)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	// probes/URL over every URL (training included), the last 50, and the
	// evaluation URLs — the ones "optimal %" is measured on
	fmt.Fprintln(tw, "policy\toptimal %\tprobes/URL\tlast 50\teval\texcess mean ms\texcess p95 ms\tcost vs random\tload max/mean\t")
	for _, x := range r.Results {
		fmt.Fprintf(tw, "%s\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%.1f\t%.3f\t%.2f\t\n", x.Policy, x.OptimalPct, x.ProbesPerURL, x.ProbesPerURLLast50,
			x.ProbesPerURLEval, x.ExcessMeanMs, x.ExcessP95Ms, x.CostVsRandom, x.LoadImbalance)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// the measures against capacity: what "optimal %" cannot say when many
	// crawlers sit a few ms apart or the nearest one is full
	fmt.Fprintln(out, "\nagainst capacity (excess over the nearest crawler with room, evaluation URLs; Σ download time over the exact min-cost assignment within capacities):")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\troom excess mean ms\troom excess p95 ms\tcost vs min-cost\tload max/mean\tutil max/mean\tover capacity\tpages over\t")
	for _, x := range r.Results {
		mc := "-"
		if x.CostVsMinCost > 0 {
			mc = fmt.Sprintf("%.3f", x.CostVsMinCost)
		}
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%s\t%.2f\t%.2f\t%.4g\t%.4g\t\n", x.Policy, x.ExcessRoomMeanMs, x.ExcessRoomP95Ms, mc,
			x.LoadImbalance, x.UtilImbalance, x.OverCapacity, x.OverPages)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	// where the probes and the excess go, for the policies whose decisions
	// stop for more than one reason
	var rows []string
	for _, x := range r.Results {
		if len(x.EvalByReason) < 2 {
			continue
		}
		whys := slices.Sorted(maps.Keys(x.EvalByReason))
		for _, why := range whys {
			f := x.EvalByReason[why]
			rows = append(rows, fmt.Sprintf("%s\t%s\t%d\t%.2f\t%.1f\t%.2f\t", x.Policy, why, f.Decisions, f.ProbesPerURL, f.ExcessMeanMs, f.ExcessShare))
		}
	}
	if len(rows) > 0 {
		fmt.Fprintln(out, "\nevaluation URLs by why their decision stopped (excess over the optimal crawler, of the crawler at the end):")
		tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "policy\treason\tdecisions\tprobes/URL\texcess mean ms\tshare of excess\t")
		for _, row := range rows {
			fmt.Fprintln(tw, row)
		}
		if err := tw.Flush(); err != nil {
			return err
		}
	}
	fmt.Fprintf(out, "\nprobes/URL as the hierarchy trains (windows of %d URLs):\n", r.CurveWindow)
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	var hdr strings.Builder
	hdr.WriteString("URLs\t")
	for _, x := range r.Results {
		hdr.WriteString(x.Policy + "\t")
	}
	fmt.Fprintln(tw, hdr.String())
	if len(r.Results) > 0 {
		for j := range r.Results[0].Curve {
			fmt.Fprintf(tw, "%d\t", min((j+1)*r.CurveWindow, r.Hosts))
			for _, x := range r.Results {
				fmt.Fprintf(tw, "%.2f\t", x.Curve[j])
			}
			fmt.Fprintln(tw)
		}
	}
	return tw.Flush()
}

// WriteJSON prints one JSON object per policy and line, with the run's
// setting beside it (a line can be told from another run's on its own).
func (r *Report) WriteJSON(out io.Writer) error {
	enc := json.NewEncoder(out)
	for _, x := range r.Results {
		obj := struct {
			Result
			Seed          uint64  `json:"seed"`
			Seeds         int     `json:"seeds"`
			Crawlers      int     `json:"crawlers"`
			Hosts         int     `json:"hosts"`
			Train         int     `json:"train"`
			HostDist      string  `json:"host_dist"`
			IPv6Share     float64 `json:"ipv6_share"`
			Latency       string  `json:"latency"`
			CurveWindow   int     `json:"curve_window"`
			OptimalMeanMs float64 `json:"optimal_mean_rtt_ms"`
			Ceiling       float64 `json:"subnet_ceiling_pct"`
			Capacity      string  `json:"capacity"`
			Balance       string  `json:"balance"`
		}{x, r.Seed, r.Seeds, r.Crawlers, r.Hosts, r.Train, r.HostDist, r.IPv6Share, r.Latency, r.CurveWindow,
			round3(r.OptimalMeanMs), r.SubnetCeilingPct, r.Capacity, r.Balance}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	return nil
}

// WriteSVG plots probes/URL per window for every policy of every report
// (one series per policy and threshold).
func WriteSVG(out io.Writer, reps []*Report) error {
	type series struct {
		name string
		pts  []float64
	}
	var ss []series
	var win, maxY float64 = 1, 1
	for _, r := range reps {
		win = float64(r.CurveWindow)
		for _, x := range r.Results {
			name := x.Policy
			if len(reps) > 1 {
				name = fmt.Sprintf("%s @%gms", x.Policy, x.ThresholdMs)
			}
			if len(reps) > 1 && (x.Policy == "random" || x.Policy == "hash" || x.Policy == "optimal") && r != reps[0] {
				continue // threshold-independent: plot once
			}
			ss = append(ss, series{name, x.Curve})
			for _, y := range x.Curve {
				maxY = math.Max(maxY, y)
			}
		}
	}
	const W, H, L, R, T, B = 760.0, 420.0, 60.0, 190.0, 30.0, 50.0
	pw, ph := W-L-R, H-T-B
	npts := 0
	for _, s := range ss {
		npts = max(npts, len(s.pts))
	}
	maxY = niceCeil(maxY)
	x := func(i int) float64 { return L + pw*float64(i+1)/float64(max(1, npts)) }
	y := func(v float64) float64 { return T + ph*(1-v/maxY) }
	colors := []string{"#1f77b4", "#d62728", "#2ca02c", "#ff7f0e", "#9467bd", "#8c564b", "#e377c2", "#7f7f7f", "#bcbd22", "#17becf"}
	var b strings.Builder
	fmt.Fprintf(&b, `<svg xmlns="http://www.w3.org/2000/svg" width="%g" height="%g" viewBox="0 0 %g %g" font-family="sans-serif" font-size="12">`+"\n", W, H, W, H)
	fmt.Fprintf(&b, `<rect width="100%%" height="100%%" fill="white"/>`+"\n")
	fmt.Fprintf(&b, `<text x="%g" y="18" font-size="14">probes per URL as the hierarchy trains (window %g URLs)</text>`+"\n", L, win)
	for k := 0; k <= 5; k++ {
		v := maxY * float64(k) / 5
		fmt.Fprintf(&b, `<line x1="%g" y1="%.1f" x2="%g" y2="%.1f" stroke="#ddd"/><text x="%g" y="%.1f" text-anchor="end">%.3g</text>`+"\n", L, y(v), L+pw, y(v), L-6, y(v)+4, v)
	}
	for i := 0; i < npts; i += max(1, npts/10) {
		fmt.Fprintf(&b, `<text x="%.1f" y="%g" text-anchor="middle">%d</text>`+"\n", x(i), T+ph+16, min(int(float64(i+1)*win), reps[0].Hosts))
	}
	fmt.Fprintf(&b, `<text x="%g" y="%g" text-anchor="middle">URLs delegated</text>`+"\n", L+pw/2, H-10)
	fmt.Fprintf(&b, `<rect x="%g" y="%g" width="%g" height="%g" fill="none" stroke="#333"/>`+"\n", L, T, pw, ph)
	if len(reps) > 0 && npts > 0 {
		// the end of training: evaluation starts here
		tx := L + pw*float64(reps[0].Train)/win/float64(npts)
		fmt.Fprintf(&b, `<line x1="%.1f" y1="%g" x2="%.1f" y2="%g" stroke="#888" stroke-dasharray="4 3"/><text x="%.1f" y="%g" fill="#555">evaluation →</text>`+"\n", tx, T, tx, T+ph, tx+4, T+14)
	}
	for k, s := range ss {
		c := colors[k%len(colors)]
		var pts []string
		for i, v := range s.pts {
			pts = append(pts, fmt.Sprintf("%.1f,%.1f", x(i), y(v)))
		}
		fmt.Fprintf(&b, `<polyline fill="none" stroke="%s" stroke-width="2" points="%s"/>`+"\n", c, strings.Join(pts, " "))
		ly := T + 10 + 18*float64(k)
		fmt.Fprintf(&b, `<line x1="%g" y1="%g" x2="%g" y2="%g" stroke="%s" stroke-width="2"/><text x="%g" y="%g">%s</text>`+"\n",
			L+pw+10, ly, L+pw+30, ly, c, L+pw+36, ly+4, xmlEscape(s.name))
	}
	b.WriteString("</svg>\n")
	_, err := io.WriteString(out, b.String())
	return err
}

func niceCeil(v float64) float64 {
	if v <= 0 {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 2.5, 5, 10} {
		if m*p >= v {
			return m * p
		}
	}
	return 10 * p
}

func xmlEscape(s string) string {
	return strings.NewReplacer("&", "&amp;", "<", "&lt;", ">", "&gt;").Replace(s)
}

// Average combines reports of the same configuration under different seeds
// (same policies, same host count): every figure is the mean over seeds,
// the counts (URLs, probes, stop reasons) are summed, so probes / URLs is
// the mean probes per URL, and Seeds says how many runs were averaged.
func Average(reps []*Report) (*Report, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("sim: no reports to average")
	}
	out := *reps[0]
	out.Results = nil
	out.Seeds = len(reps)
	n := float64(len(reps))
	out.OptimalMeanMs, out.SubnetCeilingPct = 0, 0
	for _, r := range reps {
		if len(r.Results) != len(reps[0].Results) || r.Hosts != reps[0].Hosts {
			return nil, fmt.Errorf("sim: reports to average differ in policies or hosts")
		}
		out.OptimalMeanMs += r.OptimalMeanMs / n
		out.SubnetCeilingPct += r.SubnetCeilingPct / n
	}
	out.SubnetCeilingPct = round3(out.SubnetCeilingPct)
	for i, first := range reps[0].Results {
		acc := Result{Policy: first.Policy, ThresholdMs: first.ThresholdMs, URLs: first.URLs, Reasons: map[string]int{}, Curve: make([]float64, len(first.Curve))}
		for k, r := range reps {
			x := r.Results[i]
			if x.Policy != first.Policy {
				return nil, fmt.Errorf("sim: reports to average differ in policy order")
			}
			acc.OptimalPct += x.OptimalPct / n
			acc.OptimalPctAll += x.OptimalPctAll / n
			acc.ProbesPerURL += x.ProbesPerURL / n
			acc.ProbesPerURLLast50 += x.ProbesPerURLLast50 / n
			acc.ProbesPerURLEval += x.ProbesPerURLEval / n
			acc.ExcessMeanMs += x.ExcessMeanMs / n
			acc.ExcessP95Ms += x.ExcessP95Ms / n
			acc.CostVsRandom += x.CostVsRandom / n
			acc.CostVsOptimal += x.CostVsOptimal / n
			acc.LoadImbalance += x.LoadImbalance / n
			acc.LoadCV += x.LoadCV / n
			acc.CostVsMinCost += x.CostVsMinCost / n
			acc.ExcessRoomMeanMs += x.ExcessRoomMeanMs / n
			acc.ExcessRoomP95Ms += x.ExcessRoomP95Ms / n
			acc.UtilImbalance += x.UtilImbalance / n
			acc.OverCapacity += x.OverCapacity / n
			acc.OverPages += x.OverPages / n
			acc.SubnetFloorMs += x.SubnetFloorMs / n
			acc.SubnetWholeMs += x.SubnetWholeMs / n
			acc.Probes += x.Probes
			if k > 0 {
				acc.URLs += x.URLs
			}
			for why, v := range x.Reasons {
				acc.Reasons[why] += v
			}
			if x.EvalByReason != nil {
				if acc.EvalByReason == nil {
					acc.EvalByReason = map[string]ReasonFigures{}
				}
				mergeByReason(acc.EvalByReason, x.EvalByReason, n)
			}
			for j := range acc.Curve {
				if j < len(x.Curve) {
					acc.Curve[j] += x.Curve[j] / n
				}
			}
		}
		for j := range acc.Curve {
			acc.Curve[j] = round3(acc.Curve[j])
		}
		out.Results = append(out.Results, roundResult(acc))
	}
	return &out, nil
}
