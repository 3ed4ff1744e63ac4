package main

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"os"
	"runtime/debug"
	"runtime/pprof"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
	"github.com/spf13/cobra"
)

func init() { rootCmd.AddCommand(simCmd()) }

// parseThresholds accepts "50", "50ms", "25,50,75" or "paper" (25…125 ms).
func parseThresholds(s string) ([]time.Duration, error) {
	if s == "paper" || s == "all" {
		return sim.PaperThresholds, nil
	}
	var out []time.Duration
	for _, f := range strings.Split(s, ",") {
		f = strings.TrimSpace(f)
		// whole microseconds from minThreshold to maxThreshold: the report
		// prints thresholds in ms with three decimals, and a threshold it
		// cannot print is not one a user meant
		bad := fmt.Errorf("threshold %q out of range: want whole microseconds from %v to %v", f, minThreshold, maxThreshold)
		var d time.Duration
		if ms, err := strconv.ParseFloat(f, 64); err == nil {
			us := ms * 1e3
			if !finite(us) || us < 0 || us > float64(maxThreshold/time.Microsecond) || math.Abs(us-math.Round(us)) > 1e-6*math.Max(1, ms) {
				return nil, bad
			}
			// rounded: 33.3 ms is 33299.99… µs in binary
			d = time.Duration(math.Round(us)) * time.Microsecond
		} else if d, err = time.ParseDuration(f); err != nil {
			return nil, fmt.Errorf("bad threshold %q: want milliseconds (50), a duration (50ms) or a list (25,50,75)", f)
		}
		if d < minThreshold || d > maxThreshold || d%time.Microsecond != 0 {
			return nil, bad
		}
		out = append(out, d)
	}
	return out, nil
}

// Thresholds a simulation accepts: a probe answer is at least a few
// microseconds, and nothing on Earth is an hour away.
const (
	minThreshold = time.Microsecond
	maxThreshold = time.Hour
)

// finite reports whether x is a number other than ±Inf.
func finite(x float64) bool { return !math.IsNaN(x) && !math.IsInf(x, 0) }

func simCmd() *cobra.Command {
	var (
		tracePolicy, hostDist, preset, thresholds, sitesPath, rttPath, plotPath, policies, balance, micraOpts, names, latency string
		frontierPlotPath, cpuProfile, memProfile                                                                              string
		crawlers, hosts, train, seeds, traceN                                                                                 int
		seed                                                                                                                  uint64
		asJSON, worldStats, oracle, review, calibration, frontier                                                             bool
		oracleEps, oracleHost                                                                                                 string
		oracleSamples                                                                                                         int
		memoryLimit                                                                                                           int64
		gcPercent                                                                                                             int
		nearestK                                                                                                              int
		capacityFactor, capacitySigma, ipv6Share                                                                              float64
	)
	cmd := &cobra.Command{
		Use:   "sim",
		Short: "simulate delegation policies on the emulated Internet and print the paper's table",
		Long: `sim places crawlers and web hosts at real addresses of the embedded IP hierarchy,
gives them positions (DB-IP City Lite) and latencies (fibre × path stretch + access +
jitter; or a measured matrix with --sites/--rtt; or the synthetic hub-routed one with
--latency hubs), delegates every host with each policy and scores it against the optimal crawler (lowest modelled mean RTT).

With no flags: the paper's preset — 12 crawlers, 1000 hosts, the first 650 delegations
train and the last 350 evaluate, 50 ms threshold. Deterministic: the same flags and
seed print the same report. See docs/simulator.md.`,
		Example: `  micra sim
  micra sim --threshold paper            # 25, 50, 75, 100, 125 ms
  micra sim --preset paper4 --json
  micra sim --crawlers 10000 --hosts 1000000 --policies ipmicra,micra,hash
  micra sim --sites sites.csv --rtt rtt.csv --plot curve.svg`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			cfg, err := sim.Preset(preset)
			if err != nil {
				return err
			}
			f := cmd.Flags()
			if f.Changed("seed") {
				cfg.Seed = seed
			}
			if f.Changed("crawlers") {
				cfg.Crawlers = crawlers
			}
			if f.Changed("hosts") {
				cfg.Hosts = hosts
				if !f.Changed("train") {
					cfg.Train = hosts * 65 / 100
				}
			}
			if f.Changed("train") {
				cfg.Train = train
			}
			if cfg.Crawlers < 1 || cfg.Hosts < 1 {
				return fmt.Errorf("need at least one crawler and one host")
			}
			if cfg.Train < 0 || cfg.Train >= cfg.Hosts {
				return fmt.Errorf("--train %d must be in [0, hosts=%d)", cfg.Train, cfg.Hosts)
			}
			ths := []time.Duration{cfg.Threshold}
			if f.Changed("threshold") {
				if ths, err = parseThresholds(thresholds); err != nil {
					return err
				}
			}
			if policies != "" {
				for _, p := range strings.Split(policies, ",") {
					p = strings.TrimSpace(p)
					if slices.Contains(cfg.Policies, p) {
						return fmt.Errorf("--policies: %q given twice", p)
					}
					if _, ok := sim.LookupRow(p); !ok {
						var names []string
						for _, s := range append(slices.Clone(sim.Policies), sim.References...) {
							names = append(names, s.Name)
						}
						return fmt.Errorf("unknown policy %q (have %s)", p, strings.Join(names, ", "))
					}
					cfg.Policies = append(cfg.Policies, p)
				}
			}
			if f.Changed("balance") {
				if cfg.Engine.Balance, err = delegation.ParseBalanceMode(balance); err != nil {
					return fmt.Errorf("--balance: %w", err)
				}
			}
			if cfg.Engine.Micra, err = parseMicraOptionsOver(cfg.Engine.Micra, micraOpts); err != nil {
				return err
			}
			if (sitesPath == "") != (rttPath == "") {
				return fmt.Errorf("--sites and --rtt go together")
			}
			switch latency {
			case "formula":
			case "hubs":
				if sitesPath != "" {
					return fmt.Errorf("--latency hubs and --sites/--rtt exclude each other")
				}
				if cfg.Matrix, err = world.HubMatrix(1, 0.08); err != nil {
					return err
				}
			default:
				return fmt.Errorf("--latency %q: want formula or hubs", latency)
			}
			if sitesPath != "" {
				if cfg.Matrix, err = world.LoadMatrixFiles(sitesPath, rttPath); err != nil {
					return err
				}
			}
			// capacity = factor × hosts / crawlers pages; NaN, ±Inf or a
			// factor that overflows it once became capacity 1 (maximal
			// balancing) — the opposite of what a huge factor asks for
			if f.Changed("capacity-factor") {
				cfg.CapacityFactor = capacityFactor
			}
			if cf := cfg.CapacityFactor; f.Changed("capacity-factor") && (!finite(cf) || cf <= 0 || cf*float64(cfg.Hosts) > math.MaxInt32) {
				return fmt.Errorf("--capacity-factor %g: want a positive number with factor × hosts below 2^31", cf)
			}
			if f.Changed("capacity-sigma") {
				// σ 3 already puts one crawler in a thousand at 10^4 × the median
				if !(capacitySigma >= 0 && capacitySigma <= 3) { // NaN too
					return fmt.Errorf("--capacity-sigma %g: want a number from 0 (equal capacities) to 3", capacitySigma)
				}
				cfg.CapacitySigma = capacitySigma
			}
			if traceN > 0 {
				if _, ok := sim.LookupPolicy(tracePolicy); !ok {
					return fmt.Errorf("--trace-policy %q: unknown policy", tracePolicy)
				}
				if run := cfg.RunPolicies(); !slices.Contains(run, tracePolicy) {
					return fmt.Errorf("--trace-policy %q is not run (policies: %s): nothing would be traced", tracePolicy, strings.Join(run, ", "))
				}
				cfg.Trace, cfg.TracePolicy, cfg.TraceN = cmd.ErrOrStderr(), tracePolicy, traceN
			}
			cfg.HostDist = hostDist
			cfg.CrawlerNames = names
			if !(ipv6Share >= 0 && ipv6Share <= 1) { // NaN too
				return fmt.Errorf("--ipv6 %g must be in [0, 1]", ipv6Share)
			}
			cfg.IPv6Share = ipv6Share
			cfg.NoReview = !review
			// the oracle's flags are checked before anything runs, so a typo
			// does not throw a long run away
			oc, oracleInfos, err := parseOracleFlags(oracle, f.Changed("oracle-eps"), f.Changed("oracle-host"), oracleEps, oracleHost)
			if err != nil {
				return err
			}
			if f.Changed("oracle-samples") {
				if !oracle {
					return fmt.Errorf("--oracle-samples needs --oracle")
				}
				if oracleSamples < 1 || oracleSamples > 16384 {
					return fmt.Errorf("--oracle-samples %d: want 1 to 16384 positions per country", oracleSamples)
				}
				// draws in the default's proportion (256 of 50,000)
				oc.CountrySamples, oc.PoolDraws = oracleSamples, oracleSamples*50000/256
			}
			// the plots' files are created before anything runs, so a bad
			// path does not throw a long run away
			plot, err := createPlot(plotPath, worldStats)
			if err != nil {
				return err
			}
			defer plot.discard()
			if frontierPlotPath != "" {
				frontier = true
			}
			frontierPlot, err := createPlot(frontierPlotPath, worldStats)
			if err != nil {
				return err
			}
			defer frontierPlot.discard()
			if f.Changed("memory-limit") {
				if memoryLimit < 0 {
					return fmt.Errorf("--memory-limit %d: want MiB above 0, or 0 for none", memoryLimit)
				}
				limit := int64(math.MaxInt64) // none
				if memoryLimit > 0 {
					limit = memoryLimit << 20
				}
				debug.SetMemoryLimit(limit)
			}
			if gc, set := simGCPercent(preset, gcPercent, f.Changed("gc-percent"), os.Getenv("GOGC")); set {
				if gc < 1 {
					return fmt.Errorf("--gc-percent %d: want a percentage above 0", gc)
				}
				debug.SetGCPercent(gc)
			}
			if cpuProfile != "" {
				pf, err := os.Create(cpuProfile)
				if err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pf.Close()
				if err := pprof.StartCPUProfile(pf); err != nil {
					return fmt.Errorf("--cpuprofile: %w", err)
				}
				defer pprof.StopCPUProfile()
			}
			if memProfile != "" {
				// in use as of the last collection (the policies' state may
				// be gone by the end), and every allocation of the run
				defer func() {
					if err := writeHeapProfile(memProfile); err != nil {
						fmt.Fprintln(cmd.ErrOrStderr(), "--memprofile:", err)
					}
				}()
			}
			out := bufio.NewWriter(cmd.OutOrStdout())
			defer out.Flush()
			if worldStats {
				out := cmd.OutOrStdout()
				return sim.WriteWorldStats(cmd.Context(), cfg, out)
			}
			if cmd.Flags().Changed("nearest-bound") {
				if nearestK < 1 {
					return fmt.Errorf("--nearest-bound %d: want at least 1 crawler", nearestK)
				}
				return sim.WriteNearestBound(cmd.Context(), cfg, out, nearestK)
			}
			if seeds < 1 {
				return fmt.Errorf("--seeds %d: want at least 1", seeds)
			}
			var reps []*sim.Report
			worlds := make([]*sim.World, seeds) // placed once per seed, reused across thresholds
			base := cfg.Seed
			for i, th := range ths {
				cfg.Threshold = th
				cfg.Seed = base
				runs, err := sim.RunSeeds(cmd.Context(), cfg, worlds, traceN == 0) // (--trace lines would interleave)
				if err != nil {
					return err
				}
				rep := runs[0]
				if seeds > 1 {
					if rep, err = sim.Average(runs); err != nil {
						return err
					}
				}
				reps = append(reps, rep)
				if asJSON {
					err = rep.WriteJSON(out)
				} else {
					if i > 0 {
						fmt.Fprintln(out)
					}
					err = rep.WriteText(out)
				}
				if err != nil {
					return err
				}
				out.Flush()
			}
			if calibration {
				var cal *sim.CalibrationReport
				for k := range seeds {
					cfg.Seed = base + uint64(k)
					c, err := worlds[k].Calibration(cmd.Context(), cfg)
					if err != nil {
						return err
					}
					if cal == nil {
						cal = c
					} else {
						cal.Add(c)
					}
				}
				fmt.Fprintln(out)
				if err := cal.WriteText(out); err != nil {
					return err
				}
				out.Flush()
			}
			if frontier {
				c := cfg
				c.Seed, c.Threshold = base, ths[0]
				mf, err := sim.MicraFrontier(cmd.Context(), c, worlds, sim.FrontierMisses)
				if err != nil {
					return err
				}
				ipf, err := sim.IPMicraFrontier(cmd.Context(), c, worlds, sim.FrontierThresholds)
				if err != nil {
					return err
				}
				for _, fr := range []*sim.FrontierReport{mf, ipf} {
					if asJSON {
						err = fr.WriteJSON(out)
					} else {
						fmt.Fprintln(out)
						err = fr.WriteText(out)
					}
					if err != nil {
						return err
					}
				}
				if err := frontierPlot.write(out, !asJSON, func(w io.Writer) error { return sim.WriteFrontierSVG(w, []*sim.FrontierReport{mf, ipf}) }); err != nil {
					return err
				}
				out.Flush()
			}
			if oracle {
				for _, info := range oracleInfos {
					oc.HostInfo = info
					var ors []*sim.OracleReport
					for k := range seeds {
						cfg.Seed = base + uint64(k)
						or, err := worlds[k].Oracle(cmd.Context(), cfg, oc)
						if err != nil {
							return err
						}
						ors = append(ors, or)
					}
					or, err := sim.AverageOracle(ors)
					if err != nil {
						return err
					}
					if asJSON {
						err = or.WriteJSON(out)
					} else {
						fmt.Fprintln(out)
						err = or.WriteText(out)
					}
					if err != nil {
						return err
					}
					out.Flush()
					if or.Skipped != "" {
						break
					}
				}
			}
			return plot.write(out, !asJSON, func(w io.Writer) error { return sim.WriteSVG(w, reps) })
		},
	}
	f := cmd.Flags()
	f.StringVar(&preset, "preset", "paper", "paper (12 crawlers, 1000 hosts, 650 train, 50 ms), paper4 (4 crawlers) or scale (10,000 crawlers, 1,000,000 hosts)")
	f.IntVar(&crawlers, "crawlers", 12, "number of crawlers (overrides the preset)")
	f.IntVar(&hosts, "hosts", 1000, "number of web hosts, one URL each (overrides the preset)")
	f.IntVar(&train, "train", 650, "delegations that train before evaluation starts (default 65% of hosts)")
	f.StringVar(&thresholds, "threshold", "50", "probing threshold in ms, a list (25,50,75) or 'paper' for 25,50,75,100,125")
	f.Uint64Var(&seed, "seed", 1, "seed of placement, latency model and policies")
	f.IntVar(&seeds, "seeds", 1, "average over this many seeds (seed, seed+1, …): placements vary a lot between seeds")
	f.StringVar(&policies, "policies", "", "comma-separated policies (default ipmicra,micra,optimal,hash,random; optimal only up to 1000 crawlers); subnet-oracle adds a reference row: whole subnets online within the capacities, every RTT known (formula latency)")
	f.StringVar(&hostDist, "host-dist", sim.HostsUniform, "how hosts spread over the hierarchy's leaf ranges: uniform (nearly one host per subnet) or zipf (popular subnets, like web hosting)")
	f.StringVar(&names, "names", sim.NamesRandom, "crawler names: random (like peer IDs, in no relation to placement) or ordered (c00, c01, … in spread-first placement order)")
	f.Float64Var(&ipv6Share, "ipv6", 0, "fraction of hosts at IPv6 addresses (0..1)")
	f.StringVar(&balance, "balance", "off", "load balancing: off, release, second-best or least-cost (capacity: --capacity-factor; preset scale: least-cost)")
	f.Float64Var(&capacityFactor, "capacity-factor", 2, "mean crawler capacity as a multiple of hosts/crawlers (preset scale: 1.5)")
	f.Float64Var(&capacitySigma, "capacity-sigma", 0, "crawler capacities log-normal with this σ of ln capacity around the mean; 0: all equal (preset scale: 0.5)")
	f.StringVar(&latency, "latency", "formula", "latency without --sites/--rtt: formula (distance × per-pair stretch + access + jitter) or hubs (a synthetic matrix routed through regional transit hubs, world.HubMatrix: near on the map is not always near on the network)")
	f.StringVar(&sitesPath, "sites", "", "measured latency: sites CSV (id,lat,lon[,name])")
	f.StringVar(&rttPath, "rtt", "", "measured latency: RTT CSV (src,dst,rtt_ms), directed")
	f.StringVar(&plotPath, "plot", "", "write the probes/URL curve as SVG to this file")
	f.StringVar(&frontierPlotPath, "frontier-plot", "", "write the frontiers (accuracy against probes per URL, micra and IPMicra) as SVG to this file; implies --frontier")
	f.IntVar(&traceN, "trace", 0, "print the explanation of the first N decisions of --trace-policy (to stderr), beside each host's optimal crawler")
	f.StringVar(&tracePolicy, "trace-policy", "ipmicra", "policy whose decisions --trace prints")
	f.IntVar(&nearestK, "nearest-bound", 0, "print, instead of simulating, the excess over the optimal crawler of the best of the k = 1 … N crawlers nearest each evaluation host by its exact position: no policy (policies do not know where hosts are), the reference that says how precisely a host must be located (formula latency only; docs/experiments/2026-11-scale-probes.md)")
	f.BoolVar(&worldStats, "world-stats", false, "print the latency model's calibration figures (implied stretch, RTT under 500 km, triangle violations) — and the measured matrix's, with --sites/--rtt — instead of simulating")
	f.BoolVar(&calibration, "calibration", false, "after the policies, print micra's STOP-RULE CALIBRATION: every round's summed risk (binned, after 1, 2 and ≥3 probes) beside how often the best answer so far was not the optimal crawler (evaluation hosts; --micra tunes the run; see docs/delegation.md)")
	f.BoolVar(&frontier, "frontier", false, "after the policies, print MICRA FRONTIER — micra (as --micra tunes it, MissFirst at the default ratio to Miss unless missfirst is set) at stop-rule risks 1 … 0.008 — and IPMICRA FRONTIER — IPMicra at thresholds 400 … 10 ms, the paper's trade — on the same worlds, each with the accuracy read off at 1.5 probes per evaluation URL and the probes for 95 % (works on --sites/--rtt too; see docs/delegation.md)")
	f.BoolVar(&oracle, "oracle", false, "after the policies, print the ORACLE BOUND: the accuracy/probes frontier of a rule that knows exact host and crawler positions, access delays and the stretch distribution (not a pair's stretch) — not a policy; formula latency only (see docs/simulator.md)")
	f.StringVar(&oracleHost, "oracle-host", "both", "what the oracle knows of a host's position: position (exact), country (its registry country and where that country's hosts are, as a policy could learn) or both")
	f.IntVar(&oracleSamples, "oracle-samples", 256, "positions per country in the country oracle's prior, drawn from 50,000 × N/256 addresses (1024: converged, about 3× the country variant's time; docs/simulator.md)")
	f.StringVar(&oracleEps, "oracle-eps", "", "the oracle's printed stop thresholds ε (default 0.5,0.3,0.2,0.1,0.05,0.02,0.01,0.005)")
	f.BoolVar(&review, "review", true, "give each owner's crawl timing of a further host of its subnet to the policies that review delegations with it (micra; --review=false: first decisions only)")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the run to this file (go tool pprof)")
	f.Int64Var(&memoryLimit, "memory-limit", 0, "soft limit of the Go runtime's memory in MiB: the garbage collector works harder near it instead of letting the heap double (0: none; unset: GOMEMLIMIT or none). Costly when the live heap comes near it")
	f.IntVar(&gcPercent, "gc-percent", 100, "the Go collector's heap growth between collections in % (GOGC): lower holds less memory for more collections (preset scale: 50 unless GOGC is set)")
	f.StringVar(&memProfile, "memprofile", "", "write a heap profile at the end of the run to this file (in use as of the last garbage collection, and all allocations)")
	f.BoolVar(&asJSON, "json", false, "print one JSON object per policy (and threshold) per line")
	f.StringVar(&micraOpts, "micra", "", "tune the micra policy (variants for docs/delegation.md): comma-separated key=value of miss, missfirst, neighbours, maxprobes, blind, shift, pairprior, mincandidates, parallel, nopairs, pairsamples, bandwidth, nogeo, geoafter, review, reviewevery, reviewprobe, reviewpool, pairfrom, blocks, maxcontexts, margin (ms), walk, locate")
	return cmd
}

// scaleGCPercent is the scale preset's heap growth between collections:
// its live heap is over a gigabyte and it allocates little per decision,
// so half the default growth keeps its peak under 2 GB for a few more
// collections (docs/experiments/2026-11-scale-probes.md).
const scaleGCPercent = 50

// simGCPercent is the collector's heap growth to set, if any: --gc-percent
// when given, else the scale preset's unless GOGC is set.
func simGCPercent(preset string, flag int, changed bool, gogc string) (int, bool) {
	switch {
	case changed:
		return flag, true
	case preset == "scale" && gogc == "":
		return scaleGCPercent, true
	}
	return 0, false
}

// writeHeapProfile writes the heap profile to path.
func writeHeapProfile(path string) error {
	f, err := os.Create(path)
	if err != nil {
		return err
	}
	if err := pprof.WriteHeapProfile(f); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

// parseOracleFlags checks --oracle-eps and --oracle-host (given without
// --oracle they are an error, not silently ignored) and returns the oracle's
// configuration and the host-information variants to run.
func parseOracleFlags(oracle, epsSet, hostSet bool, eps, host string) (sim.OracleConfig, []string, error) {
	var oc sim.OracleConfig
	if !oracle {
		switch {
		case epsSet:
			return oc, nil, fmt.Errorf("--oracle-eps needs --oracle")
		case hostSet:
			return oc, nil, fmt.Errorf("--oracle-host needs --oracle")
		}
		return oc, nil, nil
	}
	if epsSet {
		for _, e := range strings.Split(eps, ",") {
			x, err := strconv.ParseFloat(strings.TrimSpace(e), 64)
			if err != nil || x < 0 || math.IsNaN(x) || math.IsInf(x, 0) {
				return oc, nil, fmt.Errorf("--oracle-eps %q: want finite non-negative numbers (0.1,0.05)", e)
			}
			oc.Eps = append(oc.Eps, x)
		}
	}
	switch host {
	case "both":
		return oc, []string{sim.OracleHostPosition, sim.OracleHostCountry}, nil
	case sim.OracleHostPosition, sim.OracleHostCountry:
		return oc, []string{host}, nil
	}
	return oc, nil, fmt.Errorf("--oracle-host %q: want position, country or both", host)
}

// parseMicraOptions reads "miss=0.1,maxprobes=4" into a MicraConfig.
func parseMicraOptions(s string) (delegation.MicraConfig, error) {
	return parseMicraOptionsOver(delegation.MicraConfig{}, s)
}

// parseMicraOptionsOver is parseMicraOptions over a preset's settings m.
func parseMicraOptionsOver(m delegation.MicraConfig, s string) (delegation.MicraConfig, error) {
	if strings.TrimSpace(s) == "" {
		return m, nil
	}
	for _, kv := range strings.Split(s, ",") {
		k, v, ok := strings.Cut(strings.TrimSpace(kv), "=")
		if !ok {
			return m, fmt.Errorf("--micra %q: want key=value", kv)
		}
		x, err := strconv.ParseFloat(v, 64)
		if err != nil || !finite(x) {
			return m, fmt.Errorf("--micra %s: %q is not a finite number", k, v)
		}
		// values MicraConfig would quietly replace by its default, cut or
		// turn off are refused: the run must be the one asked for
		switch k {
		case "neighbours", "locate", "maxprobes", "mincandidates", "parallel", "pairsamples", "reviewevery", "reviewprobe", "pairfrom", "maxcontexts", "walk":
			if x != math.Trunc(x) || math.Abs(x) > math.MaxInt32 {
				return m, fmt.Errorf("--micra %s=%v: want a whole number", k, x)
			}
		}
		switch k {
		case "miss", "maxprobes", "mincandidates", "parallel", "pairsamples", "bandwidth", "pairprior", "geoafter":
			if !(x > 0) {
				return m, fmt.Errorf("--micra %s=%v: want a value above 0 (leave the key out for the default)", k, x)
			}
		case "neighbours", "locate":
			if x == 0 || x > 8 {
				return m, fmt.Errorf("--micra %s=%v: want 1 to 8, or a negative number for none (leave the key out for the default)", k, x)
			}
		case "walk":
			if x == 0 {
				return m, fmt.Errorf("--micra walk=0: want probes above 0, or a negative number for no walk (leave the key out for the default)")
			}
		case "maxcontexts":
			if x == 0 {
				return m, fmt.Errorf("--micra maxcontexts=0: want a bound above 0, or a negative number for none (leave the key out for the default)")
			}
		case "shift":
			if x < 0 || x > 1 {
				return m, fmt.Errorf("--micra shift=%v: want 0 to 1", x)
			}
		case "margin":
			if x < 0 || x > 1000 || x*1e3 != math.Trunc(x*1e3) {
				return m, fmt.Errorf("--micra margin=%v: want 0 to 1000 ms in whole microseconds", x)
			}
		}
		if k == "pairsamples" && x > math.MaxUint16 {
			return m, fmt.Errorf("--micra pairsamples=%v: at most %d", x, math.MaxUint16)
		}
		switch k {
		case "miss":
			m.Miss = x
		case "neighbours":
			m.Neighbours = int(x)
		case "locate":
			m.Locate = int(x)
		case "missfirst":
			m.MissFirst = x
		case "maxprobes":
			m.MaxProbes = int(x)
		case "blind":
			m.Blind = x
		case "shift":
			m.Shift = x
		case "pairprior":
			m.PairPrior = x
		case "mincandidates":
			m.MinCandidates = int(x)
		case "parallel":
			m.Parallel = int(x)
		case "nopairs":
			m.NoPairs = x != 0
		case "nogeo":
			m.NoGeo = x != 0
		case "geoafter":
			m.GeoAfter = x
		case "pairsamples":
			m.PairSamples = int(x)
		case "bandwidth":
			m.PairBandwidth = x
		case "review":
			m.ReviewMiss = x
		case "reviewevery":
			m.ReviewEvery = int(x)
		case "reviewprobe":
			m.ReviewProbeUpTo = int(x)
		case "reviewpool":
			if !(x >= 0 && x < 1) {
				return m, fmt.Errorf("--micra: reviewpool=%v: the margin must be in [0, 1) (0: off)", x)
			}
			m.ReviewPool = x
		case "pairfrom":
			m.PairFromLowest = int(x)
		case "maxcontexts":
			m.MaxContexts = int(x)
		case "margin":
			m.Margin = time.Duration(math.Round(x*1e3)) * time.Microsecond
		case "walk":
			m.Walk = int(x)
		case "blocks":
			if !(x >= 0 && x < 1) {
				return m, fmt.Errorf("--micra: blocks=%v: the margin must be in [0, 1) (0: no block delegations)", x)
			}
			m.BlockMargin = x
			if x == 0 {
				m.BlockMargin = -1 // off (0 in MicraConfig means the default)
			}
		default:
			return m, fmt.Errorf("--micra: unknown key %q (miss, missfirst, neighbours, maxprobes, blind, shift, pairprior, mincandidates, parallel, nopairs, pairsamples, bandwidth, nogeo, geoafter, review, reviewevery, reviewprobe, reviewpool, pairfrom, blocks, maxcontexts, margin, walk, locate)", k)
		}
	}
	return m, nil
}

// plotFile is an SVG output created before a run (so a bad path fails
// fast) and removed if the run ends without writing it.
type plotFile struct {
	f    *os.File
	path string
}

// createPlot creates path's file; none when path is empty or nothing will
// be simulated.
func createPlot(path string, worldStats bool) (*plotFile, error) {
	if path == "" || worldStats {
		return &plotFile{}, nil
	}
	f, err := os.Create(path)
	if err != nil {
		return nil, err
	}
	return &plotFile{f, path}, nil
}

// write renders into the file and closes it, saying so on out when say.
func (p *plotFile) write(out io.Writer, say bool, render func(io.Writer) error) error {
	if p.f == nil {
		return nil
	}
	if err := render(p.f); err != nil {
		return err
	}
	f := p.f
	p.f = nil
	if err := f.Close(); err != nil {
		return err
	}
	if say {
		fmt.Fprintf(out, "\nplot written to %s\n", p.path)
	}
	return nil
}

// discard closes and removes a file that was never written: no empty plot
// is left behind.
func (p *plotFile) discard() {
	if p != nil && p.f != nil {
		p.f.Close()
		os.Remove(p.path)
	}
}
