package fetch

import (
	"context"
	"errors"
	"math"
	"net"
	"net/url"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/jimsmart/grobotstxt"
)

// RobotsStatus is the outcome of fetching an origin's robots.txt.
type RobotsStatus int

// Robots outcomes (RFC 9309 §2.3.1).
const (
	// RobotsRules: robots.txt was fetched (2xx); Body holds the rules.
	RobotsRules RobotsStatus = iota + 1
	// RobotsAllowAll: robots.txt is unavailable (4xx, or too many
	// redirects): everything may be crawled.
	RobotsAllowAll
	// RobotsDisallowAll: robots.txt is unreachable (5xx, 429, network
	// error): nothing may be crawled until the entry expires.
	RobotsDisallowAll
)

func (s RobotsStatus) String() string {
	switch s {
	case RobotsRules:
		return "rules"
	case RobotsAllowAll:
		return "allow_all"
	case RobotsDisallowAll:
		return "disallow_all"
	}
	return "unknown"
}

// maxRobotsBytes is the part of a robots.txt that is parsed; RFC 9309 §2.5
// asks for at least 500 KiB and allows ignoring the rest.
const maxRobotsBytes = 500 << 10

// maxRobotsRedirects is RFC 9309 §2.3.1.2's "at least five" redirects.
const maxRobotsRedirects = 5

// RobotsEntry is the cached outcome for one origin (scheme://host[:port]).
// It is a plain value so that a RobotsCache can persist it.
type RobotsEntry struct {
	Status     RobotsStatus  `json:"status"`
	HTTPStatus int           `json:"http_status,omitempty"`
	Body       string        `json:"body,omitempty"`
	CrawlDelay time.Duration `json:"crawl_delay,omitempty"` // as declared for our agent (or *), uncapped
	Sitemaps   []string      `json:"sitemaps,omitempty"`
	FetchedAt  time.Time     `json:"fetched_at"`
	Expires    time.Time     `json:"expires"`
	// Detail says why the status was chosen (error text, redirect chain).
	Detail string `json:"detail,omitempty"`
	// HostNotFound marks a disallow-all entry caused by a host name that
	// does not exist (NXDOMAIN): not a passing failure, so a refusal under
	// it carries no RetryAfter.
	HostNotFound bool `json:"host_not_found,omitempty"`
}

// Allows reports whether the entry lets agent fetch rawURL.
func (e RobotsEntry) Allows(agent, rawURL string) bool {
	switch e.Status {
	case RobotsAllowAll:
		return true
	case RobotsDisallowAll:
		return false
	}
	return robotsAllowed(e.Body, agent, rawURL)
}

// robotsAllowed runs Google's matcher; a malformed URL is disallowed.
func robotsAllowed(body, agent, rawURL string) (ok bool) {
	defer func() {
		if recover() != nil { // the port panics on paths without a leading "/"
			ok = false
		}
	}()
	return grobotstxt.AgentAllowed(body, agent, rawURL)
}

// RobotsCache stores RobotsEntry values by origin. Implementations must be
// safe for concurrent use; Get must not return expired entries it knows of
// (the Fetcher checks Expires anyway).
type RobotsCache interface {
	Get(origin string) (RobotsEntry, bool)
	Put(origin string, e RobotsEntry)
}

// MemoryRobotsCache is a bounded in-memory RobotsCache: when full, expired
// entries and then the oldest are evicted.
type MemoryRobotsCache struct {
	mu      sync.Mutex
	max     int
	entries map[string]RobotsEntry
}

// NewMemoryRobotsCache returns a cache holding at most max origins.
func NewMemoryRobotsCache(max int) *MemoryRobotsCache {
	return &MemoryRobotsCache{max: max, entries: make(map[string]RobotsEntry)}
}

// Get implements RobotsCache.
func (c *MemoryRobotsCache) Get(origin string) (RobotsEntry, bool) {
	c.mu.Lock()
	defer c.mu.Unlock()
	e, ok := c.entries[origin]
	return e, ok
}

// Put implements RobotsCache.
func (c *MemoryRobotsCache) Put(origin string, e RobotsEntry) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if _, ok := c.entries[origin]; !ok && len(c.entries) >= c.max {
		now := time.Now()
		var oldestK string
		var oldest time.Time
		for k, v := range c.entries {
			if now.After(v.Expires) {
				delete(c.entries, k)
				continue
			}
			if oldestK == "" || v.FetchedAt.Before(oldest) {
				oldestK, oldest = k, v.FetchedAt
			}
		}
		if len(c.entries) >= c.max {
			delete(c.entries, oldestK)
		}
	}
	c.entries[origin] = e
}

// Len returns the number of cached origins.
func (c *MemoryRobotsCache) Len() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	return len(c.entries)
}

// Origin returns the robots.txt origin of u: scheme://host[:port].
func Origin(u *url.URL) string {
	return strings.ToLower(u.Scheme) + "://" + strings.ToLower(u.Host)
}

// Allowed reports whether robots.txt lets this fetcher fetch rawURL,
// fetching and caching robots.txt if needed. The error is non-nil only when
// the question cannot be answered (bad URL, guard, cancellation).
func (f *Fetcher) Allowed(ctx context.Context, rawURL string) (bool, error) {
	u, err := parseTarget(rawURL)
	if err != nil {
		return false, err
	}
	e, err := f.Robots(ctx, u)
	if err != nil {
		return false, err
	}
	return e.Allows(f.cfg.RobotsAgent, u.String()), nil
}

// Robots returns the robots.txt entry of u's origin, from the cache or by
// fetching it (once, even when many goroutines ask together).
func (f *Fetcher) Robots(ctx context.Context, u *url.URL) (RobotsEntry, error) {
	origin := Origin(u)
	if e, ok := f.cfg.RobotsCache.Get(origin); ok && f.cfg.Now().Before(e.Expires) {
		f.applyCrawlDelay(u, e, false)
		return e, nil
	}
	for attempt := 0; ; attempt++ {
		v, err, _ := f.robotsFlight.Do(origin, func() (any, error) {
			if e, ok := f.cfg.RobotsCache.Get(origin); ok && f.cfg.Now().Before(e.Expires) {
				return e, nil
			}
			e, err := f.fetchRobots(ctx, u)
			if err != nil {
				return RobotsEntry{}, err
			}
			f.cfg.RobotsCache.Put(origin, e)
			f.applyCrawlDelay(u, e, true)
			return e, nil
		})
		// The shared fetch ran under another caller's context: if that
		// caller gave up, and we have not, ask again.
		if err != nil && ReasonOf(err) == ReasonCanceled && ctx.Err() == nil && attempt < 3 {
			continue
		}
		if err != nil {
			return RobotsEntry{}, err
		}
		return v.(RobotsEntry), nil
	}
}

// applyCrawlDelay hands the capped Crawl-delay to the politeness state; when
// fresh, a capped delay is logged and counted once.
func (f *Fetcher) applyCrawlDelay(u *url.URL, e RobotsEntry, fresh bool) {
	d := e.CrawlDelay
	if d > f.cfg.MaxCrawlDelay {
		if fresh {
			f.m.crawlDelayCapped.Inc()
			f.log.Info("robots.txt Crawl-delay capped", "origin", Origin(u),
				"declared", e.CrawlDelay, "cap", f.cfg.MaxCrawlDelay)
		}
		d = f.cfg.MaxCrawlDelay
	}
	f.pol.setCrawlDelay(hostKey(u), d, fresh)
}

// fetchRobots fetches and classifies robots.txt of u's origin.
func (f *Fetcher) fetchRobots(ctx context.Context, u *url.URL) (RobotsEntry, error) {
	now := f.cfg.Now()
	robotsURL := &url.URL{Scheme: u.Scheme, Host: u.Host, Path: "/robots.txt"}
	entry := func(s RobotsStatus, code int, ttl time.Duration, detail string) RobotsEntry {
		f.m.robots.WithLabelValues(s.String()).Inc()
		return RobotsEntry{Status: s, HTTPStatus: code, FetchedAt: now, Expires: now.Add(ttl), Detail: detail}
	}
	resp, err := f.do(ctx, Request{URL: robotsURL.String()}, doOptions{
		skipRobots: true, anyType: true, truncate: maxRobotsBytes, maxRedirects: maxRobotsRedirects,
	})
	if err != nil {
		var fe *Error
		if errors.As(err, &fe) {
			switch fe.Reason {
			case ReasonCanceled, ReasonBadURL:
				return RobotsEntry{}, err
			case ReasonGuard:
				if fe.URL == robotsURL.String() {
					return RobotsEntry{}, err // the origin itself is refused
				}
			case ReasonRedirectLimit, ReasonRedirectLoop, ReasonBadRedirect:
				// RFC 9309 §2.3.1.2: past the redirect limit, "unavailable";
				// a redirect without a usable Location leads nowhere either
				return entry(RobotsAllowAll, 0, f.cfg.RobotsTTL, err.Error()), nil
			case ReasonRetryLater:
				return entry(RobotsDisallowAll, fe.Status, max(f.cfg.RobotsErrorTTL, fe.RetryAfter), err.Error()), nil
			}
		}
		f.log.Info("robots.txt unreachable: host disallowed for a while", "url", robotsURL.String(),
			"for", f.cfg.RobotsErrorTTL, "err", err)
		e := entry(RobotsDisallowAll, 0, f.cfg.RobotsErrorTTL, err.Error())
		var dnsErr *net.DNSError
		e.HostNotFound = errors.As(err, &dnsErr) && dnsErr.IsNotFound
		return e, nil
	}
	switch {
	case resp.Status >= 200 && resp.Status < 300:
		e := entry(RobotsRules, resp.Status, f.cfg.RobotsTTL, "")
		e.Body = string(resp.Body)
		e.CrawlDelay, e.Sitemaps = parseRobotsExtras(e.Body, f.cfg.RobotsAgent)
		return e, nil
	case resp.Status >= 400 && resp.Status < 500:
		return entry(RobotsAllowAll, resp.Status, f.cfg.RobotsTTL, ""), nil
	case resp.Status >= 500:
		f.log.Info("robots.txt server error: host disallowed for a while", "url", robotsURL.String(),
			"status", resp.Status, "for", f.cfg.RobotsErrorTTL)
		return entry(RobotsDisallowAll, resp.Status, f.cfg.RobotsErrorTTL, ""), nil
	default: // 1xx, 3xx without Location, 304 …: treat as unavailable
		return entry(RobotsAllowAll, resp.Status, f.cfg.RobotsTTL, "unexpected status"), nil
	}
}

// parseRobotsExtras extracts what Google's matcher ignores: the Crawl-delay
// of the group that applies to agent (its own group if any, else "*") and
// the Sitemap lines. Group rules follow RFC 9309 §2.1: consecutive
// user-agent lines open one group.
func parseRobotsExtras(body, agent string) (time.Duration, []string) {
	h := &extrasHandler{agent: strings.ToLower(agent)}
	grobotstxt.Parse(body, h)
	switch {
	case h.haveSpecific:
		return h.specific, h.sitemaps
	case h.everSpecific:
		return 0, h.sitemaps // our group exists but sets no delay
	case h.haveGlobal:
		return h.global, h.sitemaps
	}
	return 0, h.sitemaps
}

type extrasHandler struct {
	agent                    string
	inSpecific, inGlobal     bool
	lastWasAgent             bool
	everSpecific             bool
	specific, global         time.Duration
	haveSpecific, haveGlobal bool
	sitemaps                 []string
}

func (h *extrasHandler) HandleRobotsStart() {}
func (h *extrasHandler) HandleRobotsEnd()   {}
func (h *extrasHandler) HandleUserAgent(_ int, value string) {
	if !h.lastWasAgent {
		h.inSpecific, h.inGlobal = false, false
	}
	h.lastWasAgent = true
	tok := value
	if i := strings.IndexFunc(tok, func(r rune) bool {
		return !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r == '-' || r == '_' || r == '*')
	}); i >= 0 {
		tok = tok[:i]
	}
	switch {
	case tok == "*":
		h.inGlobal = true
	case strings.EqualFold(tok, h.agent):
		h.inSpecific = true
		h.everSpecific = true
	}
}
func (h *extrasHandler) HandleAllow(int, string)    { h.lastWasAgent = false }
func (h *extrasHandler) HandleDisallow(int, string) { h.lastWasAgent = false }
func (h *extrasHandler) HandleSitemap(_ int, v string) {
	h.lastWasAgent = false
	if len(h.sitemaps) < 64 {
		h.sitemaps = append(h.sitemaps, v)
	}
}
func (h *extrasHandler) HandleUnknownAction(_ int, action, value string) {
	h.lastWasAgent = false
	if !strings.EqualFold(action, "crawl-delay") {
		return
	}
	secs, err := strconv.ParseFloat(strings.TrimSpace(value), 64)
	if err != nil || secs < 0 || math.IsNaN(secs) {
		return
	}
	secs = min(secs, 1e6) // a huge delay is capped (MaxCrawlDelay), not ignored
	d := time.Duration(secs * float64(time.Second))
	if h.inSpecific && !h.haveSpecific {
		h.specific, h.haveSpecific = d, true
	}
	if h.inGlobal && !h.haveGlobal {
		h.global, h.haveGlobal = d, true
	}
}
