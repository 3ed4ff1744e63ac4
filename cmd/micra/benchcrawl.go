package main

// `micra bench crawl`: the synthetic web on loopback crawled by Colly and by
// micra in the same process run, figures printed side by side.
//
// Fairness. Both crawlers see the same web (same seed), the same seeds (every
// host's home page), obey robots.txt, keep connections alive and run without
// rest delays. Colly runs in async mode with one global LimitRule of
// Parallelism = --workers (Colly cannot bound requests per host: a LimitRule
// shares one semaphore across all matching domains). micra runs --workers
// host workers with its structural politeness intact: at most one request in
// flight per host and --per-ip per address. Colly is thus the less
// constrained of the two. Duplicate fetches are counted by the server: a 200
// answer for a page version that was already served in the same run.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"
	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
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

// benchCrawlResult is one crawler's figures.
type benchCrawlResult struct {
	Crawler          string    `json:"crawler"`
	Mode             string    `json:"mode"`
	Pages            int64     `json:"pages"`         // distinct pages fetched (server side)
	Seconds          float64   `json:"seconds"`       // wall time, first request to last
	PagesPerSec      float64   `json:"pages_per_sec"` // Pages / Seconds
	Fetches          int64     `json:"fetches"`       // page GETs answered 200 (server side)
	FetchesPerSec    float64   `json:"fetches_per_sec"`
	DuplicateFetches int64     `json:"duplicate_fetches"` // server side
	DuplicatePercent float64   `json:"duplicate_percent"`
	RobotsViolations int64     `json:"robots_violations"`
	BytesFetched     int64     `json:"bytes_fetched"`     // HTML bytes of the pages served to this crawler (decoded)
	WireBytes        int64     `json:"wire_bytes"`        // body bytes on the wire (robots.txt included; compressed with --gzip)
	CarrierBytes     int64     `json:"carrier_bytes"`     // compressed carrier bytes shipped (0: none)
	CarrierRatio     float64   `json:"carrier_ratio"`     // BytesFetched / CarrierBytes
	Records          int64     `json:"records,omitempty"` // records packed into carriers
	Errors           int64     `json:"errors"`            // fetch errors other than robots refusals
	Coverage         float64   `json:"coverage"`          // Pages / pages on the web
	Note             string    `json:"note,omitempty"`
	RoundPagesPerSec []float64 `json:"round_pages_per_sec"`
	webPages         int64
}

type benchCrawlReport struct {
	Web struct {
		Hosts          int  `json:"hosts"`
		Addresses      int  `json:"addresses"`
		PagesPerHost   int  `json:"pages_per_host"`
		Pages          int  `json:"pages"`
		AvgPageBytes   int  `json:"avg_page_bytes"`
		LinksPerPage   int  `json:"links_per_page"`
		Gzip           bool `json:"gzip"`
		CanonicalLinks bool `json:"canonical_links"`
	} `json:"web"`
	Rounds       int               `json:"rounds"`
	Workers      int               `json:"workers"`
	CollyPerHost bool              `json:"colly_per_host"`
	PerIP        int               `json:"per_ip"`
	GOMAXPROCS   int               `json:"gomaxprocs"`
	Colly        *benchCrawlResult `json:"colly,omitempty"`
	Micra        *benchCrawlResult `json:"micra"`
	SpeedupRatio float64           `json:"speedup_ratio,omitempty"` // micra pages/s ÷ Colly pages/s
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
	// --micra once chose between the engine and an in-memory copy of it;
	// the copy is gone, and the flag stays only to refuse it by name.
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
	if ctx == nil {
		ctx = context.Background()
	}
	if o.micraMode != "" && o.micraMode != "engine" {
		return fmt.Errorf("--micra %q: micra's side is always its crawl engine (package crawl); the in-memory pipeline was removed, drop --micra", o.micraMode)
	}
	if o.workers < 1 || o.perIP < 1 {
		return fmt.Errorf("--workers %d, --per-ip %d: want at least 1 each", o.workers, o.perIP)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	web, err := synthweb.Start(synthweb.Config{Seed: o.seed, Hosts: o.hosts, HostsPerIP: o.hostsPerIP, PagesPerHost: o.pagesPerHost, CanonicalLinks: o.canonical, Gzip: o.gzip})
	if err != nil {
		return err
	}
	defer web.Close()
	rep := &benchCrawlReport{Rounds: max(o.rounds, 1), Workers: o.workers, CollyPerHost: o.collyPerHost, PerIP: o.perIP, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	cfg := web.Config()
	rep.Web.Hosts, rep.Web.Addresses, rep.Web.PagesPerHost, rep.Web.Pages = cfg.Hosts, web.NumIPs(), cfg.PagesPerHost, web.TotalPages()
	rep.Web.LinksPerPage, rep.Web.CanonicalLinks, rep.Web.Gzip = cfg.LinksPerPage, cfg.CanonicalLinks, cfg.Gzip

	if o.cpuProfile != "" {
		pf, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer pf.Close()
		if err := pprof.StartCPUProfile(pf); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	// Rounds alternate the order (Colly, micra, micra, Colly, …) so that a
	// drift in machine load does not favour either crawler.
	run := func(name string) (*benchCrawlResult, error) {
		web.ResetStats()
		runtime.GC()
		if name == "colly" {
			r, err := benchColly(ctx, web, o)
			if err != nil {
				return nil, fmt.Errorf("colly: %w", err)
			}
			return r, nil
		}
		r, err := benchMicra(ctx, web, o)
		if err != nil {
			return nil, fmt.Errorf("micra: %w", err)
		}
		return r, nil
	}
	for round := 0; round < max(o.rounds, 1); round++ {
		order := []string{"colly", "micra"}
		if round%2 == 1 {
			order = []string{"micra", "colly"}
		}
		for _, name := range order {
			if name == "colly" && o.skipColly {
				continue
			}
			r, err := run(name)
			if err != nil {
				return err
			}
			if name == "colly" {
				rep.Colly = mergeResults(rep.Colly, r)
			} else {
				rep.Micra = mergeResults(rep.Micra, r)
			}
		}
	}
	r := rep.Micra
	if r.Pages > 0 {
		rep.Web.AvgPageBytes = int(r.BytesFetched / max(r.Pages, 1))
	}
	if rep.Colly != nil && rep.Colly.PagesPerSec > 0 {
		rep.SpeedupRatio = r.PagesPerSec / rep.Colly.PagesPerSec
	}
	if o.json {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printBenchCrawl(out, rep)
	return nil
}

func finishResult(r *benchCrawlResult, web *synthweb.Web, elapsed time.Duration) {
	st := web.Stats()
	r.Pages = st.UniquePages
	r.Seconds = elapsed.Seconds()
	if r.Seconds > 0 {
		r.PagesPerSec = float64(r.Pages) / r.Seconds
	}
	r.Fetches = st.PageFetches
	if r.Seconds > 0 {
		r.FetchesPerSec = float64(r.Fetches) / r.Seconds
	}
	r.DuplicateFetches = st.DuplicateFetches
	if st.PageFetches > 0 {
		r.DuplicatePercent = 100 * float64(st.DuplicateFetches) / float64(st.PageFetches)
	}
	r.RobotsViolations = st.RobotsViolations
	r.BytesFetched = st.HTMLBytes
	r.WireBytes = st.BytesServed
	if r.CarrierBytes > 0 {
		r.CarrierRatio = float64(r.BytesFetched) / float64(r.CarrierBytes)
	}
	r.webPages = int64(web.TotalPages())
	r.Coverage = float64(r.Pages) / float64(r.webPages)
	r.RoundPagesPerSec = []float64{r.PagesPerSec}
}

// mergeResults adds round r to the running total acc.
func mergeResults(acc, r *benchCrawlResult) *benchCrawlResult {
	if acc == nil {
		return r
	}
	acc.Pages += r.Pages
	acc.Fetches += r.Fetches
	acc.Seconds += r.Seconds
	acc.DuplicateFetches += r.DuplicateFetches
	acc.RobotsViolations += r.RobotsViolations
	acc.BytesFetched += r.BytesFetched
	acc.WireBytes += r.WireBytes
	acc.CarrierBytes += r.CarrierBytes
	acc.Records += r.Records
	acc.Errors += r.Errors
	acc.webPages += r.webPages
	acc.RoundPagesPerSec = append(acc.RoundPagesPerSec, r.PagesPerSec)
	acc.PagesPerSec = float64(acc.Pages) / acc.Seconds
	acc.FetchesPerSec = float64(acc.Fetches) / acc.Seconds
	acc.DuplicatePercent = 100 * float64(acc.DuplicateFetches) / float64(max(acc.Fetches, 1))
	if acc.CarrierBytes > 0 {
		acc.CarrierRatio = float64(acc.BytesFetched) / float64(acc.CarrierBytes)
	}
	acc.Coverage = float64(acc.Pages) / float64(acc.webPages)
	return acc
}

func benchColly(ctx context.Context, web *synthweb.Web, o *benchCrawlOptions) (*benchCrawlResult, error) {
	tr := &http.Transport{
		DialContext:         web.DialContext,
		MaxIdleConns:        4096,
		MaxIdleConnsPerHost: 4,
		IdleConnTimeout:     30 * time.Second,
	}
	defer tr.CloseIdleConnections()
	c := colly.NewCollector(colly.Async(true), colly.UserAgent(fetch.DefaultUserAgent+" colly-bench"))
	c.IgnoreRobotsTxt = false // obey robots.txt, like micra
	c.WithTransport(tr)
	c.SetRequestTimeout(30 * time.Second)
	mode := "colly/v2 v2.3.0 async, goquery a[href], robots.txt obeyed, global parallelism " + fmt.Sprint(o.workers)
	if o.collyPerHost {
		// One rule per host: Colly then keeps one request in flight per host
		// (each rule has its own semaphore), as micra does. Colly matches
		// rules against host:port, so the glob carries the port.
		for _, h := range web.Hosts() {
			glob := h + ":" + strconv.Itoa(web.Port())
			if err := c.Limit(&colly.LimitRule{DomainGlob: glob, Parallelism: 1}); err != nil {
				return nil, err
			}
		}
		mode = "colly/v2 v2.3.0 async, goquery a[href], robots.txt obeyed, one request per host (a LimitRule per host)"
	} else if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: o.workers}); err != nil {
		return nil, err
	}
	var errs atomic.Int64
	c.OnHTML("a[href]", func(e *colly.HTMLElement) {
		if ctx.Err() == nil {
			_ = e.Request.Visit(e.Attr("href"))
		}
	})
	c.OnError(func(_ *colly.Response, _ error) { errs.Add(1) })
	start := time.Now()
	for _, s := range web.Seeds() {
		var already *colly.AlreadyVisitedError
		if err := c.Visit(s); err != nil && !errors.As(err, &already) {
			return nil, err
		}
	}
	c.Wait()
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	r := &benchCrawlResult{Crawler: "colly", Mode: mode, Errors: errs.Load()}
	finishResult(r, web, elapsed)
	return r, nil
}

// benchMicra crawls with micra's crawl engine (package crawl): durable
// per-host breadth-first frontier in Badger, the fetcher, on-site processing
// and records packed into zstd carriers in the durable outbox, delivered to a
// file sink.
func benchMicra(ctx context.Context, web *synthweb.Web, o *benchCrawlOptions) (*benchCrawlResult, error) {
	tmp, err := os.MkdirTemp("", "micra-bench-crawl-")
	if err != nil {
		return nil, err
	}
	defer os.RemoveAll(tmp)
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	sink := &countingReceiver{next: pack.FileSink{Dir: filepath.Join(tmp, "carriers")}}
	eng, err := crawl.New(crawl.Config{
		CrawlerID: "bench",
		StateDir:  filepath.Join(tmp, "state"),
		Seeds:     web.Seeds(),
		Fetch: fetch.Config{
			AllowPrivate: true, // the synthetic web lives on loopback
			NoDelay:      true,
			DelayFactor:  -1,
			PerIPLimit:   o.perIP,
			Resolver:     web,
		},
		Concurrency:  o.workers,
		Receiver:     sink,
		StopWhenIdle: true,
		Progress:     -1,
		Logger:       quiet,
		Registerer:   prometheus.NewRegistry(),
	})
	if err != nil {
		return nil, err
	}
	defer eng.Close()
	start := time.Now()
	if err := eng.Run(ctx); err != nil {
		return nil, err
	}
	elapsed := time.Since(start)
	if ctx.Err() != nil {
		return nil, ctx.Err()
	}
	st := eng.Stats()
	var errs int64
	for reason, n := range st.ByReason {
		if reason != string(fetch.ReasonRobots) {
			errs += n
		}
	}
	r := &benchCrawlResult{
		Crawler: "micra",
		Mode: "engine: package crawl (durable Badger per-host BFS frontier, fetcher, crawl/extract, " +
			"records in zstd carriers via the durable outbox to a file sink)",
		Errors:       errs,
		CarrierBytes: sink.bytes.Load(),
		Records:      st.Records,
	}
	finishResult(r, web, elapsed)
	return r, nil
}

// countingReceiver counts the carrier bytes acknowledged by the next receiver.
type countingReceiver struct {
	next     pack.Receiver
	bytes    atomic.Int64
	carriers atomic.Int64
}

func (c *countingReceiver) Deliver(ctx context.Context, car pack.Carrier) error {
	if err := c.next.Deliver(ctx, car); err != nil {
		return err
	}
	c.bytes.Add(int64(len(car.Data)))
	c.carriers.Add(1)
	return nil
}

func printBenchCrawl(out io.Writer, rep *benchCrawlReport) {
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
	row := func(r *benchCrawlResult) {
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
	if rep.Micra.Note != "" {
		fmt.Fprintf(out, "note: %s\n", rep.Micra.Note)
	}
}

func fmtRates(rs []float64) string {
	parts := make([]string, len(rs))
	for i, r := range rs {
		parts[i] = fmt.Sprintf("%.0f", r)
	}
	return strings.Join(parts, ", ") + " pages/s"
}
