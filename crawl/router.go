package crawl

import (
	"context"
	"errors"
	"net/netip"
	"net/url"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
)

// Route is the routing step's answer for one URL, computed once and
// carried to everything downstream of it: the hand-off, the re-check
// before the fetch, the fetch (which dials Addr) and the observation of
// its timing. Nothing downstream resolves the host or asks for the owner
// again.
type Route struct {
	// Addr is the address the URL's host resolved to: the one its fetch
	// dials. Zero when the router needs no address (NeedsIP).
	Addr netip.Addr
	// Mine reports whether this crawler crawls the URL.
	Mine bool
	// Owner names the crawler that does ("" when the router names none).
	Owner string
	// Subnet and Block place Addr in the delegation (as the router maps
	// addresses): the hand-off groups URLs by them. Epoch is the epoch of
	// the delegation record Owner was read from.
	Subnet uint32
	Block  netip.Prefix
	Epoch  uint64
	// Place is the address the router placed the host at, when it maps
	// addresses (a loopback testnet emulates the Internet's); zero: Addr.
	// The page's record carries it (pack.Record.Addr).
	Place netip.Addr
	// Wait, when set by a Rechecker, says the URL is this crawler's but
	// not to be fetched before then: the host's page history is still
	// arriving from its previous owner, and a page in it must not be
	// fetched a second time. The engine puts the host aside until then.
	Wait time.Time
}

// placed is the address the route placed its host at.
func (r Route) placed() netip.Addr {
	if r.Place.IsValid() {
		return r.Place
	}
	return r.Addr
}

// Routed is a URL with its route: the unit of a hand-off.
type Routed struct {
	URL   string
	Route Route
}

// Router is how the overlay tells a crawler which URLs are its own (the host's
// subnet is delegated to it) and takes the others (a durable hand-off to the
// owner). The engine routes every in-scope discovered URL that is not
// already known, once.
type Router interface {
	// Route decides where u goes; addr is the address its host resolved
	// to, the one a fetch of it dials (the zero Addr when the engine does
	// not resolve, see NeedsIP).
	Route(ctx context.Context, u *url.URL, addr netip.Addr) (Route, error)
	// Handoff takes URLs routed to other crawlers, with their routes. It
	// returns nil only once they are durably accepted (they are not retried
	// by the engine).
	Handoff(ctx context.Context, urls []Routed) error
	// NeedsIP reports whether Route wants the resolved address; the engine
	// resolves only then (delegation is by subnet, local crawls need none).
	NeedsIP() bool
}

// Rechecker is implemented by Routers whose ownership moves while URLs
// wait in the queue (a subnet or block handed to another crawler). Before
// it fetches a queued URL the engine asks again, once; a URL no longer its
// own goes to its owner with Handoff (with the rest of its host's queue)
// and leaves the frontier, so two crawlers do not both crawl it. A URL
// still its own is fetched from the Route's Addr.
type Rechecker interface {
	// Recheck is Route without the bookkeeping of a first routing: u was
	// queued here, and the question is whether it still belongs here.
	Recheck(ctx context.Context, u *url.URL, addr netip.Addr) (Route, error)
}

// FetchObserver is implemented by Routers that want this crawler's timing
// of every HTTP fetch that got an answer: delegation learns from a crawler's
// own crawl timings (calibration events for pages that became slow, reviews
// of a subnet's delegation on the first fetch from each new address). u is
// the URL of the final hop, whose timing t is (t.Remote: the address it
// reached); r is the route the fetch followed (a Route with Mine alone when
// the router does not re-check); took sums every hop (Elapsed). It is
// called from the worker that fetched, after the fetch; it must not block
// for long.
type FetchObserver interface {
	Fetched(ctx context.Context, u *url.URL, r Route, t fetch.Timing, took time.Duration)
}

// LocalRouter owns every URL in scope: a single crawler on its own.
type LocalRouter struct{}

func (LocalRouter) Route(context.Context, *url.URL, netip.Addr) (Route, error) {
	return Route{Mine: true}, nil
}
func (LocalRouter) Handoff(context.Context, []Routed) error { return nil }
func (LocalRouter) NeedsIP() bool                           { return false }

// TransientRouteError reports whether a Route error may pass by itself: a
// deadline or cancellation inside the router (a DHT lookup or a round of
// probes that ran out of time on a slow network) rather than an answer
// about the URL. A URL whose routing failed so must be routed again later,
// not dropped.
func TransientRouteError(err error) bool {
	return errors.Is(err, context.DeadlineExceeded) || errors.Is(err, context.Canceled)
}
