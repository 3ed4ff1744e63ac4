package crawl

import (
	"context"
	"errors"
	"math"
	"net"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/fsys"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// fetched is one page as obtained over HTTP or from the file system.
type fetched struct {
	finalURL     string
	status       int
	body         []byte
	wire         int64
	contentType  string
	etag, lm     string
	modTime      time.Time
	timing       pack.Timing
	source       pack.Source
	truncated    bool
	fetchedAt    time.Time
	notModified  bool // 304, or an unchanged modification time for files
	gone         bool // 404/410 or file removed
	otherFailure string
	// refusedHere: the address guard refused the URL's own host (not a
	// redirect's target on another host): a later run may reach it.
	refusedHere bool
	permanent   bool // the failure will not pass by itself (host name gone)
	// After redirects: the final hop's validators and timing, the
	// redirect target's own (etag, lm and timing above are the source's).
	targetETag, targetLM string
	targetTiming         pack.Timing
	addr                 netip.Addr // where the route placed the host (pack.Record.Addr)
}

// visit fetches (or reads) one queued URL, processes it and marks it Done.
// It returns a non-zero time when the host must rest first (the URL stays
// queued).
func (e *Engine) visit(ctx context.Context, it frontier.Item, rt Route) time.Time {
	u, err := url.Parse(it.URL)
	if err != nil { // cannot happen for URLs the frontier admitted; drop it loudly
		e.log.Error("queued URL unparsable, dropped", "url", it.URL, "err", err)
		e.done(it, nil)
		return time.Time{}
	}
	hist, known, err := e.front.History(it.URL)
	if err != nil {
		e.log.Error("frontier: history", "url", it.URL, "err", err)
		known = false
	}
	if known && !it.Revisit && hist.Fetches > 0 {
		// A discovered URL with a history was fetched after it was queued: as
		// the target of another URL's redirect (admitRedirectTarget), whose
		// record carries its content and which has a revisit schedule of its
		// own when monitoring. Fetching it again would be a duplicate.
		e.st.alreadyFetched.Add(1)
		if e.cfg.Monitor.Enabled && hist.NextVisit.IsZero() && hist.Revisitable() {
			// a page this crawler handed off, back with its host (Withdraw
			// keeps the history, off the schedule): revisited again
			if hist.Interval <= 0 {
				hist.Interval = e.cfg.Monitor.Sleep
			}
			hist.NextVisit = hist.LastFetch.Add(hist.Interval)
			e.done(it, &hist)
			return time.Time{}
		}
		e.done(it, nil)
		return time.Time{}
	}
	var f fetched
	if _, _, ok := e.files.Match(u); ok {
		f = e.readFile(u, hist, known)
	} else if e.fetcher == nil {
		e.done(it, nil)
		return time.Time{}
	} else {
		var retry time.Time
		f, retry = e.fetchHTTP(ctx, it, rt, hist, known)
		if !retry.IsZero() || ctx.Err() != nil {
			return retry
		}
		f.addr = rt.placed()
	}
	now := f.fetchedAt
	transient := f.otherFailure != "" && !f.permanent && transientFailure(f.otherFailure)
	if !transient {
		e.hostFails.forget(it.Host)
	}
	switch {
	case transient && !known && e.retryLater(it, f.otherFailure):
		// Kept queued and tried again after RetryDelay (doubling).
		at := now.Add(min(e.cfg.RetryDelay<<min(e.retries.count(it.URL)-1, 10), max(time.Hour, e.cfg.RetryDelay)))
		if n, _ := e.hostFails.again(it.Host, math.MaxInt); n >= hostSlowAfter {
			return at // the host itself is failing: it rests, this URL first when it resumes
		}
		// One bad URL: it waits at the back of the queue, and the host's
		// other URLs go on meanwhile (politeness is one request at a time
		// per host, not a stop for the whole host).
		if err := e.front.Defer(it); err != nil {
			e.log.Error("frontier: defer", "url", it.URL, "err", err)
			return at
		}
		e.retryAt.Store(it.URL, at)
		return time.Time{}
	case f.refusedHere && !known:
		// this run may not reach the URL's own address (a private one,
		// without AllowPrivate): kept apart, not consumed, for a run that
		// may — not an error (Stats.Refused counts it)
		if err := e.front.Refuse(it); err != nil {
			e.log.Error("frontier: refuse, URL given up", "url", it.URL, "err", err)
			e.countError(f.otherFailure)
			e.done(it, nil)
		}
	case f.otherFailure != "":
		e.retries.forget(it.URL)
		e.countError(f.otherFailure)
		if known { // keep monitoring a page that failed once
			e.schedule(&hist, false, now)
			e.done(it, &hist)
		} else {
			e.done(it, nil)
		}
	case f.gone && !known:
		// never fetched: a dead link, not a page that disappeared
		e.countError("status_" + strconv.Itoa(f.status))
		e.done(it, nil)
	case f.gone:
		rec := e.baseRecord(it, f)
		rec.Change = pack.ChangeGone
		rec.Error = "gone"
		if e.emit(ctx, &rec) != nil {
			return time.Time{}
		}
		e.st.gone.Add(1)
		hist.Status, hist.LastFetch, hist.NextVisit, hist.Interval = f.status, now, time.Time{}, 0
		e.done(it, &hist)
	case f.notModified:
		e.st.notModified.Add(1)
		e.touch(&hist, f)
		e.schedule(&hist, false, now)
		e.done(it, &hist)
	default:
		if rest := e.process(ctx, it, u, hist, known, f); !rest.IsZero() {
			return rest // (its retry count stands)
		}
	}
	if f.otherFailure == "" {
		e.retries.forget(it.URL)
	}
	return time.Time{}
}

// transientFailure reports whether a fetch failure may go away by itself
// (overloaded or flaky server, network trouble): such a new URL is retried.
func transientFailure(reason string) bool {
	switch reason {
	case string(fetch.ReasonNetwork), string(fetch.ReasonTimeout), string(fetch.ReasonDNS), string(fetch.ReasonSlowBody),
		"status_408", "status_500", "status_502", "status_504":
		return true
	}
	return false
}

// retryLater counts a transient failure of it and reports whether it is
// tried again (at most MaxRetries times).
func (e *Engine) retryLater(it frontier.Item, reason string) bool {
	n, ok := e.retries.again(it.URL, e.cfg.MaxRetries)
	if ok {
		e.countEvent("retried")
		e.log.Debug("transient failure, will retry", "url", it.URL, "reason", reason, "attempt", n)
	}
	return ok
}

func (e *Engine) done(it frontier.Item, h *frontier.History) {
	if err := e.front.Done(it, h); err != nil {
		e.log.Error("frontier: done", "url", it.URL, "err", err)
	}
}

func (e *Engine) fetchHTTP(ctx context.Context, it frontier.Item, rt Route, hist frontier.History, known bool) (fetched, time.Time) {
	req := fetch.Request{URL: it.URL, Addr: rt.Addr}
	if known {
		req.ETag, req.LastModified = hist.ETag, hist.LastModified
	}
	conditional := req.ETag != "" || req.LastModified != ""
	e.st.requests.Add(1)
	resp, err := e.fetcher.Fetch(ctx, req)
	now := time.Now()
	if err != nil {
		var fe *fetch.Error
		errors.As(err, &fe)
		switch {
		case ctx.Err() != nil || fetch.ReasonOf(err) == fetch.ReasonCanceled:
			return fetched{}, time.Time{}
		case fetch.ReasonOf(err) == fetch.ReasonRetryLater:
			e.countEvent(string(fetch.ReasonRetryLater))
			if _, ok := e.backoffs.again(it.URL, maxBackoffs); !ok {
				// A server that keeps refusing would hold a one-pass crawl forever.
				e.backoffs.forget(it.URL)
				e.log.Info("URL given up after repeated 429/503", "url", it.URL, "times", maxBackoffs+1)
				return fetched{fetchedAt: now, otherFailure: "retry_later_given_up"}, time.Time{}
			}
			until := e.fetcher.HostReadyAt(it.URL)
			if fe != nil {
				until = maxTime(until, now.Add(fe.RetryAfter))
			}
			return fetched{}, maxTime(until, now.Add(10*time.Millisecond))
		case fe != nil && fe.Reason == fetch.ReasonRobots && fe.RetryAfter > 0 && known:
			// a page already known is revisited on its schedule: no parking
			// (nor a retry of the host's spent on it)
			return fetched{fetchedAt: now, otherFailure: "robots_unreachable"}, time.Time{}
		case fe != nil && fe.Reason == fetch.ReasonRobots && fe.RetryAfter > 0:
			// robots.txt unreachable: the host is disallowed only until it is
			// asked again; keep the URL queued and park the host until then.
			// Once a URL is given up, the host's other URLs are given up at
			// once while that outage lasts — and only while it lasts.
			if until, down := e.robotsDown.Load(it.Host); !down || !now.Before(until.(time.Time)) {
				e.robotsDown.Delete(it.Host)
				if _, ok := e.robotsRetry.again(it.Host, maxRobotsRetries); ok {
					e.countEvent("robots_unreachable")
					return fetched{}, now.Add(fe.RetryAfter)
				}
				e.robotsRetry.forget(it.Host)
				e.robotsDown.Store(it.Host, now.Add(fe.RetryAfter))
			}
			e.log.Info("robots.txt still unreachable, URL given up", "url", it.URL, "retries", maxRobotsRetries)
		default:
			e.robotsRetry.forget(it.Host)
			e.backoffs.forget(it.URL)
		}
		var dnsErr *net.DNSError
		return fetched{fetchedAt: now, otherFailure: string(fetch.ReasonOf(err)),
			permanent:   errors.As(err, &dnsErr) && dnsErr.IsNotFound,
			refusedHere: fe != nil && fe.Reason == fetch.ReasonGuard && sameHost(fe.URL, it.URL)}, time.Time{}
	}
	e.robotsRetry.forget(it.Host)
	e.backoffs.forget(it.URL)
	if obs, ok := e.router.(FetchObserver); ok {
		if fu, err := url.Parse(resp.FinalURL); err == nil {
			obs.Fetched(ctx, fu, rt, resp.Timing, resp.Elapsed)
		}
	}
	f := fetched{
		finalURL: resp.FinalURL, status: resp.Status, body: resp.Body, wire: resp.WireBytes,
		contentType: resp.ContentType, etag: resp.ETag, lm: resp.LastModified, fetchedAt: now,
		source: pack.SourceHTTP, notModified: resp.NotModified,
		timing: pack.Timing{DNS: resp.Timing.DNS, Connect: resp.Timing.Connect, FirstByte: resp.Timing.FirstByte, Total: resp.Elapsed},
	}
	if len(resp.Redirects) > 0 {
		// the validators are the redirect target's, not this URL's: they go
		// to the target's own history (admitRedirectTarget)
		f.targetETag, f.targetLM = f.etag, f.lm
		f.targetTiming = pack.Timing{DNS: resp.Timing.DNS, Connect: resp.Timing.Connect, FirstByte: resp.Timing.FirstByte, Total: resp.Timing.Total}
		f.etag, f.lm = "", ""
	}
	e.st.wireBytes.Add(resp.WireBytes)
	switch {
	case resp.NotModified && (!conditional || len(resp.Redirects) > 0):
		// a 304 to a GET without validators (a redirect target gets none)
		// carries no page: a server error, not "unchanged"
		f.notModified, f.otherFailure = false, "status_304"
	case resp.NotModified:
	case resp.Status == 404 || resp.Status == 410:
		f.gone = true
	case resp.Status < 200 || resp.Status > 299:
		f.otherFailure = "status_" + strconv.Itoa(resp.Status)
	}
	return f, time.Time{}
}

func (e *Engine) readFile(u *url.URL, hist frontier.History, known bool) fetched {
	now := time.Now()
	f := fetched{finalURL: u.String(), status: 200, source: pack.SourceFile, fetchedAt: now}
	start := time.Now()
	if known && !hist.ModTime.IsZero() {
		// Change detection by modification time: an unchanged file is not read.
		mod, err := e.files.Stat(u)
		if err == nil && mod.Equal(hist.ModTime) {
			f.notModified, f.modTime = true, mod
			return f
		}
	}
	max := int64(4 << 20)
	if e.cfg.Fetch.MaxBodyBytes > 0 {
		max = e.cfg.Fetch.MaxBodyBytes
	}
	d, err := e.files.Read(u, max)
	switch {
	case errors.Is(err, fsys.ErrNotFound):
		f.gone, f.status = true, 404
		return f
	case err != nil:
		e.log.Warn("file read failed", "url", u.String(), "err", err)
		f.otherFailure = "file_read"
		return f
	}
	f.body, f.wire, f.modTime, f.contentType, f.truncated = d.Body, int64(len(d.Body)), d.ModTime, d.ContentType, d.Truncated
	f.lm = d.ModTime.UTC().Format(time.RFC1123)
	f.timing.Total = time.Since(start)
	e.st.filesRead.Add(1)
	return f
}

// process handles a page with a body: change detection, extraction, record,
// links, history.
// process stores the page's record, queues or hands off its links and marks
// it done. A non-zero time is when its host may be tried again: the links
// could not be handed off, so the page stays queued.
func (e *Engine) process(ctx context.Context, it frontier.Item, u *url.URL, hist frontier.History, known bool, f fetched) time.Time {
	e.st.fetched.Add(1)
	e.st.bodyBytes.Add(int64(len(f.body)))
	if isHTML(f.contentType) { // every HTML body fetched, unchanged ones too
		e.st.htmlBytes.Add(int64(len(f.body)))
	}
	now := f.fetchedAt
	hash := extract.ContentHash(f.body)
	if known && hist.Fetches > 0 && hash == hist.ContentHash {
		// Same content (a server without validators, a touched file, or a
		// redirect's target unchanged): no record.
		e.st.unchanged.Add(1)
		// A target with a schedule keeps it; this admits one whose source
		// now redirects elsewhere, or a mark from an older version. (A
		// failed hand-off is tried again on the next revisit.)
		_ = e.admitRedirectTarget(ctx, it, f, hash, hist.SimHash, true)
		e.touch(&hist, f)
		e.schedule(&hist, false, now)
		e.done(it, &hist)
		return time.Time{}
	}
	rec := e.baseRecord(it, f)
	rec.ContentHash = hash
	if known && hist.Fetches > 0 {
		rec.Change = pack.ChangeChanged
		e.st.changed.Add(1)
	} else {
		rec.Change = pack.ChangeNew
		e.st.newPages.Add(1)
	}
	var page *extract.Page
	if isHTML(f.contentType) {
		base := u
		if f.finalURL != "" && f.finalURL != it.URL {
			if fu, err := url.Parse(f.finalURL); err == nil {
				base = fu
			}
		}
		opt := e.cfg.Extract
		if l := e.langs.fallback(it.Host); l != "" { // (else the configured one, if any)
			opt.FallbackLang = l
		}
		page = extract.Extract(f.body, base, opt)
		if page.LangFrom == extract.LangDetected || page.LangFrom == extract.LangDeclared {
			e.langs.observe(it.Host, page.Lang) // (never a fallback: a guess would reinforce itself)
		}
		rec.Title, rec.Lang, rec.Keywords, rec.SimHash = page.Title, page.Lang, page.Keywords, page.SimHash
		rec.TextBytes, rec.OutLinks = int64(page.TextBytes), page.LinkCount
		if e.cfg.ShipLinks {
			rec.Links = e.normalLinks(page.Links)
		}
		if page.NoIndex {
			rec.Flags |= pack.FlagNoIndex
		}
		if page.NoFollow {
			rec.Flags |= pack.FlagNoFollow
		}
	}
	if f.truncated {
		rec.Flags |= pack.FlagTruncated
	}
	if e.emit(ctx, &rec) != nil {
		return time.Time{}
	}
	// the redirect's target before its links: it is fetched already, and
	// they would otherwise take the last places of its host's budget
	if err := e.admitRedirectTarget(ctx, it, f, hash, rec.SimHash, false); err != nil {
		// as for links (below): the target would be lost for good
		n, _ := e.handoffFail.again(it.URL, math.MaxInt)
		return f.fetchedAt.Add(min(e.cfg.RetryDelay<<min(n-1, 10), max(time.Hour, e.cfg.RetryDelay)))
	}
	if page != nil && !page.NoFollow {
		if err := e.enqueueLinks(ctx, it, page.Links); err != nil {
			// Links lost now would be lost for good: leave the URL queued, it is
			// visited again (its record repeats: at-least-once) — after a
			// rest that doubles, or an unreachable overlay would have the
			// page fetched again back to back
			n, _ := e.handoffFail.again(it.URL, math.MaxInt) // (counted only: links are never given up)
			return f.fetchedAt.Add(min(e.cfg.RetryDelay<<min(n-1, 10), max(time.Hour, e.cfg.RetryDelay)))
		}
	}
	e.handoffFail.forget(it.URL)
	e.touch(&hist, f)
	if hist.FirstFetch.IsZero() {
		hist.FirstFetch = now
	}
	hist.Changes++
	hist.LastChange = now
	hist.ContentHash, hist.SimHash = hash, rec.SimHash
	e.schedule(&hist, known, now)
	e.done(it, &hist)
	return time.Time{}
}

// admitRedirectTarget gives the page a followed redirect of it led to —
// whose content the record of it carries — its own place in the crawl,
// decided as for a link of it: in scope at its depth (the redirect is no
// link hop), owned by this crawler (Router), within its host's budget
// (frontier); robots.txt allowed it, or the fetch would have failed. A
// target admitted is stored as fetched (Frontier.AdmitFetched) with its
// own validators, content hash, timing and, when monitoring, revisit
// schedule, exactly as a page fetched directly: it is revisited with
// conditional GETs even once the source is gone or redirects elsewhere. A
// target another crawler owns is handed off to it; one out of scope is
// dropped. A target with a history already keeps it, and its schedule.
// An error means the hand-off failed (the caller keeps it queued). quiet
// (an unchanged revisit of the source, which offers the same target again)
// leaves a refusal uncounted: the counters count refusals, not revisits.
func (e *Engine) admitRedirectTarget(ctx context.Context, it frontier.Item, f fetched, hash [16]byte, simHash uint64, quiet bool) error {
	if f.finalURL == "" || f.finalURL == it.URL || f.source != pack.SourceHTTP {
		return nil
	}
	u, err := e.parseURL(f.finalURL)
	if err != nil || u.String() == it.URL {
		return nil
	}
	if err := e.scope.CheckURL(u, it.Depth); err != nil {
		if quiet {
			return nil
		}
		var se *urlnorm.ScopeError
		if errors.As(err, &se) {
			e.m.scope.WithLabelValues(string(se.Reason)).Inc()
		}
		e.st.outOfScope.Add(1)
		return nil
	}
	s := u.String()
	if _, local := e.router.(LocalRouter); !local {
		if seen, _ := e.front.Seen(s); !seen {
			if handed, _ := e.front.HandedOff(s); handed {
				return nil
			}
			// as for links: finish even if the crawl is being stopped, within a bound
			rctx, cancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishBound)
			defer cancel()
			r, err := e.route(rctx, u)
			if err != nil {
				if rctx.Err() != nil || ctx.Err() != nil || TransientRouteError(err) {
					return err
				}
				e.log.Debug("redirect target's owner unknown, not admitted", "url", s, "err", err)
				return nil
			}
			if !r.Mine {
				return e.handOffTarget(rctx, it, Routed{URL: s, Route: r})
			}
		}
	}
	now := f.fetchedAt
	h := frontier.History{URL: s, Host: urlnorm.HostKey(u), Depth: it.Depth}
	tf := f
	tf.etag, tf.lm, tf.timing = f.targetETag, f.targetLM, f.targetTiming
	e.touch(&h, tf)
	h.FirstFetch, h.LastChange, h.Changes = now, now, 1
	h.ContentHash, h.SimHash = hash, simHash
	e.schedule(&h, false, now)
	admit := e.front.AdmitFetched
	if quiet {
		admit = e.front.AdmitFetchedQuiet
	}
	if _, err := admit(h); err != nil {
		e.log.Warn("frontier: redirect target not admitted, it may be fetched again", "url", s, "err", err)
	}
	return nil
}

// handOffTarget hands a redirect target another crawler owns to it, once
// (the claim and mark of enqueueLinks).
func (e *Engine) handOffTarget(ctx context.Context, from frontier.Item, target Routed) error {
	s := target.URL
	if _, busy := e.routeClaims.LoadOrStore(s, struct{}{}); busy {
		return nil
	}
	defer e.routeClaims.Delete(s)
	if handed, _ := e.front.HandedOff(s); handed {
		return nil
	}
	if err := e.router.Handoff(ctx, []Routed{target}); err != nil {
		e.log.Warn("hand-off of a redirect target failed", "from", from.URL, "url", s, "err", err)
		e.countEvent("handoff")
		return err
	}
	e.st.handedOff.Add(1)
	if err := e.front.MarkHandedOff([]string{s}); err != nil {
		e.log.Warn("frontier: handed-off redirect target not marked", "url", s, "err", err)
	}
	return nil
}

// touch records a fetch in the page history.
func (e *Engine) touch(h *frontier.History, f fetched) {
	h.Fetches++
	h.LastFetch = f.fetchedAt
	if f.status != 0 {
		h.Status = f.status
	}
	if !f.notModified {
		h.ETag, h.LastModified, h.ModTime = f.etag, f.lm, f.modTime
	} else {
		// A 304 keeps the stored validators but may renew them (RFC 9111
		// §4.3.4); the next conditional GET must send the new ones.
		if f.etag != "" {
			h.ETag = f.etag
		}
		if f.lm != "" {
			h.LastModified = f.lm
		}
	}
	h.DNS, h.Connect, h.FirstByte, h.Total = f.timing.DNS, f.timing.Connect, f.timing.FirstByte, f.timing.Total
	if h.MeanTotal == 0 {
		h.MeanTotal = f.timing.Total
	} else {
		h.MeanTotal = (h.MeanTotal*7 + f.timing.Total) / 8 // EWMA, α = 1/8
	}
}

// schedule sets the next revisit: adaptive, sooner after a change.
func (e *Engine) schedule(h *frontier.History, changed bool, now time.Time) {
	m := e.cfg.Monitor
	if !m.Enabled {
		h.NextVisit, h.Interval = time.Time{}, 0
		return
	}
	switch {
	case h.Interval == 0:
		h.Interval = m.Sleep
	case changed:
		h.Interval = max(m.MinInterval, h.Interval/2)
	default:
		h.Interval = min(m.MaxInterval, h.Interval*2)
	}
	h.NextVisit = now.Add(h.Interval)
}

func (e *Engine) baseRecord(it frontier.Item, f fetched) pack.Record {
	r := pack.Record{
		URL: it.URL, Status: f.status, Source: f.source, FetchedAt: f.fetchedAt, Timing: f.timing,
		WireBytes: f.wire, BodyBytes: int64(len(f.body)), ContentType: f.contentType,
		ETag: f.etag, LastModified: f.lm, CrawlerID: e.cfg.CrawlerID, Addr: f.addr.Unmap(),
	}
	if f.finalURL != it.URL {
		r.FinalURL = f.finalURL
	}
	return r
}

// emit stores a record in the outbox. It ignores cancellation: the page is
// fetched, and its record must be kept before the URL is marked done. On
// failure the caller leaves the URL queued.
func (e *Engine) emit(ctx context.Context, r *pack.Record) error {
	if e.outbox == nil {
		if err := e.cfg.OnRecord(context.WithoutCancel(ctx), r); err != nil {
			e.log.Error("record not taken (OnRecord), URL stays queued", "url", r.URL, "err", err)
			e.countEvent("outbox")
			return err
		}
		e.st.records.Add(1)
		return nil
	}
	if err := e.outbox.Add(context.WithoutCancel(ctx), r); err != nil {
		e.log.Error("outbox: add record, URL stays queued", "url", r.URL, "err", err)
		e.countEvent("outbox")
		return err
	}
	e.st.records.Add(1)
	if e.cfg.OnRecord != nil {
		if err := e.cfg.OnRecord(context.WithoutCancel(ctx), r); err != nil {
			e.log.Warn("OnRecord refused a record already in the outbox", "url", r.URL, "err", err)
		}
	}
	return nil
}

// enqueueLinks normalises, scopes and routes the links of a page: owned ones
// go into the frontier, the others to the router's hand-off. An error means
// some links were not stored.
func (e *Engine) enqueueLinks(ctx context.Context, from frontier.Item, links []extract.Link) error {
	items := make([]frontier.Item, 0, len(links))
	var handoff []Routed
	var claimed []string
	defer func() { // on every path, after Add and MarkHandedOff on success
		for _, s := range claimed {
			e.routeClaims.Delete(s)
		}
	}()
	// The page is already fetched: route its links and finish the hand-off
	// even if the crawl is being stopped, within a bound (a cancelled
	// context would fail every lookup and lose the links for good).
	rctx, rcancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishBound)
	defer rcancel()
	_, local := e.router.(LocalRouter)
	for _, l := range links {
		if l.NoFollow {
			continue
		}
		e.st.links.Add(1)
		u, err := e.parseURL(l.URL)
		if err != nil {
			e.st.badLinks.Add(1)
			continue
		}
		if err := e.scope.CheckURL(u, from.Depth+1); err != nil {
			var se *urlnorm.ScopeError
			if errors.As(err, &se) {
				e.m.scope.WithLabelValues(string(se.Reason)).Inc()
			}
			e.st.outOfScope.Add(1)
			continue
		}
		if e.cfg.FileOnly {
			if _, _, ok := e.files.Match(u); !ok {
				e.st.outOfScope.Add(1)
				continue
			}
		}
		s := u.String()
		if !local {
			if seen, _ := e.front.Seen(s); seen {
				continue
			}
			if handed, _ := e.front.HandedOff(s); handed {
				continue
			}
			// Claim the URL so it is routed once: a worker handling
			// another page (or this page, linking twice) that links to it
			// skips it; the claimant queues it or marks it handed off
			// before it drops the claim, and the second Seen and
			// HandedOff checks close the gap in between.
			if _, busy := e.routeClaims.LoadOrStore(s, struct{}{}); busy {
				continue
			}
			claimed = append(claimed, s)
			if seen, _ := e.front.Seen(s); seen {
				continue
			}
			if handed, _ := e.front.HandedOff(s); handed {
				continue
			}
			r, err := e.route(rctx, u)
			if err != nil {
				if rctx.Err() != nil || ctx.Err() != nil || TransientRouteError(err) {
					// out of time, stopping (the overlay may be closing),
					// or a lookup that timed out inside the router: the
					// page stays queued, its links come next time
					return err
				}
				e.st.badLinks.Add(1)
				continue
			}
			if !r.Mine {
				handoff = append(handoff, Routed{URL: s, Route: r})
				continue
			}
		}
		items = append(items, frontier.Item{URL: s, Host: urlnorm.HostKey(u), Depth: from.Depth + 1})
	}
	if len(items) > 0 {
		if _, err := e.front.Add(items); err != nil {
			e.log.Error("frontier: add links", "from", from.URL, "err", err)
			return err
		}
	}
	if len(handoff) > 0 {
		// a bound of its own: routing that took the whole of its bound
		// (a router that spools what it could not route in time) must not
		// fail the hand-off too, or the page would stay queued with no
		// history and be fetched again, here or by its host's next owner
		hctx, hcancel := context.WithTimeout(context.WithoutCancel(ctx), e.finishBound)
		defer hcancel()
		err := e.router.Handoff(hctx, handoff)
		if err != nil {
			e.log.Warn("hand-off failed, page stays queued", "from", from.URL, "urls", len(handoff), "err", err)
			e.countEvent("handoff")
			return err
		}
		e.st.handedOff.Add(int64(len(handoff)))
		// The owners have them: other pages linking to them must not hand
		// them off again. Losing this mark costs only a repeated hand-off.
		urls := make([]string, len(handoff))
		for i, h := range handoff {
			urls[i] = h.URL
		}
		if err := e.front.MarkHandedOff(urls); err != nil {
			e.log.Warn("frontier: handed-off URLs not marked seen", "urls", len(handoff), "err", err)
		}
	}
	return nil
}

func maxTime(a, b time.Time) time.Time {
	if a.After(b) {
		return a
	}
	return b
}

// sameHost reports whether two URLs name the same host and port (a
// failure of robots.txt or of a same-host redirect hop is the URL's own).
func sameHost(a, b string) bool {
	ua, err := url.Parse(a)
	if err != nil {
		return false
	}
	ub, err := url.Parse(b)
	return err == nil && strings.EqualFold(ua.Host, ub.Host)
}

// normalLinks is a page's links as the crawl spells URLs (normalised,
// each once, in page order); links that do not parse are left out.
func (e *Engine) normalLinks(links []extract.Link) []string {
	out := make([]string, 0, len(links))
	seen := make(map[string]bool, len(links))
	for _, l := range links {
		u, err := e.parseURL(l.URL)
		if err != nil {
			continue
		}
		if s := u.String(); !seen[s] {
			seen[s] = true
			out = append(out, s)
		}
	}
	return out
}
