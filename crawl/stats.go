package crawl

import (
	"context"
	"maps"
	"net/netip"
	"sort"
	"sync"
	"sync/atomic"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/prometheus/client_golang/prometheus"
)

type counters struct {
	requests, fetched, filesRead              atomic.Int64
	newPages, changed, unchanged, notModified atomic.Int64
	gone, records, alreadyFetched             atomic.Int64
	wireBytes, bodyBytes, htmlBytes           atomic.Int64
	links, badLinks, outOfScope, handedOff    atomic.Int64
	revisitsQueued, windowWaits, withdrawn    atomic.Int64
	errMu                                     sync.Mutex
	errors                                    map[string]int64 // failed URLs by reason
	events                                    map[string]int64 // retries, back-offs, steps tried again
	errTotal                                  atomic.Int64
}

// Stats is a snapshot of a crawler's progress.
type Stats struct {
	Elapsed  time.Duration
	Requests int64 // HTTP fetch attempts
	Fetched  int64 // pages with a body (HTTP 2xx or file read)
	// Outcomes of pages with a body or a validator answer. Gone counts
	// known pages that disappeared (404/410 on a revisit); a URL whose
	// first fetch answers 404 is an error (status_404), not gone.
	New, Changed, Unchanged, NotModified, Gone int64
	Records                                    int64 // records handed to the outbox
	// AlreadyFetched counts queued URLs skipped because they were fetched
	// meanwhile as the target of another URL's redirect.
	AlreadyFetched int64
	// Errors counts failed visits: a URL given up, or a revisit that
	// failed (the page stays monitored); ByReason splits them by reason.
	Errors   int64
	ByReason map[string]int64
	// Events counts what was tried again rather than failed: a transient
	// failure retried ("retried"), a 429/503 honoured ("retry_later"), a
	// host parked while its robots.txt is unreachable
	// ("robots_unreachable"), and a page kept queued because its links,
	// record or withdrawal could not be stored ("handoff", "outbox",
	// "withdraw").
	Events map[string]int64
	// Replays counts requests the HTTP transport re-sent by itself after a
	// server closed a kept-alive connection: requests the crawler did not
	// decide to send.
	Replays int64

	Queued      int64
	ReadyHosts  int64
	ActiveHosts int
	Seen        int64
	Scheduled   int64 // revisits waiting
	// Refused counts URLs the address guard refused, kept (not consumed)
	// for a run that may reach them (Fetch.AllowPrivate): such a run
	// queues them again.
	Refused int64

	// HTMLBytes counts every HTML body fetched, unchanged ones included.
	WireBytes, BodyBytes, HTMLBytes int64
	Links, BadLinks, OutOfScope     int64
	HandedOff, RevisitsQueued       int64
	// Withdrawn counts queued URLs handed to the crawler that owns them now
	// instead of being fetched (Rechecker).
	Withdrawn int64

	CarriersSealed, CarriersDelivered int64
	PendingCarriers                   int
	CarrierBytes, CarrierRawBytes     int64 // sealed: compressed with header, and raw payload
	// PendingRecords counts records in the outbox not sealed into a
	// carrier yet (they are, within Outbox MaxHold); DeliveryErrors counts
	// failed deliveries since the engine opened.
	PendingRecords int
	DeliveryErrors int64

	PagesPerSec float64
}

// CarrierRatio is carrier bytes shipped per HTML byte fetched (UCYMicra: ≤ 1/20).
func (s Stats) CarrierRatio() float64 {
	if s.HTMLBytes == 0 {
		return 0
	}
	return float64(s.CarrierBytes) / float64(s.HTMLBytes)
}

// Stats returns a snapshot of the crawler's counters; safe at any time.
func (e *Engine) Stats() Stats {
	c := &e.st
	s := Stats{
		Requests: c.requests.Load(), Fetched: c.fetched.Load(),
		New: c.newPages.Load(), Changed: c.changed.Load(), Unchanged: c.unchanged.Load(),
		NotModified: c.notModified.Load(), Gone: c.gone.Load(), Records: c.records.Load(),
		AlreadyFetched: c.alreadyFetched.Load(), Errors: c.errTotal.Load(),
		WireBytes: c.wireBytes.Load(), BodyBytes: c.bodyBytes.Load(), HTMLBytes: c.htmlBytes.Load(),
		Links: c.links.Load(), BadLinks: c.badLinks.Load(), OutOfScope: c.outOfScope.Load(),
		HandedOff: c.handedOff.Load(), RevisitsQueued: c.revisitsQueued.Load(), Withdrawn: c.withdrawn.Load(),
	}
	c.errMu.Lock()
	s.ByReason = maps.Clone(c.errors)
	s.Events = maps.Clone(c.events)
	c.errMu.Unlock()
	fs := e.front.Stats()
	s.Queued, s.ReadyHosts, s.ActiveHosts, s.Seen, s.Scheduled = fs.Queued, fs.ReadyHosts, fs.ActiveHosts, fs.Seen, fs.Scheduled
	s.Refused = fs.Refused
	if e.fetcher != nil {
		s.Replays = e.fetcher.Replays()
	}
	var os pack.OutboxStats
	if e.outbox != nil {
		os = e.outbox.Stats()
	}
	s.CarriersSealed, s.CarriersDelivered, s.PendingCarriers = os.CarriersSealed, os.CarriersDelivered, os.PendingCarriers
	s.PendingRecords, s.DeliveryErrors = os.PendingRecords, os.DeliveryErrors
	s.CarrierBytes, s.CarrierRawBytes = os.BytesSealed, os.RawBytesSealed
	if st := e.started.Load(); st != 0 {
		s.Elapsed = time.Since(time.Unix(0, st))
		if sec := s.Elapsed.Seconds(); sec > 0 {
			s.PagesPerSec = float64(s.Fetched+s.NotModified) / sec
		}
	}
	return s
}

// countError counts a failed visit: the URL is given up (or, for a page
// already known, this revisit failed).
func (e *Engine) countError(reason string) {
	e.st.errTotal.Add(1)
	e.st.errMu.Lock()
	if e.st.errors == nil {
		e.st.errors = map[string]int64{}
	}
	e.st.errors[reason]++
	e.st.errMu.Unlock()
	e.m.errors.WithLabelValues(reason).Inc()
}

// countEvent counts a step that is tried again: nothing is given up.
func (e *Engine) countEvent(event string) {
	e.st.errMu.Lock()
	if e.st.events == nil {
		e.st.events = map[string]int64{}
	}
	e.st.events[event]++
	e.st.errMu.Unlock()
	e.m.events.WithLabelValues(event).Inc()
}

type metrics struct {
	errors *prometheus.CounterVec
	events *prometheus.CounterVec
	scope  *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, e *Engine) *metrics {
	m := &metrics{
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "crawl", Name: "errors_total",
			Help: "Failed visits (URLs given up, revisits that failed) by reason: fetch reasons, status_NNN, file_read."}, []string{"reason"}),
		events: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "crawl", Name: "events_total",
			Help: "Steps tried again, nothing given up: retried, retry_later, robots_unreachable, handoff, outbox, withdraw."}, []string{"event"}),
		scope: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "crawl", Name: "out_of_scope_total",
			Help: "Discovered links and redirect targets refused by a scope rule."}, []string{"rule"}),
	}
	if reg == nil {
		return m
	}
	counter := func(name, help string, f func() int64) prometheus.Collector {
		return prometheus.NewCounterFunc(prometheus.CounterOpts{Namespace: "micra", Subsystem: "crawl", Name: name, Help: help},
			func() float64 { return float64(f()) })
	}
	c := &e.st
	for _, col := range []prometheus.Collector{
		m.errors, m.events, m.scope,
		counter("pages_fetched_total", "Pages with a body (HTTP 2xx or file read).", c.fetched.Load),
		counter("pages_new_total", "First fetches that produced a record.", c.newPages.Load),
		counter("pages_changed_total", "Revisits that found new content.", c.changed.Load),
		counter("pages_unchanged_total", "Revisits with equal content hash.", c.unchanged.Load),
		counter("pages_not_modified_total", "304 answers and unchanged file modification times.", c.notModified.Load),
		counter("records_total", "Records handed to the outbox.", c.records.Load),
		counter("already_fetched_total", "Queued URLs skipped: fetched meanwhile as a redirect target.", c.alreadyFetched.Load),
		counter("html_bytes_total", "Decoded HTML bytes processed.", c.htmlBytes.Load),
		counter("wire_bytes_total", "Body bytes received on the wire.", c.wireBytes.Load),
		counter("handed_off_total", "URLs handed to other crawlers.", c.handedOff.Load),
		counter("withdrawn_total", "Queued URLs handed to the crawler that owns them now instead of fetched.", c.withdrawn.Load),
		prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "crawl", Name: "active_hosts",
			Help: "Hosts being crawled."}, func() float64 { return float64(e.front.Stats().ActiveHosts) }),
	} {
		if err := reg.Register(col); err != nil {
			e.log.Warn("metric not registered", "err", err)
		}
	}
	return m
}

func (e *Engine) progressLoop(ctx context.Context) {
	t := time.NewTicker(e.cfg.Progress)
	defer t.Stop()
	var last Stats
	lastAt := time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-t.C:
			s := e.Stats()
			rate := float64(s.Fetched+s.NotModified-last.Fetched-last.NotModified) / now.Sub(lastAt).Seconds()
			e.log.Info("crawl progress", "pages_per_s", round1(rate), "fetched", s.Fetched, "not_modified", s.NotModified,
				"queued", s.Queued, "scheduled", s.Scheduled, "active_hosts", s.ActiveHosts, "errors", s.Errors, "records", s.Records,
				"carriers", s.CarriersSealed, "carrier_bytes", s.CarrierBytes, "pending_carriers", s.PendingCarriers)
			last, lastAt = s, now
		}
	}
}

// logSummary logs the run's figures: "crawl finished" when the run ended
// by itself (StopWhenIdle, the first pass done), "crawl stopped" with the
// cause when ctx ended it (a signal, the node closing) — the crawl is not
// done then, and resumes on the next Run.
func (e *Engine) logSummary(ctx context.Context) {
	s := e.Stats()
	reasons := make([]string, 0, len(s.ByReason))
	for r := range s.ByReason {
		reasons = append(reasons, r)
	}
	sort.Strings(reasons)
	args := []any{"elapsed", s.Elapsed.Round(time.Millisecond), "fetched", s.Fetched, "pages_per_s", round1(s.PagesPerSec),
		"new", s.New, "changed", s.Changed, "unchanged", s.Unchanged, "not_modified", s.NotModified, "gone", s.Gone,
		"records", s.Records, "errors", s.Errors, "already_fetched", s.AlreadyFetched, "queued", s.Queued,
		"html_bytes", s.HTMLBytes, "carrier_bytes", s.CarrierBytes, "carrier_ratio", round4(s.CarrierRatio())}
	for _, r := range reasons {
		args = append(args, "err_"+r, s.ByReason[r])
	}
	events := make([]string, 0, len(s.Events))
	for ev := range s.Events {
		events = append(events, ev)
	}
	sort.Strings(events)
	for _, ev := range events {
		args = append(args, "event_"+ev, s.Events[ev])
	}
	if s.Replays > 0 {
		args = append(args, "transport_replays", s.Replays)
	}
	if ctx.Err() != nil {
		e.log.Info("crawl stopped", append([]any{"cause", context.Cause(ctx).Error()}, args...)...)
		return
	}
	e.log.Info("crawl finished", args...)
}

func round1(f float64) float64 { return float64(int64(f*10+0.5)) / 10 }
func round4(f float64) float64 { return float64(int64(f*10000+0.5)) / 10000 }

// dnsCache resolves host names for the Router, bounded and with a TTL.
type dnsCache struct {
	r   fetch.Resolver
	max int
	mu  sync.Mutex
	m   map[string]dnsEntry
}

type dnsEntry struct {
	addr netip.Addr
	exp  time.Time
}

func newDNSCache(r fetch.Resolver, max int) *dnsCache {
	return &dnsCache{r: r, max: max, m: map[string]dnsEntry{}}
}

func (d *dnsCache) lookup(ctx context.Context, host string) (netip.Addr, error) {
	if a, err := netip.ParseAddr(host); err == nil {
		return a, nil
	}
	now := time.Now()
	d.mu.Lock()
	if e, ok := d.m[host]; ok && now.Before(e.exp) {
		d.mu.Unlock()
		return e.addr, nil
	}
	d.mu.Unlock()
	addrs, err := d.r.LookupNetIP(ctx, "ip", host)
	if err != nil || len(addrs) == 0 {
		if err == nil {
			err = &netipError{host}
		}
		return netip.Addr{}, err
	}
	d.mu.Lock()
	if len(d.m) >= d.max {
		clear(d.m) // bounded: start over rather than grow
	}
	d.m[host] = dnsEntry{addrs[0].Unmap(), now.Add(5 * time.Minute)}
	d.mu.Unlock()
	return addrs[0].Unmap(), nil
}

type netipError struct{ host string }

func (e *netipError) Error() string { return "no address for " + e.host }
