package fetch

import (
	"errors"
	"fmt"
	"time"
)

// Reason names why a fetch failed. The values are stable: they are Prometheus
// label values and appear in logs and crawl records.
type Reason string

// Failure reasons.
const (
	ReasonBadURL          Reason = "bad_url"          // not an absolute http(s) URL
	ReasonGuard           Reason = "guard"            // destination address refused
	ReasonRobots          Reason = "robots"           // disallowed by robots.txt (or robots.txt unreachable)
	ReasonDNS             Reason = "dns"              // host name did not resolve
	ReasonNetwork         Reason = "network"          // connect, reset, TLS or protocol failure
	ReasonTimeout         Reason = "timeout"          // total time per request exceeded
	ReasonSlowBody        Reason = "slow_body"        // body not complete within SlowBodyDeadline
	ReasonBodyTooLarge    Reason = "body_too_large"   // decoded body above MaxBodyBytes
	ReasonHeaderTooLarge  Reason = "header_too_large" // response header above MaxHeaderBytes
	ReasonRedirectLimit   Reason = "redirect_limit"   // more than MaxRedirects hops
	ReasonRedirectLoop    Reason = "redirect_loop"    // a hop returned to a URL already visited
	ReasonBadRedirect     Reason = "bad_redirect"     // missing or unusable Location
	ReasonContentType     Reason = "content_type"     // media type not in AllowedTypes
	ReasonContentEncoding Reason = "content_encoding" // unknown or corrupt Content-Encoding
	ReasonCharset         Reason = "charset"          // unknown charset or undecodable text
	ReasonRetryLater      Reason = "retry_later"      // 429/503: host backed off, try again later
	ReasonCanceled        Reason = "canceled"         // caller's context ended
)

// Error is the error type of every failed fetch.
type Error struct {
	Reason Reason
	URL    string
	// Status is the HTTP status that caused the failure, if any.
	Status int
	// RetryAfter is how long the host is backed off (ReasonRetryLater), or,
	// for ReasonRobots when robots.txt was unreachable (5xx, network), how
	// long until it is asked again: the URL is refused only until then.
	RetryAfter time.Duration
	Err        error
}

func (e *Error) Error() string {
	msg := fmt.Sprintf("fetch %s: %s", e.URL, e.Reason)
	if e.Status != 0 {
		msg += fmt.Sprintf(" (HTTP %d)", e.Status)
	}
	if e.Err != nil {
		msg += ": " + e.Err.Error()
	}
	return msg
}

func (e *Error) Unwrap() error { return e.Err }

// Is makes errors.Is(err, ErrRobots) (and the other sentinels) match any
// *Error with the same Reason.
func (e *Error) Is(target error) bool {
	t, ok := target.(*Error)
	return ok && t.URL == "" && t.Err == nil && t.Reason == e.Reason
}

// Sentinels for errors.Is.
var (
	ErrBadURL          = &Error{Reason: ReasonBadURL}
	ErrGuard           = &Error{Reason: ReasonGuard}
	ErrRobots          = &Error{Reason: ReasonRobots}
	ErrDNS             = &Error{Reason: ReasonDNS}
	ErrNetwork         = &Error{Reason: ReasonNetwork}
	ErrTimeout         = &Error{Reason: ReasonTimeout}
	ErrSlowBody        = &Error{Reason: ReasonSlowBody}
	ErrBodyTooLarge    = &Error{Reason: ReasonBodyTooLarge}
	ErrHeaderTooLarge  = &Error{Reason: ReasonHeaderTooLarge}
	ErrRedirectLimit   = &Error{Reason: ReasonRedirectLimit}
	ErrRedirectLoop    = &Error{Reason: ReasonRedirectLoop}
	ErrBadRedirect     = &Error{Reason: ReasonBadRedirect}
	ErrContentType     = &Error{Reason: ReasonContentType}
	ErrContentEncoding = &Error{Reason: ReasonContentEncoding}
	ErrCharset         = &Error{Reason: ReasonCharset}
	ErrRetryLater      = &Error{Reason: ReasonRetryLater}
	ErrCanceled        = &Error{Reason: ReasonCanceled}
)

// ReasonOf returns the Reason of a fetch error, "" for nil and "other" for
// errors that did not come from this package.
func ReasonOf(err error) Reason {
	if err == nil {
		return ""
	}
	var fe *Error
	if errors.As(err, &fe) {
		return fe.Reason
	}
	return "other"
}

func newError(r Reason, url string, err error) *Error {
	return &Error{Reason: r, URL: url, Err: err}
}
