package fetch

import (
	"context"
	"crypto/tls"
	"errors"
	"fmt"
	"log/slog"
	"math"
	"net/netip"
	"strings"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// DefaultUserAgent identifies micra with a contact URL, as politeness asks.
const DefaultUserAgent = "micra/0.1 (+https://github.com/micra-crawler/micra)"

// Resolver resolves host names; *net.Resolver satisfies it. Testnets plug in
// resolvers that map synthetic host names to loopback addresses.
type Resolver interface {
	LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error)
}

// Config configures a Fetcher. Zero fields take the defaults documented on
// each field (see Defaults).
type Config struct {
	// UserAgent is the User-Agent header; it must carry a contact URL.
	// Default DefaultUserAgent.
	UserAgent string
	// RobotsAgent is the product token matched against robots.txt
	// User-agent lines. Default: the first token of UserAgent ("micra").
	RobotsAgent string

	// MaxBodyBytes caps the decoded body. Default 4 MiB.
	MaxBodyBytes int64
	// MaxHeaderBytes caps the response header block. Default 64 KiB.
	MaxHeaderBytes int64
	// Timeout bounds one request hop from sending to the end of the body.
	// Default 30 s.
	Timeout time.Duration
	// SlowBodyDeadline bounds the time from the response header to the end
	// of the body (slow drip). Default 15 s.
	SlowBodyDeadline time.Duration
	// MaxRedirects is the largest number of redirects followed. Default 5;
	// negative means do not follow redirects (the 3xx is returned).
	MaxRedirects int
	// AllowedTypes lists the media types whose bodies are read (compared
	// case-insensitively, parameters ignored); others fail with
	// ReasonContentType. Default text/html and application/xhtml+xml. A
	// single "*/*" accepts everything.
	AllowedTypes []string

	// AllowPrivate permits private, loopback, link-local and reserved
	// destinations. Only testnets set it.
	AllowPrivate bool
	// AllowPrefixes lists ranges permitted even though the guard would
	// refuse them (an operator's own intranet server), without opening
	// every private range.
	AllowPrefixes []netip.Prefix

	// PerIPLimit is the number of requests in flight to one IP address (many
	// hosts share an address). Default 2.
	PerIPLimit int
	// MinDelay is the floor of the pause between two requests to one host.
	// Default 1 s. Set NoDelay to make a zero MinDelay mean zero.
	MinDelay time.Duration
	// NoDelay, with MinDelay zero, removes the floor (benchmarks, testnets).
	NoDelay bool
	// DelayFactor multiplies the last request's duration to derive the pause
	// (slow servers get more rest). Default 5; negative disables.
	DelayFactor float64
	// MaxDelay caps the derived pause (not Crawl-delay). Default 30 s.
	MaxDelay time.Duration
	// MaxCrawlDelay caps a robots.txt Crawl-delay. Default 30 s.
	MaxCrawlDelay time.Duration
	// MaxBackoff caps the back-off after 429/503 (Retry-After or
	// exponential). Default 1 h.
	MaxBackoff time.Duration

	// RobotsTTL is how long a fetched robots.txt is trusted. Default 24 h.
	RobotsTTL time.Duration
	// RobotsErrorTTL is how long a 5xx or unreachable robots.txt disallows
	// the host before it is tried again. Default 10 min.
	RobotsErrorTTL time.Duration
	// RobotsCache stores robots.txt outcomes. Default: an in-memory cache of
	// RobotsCacheSize origins.
	RobotsCache RobotsCache
	// RobotsCacheSize bounds the default in-memory robots cache. Default 100 000.
	RobotsCacheSize int

	// Resolver resolves host names. Default net.DefaultResolver.
	Resolver Resolver
	// Emulator, if set, stands for the network between this crawler and
	// the addresses it fetches (the testnet's emulated world): each connect
	// takes one round trip and each response waits one round trip after its
	// request was written. nil: the real network.
	Emulator Emulator
	// DNSTTL is how long resolutions are cached. Default 5 min.
	DNSTTL time.Duration
	// TLSConfig is the client TLS configuration (tests add their root CA).
	TLSConfig *tls.Config
	// MaxIdleConnsPerHost bounds kept-alive idle connections per host.
	// Default 2.
	MaxIdleConnsPerHost int

	// Registerer receives the fetcher's metrics. Default: a private registry.
	Registerer prometheus.Registerer
	// Logger receives refusals and notable events. Default slog.Default().
	Logger *slog.Logger
	// Now is the clock (tests). Default time.Now.
	Now func() time.Time
}

// Defaults returns c with every zero field set to its default.
func (c Config) Defaults() Config {
	if c.UserAgent == "" {
		c.UserAgent = DefaultUserAgent
	}
	if c.RobotsAgent == "" {
		tok := c.UserAgent
		if i := strings.IndexAny(tok, "/ "); i > 0 {
			tok = tok[:i]
		}
		c.RobotsAgent = tok
	}
	if c.MaxBodyBytes == 0 {
		c.MaxBodyBytes = 4 << 20
	}
	if c.MaxHeaderBytes == 0 {
		c.MaxHeaderBytes = 64 << 10
	}
	if c.Timeout == 0 {
		c.Timeout = 30 * time.Second
	}
	if c.SlowBodyDeadline == 0 {
		c.SlowBodyDeadline = 15 * time.Second
	}
	if c.MaxRedirects == 0 {
		c.MaxRedirects = 5
	}
	if len(c.AllowedTypes) == 0 {
		c.AllowedTypes = []string{"text/html", "application/xhtml+xml"}
	}
	if c.PerIPLimit == 0 {
		c.PerIPLimit = 2
	}
	if c.MinDelay == 0 && !c.NoDelay {
		c.MinDelay = time.Second
	}
	if c.DelayFactor == 0 {
		c.DelayFactor = 5
	}
	if c.MaxDelay == 0 {
		c.MaxDelay = 30 * time.Second
	}
	if c.MaxCrawlDelay == 0 {
		c.MaxCrawlDelay = 30 * time.Second
	}
	if c.MaxBackoff == 0 {
		c.MaxBackoff = time.Hour
	}
	if c.RobotsTTL == 0 {
		c.RobotsTTL = 24 * time.Hour
	}
	if c.RobotsErrorTTL == 0 {
		c.RobotsErrorTTL = 10 * time.Minute
	}
	if c.RobotsCacheSize == 0 {
		c.RobotsCacheSize = 100_000
	}
	if c.DNSTTL == 0 {
		c.DNSTTL = 5 * time.Minute
	}
	if c.MaxIdleConnsPerHost == 0 {
		c.MaxIdleConnsPerHost = 2
	}
	if c.Logger == nil {
		c.Logger = slog.Default()
	}
	if c.Now == nil {
		c.Now = time.Now
	}
	return c
}

func (c Config) validate() error {
	var errs []error
	if !strings.Contains(c.UserAgent, "http") && !strings.Contains(c.UserAgent, "@") {
		errs = append(errs, errors.New("fetch: UserAgent must carry a contact URL or address"))
	}
	if c.MaxBodyBytes < 0 || c.MaxHeaderBytes < 0 {
		errs = append(errs, errors.New("fetch: negative size limit"))
	}
	if c.PerIPLimit < 0 {
		errs = append(errs, errors.New("fetch: negative PerIPLimit"))
	}
	for _, d := range []struct {
		name string
		v    time.Duration
	}{{"Timeout", c.Timeout}, {"SlowBodyDeadline", c.SlowBodyDeadline}, {"MinDelay", c.MinDelay}, {"MaxDelay", c.MaxDelay},
		{"MaxCrawlDelay", c.MaxCrawlDelay}, {"MaxBackoff", c.MaxBackoff}, {"RobotsTTL", c.RobotsTTL},
		{"RobotsErrorTTL", c.RobotsErrorTTL}, {"DNSTTL", c.DNSTTL}} {
		if d.v < 0 {
			errs = append(errs, fmt.Errorf("fetch: negative duration %s %v", d.name, d.v))
		}
	}
	if math.IsNaN(c.DelayFactor) || math.IsInf(c.DelayFactor, 0) {
		errs = append(errs, fmt.Errorf("fetch: DelayFactor %v is not a finite number", c.DelayFactor))
	}
	return errors.Join(errs...)
}
