package crawl

import (
	"context"
	"net/netip"
	"net/url"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
)

// Router is how the overlay tells a crawler which URLs are its own (the host's
// subnet is delegated to it) and takes the others (a durable hand-off to the
// owner). The engine asks it for every in-scope discovered URL that is not
// already known.
type Router interface {
	// Owns reports whether this crawler crawls u, whose host resolved to ip
	// (the zero Addr when the engine does not resolve, see NeedsIP).
	Owns(ctx context.Context, u *url.URL, ip netip.Addr) (bool, error)
	// Handoff takes URLs owned by other crawlers. It returns nil only once
	// they are durably accepted (they are not retried by the engine).
	Handoff(ctx context.Context, urls []string) error
	// NeedsIP reports whether Owns wants the resolved address; the engine
	// resolves only then (delegation is by subnet, local crawls need none).
	NeedsIP() bool
}

// Rechecker is implemented by Routers whose ownership moves while URLs
// wait in the queue (a subnet or block handed to another crawler). Before
// it fetches a queued URL the engine asks again; a URL no longer its own
// goes to its owner with Handoff (with the rest of its host's queue) and
// leaves the frontier, so two crawlers do not both crawl it.
type Rechecker interface {
	// StillOwns is Owns without the bookkeeping of a first routing: u was
	// queued here, and the question is whether it still belongs here.
	StillOwns(ctx context.Context, u *url.URL, ip netip.Addr) (bool, error)
}

// FetchObserver is implemented by Routers that want this crawler's timing
// of every HTTP fetch that got an answer: delegation learns from a crawler's
// own crawl timings (calibration events for pages that became slow, reviews
// of a subnet's delegation on the first fetch from each new host). u is the
// URL of the final hop, whose timing t is; took sums every hop (Elapsed).
// It is called from the worker that fetched, after the fetch; it must not
// block for long.
type FetchObserver interface {
	Fetched(ctx context.Context, u *url.URL, t fetch.Timing, took time.Duration)
}

// LocalRouter owns every URL in scope: a single crawler on its own.
type LocalRouter struct{}

func (LocalRouter) Owns(context.Context, *url.URL, netip.Addr) (bool, error) { return true, nil }
func (LocalRouter) Handoff(context.Context, []string) error                  { return nil }
func (LocalRouter) NeedsIP() bool                                            { return false }
