// Package synthweb owns micra's synthetic web: a deterministic, seeded web
// of many hosts served on loopback, used by `micra bench crawl`, the crawl
// engine's tests and the testnet.
//
// Shape (Config): Hosts host names (w000.synth.test …) spread over
// Hosts/HostsPerIP loopback addresses in 127.77.0.0/16, all on one port, so
// per-host and per-IP politeness are both meaningful. Each host has
// PagesPerHost pages of about PageBytes of HTML with LinksPerPage links, a
// LocalLinkFraction of them to the same host; text is drawn from an English
// vocabulary with a Zipf distribution, with a title, headings, a script, a
// style block and comments. Link spellings vary (relative, absolute,
// fragments, "./", tracking parameters) as on the real web, while the server
// knows the canonical page behind each: that is how duplicate fetches are
// counted at the server side (Stats).
//
// Each host serves robots.txt (Disallow: /private/, optionally a
// Crawl-delay); a crawler that fetches /private/ pages is counted as a robots
// violation. Pages carry ETag and Last-Modified and answer conditional GETs
// with 304; Change bumps the version of a fraction of pages (monitoring).
//
// Realistic turns on the Web's unevenness: varied page sizes, a heavy-tailed
// in-degree (links to other hosts favour popular hosts), slow hosts and
// pages that fail once (503) before they serve.
//
// Name resolution is the Web's own: Resolver (for crawl/fetch) and
// DialContext (for any http.Transport) map synthetic names to their
// loopback addresses; nothing leaves the machine.
package synthweb

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"math/rand/v2"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"
)

// Config shapes the synthetic web. Zero fields take the defaults noted.
type Config struct {
	Seed              uint64  // default 1
	Hosts             int     // default 200
	HostsPerIP        int     // default 4
	PagesPerHost      int     // default 100
	PageBytes         int     // approximate HTML size, default 10 240
	LinksPerPage      int     // default 20
	LocalLinkFraction float64 // default 0.8
	// TrackingParamRate is the fraction of links carrying a tracking
	// parameter (?utm_source=…) that does not change the page. Default
	// 0.02; negative for none.
	TrackingParamRate float64
	// CanonicalLinks, when set, spells every link so that it resolves to
	// the canonical URL without normalisation rules beyond RFC 3986
	// resolution: no fragments, no tracking parameters, no case games.
	CanonicalLinks bool
	// PrivateLinkRate is the fraction of pages linking to a robots-excluded
	// /private/ page. Default 0.1; negative for none.
	PrivateLinkRate float64
	// Gzip serves pages gzip-encoded to clients that accept it.
	Gzip bool
	// CrawlDelay, if set, is announced in every robots.txt.
	CrawlDelay time.Duration
	// Latency is added before every response (0: none).
	Latency time.Duration
	// HostLatency, if set, adds a per-host delay before every response (the
	// testnet emulates a host's network distance with it).
	HostLatency func(host int) time.Duration
	// PageBytesSigma spreads page sizes log-normally around PageBytes
	// (0: every page about PageBytes), as real pages vary.
	PageBytesSigma float64
	// PopularityZipf, when above 1, draws the targets of links to other
	// hosts from a Zipf law with this exponent over hosts, so in-degree is
	// heavy-tailed as on the Web (0: uniform targets).
	PopularityZipf float64
	// SlowHostRate is the fraction of hosts that add SlowHostDelay before
	// every response (a busy server).
	SlowHostRate  float64
	SlowHostDelay time.Duration
	// FlakyRate is the fraction of pages whose first request is answered
	// 503 with Retry-After: 1 (a transient failure a crawler must retry).
	FlakyRate float64
	// Domain is the suffix of host names. Default "synth.test".
	Domain string
	// Listen prefix: addresses are 127.77.x.y. Default 127.77.
	AddrPrefix [2]byte
}

func (c Config) withDefaults() Config {
	if c.Seed == 0 {
		c.Seed = 1
	}
	if c.Hosts == 0 {
		c.Hosts = 200
	}
	if c.HostsPerIP == 0 {
		c.HostsPerIP = 4
	}
	if c.PagesPerHost == 0 {
		c.PagesPerHost = 100
	}
	if c.PageBytes == 0 {
		c.PageBytes = 10 << 10
	}
	if c.LinksPerPage == 0 {
		c.LinksPerPage = 20
	}
	if c.LocalLinkFraction == 0 {
		c.LocalLinkFraction = 0.8
	}
	if c.TrackingParamRate == 0 && !c.CanonicalLinks {
		c.TrackingParamRate = 0.02
	}
	if c.PrivateLinkRate == 0 {
		c.PrivateLinkRate = 0.1
	}
	if c.Domain == "" {
		c.Domain = "synth.test"
	}
	if c.AddrPrefix == [2]byte{} {
		c.AddrPrefix = [2]byte{127, 77}
	}
	return c
}

// Stats are counted at the server side.
type Stats struct {
	Requests         int64 // every HTTP request
	PageFetches      int64 // 200 answers for pages
	UniquePages      int64 // distinct (host, page, version) served with 200
	DuplicateFetches int64 // 200 answers for a page version already served
	NotModified      int64 // 304 answers
	RobotsFetches    int64
	RobotsViolations int64 // requests for /private/ pages
	NotFound         int64
	Unavailable      int64 // transient 503 answers (FlakyRate)
	BytesServed      int64 // body bytes written (compressed when Gzip)
	HTMLBytes        int64 // page HTML bytes served with 200, before any compression
}

// Web is a running synthetic web.
type Web struct {
	cfg       Config
	port      int
	names     []string
	ipOf      []netip.Addr
	byName    map[string]int
	listeners []net.Listener
	srv       *http.Server
	wg        sync.WaitGroup
	text      *textGen
	baseTime  time.Time

	mu       sync.RWMutex
	versions map[uint64]uint32 // page id → version (absent: 0)

	served  []atomic.Uint32 // per page id: 200 answers for the current version in this epoch
	flaked  []atomic.Bool   // per page id: its one transient failure was served
	popular []int           // host of each popularity rank (PopularityZipf)
	stats   struct{ requests, pages, unique, dups, notModified, robots, violations, notFound, unavailable, bytes, html atomic.Int64 }
	started atomic.Bool
}

// Start builds the web and serves it on loopback until Close.
func Start(cfg Config) (*Web, error) {
	cfg = cfg.withDefaults()
	if cfg.Hosts < 1 || cfg.PagesPerHost < 1 || cfg.HostsPerIP < 1 {
		return nil, errors.New("synthweb: Hosts, PagesPerHost and HostsPerIP must be positive")
	}
	nIPs := (cfg.Hosts + cfg.HostsPerIP - 1) / cfg.HostsPerIP
	if nIPs > 250*250 {
		return nil, errors.New("synthweb: too many addresses")
	}
	w := &Web{
		cfg:      cfg,
		byName:   make(map[string]int, cfg.Hosts),
		versions: make(map[uint64]uint32),
		served:   make([]atomic.Uint32, cfg.Hosts*cfg.PagesPerHost),
		flaked:   make([]atomic.Bool, cfg.Hosts*cfg.PagesPerHost),
		text:     newTextGen(cfg.Seed),
		baseTime: time.Date(2026, 1, 1, 0, 0, 0, 0, time.UTC),
	}
	width := len(strconv.Itoa(cfg.Hosts - 1))
	width = max(width, 3)
	for i := 0; i < cfg.Hosts; i++ {
		name := fmt.Sprintf("w%0*d.%s", width, i, cfg.Domain)
		w.names = append(w.names, name)
		w.byName[name] = i
		ipIdx := i / cfg.HostsPerIP
		w.ipOf = append(w.ipOf, netip.AddrFrom4([4]byte{cfg.AddrPrefix[0], cfg.AddrPrefix[1], byte(ipIdx/250 + 0), byte(ipIdx%250 + 1)}))
	}
	if cfg.PopularityZipf > 1 {
		w.popular = newRand(cfg.Seed, 0x909).Perm(cfg.Hosts)
	}
	if err := w.listen(nIPs); err != nil {
		return nil, err
	}
	w.srv = &http.Server{
		Handler:           http.HandlerFunc(w.serve),
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       60 * time.Second,
		MaxHeaderBytes:    64 << 10,
	}
	for _, l := range w.listeners {
		w.wg.Add(1)
		go func(l net.Listener) {
			defer w.wg.Done()
			_ = w.srv.Serve(l)
		}(l)
	}
	w.started.Store(true)
	return w, nil
}

// listen binds one listener per address, all on the same port.
func (w *Web) listen(nIPs int) error {
	var lastErr error
	for attempt := 0; attempt < 8; attempt++ {
		var ls []net.Listener
		ok := true
		port := 0
		for i := 0; i < nIPs; i++ {
			ip := w.ipOf[i*w.cfg.HostsPerIP]
			l, err := net.Listen("tcp4", netip.AddrPortFrom(ip, uint16(port)).String())
			if err != nil {
				lastErr = err
				ok = false
				break
			}
			if port == 0 {
				port = l.Addr().(*net.TCPAddr).Port
			}
			ls = append(ls, l)
		}
		if ok {
			w.listeners, w.port = ls, port
			return nil
		}
		for _, l := range ls {
			l.Close()
		}
	}
	return fmt.Errorf("synthweb: cannot bind %d loopback addresses on one port: %w", nIPs, lastErr)
}

// Close stops the servers and waits for them.
func (w *Web) Close() error {
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err := w.srv.Shutdown(ctx)
	if err != nil {
		w.srv.Close()
	}
	w.wg.Wait()
	return err
}

// Port is the TCP port every host listens on.
func (w *Web) Port() int { return w.port }

// Hosts returns the host names (without port).
func (w *Web) Hosts() []string { return append([]string(nil), w.names...) }

// NumIPs returns the number of distinct addresses.
func (w *Web) NumIPs() int { return len(w.listeners) }

// TotalPages is the number of crawlable pages (excluding /private/).
func (w *Web) TotalPages() int { return w.cfg.Hosts * w.cfg.PagesPerHost }

// Config returns the effective configuration.
func (w *Web) Config() Config { return w.cfg }

// HomeURL returns the home page URL of host i.
func (w *Web) HomeURL(i int) string {
	return "http://" + w.names[i] + ":" + strconv.Itoa(w.port) + "/"
}

// PageURL returns the canonical URL of page p of host i.
func (w *Web) PageURL(i, p int) string {
	return "http://" + w.names[i] + ":" + strconv.Itoa(w.port) + pagePath(p)
}

// HostIP returns the loopback address host i is served on.
func (w *Web) HostIP(i int) netip.Addr { return w.ipOf[i] }

// HostIndex returns the index of a host name, or -1.
func (w *Web) HostIndex(name string) int {
	if i, ok := w.byName[strings.ToLower(strings.TrimSuffix(name, "."))]; ok {
		return i
	}
	return -1
}

// Seeds returns the home pages of every host.
func (w *Web) Seeds() []string {
	s := make([]string, w.cfg.Hosts)
	for i := range s {
		s[i] = w.HomeURL(i)
	}
	return s
}

func pagePath(p int) string {
	if p == 0 {
		return "/"
	}
	return "/p/" + strconv.Itoa(p) + ".html"
}

// LookupNetIP resolves synthetic host names (crawl/fetch.Resolver).
func (w *Web) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if i, ok := w.byName[strings.ToLower(strings.TrimSuffix(host, "."))]; ok {
		return []netip.Addr{w.ipOf[i]}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such synthetic host", Name: host, IsNotFound: true}
}

// DialContext dials a synthetic host:port (for an http.Transport).
func (w *Web) DialContext(ctx context.Context, network, addr string) (net.Conn, error) {
	host, port, err := net.SplitHostPort(addr)
	if err != nil {
		return nil, err
	}
	ips, err := w.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return nil, err
	}
	var d net.Dialer
	return d.DialContext(ctx, network, net.JoinHostPort(ips[0].String(), port))
}

// Stats returns the server-side counters of the current epoch.
func (w *Web) Stats() Stats {
	return Stats{
		Requests:         w.stats.requests.Load(),
		PageFetches:      w.stats.pages.Load(),
		UniquePages:      w.stats.unique.Load(),
		DuplicateFetches: w.stats.dups.Load(),
		NotModified:      w.stats.notModified.Load(),
		RobotsFetches:    w.stats.robots.Load(),
		RobotsViolations: w.stats.violations.Load(),
		NotFound:         w.stats.notFound.Load(),
		Unavailable:      w.stats.unavailable.Load(),
		BytesServed:      w.stats.bytes.Load(),
		HTMLBytes:        w.stats.html.Load(),
	}
}

// ResetStats starts a new epoch: counters go to zero and every page counts
// as not yet served (so a second crawler is measured on its own).
func (w *Web) ResetStats() {
	for i := range w.served {
		w.served[i].Store(0)
		w.flaked[i].Store(false)
	}
	w.stats.unavailable.Store(0)
	w.stats.requests.Store(0)
	w.stats.pages.Store(0)
	w.stats.unique.Store(0)
	w.stats.dups.Store(0)
	w.stats.notModified.Store(0)
	w.stats.robots.Store(0)
	w.stats.violations.Store(0)
	w.stats.notFound.Store(0)
	w.stats.bytes.Store(0)
	w.stats.html.Store(0)
}

// Change bumps the version of about fraction of all pages, chosen
// deterministically from round; it returns the number of changed pages. A
// changed page has new text, a new ETag and a later Last-Modified.
func (w *Web) Change(fraction float64, round uint64) int {
	w.mu.Lock()
	defer w.mu.Unlock()
	n := 0
	for h := 0; h < w.cfg.Hosts; h++ {
		for p := 0; p < w.cfg.PagesPerHost; p++ {
			if unit(mix(w.cfg.Seed, 0xC4A9, round, uint64(h), uint64(p))) < fraction {
				id := w.pageID(h, p)
				w.versions[id]++
				w.served[id].Store(0)
				n++
			}
		}
	}
	return n
}

// Version returns the current version of page p of host h.
func (w *Web) Version(h, p int) uint32 {
	w.mu.RLock()
	defer w.mu.RUnlock()
	return w.versions[w.pageID(h, p)]
}

func (w *Web) pageID(h, p int) uint64 { return uint64(h)*uint64(w.cfg.PagesPerHost) + uint64(p) }

// mix hashes its arguments into one well-spread value (FNV-1a of the
// words, then a SplitMix64 finaliser).
func mix(vs ...uint64) uint64 {
	h := fnv.New64a()
	var b [8]byte
	for _, v := range vs {
		for i := 0; i < 8; i++ {
			b[i] = byte(v >> (8 * i))
		}
		h.Write(b[:])
	}
	z := h.Sum64() + 0x9e3779b97f4a7c15
	z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9
	z = (z ^ (z >> 27)) * 0x94d049bb133111eb
	return z ^ (z >> 31)
}

func unit(v uint64) float64 { return float64(v>>11) / (1 << 53) }

func newRand(vs ...uint64) *rand.Rand {
	s := mix(vs...)
	return rand.New(rand.NewPCG(s, s^0x5851f42d4c957f2d))
}

// Realistic returns c with the Web's unevenness turned on where c leaves
// it off: page sizes spread log-normally (σ 0.7), links to other hosts
// drawn Zipf(1.2) over hosts, 5 % of hosts slow (300 ms before every
// response) and 2 % of pages failing once with 503. The testnet crawls
// this web; benchmarks keep the even one.
func (c Config) Realistic() Config {
	if c.PageBytesSigma == 0 {
		c.PageBytesSigma = 0.7
	}
	if c.PopularityZipf == 0 {
		c.PopularityZipf = 1.2
	}
	if c.SlowHostRate == 0 {
		c.SlowHostRate, c.SlowHostDelay = 0.05, 300*time.Millisecond
	}
	if c.FlakyRate == 0 {
		c.FlakyRate = 0.02
	}
	return c
}
