package bench

// The crawl experiment: the synthetic web on loopback crawled by Colly and by
// micra in the same process run.
//
// Fairness. Both crawlers see the same web (same seed), the same seeds (every
// host's home page), obey robots.txt, keep connections alive and run without
// rest delays. Colly runs in async mode with one global LimitRule of
// Parallelism = Workers (Colly cannot bound requests per host: a LimitRule
// shares one semaphore across all matching domains). micra runs Workers host
// workers with its structural politeness intact: at most one request in
// flight per host and PerIP per address. Colly is thus the less constrained
// of the two. Duplicate fetches are counted by the server: a 200 answer for a
// page version that was already served in the same run.

import (
	"context"
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
	"sync/atomic"
	"time"

	"github.com/gocolly/colly/v2"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// CrawlOptions configures RunCrawl.
type CrawlOptions struct {
	// The synthetic web (testnet/synthweb).
	Hosts, HostsPerIP, PagesPerHost int
	Seed                            uint64
	CanonicalLinks                  bool // spell every link canonically
	Gzip                            bool // serve pages gzip-encoded to crawlers that accept it

	Workers      int  // micra host workers; Colly's global parallelism
	PerIP        int  // micra requests in flight per address
	CollyPerHost bool // give Colly micra's per-host limit instead of one global rule
	SkipColly    bool // run micra only
	// Rounds is how many crawls each crawler makes, alternating the order;
	// figures are totals over all rounds (at least 1).
	Rounds int
	// CPUProfile, when set, receives a CPU profile of the crawls.
	CPUProfile io.Writer
}

// CrawlResult is one crawler's figures, totals over the rounds.
type CrawlResult struct {
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
	WireBytes        int64     `json:"wire_bytes"`        // body bytes on the wire (robots.txt included; compressed with Gzip)
	CarrierBytes     int64     `json:"carrier_bytes"`     // compressed carrier bytes shipped (0: none)
	CarrierRatio     float64   `json:"carrier_ratio"`     // BytesFetched / CarrierBytes
	Records          int64     `json:"records,omitempty"` // records packed into carriers
	Errors           int64     `json:"errors"`            // fetch errors other than robots refusals
	Coverage         float64   `json:"coverage"`          // Pages / pages on the web
	RoundPagesPerSec []float64 `json:"round_pages_per_sec"`
	webPages         int64
}

// CrawlReport is the outcome of RunCrawl.
type CrawlReport struct {
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
	Rounds       int          `json:"rounds"`
	Workers      int          `json:"workers"`
	CollyPerHost bool         `json:"colly_per_host"`
	PerIP        int          `json:"per_ip"`
	GOMAXPROCS   int          `json:"gomaxprocs"`
	Colly        *CrawlResult `json:"colly,omitempty"`
	Micra        *CrawlResult `json:"micra"`
	SpeedupRatio float64      `json:"speedup_ratio,omitempty"` // micra pages/s ÷ Colly pages/s
}

// RunCrawl starts the synthetic web, crawls it with Colly and with micra's
// crawl engine (package crawl) for o.Rounds rounds each, and returns both
// crawlers' figures.
func RunCrawl(ctx context.Context, o CrawlOptions) (*CrawlReport, error) {
	if o.Workers < 1 || o.PerIP < 1 {
		return nil, fmt.Errorf("bench: Workers %d, PerIP %d: want at least 1 each", o.Workers, o.PerIP)
	}
	rounds := max(o.Rounds, 1)
	web, err := synthweb.Start(synthweb.Config{Seed: o.Seed, Hosts: o.Hosts, HostsPerIP: o.HostsPerIP, PagesPerHost: o.PagesPerHost, CanonicalLinks: o.CanonicalLinks, Gzip: o.Gzip})
	if err != nil {
		return nil, err
	}
	defer web.Close()
	rep := &CrawlReport{Rounds: rounds, Workers: o.Workers, CollyPerHost: o.CollyPerHost, PerIP: o.PerIP, GOMAXPROCS: runtime.GOMAXPROCS(0)}
	cfg := web.Config()
	rep.Web.Hosts, rep.Web.Addresses, rep.Web.PagesPerHost, rep.Web.Pages = cfg.Hosts, web.NumIPs(), cfg.PagesPerHost, web.TotalPages()
	rep.Web.LinksPerPage, rep.Web.CanonicalLinks, rep.Web.Gzip = cfg.LinksPerPage, cfg.CanonicalLinks, cfg.Gzip

	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return nil, err
		}
		defer pprof.StopCPUProfile()
	}
	run := func(name string) (*CrawlResult, error) {
		web.ResetStats()
		runtime.GC()
		if name == "colly" {
			r, err := crawlColly(ctx, web, o)
			if err != nil {
				return nil, fmt.Errorf("colly: %w", err)
			}
			return r, nil
		}
		r, err := crawlMicra(ctx, web, o)
		if err != nil {
			return nil, fmt.Errorf("micra: %w", err)
		}
		return r, nil
	}
	// Rounds alternate the order (Colly, micra, micra, Colly, …) so that a
	// drift in machine load does not favour either crawler.
	for round := range rounds {
		order := []string{"colly", "micra"}
		if round%2 == 1 {
			order = []string{"micra", "colly"}
		}
		for _, name := range order {
			if name == "colly" && o.SkipColly {
				continue
			}
			r, err := run(name)
			if err != nil {
				return nil, err
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
	return rep, nil
}

func finishResult(r *CrawlResult, web *synthweb.Web, elapsed time.Duration) {
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
func mergeResults(acc, r *CrawlResult) *CrawlResult {
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

func crawlColly(ctx context.Context, web *synthweb.Web, o CrawlOptions) (*CrawlResult, error) {
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
	mode := "colly/v2 v2.3.0 async, goquery a[href], robots.txt obeyed, global parallelism " + fmt.Sprint(o.Workers)
	if o.CollyPerHost {
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
	} else if err := c.Limit(&colly.LimitRule{DomainGlob: "*", Parallelism: o.Workers}); err != nil {
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
	r := &CrawlResult{Crawler: "colly", Mode: mode, Errors: errs.Load()}
	finishResult(r, web, elapsed)
	return r, nil
}

// crawlMicra crawls with micra's crawl engine (package crawl): durable
// per-host breadth-first frontier in Badger, the fetcher, on-site processing
// and records packed into zstd carriers in the durable outbox, delivered to a
// file sink.
func crawlMicra(ctx context.Context, web *synthweb.Web, o CrawlOptions) (*CrawlResult, error) {
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
			PerIPLimit:   o.PerIP,
			Resolver:     web,
		},
		Concurrency:  o.Workers,
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
	r := &CrawlResult{
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
	next  pack.Receiver
	bytes atomic.Int64
}

func (c *countingReceiver) Deliver(ctx context.Context, car pack.Carrier) error {
	if err := c.next.Deliver(ctx, car); err != nil {
		return err
	}
	c.bytes.Add(int64(len(car.Data)))
	return nil
}
