package main

// `micra bench crawl`: flags and printing of testnet/bench's crawl
// experiment (micra beside Colly on the loopback synthetic web).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"strings"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/bench"
)

type benchCrawlOptions struct {
	json         bool
	hosts        int
	hostsPerIP   int
	pagesPerHost int
	seed         uint64
	workers      int
	perIP        int
	skipColly    bool
	rounds       int
	canonical    bool
	gzip         bool
	collyPerHost bool
	cpuProfile   string
	micraMode    string
	timeout      time.Duration
}

func init() {
	o := &benchCrawlOptions{}
	cmd := &cobra.Command{
		Use:   "crawl",
		Short: "crawl the loopback synthetic web with micra and with Colly in one run; print pages/s, ratio, duplicates, bytes",
		Long: `Starts the synthetic web (testnet/synthweb) on loopback, crawls it with
github.com/gocolly/colly/v2 and then with micra, in the same process, and prints
pages/s of each, their ratio, duplicate fetches of each (counted by the server),
bytes fetched and bytes shipped in carriers.`,
		RunE: func(cmd *cobra.Command, _ []string) error { return runBenchCrawl(cmd.Context(), cmd.OutOrStdout(), o) },
	}
	f := cmd.Flags()
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.IntVar(&o.hosts, "hosts", 200, "hosts in the synthetic web")
	f.IntVar(&o.hostsPerIP, "hosts-per-ip", 4, "hosts sharing one loopback address")
	f.IntVar(&o.pagesPerHost, "pages-per-host", 100, "pages per host")
	f.Uint64Var(&o.seed, "seed", 1, "seed of the synthetic web")
	f.IntVar(&o.workers, "workers", 64, "micra host workers; Colly global parallelism")
	f.IntVar(&o.perIP, "per-ip", 2, "micra requests in flight per address")
	f.BoolVar(&o.skipColly, "skip-colly", false, "run micra only")
	f.IntVar(&o.rounds, "rounds", 2, "crawls of each crawler, alternating the order; figures are totals over all rounds")
	f.BoolVar(&o.canonical, "canonical-links", false, "spell every link canonically (no fragments, tracking parameters or case variants)")
	f.BoolVar(&o.collyPerHost, "colly-per-host", false, "give Colly micra's per-host limit (one LimitRule of Parallelism 1 per host) instead of one global rule")
	f.BoolVar(&o.gzip, "gzip", false, "serve pages gzip-encoded to crawlers that accept it")
	// Hidden: engine is its only value; the flag is kept so that any other
	// value is refused by name rather than by cobra as an unknown flag.
	f.StringVar(&o.micraMode, "micra", "engine", "micra side: engine (package crawl), the only one")
	_ = f.MarkHidden("micra")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	f.DurationVar(&o.timeout, "timeout", 30*time.Minute, "give up after this long")
	benchParentCmd().AddCommand(cmd)
}

// benchParentCmd returns the shared "bench" command, creating it if no other
// file has.
func benchParentCmd() *cobra.Command {
	for _, c := range rootCmd.Commands() {
		if c.Name() == "bench" {
			return c
		}
	}
	b := &cobra.Command{Use: "bench", Short: "experiments that measure micra beside a peer in the same run"}
	rootCmd.AddCommand(b)
	return b
}

func runBenchCrawl(ctx context.Context, out io.Writer, o *benchCrawlOptions) error {
	if o.micraMode != "" && o.micraMode != "engine" {
		return fmt.Errorf("--micra %q: micra's side is always its crawl engine (package crawl); the in-memory pipeline was removed, drop --micra", o.micraMode)
	}
	if o.workers < 1 || o.perIP < 1 {
		return fmt.Errorf("--workers %d, --per-ip %d: want at least 1 each", o.workers, o.perIP)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	opts := bench.CrawlOptions{Hosts: o.hosts, HostsPerIP: o.hostsPerIP, PagesPerHost: o.pagesPerHost, Seed: o.seed,
		CanonicalLinks: o.canonical, Gzip: o.gzip, Workers: o.workers, PerIP: o.perIP, CollyPerHost: o.collyPerHost,
		SkipColly: o.skipColly, Rounds: o.rounds}
	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		opts.CPUProfile = pf
	}
	rep, err := bench.RunCrawl(ctx, opts)
	if err != nil {
		return err
	}
	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchCrawl(out, rep)
	return nil
}

func printBenchCrawl(out io.Writer, rep *bench.CrawlReport) {
	spelling := "links spelled as on the real web (fragments, tracking parameters, case, dot segments)"
	if rep.Web.CanonicalLinks {
		spelling = "canonically spelled links"
	}
	if rep.Web.Gzip {
		spelling += ", gzip-encoded"
	}
	fmt.Fprintf(out, "synthetic web: %d hosts on %d loopback addresses, %d pages (%d per host), ~%d B/page, %d links/page, %s\n",
		rep.Web.Hosts, rep.Web.Addresses, rep.Web.Pages, rep.Web.PagesPerHost, rep.Web.AvgPageBytes, rep.Web.LinksPerPage, spelling)
	colly := fmt.Sprintf("Colly: global parallelism %d", rep.Workers)
	if rep.CollyPerHost {
		colly = "Colly: 1 request per host"
	}
	fmt.Fprintf(out, "limits: %s; micra: %d host workers, 1 request per host, %d per address; GOMAXPROCS=%d\n",
		colly, rep.Workers, rep.PerIP, rep.GOMAXPROCS)
	fmt.Fprintf(out, "%d round(s) per crawler, order alternating; figures are totals over all rounds\n\n", rep.Rounds)
	fmt.Fprintf(out, "%-7s %8s %8s %9s %9s %12s %8s %11s %11s %10s %9s %6s\n",
		"crawler", "pages", "seconds", "pages/s", "GETs/s", "duplicates", "robots!", "HTML B", "wire B", "carrier B", "HTML/car", "errors")
	row := func(r *bench.CrawlResult) {
		carrier, ratio := "-", "-"
		if r.CarrierBytes > 0 {
			carrier, ratio = fmt.Sprint(r.CarrierBytes), fmt.Sprintf("%.1f×", r.CarrierRatio)
		}
		fmt.Fprintf(out, "%-7s %8d %8.2f %9.0f %9.0f %6d %4.1f%% %8d %11d %11d %10s %9s %6d\n",
			r.Crawler, r.Pages, r.Seconds, r.PagesPerSec, r.FetchesPerSec, r.DuplicateFetches, r.DuplicatePercent, r.RobotsViolations,
			r.BytesFetched, r.WireBytes, carrier, ratio, r.Errors)
	}
	if rep.Colly != nil {
		row(rep.Colly)
	}
	row(rep.Micra)
	fmt.Fprintln(out)
	if rep.Colly != nil {
		fmt.Fprintf(out, "micra/Colly pages/s ratio: %.2f× (target ≥ 1.5×); per round: micra %s, Colly %s\n",
			rep.SpeedupRatio, fmtRates(rep.Micra.RoundPagesPerSec), fmtRates(rep.Colly.RoundPagesPerSec))
		fmt.Fprintf(out, "colly: %s\n", rep.Colly.Mode)
	}
	fmt.Fprintf(out, "micra: %s\n", rep.Micra.Mode)
}

func fmtRates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, ", ") + " pages/s"
}
