package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"net/http"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/testnet/sim"
)

// Progress is one look at a running crawl.
type Progress struct {
	Elapsed  time.Duration
	Fetched  int64 // distinct pages the synthetic web served
	AtSink   int64 // distinct pages the sink committed
	Total    int   // pages of the synthetic web
	CaughtUp int   // nodes with nothing left to do
}

// Result is one crawl of the synthetic web by the testnet, measured at the
// sink (what reached the indexers), at the synthetic web's servers (what
// was fetched) and from the nodes' metrics (what delegation cost).
type Result struct {
	Policy string `json:"policy"`
	Peers  int    `json:"peers"`
	Hosts  int    `json:"hosts"`

	Pages       int     `json:"pages"` // distinct pages at the sink
	TotalPages  int     `json:"total_pages"`
	CoveragePct float64 `json:"coverage_pct"`
	// Overlap is records of a page delivered by a second crawler (the
	// sink's count); DuplicateFetches is pages served twice (the web's).
	Overlap          int64 `json:"overlap"`
	DuplicateFetches int64 `json:"duplicate_fetches"`
	RobotsFetches    int64 `json:"robots_fetches"`

	// OptimalPct is the share of hosts crawled by their nearest crawler
	// (lowest modelled mean RTT); ExcessRTTMs the mean modelled RTT of the
	// crawler that fetched a host over its nearest's.
	OptimalPct  float64 `json:"optimal_pct"`
	ExcessRTTMs float64 `json:"excess_rtt_ms"`
	// Probes is every probe the nodes sent; ProbesPerHost divides it by
	// the hosts delegated.
	Probes        int64   `json:"probes"`
	ProbesPerHost float64 `json:"probes_per_host"`

	// MakespanS runs from the seeds to the last page fetched; DownloadS
	// is Σ of every page's fetch time (its records' total_ms).
	MakespanS float64 `json:"makespan_s"`
	DownloadS float64 `json:"download_s"`

	// BytesFetched is the pages' bytes on the wire; BytesToSink the
	// carriers the crawlers sealed for the sink (compressed records).
	BytesFetched int64 `json:"bytes_fetched"`
	BytesToSink  int64 `json:"bytes_to_sink"`

	// PagesPerCrawler counts the pages each crawler delivered; MaxLoadPct
	// is the busiest crawler's pages over its capacity (the world's, in
	// pages), OverCapacity the crawlers that took on more than theirs.
	PagesPerCrawler map[string]int `json:"pages_per_crawler"`
	MaxLoadPct      float64        `json:"max_load_pct"`
	OverCapacity    int            `json:"over_capacity"`
	// SimOptimalPct and SimProbesPerURL are `micra sim`'s figures for the
	// policy on the same world, over every host (Testnet.Simulate, or
	// RunExperiment for every policy in one simulator run).
	SimOptimalPct   float64 `json:"sim_optimal_pct"`
	SimProbesPerURL float64 `json:"sim_probes_per_url"`
	Complete        bool    `json:"complete"` // every page reached the sink before the deadline
	// SeedsRejected are the seeds the seeded node could not route, with
	// the reason (URL: reason).
	SeedsRejected []string `json:"seeds_rejected,omitempty"`
	// Killed lists the nodes SIGKILLed mid-crawl (Options.Kill) and
	// KilledAtPages the distinct pages fetched then.
	Killed        []int `json:"killed,omitempty"`
	KilledAtPages int64 `json:"killed_at_pages,omitempty"`
	// Restarted lists the killed nodes started again (Options.Restart);
	// SinkKilled says the sink was SIGKILLed and started again.
	Restarted  []int `json:"restarted,omitempty"`
	SinkKilled bool  `json:"sink_killed,omitempty"`
	// Partition: PartitionS is how long the two halves were split,
	// DisagreeMax the most subnets whose owner two live nodes named
	// differently meanwhile, ConvergedS the seconds from the heal until no
	// two live nodes disagree (-1: not within a minute).
	PartitionS  float64 `json:"partition_s,omitempty"`
	DisagreeMax int     `json:"disagree_max,omitempty"`
	ConvergedS  float64 `json:"converged_s,omitempty"`
	// Delivery compares what the subscriber beside the sink printed with
	// the sink's log (Options.Subscriber).
	Delivery *Delivery `json:"delivery,omitempty"`

	// NodePeakRSSMB is the largest peak resident set (VmHWM) of any node
	// process, SinkPeakRSSMB the sink's, read when the crawl is complete.
	NodePeakRSSMB float64 `json:"node_peak_rss_mb"`
	SinkPeakRSSMB float64 `json:"sink_peak_rss_mb"`
}

// Crawl seeds the testnet with every host's home page (through the last
// node's control API, once every node sees all peers) and waits until all
// pages fetched have reached the sink and every node is caught up, or ctx
// ends; then it reads the sink's change log and scores the crawl.
func (t *Testnet) Crawl(ctx context.Context, progress func(Progress)) (*Result, error) {
	if t.State.Sink == nil {
		return nil, errors.New("cluster: a crawl is measured at the sink: start the testnet with a sink")
	}
	t0 := time.Now()
	if err := t.WaitMembers(ctx); err != nil {
		return nil, err
	}
	fmt.Fprintf(t.o.Log, "membership formed (%d crawlers seen by every node) in %.1f s; seeding %d hosts\n",
		len(t.State.Nodes), time.Since(t0).Seconds(), len(t.Web.Hosts()))
	t.Web.ResetStats()
	start := time.Now()
	last := t.State.Nodes[len(t.State.Nodes)-1]
	total := t.Web.TotalPages()
	var killed []int
	var killedAt int64
	var faults faultRun
	killDone := make(chan struct{})
	kctx, kcancel := context.WithCancel(ctx) // (the watcher ends with Crawl)
	defer kcancel()
	sc := t.sinkClient() // (a sink started again keeps its HTTP address)
	if t.o.Kill > 0 || t.o.KillSink || t.o.Partition > 0 {
		// by pages fetched (the sink's count moves a carrier at a time),
		// read every 20 ms from before the seeding (which returns once
		// every seed is routed, while the crawl is well under way)
		go func() {
			defer close(killDone)
			tick := time.NewTicker(20 * time.Millisecond)
			defer tick.Stop()
			for {
				if f := t.Web.Stats().UniquePages; float64(f) >= t.o.KillAt*float64(total) {
					killed, killedAt = t.killNodes(last.Index), f
					if len(killed) > 0 {
						fmt.Fprintf(t.o.Log, "killed nodes %v (SIGKILL) with %d of %d pages fetched\n", killed, f, total)
					}
					faults = t.runFaults(kctx, killed)
					return
				}
				select {
				case <-kctx.Done():
					return
				case <-tick.C:
				}
			}
		}()
	} else {
		close(killDone)
	}
	si, err := t.control(last).Seed(ctx, t.Web.Seeds())
	if err != nil {
		return nil, fmt.Errorf("seeding node %d: %w", last.Index, err)
	}
	var rejected []string
	for _, r := range si.Seeds {
		if r.Status == node.SeedRejected {
			rejected = append(rejected, r.URL+": "+r.Reason)
		}
	}
	if len(rejected) > 0 {
		fmt.Fprintf(t.o.Log, "%d of %d seeds rejected by node %d (their hosts are crawled only if a link reaches them), e.g. %s\n",
			len(rejected), len(si.Seeds), last.Index, rejected[0])
	}
	for {
		select {
		case <-killDone:
		default:
			// nodes are about to die: not done before they have
			if progress != nil {
				p := Progress{Elapsed: time.Since(start), Total: total, Fetched: t.Web.Stats().UniquePages}
				if st, err := sc.Status(ctx); err == nil {
					p.AtSink = st.Counts.Pages
				}
				progress(p)
			}
			time.Sleep(100 * time.Millisecond)
			continue
		}
		break
	}
	complete, err := t.WaitCrawled(ctx, start, progress)
	if err != nil {
		return nil, err
	}
	fmt.Fprintf(t.o.Log, "crawl caught up after %.1f s\n", time.Since(start).Seconds())
	r, err := t.Score(ctx, start)
	if err != nil {
		return nil, err
	}
	r.Complete, r.SeedsRejected = complete, rejected
	r.Killed, r.KilledAtPages = killed, killedAt
	r.Restarted, r.SinkKilled = faults.restarted, faults.sinkKilled
	r.PartitionS, r.DisagreeMax, r.ConvergedS = faults.partition.Seconds(), faults.disagreeMax, faults.converged
	if t.sub != nil {
		dctx, cancel := context.WithTimeout(ctx, time.Minute)
		d, err := t.CheckDelivery(dctx)
		cancel()
		if err != nil {
			return nil, fmt.Errorf("the subscriber beside the sink: %w", err)
		}
		r.Delivery = &d
	}
	return r, nil
}

// faultRun is what runFaults did.
type faultRun struct {
	restarted   []int
	sinkKilled  bool
	partition   time.Duration
	disagreeMax int
	converged   float64
}

// runFaults applies Options' other faults at the kill point, after the
// nodes in killed died: the sink's kill, a partition, and the restarts.
func (t *Testnet) runFaults(ctx context.Context, killed []int) (fr faultRun) {
	logf := func(format string, a ...any) { fmt.Fprintf(t.o.Log, format+"\n", a...) }
	if t.o.KillSink {
		st, _ := t.SinkStatus(ctx)
		if err := t.KillSink(); err != nil {
			logf("%v", err)
		} else {
			fr.sinkKilled = true
			logf("killed the sink (SIGKILL) during ingest, at record %d (%d pages)", st.Head, st.Counts.Pages)
		}
	}
	if t.o.Partition > 0 {
		half := len(t.State.Nodes) / 2
		var side []int
		for i := range half {
			side = append(side, i)
		}
		start := time.Now()
		if err := t.Partition(ctx, side, true); err != nil {
			logf("partition: %v", err)
		}
		logf("partitioned nodes 0-%d (with the sink) from %d-%d for %v", half-1, half, len(t.State.Nodes)-1, t.o.Partition)
		for time.Since(start) < t.o.Partition && ctx.Err() == nil {
			if o, err := t.Owners(ctx); err == nil {
				fr.disagreeMax = max(fr.disagreeMax, o.Disagree)
			}
			sleepCtx(ctx, 2*time.Second)
		}
		fr.partition = time.Since(start)
		if err := t.Heal(ctx); err != nil {
			logf("heal: %v", err)
		}
		fr.converged = t.converge(ctx, time.Minute)
		if fr.converged >= 0 {
			logf("healed; the live nodes agreed on every owner %.1f s later (at most %d subnets disagreed while split)", fr.converged, fr.disagreeMax)
		} else {
			logf("healed; the live nodes still disagreed on owners a minute later")
		}
	}
	wait := t.o.Restart
	if wait <= 0 && fr.sinkKilled {
		wait = 5 * time.Second
	}
	if wait > 0 {
		sleepCtx(ctx, wait)
	}
	if fr.sinkKilled {
		if err := t.RestartSink(ctx); err != nil {
			logf("%v", err)
		} else {
			logf("started the sink again on its data directory")
		}
	}
	if t.o.Restart > 0 {
		for _, i := range killed {
			if err := t.RestartNode(ctx, i); err != nil {
				logf("%v", err)
				continue
			}
			fr.restarted = append(fr.restarted, i)
		}
		if len(fr.restarted) > 0 {
			logf("started nodes %v again on their homes", fr.restarted)
		}
	}
	return fr
}

// converge polls the live nodes' owners every second until no two
// disagree, and returns the seconds that took (-1: not within limit).
func (t *Testnet) converge(ctx context.Context, limit time.Duration) float64 {
	start := time.Now()
	for time.Since(start) < limit && ctx.Err() == nil {
		if o, err := t.Owners(ctx); err == nil && o.Disagree == 0 && o.Nodes == len(t.Live()) {
			return time.Since(start).Seconds()
		}
		sleepCtx(ctx, time.Second)
	}
	return -1
}

func sleepCtx(ctx context.Context, d time.Duration) {
	select {
	case <-ctx.Done():
	case <-time.After(d):
	}
}

// WaitCrawled waits until every page fetched is at the sink and every
// live node is caught up, twice in a row half a second apart (a hand-off
// in flight between two looks makes a node busy again), or ctx ends.
// complete says every page of the web is at the sink.
func (t *Testnet) WaitCrawled(ctx context.Context, start time.Time, progress func(Progress)) (complete bool, err error) {
	total := t.Web.TotalPages()
	sc := t.sinkClient()
	var stable int
	for {
		p := Progress{Elapsed: time.Since(start), Total: total, Fetched: t.Web.Stats().UniquePages}
		if st, err := sc.Status(ctx); err == nil {
			p.AtSink = st.Counts.Pages
		}
		for _, i := range t.Live() {
			if ns, err := t.control(t.State.Nodes[i]).Status(ctx); err == nil && ns.CaughtUp {
				p.CaughtUp++
			}
		}
		if progress != nil {
			progress(p)
		}
		if p.Fetched > 0 && p.AtSink >= p.Fetched && p.CaughtUp == len(t.Live()) {
			if stable++; stable >= 2 {
				return p.AtSink >= int64(total), nil
			}
		} else {
			stable = 0
		}
		select {
		case <-ctx.Done():
			return false, fmt.Errorf("crawl: %d of %d pages at the sink: %w", p.AtSink, total, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// killNodes SIGKILLs Options.Kill crawler nodes, 1, 2, … skipping node 0
// (the bootstrap peer) and keep (the seeded node), and returns their
// indexes.
func (t *Testnet) killNodes(keep int) []int {
	out := []int{}
	for i := 1; i < len(t.nodes) && len(out) < t.o.Kill; i++ {
		if i == keep {
			continue
		}
		if err := t.KillNode(i); err != nil {
			fmt.Fprintln(t.o.Log, err)
			continue
		}
		out = append(out, i)
	}
	return out
}

// Simulate fills r's simulator figures: `micra sim` on this testnet's
// world for its policy.
func (t *Testnet) Simulate(ctx context.Context, r *Result) error {
	res, err := Simulate(ctx, t.o, r.Hosts, []string{r.Policy})
	if err != nil {
		return fmt.Errorf("the simulator on the same world: %w", err)
	}
	r.setSim(res[r.Policy])
	return nil
}

// setSim copies the simulator's figures for r's policy.
func (r *Result) setSim(s sim.Result) {
	r.SimOptimalPct, r.SimProbesPerURL = s.OptimalPctAll, s.ProbesPerURL
}

// control is node n's control API client.
func (t *Testnet) control(n NodeState) *node.ControlClient {
	c, err := node.NewControlClient(n.API)
	if err != nil {
		panic(err) // the node wrote it: always an http:// address
	}
	return c
}

// WaitMembers waits until every node counts every peer as a live member.
func (t *Testnet) WaitMembers(ctx context.Context) error {
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for {
		ok := 0
		for _, n := range t.State.Nodes {
			if ns, err := t.control(n).Status(wctx); err == nil && ns.CrawlersLive >= len(t.State.Nodes) {
				ok++
			}
		}
		if ok == len(t.State.Nodes) {
			return nil
		}
		select {
		case <-wctx.Done():
			return fmt.Errorf("membership: %d of %d nodes see every peer: %w", ok, len(t.State.Nodes), wctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// Score reads the sink's change log and the live nodes' metrics for a
// crawl seeded at start (a node started again counts from its restart).
func (t *Testnet) Score(ctx context.Context, start time.Time) (*Result, error) {
	r := &Result{Policy: t.o.Policy, Peers: len(t.State.Nodes), Hosts: len(t.Web.Hosts()), TotalPages: t.Web.TotalPages(),
		PagesPerCrawler: map[string]int{}}
	ws := t.Web.Stats()
	r.DuplicateFetches, r.RobotsFetches = ws.DuplicateFetches, ws.RobotsFetches
	idx := map[string]int{}
	for _, n := range t.State.Nodes {
		idx[n.PeerID] = n.Index
	}
	pages := map[string]bool{}
	hostOwner := map[int]map[int]int{} // host → crawler index → pages
	var lastFetch time.Time
	_, err := t.sinkClient().Records(ctx, 0, 0, false, sink.Filter{}, func(_ uint64, line []byte) error {
		var rec sink.StreamRecord
		if err := json.Unmarshal(line, &rec); err != nil {
			return err
		}
		if rec.Status != http.StatusOK {
			return nil
		}
		if rec.Overlap {
			r.Overlap++
		}
		if pages[rec.URL] {
			return nil
		}
		pages[rec.URL] = true
		r.PagesPerCrawler[rec.CrawlerID]++
		r.DownloadS += rec.TotalMs / 1000
		r.BytesFetched += rec.WireBytes
		if rec.FetchedAt.After(lastFetch) {
			lastFetch = rec.FetchedAt
		}
		u, err := url.Parse(rec.URL)
		if err != nil {
			return nil
		}
		h := t.Web.HostIndex(u.Hostname())
		c, ok := idx[rec.CrawlerID]
		if h < 0 || !ok {
			return nil
		}
		if hostOwner[h] == nil {
			hostOwner[h] = map[int]int{}
		}
		hostOwner[h][c]++
		return nil
	})
	if err != nil {
		return nil, err
	}
	for _, p := range t.nodes {
		r.NodePeakRSSMB = max(r.NodePeakRSSMB, peakRSSMB(p.pid()))
	}
	if t.sink != nil {
		r.SinkPeakRSSMB = peakRSSMB(t.sink.pid())
	}
	r.Pages = len(pages)
	for id, n := range r.PagesPerCrawler {
		i, ok := idx[id]
		if !ok || i >= len(t.World.Spec.Places) || t.World.Spec.Places[i].Capacity <= 0 {
			continue
		}
		c := t.World.Spec.Places[i].Capacity
		r.MaxLoadPct = max(r.MaxLoadPct, 100*float64(n)/float64(c))
		if n > c {
			r.OverCapacity++
		}
	}
	r.CoveragePct = 100 * float64(r.Pages) / float64(max(1, r.TotalPages))
	if !lastFetch.IsZero() {
		r.MakespanS = lastFetch.Sub(start).Seconds()
	}
	var hit int
	var excess time.Duration
	for h, owners := range hostOwner {
		// the crawler that fetched most of the host's pages owns it
		c, most := -1, 0
		for ci, n := range owners {
			if n > most || n == most && ci < c {
				c, most = ci, n
			}
		}
		opt := t.World.Optimal(h)
		if c == opt {
			hit++
		}
		excess += t.World.MeanRTT(c, h) - t.World.MeanRTT(opt, h)
	}
	if len(hostOwner) > 0 {
		r.OptimalPct = 100 * float64(hit) / float64(len(hostOwner))
		r.ExcessRTTMs = float64(excess.Microseconds()) / 1000 / float64(len(hostOwner))
	}
	for _, n := range t.State.Nodes {
		if t.killed[n.Index] {
			continue // its counters died with it
		}
		m, err := scrapeCounters(ctx, n.API+"/metrics", "micra_overlay_probes_sent_total", "micra_outbox_carrier_bytes_total")
		if err != nil {
			return nil, fmt.Errorf("node %d metrics: %w", n.Index, err)
		}
		r.Probes += int64(m[0])
		r.BytesToSink += int64(m[1])
	}
	r.ProbesPerHost = float64(r.Probes) / float64(max(1, len(hostOwner)))
	return r, nil
}

// sinkClient reads the testnet's sink.
func (t *Testnet) sinkClient() *sink.HTTPClient {
	c, err := sink.NewHTTPClient(t.State.Sink.HTTP)
	if err != nil {
		panic(err) // the sink printed it: always an http:// address
	}
	return c
}

// scrapeCounters sums each named counter's samples in a Prometheus text
// exposition.
func scrapeCounters(ctx context.Context, u string, names ...string) ([]float64, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, err
	}
	defer resp.Body.Close()
	p := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := p.TextToMetricFamilies(resp.Body)
	if err != nil {
		return nil, err
	}
	sums := make([]float64, len(names))
	for i, name := range names {
		if f, ok := fams[name]; ok {
			for _, m := range f.GetMetric() {
				sums[i] += m.GetCounter().GetValue()
			}
		}
	}
	return sums, nil
}

// SinkSample is what an indexer sees at the sink after a crawl: the first
// records of a subscription from cursor 0 and a full-text search for the
// first record's top keyword.
type SinkSample struct {
	First  []sink.StreamRecord `json:"first"`
	Query  string              `json:"query"`
	Search sink.Results        `json:"search"`
}

// Sample reads the first n records and searches the sink's index for the
// first record's top keyword, waiting (up to ctx) until the index has
// caught up with the log.
func (t *Testnet) Sample(ctx context.Context, n int) (*SinkSample, error) {
	if t.State.Sink == nil {
		return nil, errors.New("cluster: no sink")
	}
	s := &SinkSample{}
	c := t.sinkClient()
	_, err := c.Records(ctx, 0, n, false, sink.Filter{}, func(_ uint64, line []byte) error {
		var r sink.StreamRecord
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		s.First = append(s.First, r)
		return nil
	})
	if err != nil {
		return nil, err
	}
	if len(s.First) == 0 || len(s.First[0].Keywords) == 0 {
		return s, nil
	}
	s.Query = s.First[0].Keywords[0].Term
	st, err := c.Status(ctx)
	if err != nil {
		return nil, err
	}
	for {
		if s.Search, err = c.Search(ctx, s.Query, "", 5); err != nil {
			return nil, err
		}
		if s.Search.Indexed >= st.Head {
			return s, nil
		}
		select {
		case <-ctx.Done():
			return s, fmt.Errorf("search: the index reached record %d of %d: %w", s.Search.Indexed, st.Head, ctx.Err())
		case <-time.After(200 * time.Millisecond):
		}
	}
}

// peakRSSMB reads a process's peak resident set (VmHWM, Linux) in MB; 0
// when it cannot.
func peakRSSMB(pid int) float64 {
	b, err := os.ReadFile(fmt.Sprintf("/proc/%d/status", pid))
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmHWM:"); ok {
			var kb float64
			if _, err := fmt.Sscanf(strings.TrimSpace(rest), "%f kB", &kb); err == nil {
				return kb / 1024
			}
		}
	}
	return 0
}
