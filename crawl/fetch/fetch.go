package fetch

import (
	"context"
	"errors"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptrace"
	"net/netip"
	"net/url"
	"strconv"
	"strings"
	"sync/atomic"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/sync/singleflight"

	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Request is one fetch.
type Request struct {
	// URL is the absolute http or https URL (normally already normalised by
	// crawl/urlnorm).
	URL string
	// Method is GET (default) or HEAD.
	Method string
	// ETag and LastModified are the validators of the last fetch of this
	// URL; when set they are sent as If-None-Match and If-Modified-Since.
	ETag         string
	LastModified string
	// Addr, when set, is the address to dial for URL's host: the one the
	// crawler routed the URL by (crawl.Route), so the address routed is
	// the address fetched, with no second resolution in between. The guard
	// applies to it as to any. Redirects to other hosts resolve as usual.
	Addr netip.Addr
}

// Response is the outcome of a successful fetch: any HTTP status except
// 429/503 (which return ReasonRetryLater). Only 2xx GET responses carry a Body.
type Response struct {
	RequestURL string
	FinalURL   string
	// Redirects lists the URLs that answered with a redirect, in order
	// (RequestURL first); empty without redirects.
	Redirects []string
	Status    int
	Proto     string // "HTTP/1.1" or "HTTP/2.0"
	Header    http.Header
	// Body is the decoded body (Content-Encoding removed) and, for text
	// media types, converted to UTF-8.
	Body []byte
	// ContentType is the lower-case media type without parameters
	// (sniffed when the server sent none).
	ContentType string
	// Charset is the canonical name of the body's original charset.
	Charset string
	// NotModified is true for 304 answers to a conditional GET.
	NotModified  bool
	ETag         string
	LastModified string
	// Location is the redirect target of a 3xx returned without following
	// (MaxRedirects < 0).
	Location string
	// Timing is the final hop's timing.
	Timing Timing
	// Elapsed sums all hops' Timing.Total (without politeness waits).
	Elapsed time.Duration
	// Waited is the time spent waiting for politeness (host slot, per-IP
	// limit, rest, back-off) over all hops.
	Waited time.Duration
	// WireBytes counts body bytes as transferred (before decoding) over all
	// hops.
	WireBytes int64
	// RemoteIP is the address the final hop talked to.
	RemoteIP netip.Addr
}

// Fetcher is micra's polite, guarded HTTP client. It is safe for concurrent
// use; its only goroutines are the transport's connection readers, released
// by Close.
type Fetcher struct {
	cfg          Config
	log          *slog.Logger
	m            *metrics
	pol          *politeness
	dns          dnsCache
	dialer       *net.Dialer
	transport    *http.Transport
	client       *http.Client
	robotsFlight singleflight.Group
	replays      atomic.Int64
}

// New returns a Fetcher for cfg (zero fields take defaults).
func New(cfg Config) (*Fetcher, error) {
	cfg = cfg.Defaults()
	if err := cfg.validate(); err != nil {
		return nil, err
	}
	if cfg.Resolver == nil {
		cfg.Resolver = net.DefaultResolver
	}
	if cfg.RobotsCache == nil {
		cfg.RobotsCache = NewMemoryRobotsCache(cfg.RobotsCacheSize)
	}
	if cfg.Registerer == nil {
		cfg.Registerer = prometheus.NewRegistry()
	}
	f := &Fetcher{
		cfg: cfg,
		log: cfg.Logger.With("component", "fetch"),
		m:   newMetrics(cfg.Registerer),
		pol: newPoliteness(cfg.PerIPLimit, cfg.Now),
		dns: dnsCache{entries: make(map[string]dnsEntry), max: 100_000},
	}
	f.dialer = &net.Dialer{Timeout: min(cfg.Timeout, 10*time.Second), KeepAlive: 30 * time.Second, ControlContext: f.dialControl}
	f.transport = &http.Transport{
		Proxy:                  nil, // never an environment proxy: the guard must see the real destination
		DialContext:            f.dialContext,
		TLSClientConfig:        cfg.TLSConfig,
		ForceAttemptHTTP2:      true,
		MaxIdleConns:           4096,
		MaxIdleConnsPerHost:    cfg.MaxIdleConnsPerHost,
		IdleConnTimeout:        90 * time.Second,
		TLSHandshakeTimeout:    min(cfg.Timeout, 10*time.Second),
		ResponseHeaderTimeout:  cfg.Timeout,
		ExpectContinueTimeout:  time.Second,
		MaxResponseHeaderBytes: cfg.MaxHeaderBytes,
		DisableCompression:     true, // we decode ourselves so the cap sees decoded bytes
	}
	f.client = &http.Client{
		Transport: f.transport,
		// Redirects are followed by Fetch itself: each hop is guarded,
		// robots-checked and polite to its own host.
		CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse },
	}
	return f, nil
}

// Config returns the effective configuration (defaults applied).
func (f *Fetcher) Config() Config { return f.cfg }

// Replays returns the number of requests the HTTP transport re-sent on its
// own since New (see the package documentation): copies a server may have
// received beyond the requests Fetch decided to send.
func (f *Fetcher) Replays() int64 { return f.replays.Load() }

// Close releases idle connections.
func (f *Fetcher) Close() { f.transport.CloseIdleConnections() }

// HostReadyAt returns the earliest time a request to the host of rawURL may
// start (rest and back-off), the zero time if now. Schedulers use it to pick
// hosts without blocking in Fetch.
func (f *Fetcher) HostReadyAt(rawURL string) time.Time {
	u, err := url.Parse(rawURL)
	if err != nil {
		return time.Time{}
	}
	return f.pol.readyAt(hostKey(u))
}

// Fetch fetches req politely (see the package documentation) and returns
// the response of the final hop, or an *Error.
func (f *Fetcher) Fetch(ctx context.Context, req Request) (*Response, error) {
	if req.Addr.IsValid() {
		// every hop to the request's host dials the pinned address first,
		// its robots.txt too: the connection a page reuses is the one
		// robots.txt opened
		if u, err := url.Parse(req.URL); err == nil {
			ctx = context.WithValue(ctx, pinKey{}, pin{host: u.Hostname(), addr: req.Addr.Unmap()})
		}
	}
	return f.do(ctx, req, doOptions{})
}

// doOptions adapt do for robots.txt fetches.
type doOptions struct {
	skipRobots   bool  // robots.txt itself
	anyType      bool  // no content-type filter, no charset conversion
	truncate     int64 // >0: cap the body here and truncate instead of failing
	maxRedirects int   // >0: overrides Config.MaxRedirects
}

func parseTarget(raw string) (*url.URL, error) {
	u, err := url.Parse(raw)
	if err != nil {
		return nil, newError(ReasonBadURL, raw, err)
	}
	if u.Scheme != "http" && u.Scheme != "https" {
		return nil, newError(ReasonBadURL, raw, errors.New("scheme must be http or https"))
	}
	if u.Hostname() == "" {
		return nil, newError(ReasonBadURL, raw, errors.New("no host"))
	}
	u.Fragment, u.RawFragment = "", ""
	u.User = nil // a crawler never sends credentials found in a link
	return u, nil
}

// hostKey is the politeness key: lower-case host with non-default port.
func hostKey(u *url.URL) string {
	h := strings.ToLower(u.Host)
	switch {
	case u.Scheme == "http" && strings.HasSuffix(h, ":80"):
		h = strings.TrimSuffix(h, ":80")
	case u.Scheme == "https" && strings.HasSuffix(h, ":443"):
		h = strings.TrimSuffix(h, ":443")
	}
	return h
}

func isRedirect(code int) bool {
	switch code {
	case 301, 302, 303, 307, 308:
		return true
	}
	return false
}

// fail counts and logs a failure and returns it.
func (f *Fetcher) fail(err *Error) error {
	f.m.errors.WithLabelValues(string(err.Reason)).Inc()
	switch err.Reason {
	case ReasonGuard:
		f.log.Warn("fetch refused", "reason", err.Reason, "url", err.URL, "err", err.Err)
	case ReasonBodyTooLarge, ReasonHeaderTooLarge, ReasonSlowBody, ReasonTimeout, ReasonRedirectLoop,
		ReasonRedirectLimit, ReasonBadRedirect, ReasonContentEncoding, ReasonCharset:
		f.log.Info("fetch limit", "reason", err.Reason, "url", err.URL, "status", err.Status, "err", err.Err)
	default:
		f.log.Debug("fetch failed", "reason", err.Reason, "url", err.URL, "status", err.Status, "err", err.Err)
	}
	return err
}

func (f *Fetcher) do(ctx context.Context, req Request, opts doOptions) (*Response, error) {
	u, err := parseTarget(req.URL)
	if err != nil {
		return nil, f.fail(err.(*Error))
	}
	method := strings.ToUpper(req.Method)
	if method == "" {
		method = http.MethodGet
	}
	if method != http.MethodGet && method != http.MethodHead {
		return nil, f.fail(newError(ReasonBadURL, req.URL, errors.New("method must be GET or HEAD")))
	}
	maxRedirects := f.cfg.MaxRedirects
	if opts.maxRedirects > 0 {
		maxRedirects = opts.maxRedirects
	}
	resp := &Response{RequestURL: u.String()}
	visited := map[string]bool{u.String(): true}
	for hop := 0; ; hop++ {
		if !opts.skipRobots {
			e, err := f.Robots(ctx, u)
			if err != nil {
				var fe *Error
				if errors.As(err, &fe) {
					return nil, f.fail(&Error{Reason: fe.Reason, URL: u.String(), Status: fe.Status, Err: fe.Err})
				}
				return nil, f.fail(newError(ReasonNetwork, u.String(), err))
			}
			if !e.Allows(f.cfg.RobotsAgent, robotsForm(u)) {
				ferr := &Error{Reason: ReasonRobots, URL: u.String(), Status: e.HTTPStatus, Err: errors.New("disallowed by robots.txt")}
				if e.Status == RobotsDisallowAll && !e.HostNotFound {
					// Unreachable robots.txt disallows only for a while
					// (RFC 9309 §2.3.1.4): say when it is asked again, so the
					// caller keeps the URL instead of dropping it.
					ferr.Err = errors.New("robots.txt unreachable: " + e.Detail)
					ferr.RetryAfter = max(e.Expires.Sub(f.cfg.Now()), time.Millisecond)
				} else if e.HostNotFound {
					ferr.Err = errors.New("robots.txt unreachable, host not found: " + e.Detail)
				}
				return nil, f.fail(ferr)
			}
		}
		hreq := req
		if hop > 0 {
			// the validators are the requested URL's: sent to a redirect
			// target, a 304 from it would pass the source's new content
			// off as unchanged
			hreq.ETag, hreq.LastModified = "", ""
		}
		h, err := f.hop(ctx, u, method, hreq, opts)
		if h != nil {
			resp.Elapsed += h.timing.Total
			resp.Waited += h.waited
			resp.WireBytes += h.wire
		}
		if err != nil {
			return nil, f.fail(err)
		}
		if isRedirect(h.status) && maxRedirects >= 0 {
			loc := h.header.Get("Location")
			if loc == "" {
				return nil, f.fail(&Error{Reason: ReasonBadRedirect, URL: u.String(), Status: h.status, Err: errors.New("redirect without Location")})
			}
			next, err := u.Parse(loc)
			if err == nil && next.Scheme != "http" && next.Scheme != "https" {
				err = errors.New("redirect to scheme " + next.Scheme)
			}
			if err == nil && next.Hostname() == "" {
				err = errors.New("redirect without host")
			}
			if err != nil {
				return nil, f.fail(&Error{Reason: ReasonBadRedirect, URL: u.String(), Status: h.status, Err: err})
			}
			next.Fragment, next.RawFragment = "", ""
			next.User = nil
			if hop >= maxRedirects {
				return nil, f.fail(&Error{Reason: ReasonRedirectLimit, URL: req.URL, Status: h.status,
					Err: errors.New("more than " + strconv.Itoa(maxRedirects) + " redirects, last to " + next.String())})
			}
			if visited[next.String()] {
				return nil, f.fail(&Error{Reason: ReasonRedirectLoop, URL: req.URL, Status: h.status,
					Err: errors.New("redirect loop back to " + next.String())})
			}
			visited[next.String()] = true
			resp.Redirects = append(resp.Redirects, u.String())
			if h.status == http.StatusSeeOther && method != http.MethodHead {
				method = http.MethodGet
			}
			u = next
			continue
		}
		resp.FinalURL = u.String()
		resp.Status = h.status
		resp.Proto = h.proto
		resp.Header = h.header
		resp.Body = h.body
		resp.ContentType = h.mediaType
		resp.Charset = h.charset
		resp.NotModified = h.status == http.StatusNotModified
		resp.ETag = h.header.Get("ETag")
		resp.LastModified = h.header.Get("Last-Modified")
		if isRedirect(h.status) {
			resp.Location = h.header.Get("Location")
		}
		resp.Timing = h.timing
		resp.RemoteIP = h.remote
		return resp, nil
	}
}

// hopResult is one request/response exchange.
type hopResult struct {
	status    int
	proto     string
	header    http.Header
	body      []byte
	mediaType string
	charset   string
	timing    Timing
	waited    time.Duration
	wire      int64
	remote    netip.Addr
}

var (
	errTotalTimeout = errors.New("total time per request exceeded")
	errSlowBody     = errors.New("body not complete within the slow-body deadline")
)

// hop performs one exchange under the host's politeness slot.
func (f *Fetcher) hop(ctx context.Context, u *url.URL, method string, req Request, opts doOptions) (res *hopResult, ferr *Error) {
	target := u.String()
	key := hostKey(u)
	hs, waited, err := f.pol.acquireHost(ctx, key)
	res = &hopResult{waited: waited}
	if err != nil {
		return res, newError(ReasonCanceled, target, err)
	}
	rest := f.cfg.MinDelay
	defer func() { f.pol.releaseHost(key, hs, rest) }()

	if !f.cfg.AllowPrivate && u.Port() != "" {
		if p, err := strconv.Atoi(u.Port()); err == nil && BadPort(p) {
			return res, newError(ReasonGuard, target, errors.New("port "+u.Port()+" is on the bad-port list (protocol smuggling)"))
		}
	}
	ht := &hopTiming{}
	var addrs []netip.Addr
	var took time.Duration
	if pn, pinned := ctx.Value(pinKey{}).(pin); pinned && strings.EqualFold(pn.host, u.Hostname()) {
		addrs = []netip.Addr{pn.addr}
		err = f.checkAddr(addrs[0])
	} else {
		addrs, took, err = f.resolveAllowed(ctx, u.Hostname())
	}
	ht.preDNS = took
	if err != nil {
		var ge *guardError
		switch {
		case errors.As(err, &ge):
			return res, newError(ReasonGuard, target, err)
		case ctx.Err() != nil:
			return res, newError(ReasonCanceled, target, err)
		}
		return res, newError(ReasonDNS, target, err)
	}
	ipStart := time.Now()
	releaseIP, err := f.pol.acquireIP(ctx, addrs[0])
	res.waited += time.Since(ipStart)
	if err != nil {
		return res, newError(ReasonCanceled, target, err)
	}
	defer releaseIP()
	f.m.politenessWait.Observe(res.waited.Seconds())

	hctx, cancel := context.WithCancelCause(ctx)
	defer cancel(nil)
	total := time.AfterFunc(f.cfg.Timeout, func() { cancel(errTotalTimeout) })
	defer total.Stop()
	hctx = context.WithValue(hctx, hopTimingKey{}, ht)
	hctx = httptrace.WithClientTrace(hctx, ht.trace())

	hreq, err := http.NewRequestWithContext(hctx, method, target, nil)
	if err != nil {
		return res, newError(ReasonBadURL, target, err)
	}
	hreq.Header.Set("User-Agent", f.cfg.UserAgent)
	hreq.Header.Set("Accept", "text/html,application/xhtml+xml;q=0.9,*/*;q=0.5")
	hreq.Header.Set("Accept-Encoding", acceptEncoding)
	if req.ETag != "" {
		hreq.Header.Set("If-None-Match", req.ETag)
	}
	if req.LastModified != "" {
		hreq.Header.Set("If-Modified-Since", req.LastModified)
	}

	// classify maps a transport or body error to a reason, preferring our
	// own cancellation causes.
	classify := func(err error) *Error {
		cause := context.Cause(hctx)
		var ge *guardError
		switch {
		case errors.Is(cause, errTotalTimeout):
			return newError(ReasonTimeout, target, errTotalTimeout)
		case errors.Is(cause, errSlowBody):
			return newError(ReasonSlowBody, target, errSlowBody)
		case ctx.Err() != nil:
			return newError(ReasonCanceled, target, ctx.Err())
		case errors.As(err, &ge):
			return newError(ReasonGuard, target, ge)
		case isHeaderTooLarge(err):
			return newError(ReasonHeaderTooLarge, target, err)
		}
		var ne net.Error
		if errors.As(err, &ne) && ne.Timeout() {
			return newError(ReasonTimeout, target, err)
		}
		return newError(ReasonNetwork, target, err)
	}

	ht.start = time.Now()
	hresp, err := f.client.Do(hreq)
	defer func() {
		end := time.Now()
		res.timing = ht.result(end)
		ht.mu.Lock()
		res.remote = ht.remote
		ht.mu.Unlock()
		res.timing.Remote = res.remote
		// Rest: derived from this request's duration, floored and capped;
		// a longer (capped) Crawl-delay wins. A body cut off by the
		// slow-body deadline measures that URL, not the server's load: its
		// rest follows the time to the first byte.
		took := res.timing.Total
		if ferr != nil && ferr.Reason == ReasonSlowBody {
			took = res.timing.FirstByte
		}
		d := time.Duration(f.cfg.DelayFactor * float64(took))
		if f.cfg.DelayFactor < 0 {
			d = 0
		}
		rest = max(min(d, f.cfg.MaxDelay), f.cfg.MinDelay) // MinDelay is the floor, above MaxDelay too
		rest = max(rest, f.pol.crawlDelay(hs))
		f.observe(method, res, ferr)
		// counted at the hop's end, not when Do returns: the write of the
		// answered copy may be reported after its response header, but
		// before its body ends
		if n := ht.replays(); n > 0 {
			f.replays.Add(int64(n))
			f.m.transportReplays.Add(float64(n))
			f.log.Info("request re-sent by the HTTP transport after the server closed the connection",
				"url", target, "replays", n, "status", res.status)
		}
	}()
	if err != nil {
		return res, classify(err)
	}
	defer hresp.Body.Close()
	res.status = hresp.StatusCode
	res.proto = hresp.Proto
	res.header = hresp.Header

	if hresp.StatusCode == http.StatusTooManyRequests || hresp.StatusCode == http.StatusServiceUnavailable {
		ra := parseRetryAfter(hresp.Header.Get("Retry-After"), f.cfg.Now())
		d := f.pol.backoff(hs, ra, max(f.cfg.MinDelay, time.Second), f.cfg.MaxBackoff)
		f.m.backoffs.Inc()
		f.log.Info("host backed off", "host", key, "status", hresp.StatusCode, "retry_after", hresp.Header.Get("Retry-After"), "for", d)
		drain(hresp.Body)
		return res, &Error{Reason: ReasonRetryLater, URL: target, Status: hresp.StatusCode, RetryAfter: d,
			Err: errors.New("server asked to retry later")}
	}
	f.pol.clearBackoff(hs)

	if method == http.MethodHead || hresp.StatusCode < 200 || hresp.StatusCode >= 300 ||
		hresp.StatusCode == http.StatusNoContent {
		drain(hresp.Body)
		return res, nil
	}

	mt, declared := mediaType(hresp.Header.Get("Content-Type"))
	if !opts.anyType && mt != "" && !f.typeAllowed(mt) {
		return res, &Error{Reason: ReasonContentType, URL: target, Status: hresp.StatusCode,
			Err: errors.New("media type " + mt + " not accepted")}
	}

	limit := f.cfg.MaxBodyBytes
	if opts.truncate > 0 {
		limit = opts.truncate
	}
	encoding := hresp.Header.Get("Content-Encoding")
	if opts.truncate == 0 && hresp.ContentLength > limit {
		return res, &Error{Reason: ReasonBodyTooLarge, URL: target, Status: hresp.StatusCode,
			Err: errors.New("Content-Length " + strconv.FormatInt(hresp.ContentLength, 10) + " exceeds " + strconv.FormatInt(limit, 10) + " bytes")}
	}
	slow := time.AfterFunc(f.cfg.SlowBodyDeadline, func() { cancel(errSlowBody) })
	defer slow.Stop()
	cr := &countingReader{r: hresp.Body}
	dec, closeDec, err := decoders(cr, encoding, 8<<20)
	if err != nil {
		return res, &Error{Reason: ReasonContentEncoding, URL: target, Status: hresp.StatusCode, Err: err}
	}
	hint := hresp.ContentLength
	if encoding != "" {
		hint = -1
	}
	body, err := readLimited(dec, limit, hint, opts.truncate > 0)
	closeDec()
	res.wire = cr.n
	if err != nil {
		switch {
		case errors.Is(err, errBodyTooLarge):
			return res, &Error{Reason: ReasonBodyTooLarge, URL: target, Status: hresp.StatusCode,
				Err: errors.New("decoded body exceeds " + strconv.FormatInt(limit, 10) + " bytes after " + strconv.FormatInt(cr.n, 10) + " on the wire")}
		case encoding != "" && context.Cause(hctx) == nil && !isTransportErr(err):
			return res, &Error{Reason: ReasonContentEncoding, URL: target, Status: hresp.StatusCode, Err: err}
		}
		// the server answered: a body that failed (slow, timed out, cut
		// off) still reports the status received
		e := classify(err)
		e.Status = hresp.StatusCode
		return res, e
	}
	f.m.bytes.WithLabelValues("wire").Add(float64(cr.n))
	f.m.bytes.WithLabelValues("decoded").Add(float64(len(body)))
	if mt == "" {
		mt, declared = mediaType(http.DetectContentType(body))
		if !opts.anyType && !f.typeAllowed(mt) {
			return res, &Error{Reason: ReasonContentType, URL: target, Status: hresp.StatusCode,
				Err: errors.New("sniffed media type " + mt + " not accepted")}
		}
	}
	res.mediaType = mt
	if !opts.anyType && isText(mt) {
		out, name, err := f.toUTF8(body, mt, declared)
		if err != nil {
			return res, &Error{Reason: ReasonCharset, URL: target, Status: hresp.StatusCode, Err: err}
		}
		body, res.charset = out, name
	}
	res.body = body
	return res, nil
}

// observe records the hop's request and timing metrics.
func (f *Fetcher) observe(method string, res *hopResult, ferr *Error) {
	class := "error"
	if res.status > 0 {
		class = strconv.Itoa(res.status/100) + "xx"
	}
	f.m.requests.WithLabelValues(method, class).Inc()
	if res.status == 0 {
		return
	}
	t := res.timing
	if !t.Reused {
		f.m.phase.WithLabelValues("dns").Observe(t.DNS.Seconds())
		f.m.phase.WithLabelValues("connect").Observe(t.Connect.Seconds())
		if t.TLS > 0 {
			f.m.phase.WithLabelValues("tls").Observe(t.TLS.Seconds())
		}
	}
	f.m.phase.WithLabelValues("first_byte").Observe(t.FirstByte.Seconds())
	f.m.phase.WithLabelValues("total").Observe(t.Total.Seconds())
}

// drain reads a little of an unwanted body so the connection can be reused.
func drain(r io.Reader) {
	_, _ = io.Copy(io.Discard, io.LimitReader(r, 64<<10))
}

func isHeaderTooLarge(err error) bool {
	s := err.Error()
	return strings.Contains(s, "server response headers exceeded") ||
		strings.Contains(s, "header list larger than") ||
		strings.Contains(s, "header too large")
}

func isTransportErr(err error) bool {
	var ne net.Error
	return errors.As(err, &ne)
}

// parseRetryAfter returns the Retry-After delay (delta-seconds or HTTP-date),
// or -1 if absent or unparsable.
func parseRetryAfter(v string, now time.Time) time.Duration {
	v = strings.TrimSpace(v)
	if v == "" {
		return -1
	}
	if secs, err := strconv.ParseInt(v, 10, 64); err == nil {
		if secs < 0 {
			return -1
		}
		if secs > 1<<31 {
			secs = 1 << 31
		}
		return time.Duration(secs) * time.Second
	}
	if t, err := http.ParseTime(v); err == nil {
		return max(t.Sub(now), 0)
	}
	return -1
}

// robotsForm is the form of u that robots.txt rules are matched against:
// normalised, so percent-encoded unreserved octets are decoded (RFC 9309
// §2.2.2) — seeds and links are normalised already, redirect targets are
// not, and /%70rivate must not pass Disallow: /private.
func robotsForm(u *url.URL) string {
	if s, err := urlnorm.Normalize(u.String()); err == nil {
		return s
	}
	return u.String()
}
