package main

// `micra crawl`: one crawler on its own, from a seed file to carrier files.

import (
	"bufio"
	"cmp"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"os"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"runtime/pprof"
	"sort"
	"strconv"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/fsys"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/node"
)

type crawlOptions struct {
	seeds, out, state, id, userAgent, metrics string
	concurrency, perIP, maxDepth, maxPages    int
	minDelay, carrierHold, progress           time.Duration
	carrierBytes                              int
	maxBody                                   int64
	retries                                   int
	retryDelay                                time.Duration
	sameHosts, allowPrivate, fileOnly, sync   bool
	shipLinks                                 bool
	monitor                                   bool
	sleep                                     time.Duration
	windows, fileRoots                        []string
	timeZone                                  string
	benchFrontier                             int
	benchHosts                                int
	benchMemProfile                           string
}

func init() {
	o := &crawlOptions{}
	cmd := &cobra.Command{
		Use:   "crawl --seeds FILE --out DIR",
		Short: "run one crawler: seeds → polite per-host BFS crawl → keyword records in zstd carrier files",
		Long: `Runs a single micra crawler on its own. URLs from --seeds (one per line, # comments)
are crawled host by host, breadth-first, politely (robots.txt, one request per host,
per-IP limits, back-off), each HTML page is reduced on the spot to title, ranked
stemmed keywords and fingerprints, and the records leave in zstd carriers written
to --out (one file per carrier). State (frontier, seen-set, page history, outbox)
lives in Badger under --state: interrupt it (Ctrl-C, or even kill -9) and run the
same command again to resume without refetching. Interrupted (SIGINT, SIGTERM), it
still writes out the pending records and closes the state, then exits with status
128+signal (130 for Ctrl-C) rather than 0.

Without --monitor the command returns when the first pass is complete; with
--monitor it keeps revisiting pages with conditional GETs (adaptive intervals
around --sleep) until interrupted, shipping records only for changed pages.

--bench-frontier N instead measures the frontier: it queues N synthetic URLs and
prints the process RSS at 1 M and 10 M (and at N).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if o.benchFrontier > 0 {
				return runFrontierBench(cmd.Context(), o)
			}
			return runCrawl(cmd.Context(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.seeds, "seeds", "", "file of seed URLs, one per line ('-' for stdin)")
	f.StringVar(&o.out, "out", "", "directory for carrier files (.mcar)")
	f.StringVar(&o.state, "state", "", "state directory (default OUT/.state)")
	f.StringVar(&o.id, "id", "", "crawler id in records and carrier names (default: host name and a suffix made once per state)")
	f.StringVar(&o.userAgent, "user-agent", fetch.DefaultUserAgent, "User-Agent with a contact URL")
	f.IntVar(&o.concurrency, "concurrency", 64, "hosts crawled in parallel")
	f.IntVar(&o.perIP, "per-ip", 2, "requests in flight per IP address")
	f.DurationVar(&o.minDelay, "min-delay", time.Second, "floor of the pause between two requests to one host")
	f.IntVar(&o.maxDepth, "max-depth", 16, "largest link distance from a seed")
	f.IntVar(&o.maxPages, "max-pages-per-host", 100_000, "pages crawled per host at most")
	f.BoolVar(&o.sameHosts, "same-hosts", false, "stay on the seeds' hosts")
	f.BoolVar(&o.shipLinks, "ship-links", false, "put each page's out-links (normalised) in its record, for indexers that build the link graph")
	f.Int64Var(&o.maxBody, "max-body", 4<<20, "decoded body cap in bytes")
	f.IntVar(&o.retries, "retries", 2, "retries of a new URL after a transient failure (5xx, timeout, network); 0: none")
	f.DurationVar(&o.retryDelay, "retry-delay", 30*time.Second, "host's rest before the first retry (doubles per retry)")
	f.IntVar(&o.carrierBytes, "carrier-bytes", 1<<20, "max uncompressed records per carrier")
	f.DurationVar(&o.carrierHold, "carrier-hold", 30*time.Second, "max time a record waits for its carrier")
	f.BoolVar(&o.monitor, "monitor", false, "after the first pass, keep revisiting pages (conditional GET)")
	f.DurationVar(&o.sleep, "sleep", 24*time.Hour, "first revisit interval (adaptive afterwards)")
	f.StringArrayVar(&o.windows, "window", nil, "time span when the crawler may work, e.g. 'Mon-Fri 22:00-06:00' (repeatable)")
	f.StringVar(&o.timeZone, "tz", "UTC", "time zone of --window")
	f.StringArrayVar(&o.fileRoots, "file-root", nil, "crawl DIR from the file system as URL-PREFIX: DIR=URL-PREFIX (repeatable)")
	f.BoolVar(&o.fileOnly, "file-only", false, "no HTTP: crawl only the --file-root documents")
	f.BoolVar(&o.allowPrivate, "allow-private", false, "allow private and loopback destinations (testnets only)")
	f.BoolVar(&o.sync, "sync", false, "fsync every state commit (survive power loss, slower)")
	f.DurationVar(&o.progress, "progress", 5*time.Second, "interval of progress lines")
	f.StringVar(&o.metrics, "metrics", "", "serve Prometheus metrics on this address (e.g. 127.0.0.1:9101)")
	f.IntVar(&o.benchFrontier, "bench-frontier", 0, "measure frontier memory with N queued URLs instead of crawling")
	f.IntVar(&o.benchHosts, "bench-hosts", 100_000, "hosts the --bench-frontier URLs are spread over")
	f.StringVar(&o.benchMemProfile, "bench-memprofile", "", "write a heap profile at the end of --bench-frontier")
	rootCmd.AddCommand(cmd)
}

// readSeeds reads one URL per line; blank lines and # comments are skipped.
// Bad lines are reported as file:line: reason and do not stop the others.
func readSeeds(path string, norm *urlnorm.Normalizer) ([]string, []string, error) {
	var r *os.File
	if path == "-" {
		r, path = os.Stdin, "stdin"
	} else {
		f, err := os.Open(path)
		if err != nil {
			return nil, nil, err
		}
		defer f.Close()
		r = f
	}
	var seeds, bad []string
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for line := 1; sc.Scan(); line++ {
		s := strings.TrimSpace(sc.Text())
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		if _, err := norm.Parse(s); err != nil {
			bad = append(bad, fmt.Sprintf("%s:%d: %v", path, line, err))
			continue
		}
		seeds = append(seeds, s)
	}
	if err := sc.Err(); err != nil {
		return seeds, bad, fmt.Errorf("%s: %w", path, err)
	}
	return seeds, bad, nil
}

func runCrawl(ctx context.Context, o *crawlOptions) error {
	if o.out == "" || (o.seeds == "" && len(o.fileRoots) == 0) {
		return errors.New("crawl: --out and --seeds (or --file-root) are required")
	}
	// checked here, before any directory is made: further down a bad value
	// is either replaced by a default or reported without its flag's name
	for _, f := range []struct {
		name string
		bad  bool
	}{{"--per-ip", o.perIP < 0}, {"--min-delay", o.minDelay < 0}, {"--concurrency", o.concurrency < 0},
		{"--carrier-bytes", o.carrierBytes < 0}, {"--carrier-hold", o.carrierHold < 0}} {
		if f.bad {
			return fmt.Errorf("crawl: %s must not be negative", f.name)
		}
	}
	if o.state == "" {
		o.state = filepath.Join(o.out, ".state")
	}

	var seeds []string
	if o.seeds != "" {
		var bad []string
		var err error
		seeds, bad, err = readSeeds(o.seeds, urlnorm.New(urlnorm.DefaultOptions()))
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, b)
		}
		if err != nil {
			return err
		}
		if len(bad) > 0 {
			slog.Warn("bad seed lines skipped", "count", len(bad))
		}
		if len(seeds) == 0 && len(o.fileRoots) == 0 {
			return fmt.Errorf("crawl: no usable seed in %s", o.seeds)
		}
	}
	var roots []fsys.Root
	for _, s := range o.fileRoots {
		r, err := fsys.ParseRoot(s)
		if err != nil {
			return err
		}
		roots = append(roots, r)
	}
	var windows crawl.Windows
	for _, s := range o.windows {
		w, err := crawl.ParseWindow(s)
		if err != nil {
			return err
		}
		windows.Spans = append(windows.Spans, w)
	}
	if len(windows.Spans) > 0 {
		loc, err := time.LoadLocation(o.timeZone)
		if err != nil {
			return fmt.Errorf("crawl: --tz: %w", err)
		}
		windows.Loc = loc
	}
	scope := urlnorm.DefaultScope()
	scope.MaxDepth, scope.MaxPagesPerHost = o.maxDepth, o.maxPages
	reg := prometheus.NewRegistry()
	reg.MustRegister(prometheus.NewGoCollector(), prometheus.NewProcessCollector(prometheus.ProcessCollectorOpts{}))
	cfg := crawl.Config{
		CrawlerID: o.id, StateDir: o.state, SyncWrites: o.sync, Seeds: seeds,
		Fetch: fetch.Config{UserAgent: o.userAgent, PerIPLimit: o.perIP, MinDelay: o.minDelay, NoDelay: o.minDelay == 0,
			MaxBodyBytes: o.maxBody, AllowPrivate: o.allowPrivate},
		Scope: scope, SameHostsAsSeeds: o.sameHosts, Concurrency: o.concurrency, ShipLinks: o.shipLinks,
		MaxRetries: cmp.Or(o.retries, -1), RetryDelay: o.retryDelay,
		Receiver: pack.FileSink{Dir: o.out}, MaxCarrierBytes: o.carrierBytes, MaxCarrierHold: o.carrierHold,
		Monitor: crawl.Monitor{Enabled: o.monitor, Sleep: o.sleep}, Windows: windows,
		FileRoots: roots, FileOnly: o.fileOnly, StopWhenIdle: !o.monitor, Progress: o.progress,
		Logger: slog.Default(), Registerer: reg,
	}
	var metricsLn net.Listener
	if o.metrics != "" {
		// Listen before crawling, so a taken or bad address is a clear error
		// rather than a log line in a crawl that runs without its metrics.
		ln, err := net.Listen("tcp", o.metrics)
		if err != nil {
			return fmt.Errorf("crawl: --metrics: %w", err)
		}
		metricsLn = ln
	}
	if cfg.CrawlerID == "" {
		id, err := stateCrawlerID(o.state)
		if err != nil {
			if metricsLn != nil {
				metricsLn.Close()
			}
			return err
		}
		cfg.CrawlerID, o.id = id, id
	}
	eng, err := crawl.New(cfg)
	if err != nil {
		if metricsLn != nil {
			metricsLn.Close()
		}
		return err
	}
	if metricsLn != nil {
		srv := &http.Server{Handler: node.MetricsHandler(reg), ReadHeaderTimeout: 5 * time.Second}
		go func() {
			if err := srv.Serve(metricsLn); err != nil && !errors.Is(err, http.ErrServerClosed) {
				slog.Error("metrics server", "err", err)
			}
		}()
		defer srv.Close()
	}
	slog.Info("crawl starting", "id", o.id, "seeds", len(seeds), "file_roots", len(roots), "out", o.out, "state", o.state, "monitor", o.monitor)
	runErr := eng.Run(ctx)
	st := eng.Stats()
	printCrawlSummary(st)
	// Closing writes the state out: its error is the run's too.
	if err := eng.Close(); err != nil {
		runErr = errors.Join(runErr, fmt.Errorf("crawl: close state %s: %w", o.state, err))
	}
	if ctx.Err() != nil {
		// Interrupted: the state is closed (nothing acknowledged is lost),
		// but the crawl is not done. Say so, with the run's own error if it
		// had one, and exit non-zero (main: 128+signal).
		return errors.Join(fmt.Errorf("crawl: %w; state kept in %s — run the same command to resume",
			context.Cause(ctx), o.state), runErr)
	}
	if runErr == nil && !o.monitor {
		runErr = nothingCrawled(st, o.allowPrivate)
	}
	return runErr
}

// nothingCrawled is the error of a one-pass crawl that could crawl nothing
// it was given: every URL failed or was refused by the address guard. (A
// resumed crawl with nothing left to do fetches nothing too, and is fine.)
func nothingCrawled(s crawl.Stats, allowPrivate bool) error {
	// refused URLs kept from earlier runs count only when they are all the
	// crawl ever had: a finished crawl with a refused link is fine
	onlyRefused := s.Refused > 0 && s.Seen <= s.Refused
	if s.Fetched+s.NotModified > 0 || (s.Errors == 0 && !onlyRefused) {
		return nil
	}
	var parts []string
	if s.Errors > 0 {
		parts = append(parts, plural(s.Errors, "URL")+" failed (reasons above)")
	}
	if s.Refused > 0 {
		p := plural(s.Refused, "URL") + " refused by the address guard (private, loopback or reserved addresses), kept"
		if !allowPrivate {
			p += ": run again with --allow-private, on testnets only, to crawl them"
		}
		parts = append(parts, p)
	}
	msg := "crawl: nothing crawled: " + strings.Join(parts, "; ")
	return errors.New(msg)
}

func printCrawlSummary(s crawl.Stats) {
	w := os.Stdout
	fmt.Fprintf(w, "crawl summary\n")
	fmt.Fprintf(w, "  elapsed            %v\n", s.Elapsed.Round(time.Millisecond))
	fmt.Fprintf(w, "  pages fetched      %d  (%.1f pages/s)\n", s.Fetched, s.PagesPerSec)
	fmt.Fprintf(w, "  new / changed      %d / %d\n", s.New, s.Changed)
	fmt.Fprintf(w, "  unchanged / 304    %d / %d\n", s.Unchanged, s.NotModified)
	fmt.Fprintf(w, "  gone               %d\n", s.Gone)
	fmt.Fprintf(w, "  records            %d\n", s.Records)
	fmt.Fprintf(w, "  queued (left)      %d\n", s.Queued)
	fmt.Fprintf(w, "  via redirect       %d  (queued URLs skipped: fetched as a redirect target)\n", s.AlreadyFetched)
	fmt.Fprintf(w, "  HTML bytes         %d\n", s.HTMLBytes)
	fmt.Fprintf(w, "  carrier bytes      %d in %d carriers (%d delivered, %d pending)\n", s.CarrierBytes, s.CarriersSealed, s.CarriersDelivered, s.PendingCarriers)
	if s.HTMLBytes > 0 && s.CarrierBytes > 0 {
		fmt.Fprintf(w, "  carrier / HTML     %.4f (%s; UCYMicra: 1/20)\n", s.CarrierRatio(), ratioText(s.CarrierRatio()))
	}
	fmt.Fprintf(w, "  errors             %d  (URLs given up, revisits failed)\n", s.Errors)
	if s.Refused > 0 {
		fmt.Fprintf(w, "  refused            %d  (by the address guard; kept for a run with --allow-private)\n", s.Refused)
	}
	printCounts(w, s.ByReason)
	var events int64
	for _, n := range s.Events {
		events += n
	}
	if events > 0 {
		fmt.Fprintf(w, "  tried again        %d  (nothing given up)\n", events)
		printCounts(w, s.Events)
	}
	if s.Replays > 0 {
		fmt.Fprintf(w, "  transport replays  %d  (requests the HTTP client re-sent by itself)\n", s.Replays)
	}
}

func printCounts(w io.Writer, m map[string]int64) {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		fmt.Fprintf(w, "    %-18s %d\n", k, m[k])
	}
}

// runFrontierBench queues N synthetic URLs spread over many hosts and prints the
// resident set size when 1 M and 10 M (and N) URLs are queued: the frontier's
// memory must stay bounded while its disk use grows.
func runFrontierBench(ctx context.Context, o *crawlOptions) error {
	dir := o.state
	if dir == "" {
		tmp, err := os.MkdirTemp("", "micra-bench-frontier-")
		if err != nil {
			return err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	db, err := frontier.OpenDB(dir, frontier.DBOptions{})
	if err != nil {
		return err
	}
	defer db.Close()
	fr, err := frontier.New(db, frontier.Options{})
	if err != nil {
		return err
	}
	defer fr.Close()
	n, hosts := o.benchFrontier, max(o.benchHosts, 1)
	// A line at every million shows whether memory plateaus or keeps growing.
	marks := map[int]bool{n: true, 250_000: true, 500_000: true}
	for m := 1_000_000; m <= n; m += 1_000_000 {
		marks[m] = true
	}
	fmt.Printf("frontier memory: %d URLs over %d hosts (GOMAXPROCS %d)\n", n, hosts, runtime.GOMAXPROCS(0))
	// RSS splits into anonymous memory (heap, Badger's caches and memtables:
	// what must stay bounded) and file pages of Badger's memory-mapped tables
	// (page cache the kernel reclaims under pressure).
	fmt.Printf("%12s %9s %9s %9s %9s %9s %9s\n", "queued", "rss_MiB", "anon_MiB", "file_MiB", "heap_MiB", "disk_MiB", "urls/s")
	start := time.Now()
	const batch = 1000
	items := make([]frontier.Item, 0, batch)
	for i := 0; i < n; {
		if err := ctx.Err(); err != nil {
			return err
		}
		items = items[:0]
		for j := 0; j < batch && i < n; j, i = j+1, i+1 {
			h := i % hosts
			host := "h" + strconv.Itoa(h) + ".bench.test"
			items = append(items, frontier.Item{URL: "http://" + host + "/p/" + strconv.Itoa(i/hosts) + ".html", Host: host, Depth: 1})
		}
		if _, err := fr.Add(items); err != nil {
			return err
		}
		if i == n && o.benchMemProfile != "" {
			if f, err := os.Create(o.benchMemProfile); err == nil {
				pprof.WriteHeapProfile(f)
				f.Close()
			}
		}
		if marks[i] {
			runtime.GC()
			debug.FreeOSMemory()
			var ms runtime.MemStats
			runtime.ReadMemStats(&ms)
			rss, anon, file := rssBytes()
			fmt.Printf("%12d %9.1f %9.1f %9.1f %9.1f %9.1f %9.0f\n", fr.Stats().Queued, mib(rss), mib(anon), mib(file),
				mib(int64(ms.HeapInuse)), mib(dirBytes(dir)), float64(i)/time.Since(start).Seconds())
		}
	}
	return nil
}

func mib(b int64) float64 { return float64(b) / (1 << 20) }

// rssBytes reads the resident set size and its anonymous and file-backed
// parts from /proc (Linux).
func rssBytes() (rss, anon, file int64) {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0, 0, 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		name, rest, ok := strings.Cut(line, ":")
		if !ok {
			continue
		}
		kb, _ := strconv.ParseInt(strings.TrimSuffix(strings.TrimSpace(rest), " kB"), 10, 64)
		switch name {
		case "VmRSS":
			rss = kb << 10
		case "RssAnon":
			anon = kb << 10
		case "RssFile":
			file = kb << 10
		}
	}
	return rss, anon, file
}

func dirBytes(dir string) int64 {
	var n int64
	filepath.WalkDir(dir, func(_ string, d os.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if fi, err := d.Info(); err == nil {
				n += fi.Size()
			}
		}
		return nil
	})
	return n
}

func plural(n int64, what string) string {
	if n == 1 {
		return "1 " + what
	}
	return fmt.Sprintf("%d %ss", n, what)
}

// ratioText writes a ratio as 1/N below one (carriers are much smaller than
// the pages they describe) and as N× above.
func ratioText(r float64) string {
	if r < 1 {
		return fmt.Sprintf("1/%.0f", 1/r)
	}
	return fmt.Sprintf("%.1f×", r)
}

// stateCrawlerID is the default --id: the host name and a random suffix
// made once per crawl state (kept in STATE/crawler-id). Carriers are named
// by crawler id and a sequence that starts again with each new state, so
// two crawls from one machine must not share an id: a sink would take the
// second's carriers for redeliveries of the first's.
func stateCrawlerID(state string) (string, error) {
	path := filepath.Join(state, "crawler-id")
	if b, err := os.ReadFile(path); err == nil {
		if id := strings.TrimSpace(string(b)); id != "" {
			return id, nil
		}
	} else if !errors.Is(err, os.ErrNotExist) {
		return "", fmt.Errorf("crawl: %w", err)
	}
	host, _ := os.Hostname()
	if host == "" {
		host = "micra"
	}
	var r [4]byte
	if _, err := rand.Read(r[:]); err != nil {
		return "", err
	}
	id := fmt.Sprintf("%s-%x", host, r)
	if err := os.MkdirAll(state, 0o755); err != nil {
		return "", fmt.Errorf("crawl: state %s: %w", state, err)
	}
	if err := os.WriteFile(path, []byte(id+"\n"), 0o644); err != nil {
		return "", fmt.Errorf("crawl: %w", err)
	}
	return id, nil
}
