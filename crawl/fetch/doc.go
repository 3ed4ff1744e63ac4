// Package fetch owns micra's HTTP fetching: the client every crawler uses for
// page GETs, conditional revisits and HEAD probes, and the promises micra makes
// to the web and to the volunteer's own network.
//
// A Fetcher (New) is safe for concurrent use; one per crawler. Fetch blocks
// until the request may be sent politely, sends it, and returns a Response
// whose Body is decoded, size-checked and converted to UTF-8:
//
//   - Transport: HTTP/1.1 and HTTP/2 (over TLS) with keep-alive. Every hop of
//     every GET and HEAD is timed with net/http/httptrace (Timing: DNS,
//     connect, TLS, first byte, total) — calibration and latency probes are
//     built on these numbers.
//   - Politeness: at most one request in flight per host (HostKey: host and
//     non-default port) and at most Config.PerIPLimit per resolved IP address;
//     after each request the host rests for max(MinDelay, DelayFactor × the
//     request's duration), capped at MaxDelay, or the robots.txt Crawl-delay
//     if longer (itself capped at MaxCrawlDelay, logged and counted when
//     capped). 429 and 503 push the host back by Retry-After (seconds or
//     HTTP date, capped at MaxBackoff) or by an exponential back-off when the
//     server gives none; Fetch returns ReasonRetryLater and the next Fetch for
//     that host waits. HostReadyAt tells a scheduler when a host may be asked
//     again without blocking.
//   - robots.txt (RFC 9309) through github.com/jimsmart/grobotstxt, a port of
//     Google's reference parser and matcher: fetched once per origin and cached
//     for RobotsTTL (RobotsCache, pluggable so a crawler can keep it durable);
//     2xx → rules; 4xx → allow all; 5xx, 429 and network errors → disallow all
//     for RobotsErrorTTL; up to 5 redirects followed; bodies beyond 500 KiB
//     truncated as the RFC allows.
//   - Conditional GET: Request.ETag and Request.LastModified become
//     If-None-Match and If-Modified-Since; 304 gives Response.NotModified.
//   - Limits against hostile servers, each failing with an *Error whose Reason
//     is counted (micra_fetch_errors_total{reason}) and logged: body cap after
//     decompression (Content-Encoding gzip, deflate, br and zstd are decoded
//     here, never by net/http, so bombs hit the cap on decoded bytes), header
//     size cap, total time per request, slow-body deadline, redirect limit and
//     loop detection, content-type filter, unknown charsets rejected and
//     others converted to UTF-8 (invalid UTF-8 repaired and counted).
//   - Transport replays: net/http re-sends an idempotent request on a new
//     connection when a kept-alive one closes before answering, so a server
//     may receive a copy the crawler did not decide to send, outside its
//     pacing. It cannot be turned off cleanly; it is counted instead
//     (written requests beyond the first of a hop, seen by httptrace):
//     Fetcher.Replays, micra_fetch_transport_replays_total, and an Info log
//     line naming the URL.
//   - Guard: destinations in private, loopback, link-local, multicast,
//     unspecified and reserved ranges are refused (ReasonGuard) unless
//     Config.AllowPrivate — checked after DNS resolution, again in the dialer's
//     Control hook on the address actually dialled, and on every redirect hop;
//     ports on the WHATWG bad-port list (SMTP, IRC …) are refused too.
//
// Errors: every failure is an *Error carrying a Reason (stable strings used
// as metric labels). errors.Is(err, fetch.ErrRobots) and the other sentinel
// values compare reasons; ReasonOf(err) returns the reason for counting.
package fetch
