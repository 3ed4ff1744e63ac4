package urlnorm

import (
	"fmt"
	"net/url"
	"strings"
)

// ScopeReason names why a URL is outside the crawl scope. The values are
// stable: they are used as Prometheus label values and in logs.
type ScopeReason string

// Scope reasons.
const (
	ScopeDepth         ScopeReason = "max_depth"
	ScopeHostFull      ScopeReason = "max_pages_per_host"
	ScopeURLLength     ScopeReason = "url_too_long"
	ScopePathRepeat    ScopeReason = "path_repetition"
	ScopePathSegments  ScopeReason = "too_many_path_segments"
	ScopeQueryParams   ScopeReason = "too_many_query_params"
	ScopeHostNotInSeed ScopeReason = "host_not_allowed"
)

// ScopeError is returned by Scope.Check for a URL outside the crawl scope.
type ScopeError struct {
	URL    string
	Reason ScopeReason
	Detail string
}

func (e *ScopeError) Error() string {
	return fmt.Sprintf("out of scope (%s): %s: %s", e.Reason, e.URL, e.Detail)
}

// Scope holds the crawl-scope rules. A zero field disables that rule, except
// where DefaultScope documents a default. Scope is a value without state: the
// number of pages already taken from a host is kept by the caller (the
// frontier, durably) and passed in, so a restarted crawler keeps its budget.
type Scope struct {
	// MaxDepth is the largest link distance from a seed that is crawled
	// (seeds have depth 0).
	MaxDepth int
	// MaxPagesPerHost bounds the pages crawled per host (UbiCrawler's bound
	// against infinite sites).
	MaxPagesPerHost int
	// MaxURLLength bounds the length of the normalised URL in bytes.
	MaxURLLength int
	// MaxPathRepeat is the largest number of times one path segment may occur
	// in a path: /a/b/a/b/a/b/ (relative-link loops) and /cal/2024/cal/2024/
	// exceed it.
	MaxPathRepeat int
	// MaxPathSegments bounds the number of path segments.
	MaxPathSegments int
	// MaxQueryParams bounds the number of query parameters (faceted-search
	// traps multiply them).
	MaxQueryParams int
	// Hosts, when non-empty, restricts the crawl to these host keys (see
	// HostKey); links to other hosts are out of scope.
	Hosts map[string]bool
}

// DefaultScope returns the scope rules used when the operator sets none.
func DefaultScope() Scope {
	return Scope{
		MaxDepth:        16,
		MaxPagesPerHost: 100_000,
		MaxURLLength:    2048,
		MaxPathRepeat:   3,
		MaxPathSegments: 32,
		MaxQueryParams:  16,
	}
}

// Check returns nil if the normalised URL u at the given depth may be
// crawled, given that hostPages pages of its host were already admitted, or
// a *ScopeError naming the rule that excludes it.
func (s Scope) Check(u *url.URL, depth, hostPages int) error {
	if err := s.CheckURL(u, depth); err != nil {
		return err
	}
	if s.MaxPagesPerHost > 0 && hostPages >= s.MaxPagesPerHost {
		return &ScopeError{URL: u.String(), Reason: ScopeHostFull, Detail: fmt.Sprintf("%d pages already", hostPages)}
	}
	return nil
}

// CheckURL applies every rule that depends only on the URL and its depth.
func (s Scope) CheckURL(u *url.URL, depth int) error {
	str := u.String()
	fail := func(r ScopeReason, format string, args ...any) error {
		return &ScopeError{URL: str, Reason: r, Detail: fmt.Sprintf(format, args...)}
	}
	if s.MaxDepth > 0 && depth > s.MaxDepth {
		return fail(ScopeDepth, "depth %d > %d", depth, s.MaxDepth)
	}
	if s.MaxURLLength > 0 && len(str) > s.MaxURLLength {
		return fail(ScopeURLLength, "%d bytes > %d", len(str), s.MaxURLLength)
	}
	if len(s.Hosts) > 0 && !s.Hosts[HostKey(u)] {
		return fail(ScopeHostNotInSeed, "host %s", HostKey(u))
	}
	p := u.EscapedPath()
	segs := strings.Split(strings.Trim(p, "/"), "/")
	if s.MaxPathSegments > 0 && len(segs) > s.MaxPathSegments {
		return fail(ScopePathSegments, "%d segments > %d", len(segs), s.MaxPathSegments)
	}
	if s.MaxPathRepeat > 0 && len(segs) > s.MaxPathRepeat {
		counts := make(map[string]int, len(segs))
		for _, seg := range segs {
			if seg == "" {
				continue
			}
			counts[seg]++
			if counts[seg] > s.MaxPathRepeat {
				return fail(ScopePathRepeat, "segment %q repeats more than %d times", seg, s.MaxPathRepeat)
			}
		}
	}
	if s.MaxQueryParams > 0 && u.RawQuery != "" {
		if n := strings.Count(u.RawQuery, "&") + 1; n > s.MaxQueryParams {
			return fail(ScopeQueryParams, "%d parameters > %d", n, s.MaxQueryParams)
		}
	}
	return nil
}
