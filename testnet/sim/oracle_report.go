package sim

import (
	"cmp"
	"encoding/json"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"text/tabwriter"
)

// summarise fills At15, ProbesFor95 (evaluation hosts), their *All twins
// (every host) and MaxPct from the upper concave hull of every (probes/URL,
// % optimal) point.
func (r *OracleReport) summarise() {
	all := append(slices.Clone(r.Rows), r.Sweep...)
	r.MaxPct = math.NaN()
	for _, row := range all {
		if math.IsNaN(r.MaxPct) || row.OptimalPct > r.MaxPct {
			r.MaxPct = row.OptimalPct
		}
	}
	r.At15, r.ProbesFor95 = frontier(all, func(x OracleRow) (float64, float64) { return x.ProbesPerURL, x.OptimalPct })
	r.At15All, r.ProbesFor95All = frontier(all, func(x OracleRow) (float64, float64) { return x.ProbesPerURLAll, x.OptimalPctAll })
}

// frontier reads the best % optimal at 1.5 probes/URL and the probes/URL
// for 95 % off the upper concave hull of the rows' (probes, %) points; NaN
// when out of the hull's range.
func frontier(rows []OracleRow, xy func(OracleRow) (float64, float64)) (at15, for95 float64) {
	type pt struct{ x, y float64 }
	var pts []pt
	for _, row := range rows {
		x, y := xy(row)
		pts = append(pts, pt{x, y})
	}
	at15, for95 = math.NaN(), math.NaN()
	if len(pts) == 0 {
		return
	}
	slices.SortFunc(pts, func(a, b pt) int {
		if c := cmp.Compare(a.x, b.x); c != 0 {
			return c
		}
		return cmp.Compare(b.y, a.y)
	})
	// Andrew's monotone chain, upper part, then keep the rising section
	var hull []pt
	for _, p := range pts {
		if len(hull) > 0 && hull[len(hull)-1].x == p.x {
			continue // same x, lower y
		}
		for len(hull) >= 2 {
			a, b := hull[len(hull)-2], hull[len(hull)-1]
			if (b.x-a.x)*(p.y-a.y)-(b.y-a.y)*(p.x-a.x) >= 0 {
				hull = hull[:len(hull)-1]
				continue
			}
			break
		}
		hull = append(hull, p)
	}
	for i := 1; i < len(hull); i++ {
		if hull[i].y <= hull[i-1].y {
			hull = hull[:i]
			break
		}
	}
	at := func(x float64) float64 {
		for i := 1; i < len(hull); i++ {
			a, b := hull[i-1], hull[i]
			if x >= a.x && x <= b.x {
				return a.y + (b.y-a.y)*(x-a.x)/(b.x-a.x)
			}
		}
		if len(hull) == 1 && x == hull[0].x {
			return hull[0].y
		}
		if x > hull[len(hull)-1].x {
			return hull[len(hull)-1].y // more probes than the last point: no better
		}
		return math.NaN()
	}
	at15 = at(1.5)
	for i, p := range hull {
		if p.y >= 95 {
			if i == 0 {
				for95 = p.x
			} else {
				a := hull[i-1]
				for95 = a.x + (p.x-a.x)*(95-a.y)/(p.y-a.y)
			}
			break
		}
	}
	return
}

// AverageOracle is the mean of oracle reports of the same configuration
// under different seeds; the summary is recomputed from the mean points.
func AverageOracle(reps []*OracleReport) (*OracleReport, error) {
	if len(reps) == 0 {
		return nil, fmt.Errorf("sim: no oracle reports to average")
	}
	out := *reps[0]
	out.Seeds = len(reps)
	if out.Skipped != "" {
		return &out, nil
	}
	for _, r := range reps[1:] {
		if r.HostInfo != out.HostInfo || r.HostDist != out.HostDist || r.Crawlers != out.Crawlers || r.Hosts != out.Hosts || r.Train != out.Train || r.Skipped != "" {
			return nil, fmt.Errorf("sim: oracle reports to average differ in configuration (%s/%s, %d crawlers vs %s/%s, %d)",
				out.HostInfo, out.HostDist, out.Crawlers, r.HostInfo, r.HostDist, r.Crawlers)
		}
		out.CountryFallbacks += r.CountryFallbacks
	}
	same := func(a, b *float64) bool { return (a == nil) == (b == nil) && (a == nil || *a == *b) }
	avg := func(get func(*OracleReport) []OracleRow) ([]OracleRow, error) {
		first := get(reps[0])
		acc := make([]OracleRow, len(first))
		copy(acc, first)
		for i := range acc {
			acc[i].OptimalPct, acc[i].ProbesPerURL, acc[i].OptimalPctAll, acc[i].ProbesPerURLAll = 0, 0, 0, 0
		}
		nf := float64(len(reps))
		for _, r := range reps {
			rows := get(r)
			if len(rows) != len(acc) {
				return nil, fmt.Errorf("sim: oracle reports to average differ in rows")
			}
			for i, x := range rows {
				if x.Rule != acc[i].Rule || x.K != acc[i].K || !same(x.Eps, acc[i].Eps) || !same(x.Tau, acc[i].Tau) {
					return nil, fmt.Errorf("sim: oracle reports to average differ in row %d (%s K=%d)", i, x.Rule, x.K)
				}
				acc[i].OptimalPct += x.OptimalPct / nf
				acc[i].ProbesPerURL += x.ProbesPerURL / nf
				acc[i].OptimalPctAll += x.OptimalPctAll / nf
				acc[i].ProbesPerURLAll += x.ProbesPerURLAll / nf
			}
		}
		return acc, nil
	}
	var err error
	if out.Rows, err = avg(func(r *OracleReport) []OracleRow { return r.Rows }); err != nil {
		return nil, err
	}
	if out.Sweep, err = avg(func(r *OracleReport) []OracleRow { return r.Sweep }); err != nil {
		return nil, err
	}
	out.summarise()
	return &out, nil
}

// oracleLabel names a row for the text table.
func oracleLabel(r OracleRow) string {
	switch r.Rule {
	case OracleRuleNearest:
		return "nearest crawler by (expected) distance"
	case OracleRulePrior:
		return "prior's choice, no probe (max P(nearest))"
	case OracleRuleTwoNearest:
		return "two lowest expected RTTs"
	case OracleRuleGate:
		return "blind iff P(nearest) ≥ " + strconv.FormatFloat(*r.Tau, 'g', -1, 64) + ", else Bayes ε = " + strconv.FormatFloat(*r.Eps, 'g', -1, 64)
	}
	return "Bayes stop, ε = " + strconv.FormatFloat(*r.Eps, 'g', -1, 64)
}

func fmtMaybe(x float64, f string) string {
	if math.IsNaN(x) {
		return "not reached"
	}
	return fmt.Sprintf(f, x)
}

// WriteText prints the oracle's frontier as a table, clearly labelled as a
// bound that reads the world model.
func (r *OracleReport) WriteText(out io.Writer) error {
	if r.HostInfo == OracleHostCountry {
		fmt.Fprintln(out, "ORACLE BOUND, HOST COUNTRY ONLY — knows each host's registry country (as policies do) and where that")
		fmt.Fprintf(out, "country's hosts are (%d addresses drawn like uniform hosts), exact crawler positions and access delays,\n", r.PoolDraws)
		fmt.Fprintln(out, "the stretch distribution and the jitter model; learns each pair's stretch only by probing (the")
		fmt.Fprintln(out, "simulator's prober). Not a policy: it reads the world model.")
	} else {
		fmt.Fprintln(out, "ORACLE BOUND — knows exact host and crawler positions and access delays, the stretch distribution and")
		fmt.Fprintln(out, "the jitter model; learns each pair's stretch only by probing (the simulator's prober). Not a policy:")
		fmt.Fprintln(out, "it reads the world model.")
	}
	if r.Skipped != "" {
		fmt.Fprintf(out, "oracle skipped: %s\n", r.Skipped)
		return nil
	}
	fmt.Fprintf(out, "%d crawlers, %d hosts (%s); no training: scored on the %d evaluation hosts (the last %d, as the policies' optimal %%)",
		r.Crawlers, r.Hosts, r.HostDist, r.Hosts-r.Train, r.Hosts-r.Train)
	if r.Seeds > 1 {
		fmt.Fprintf(out, ", mean over %d seeds (%d … %d)", r.Seeds, r.Seed, r.Seed+uint64(r.Seeds)-1)
	}
	fmt.Fprintln(out)
	if r.CountryFallbacks > 0 {
		fmt.Fprintf(out, "%d hosts (over all seeds) had a country without pool addresses: prior = its centroid, or the world's hosts\n", r.CountryFallbacks)
	}
	fmt.Fprintln(out)
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "oracle rule\tK\toptimal %\tprobes/URL\tall hosts: optimal %\tprobes/URL\t")
	for _, x := range r.Rows {
		fmt.Fprintf(tw, "%s\t%d\t%.1f\t%.2f\t%.1f\t%.2f\t\n", oracleLabel(x), x.K, x.OptimalPct, x.ProbesPerURL, x.OptimalPctAll, x.ProbesPerURLAll)
	}
	if err := tw.Flush(); err != nil {
		return err
	}
	fmt.Fprintf(out, "\nfrontier (upper concave hull of these rules and a dense sweep of ε × τ × K ∈ {1, 2, 3, 4, 6, all},\n")
	fmt.Fprintf(out, "0-probe decisions included; mixing two rules host by host reaches any point between them):\n")
	fmt.Fprintf(out, "                                    evaluation hosts   all hosts\n")
	fmt.Fprintf(out, "  best optimal %% at 1.5 probes/URL: %-17s  %s\n", fmtMaybe(r.At15, "%.1f %%"), fmtMaybe(r.At15All, "%.1f %%"))
	fmt.Fprintf(out, "  probes/URL for 95 %% optimal:      %-17s  %s\n", fmtMaybe(r.ProbesFor95, "%.2f"), fmtMaybe(r.ProbesFor95All, "%.2f"))
	fmt.Fprintf(out, "  best optimal %% of any rule:       %s\n", fmtMaybe(r.MaxPct, "%.1f %%"))
	return nil
}

// WriteJSON prints one JSON object per printed row, then one summary object.
func (r *OracleReport) WriteJSON(out io.Writer) error {
	enc := json.NewEncoder(out)
	if r.Skipped != "" {
		return enc.Encode(map[string]any{"oracle_skipped": r.Skipped, "seed": r.Seed, "seeds": r.Seeds})
	}
	for _, x := range r.Rows {
		x.OptimalPct, x.ProbesPerURL, x.OptimalPctAll, x.ProbesPerURLAll = round3(x.OptimalPct), round3(x.ProbesPerURL), round3(x.OptimalPctAll), round3(x.ProbesPerURLAll)
		obj := struct {
			OracleRow
			OracleSetup
		}{x, r.OracleSetup}
		if err := enc.Encode(obj); err != nil {
			return err
		}
	}
	num := func(x float64) any {
		if math.IsNaN(x) {
			return nil
		}
		return round3(x)
	}
	return enc.Encode(map[string]any{"oracle_summary": true, "seed": r.Seed, "seeds": r.Seeds, "host_dist": r.HostDist, "oracle_host_info": r.HostInfo,
		"optimal_pct_at_1_5": num(r.At15), "probes_per_url_for_95": num(r.ProbesFor95), "max_optimal_pct": num(r.MaxPct),
		"optimal_pct_at_1_5_all": num(r.At15All), "probes_per_url_for_95_all": num(r.ProbesFor95All)})
}
