package crawl

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Accept queues URLs another crawler handed to this one (the overlay's
// hand-off sink). It returns only once they are durably queued; URLs seen
// before are dropped by the seen-set, so a batch sent twice fetches nothing
// twice. A URL that does not parse or is out of this crawler's scope is
// logged and dropped — it must not make the sender re-send the rest.
// Handed-off URLs are queued at depth 1 (the sender's depth is not carried).
func (e *Engine) Accept(ctx context.Context, urls []string) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	items := make([]frontier.Item, 0, len(urls))
	for _, s := range urls {
		u, err := e.parseURL(s)
		if err == nil {
			err = e.scope.CheckURL(u, 1)
		}
		if err != nil {
			e.log.Warn("hand-off: URL dropped", "url", s, "err", err)
			e.st.outOfScope.Add(1)
			continue
		}
		items = append(items, frontier.Item{URL: u.String(), Host: urlnorm.HostKey(u), Depth: 1})
	}
	if len(items) == 0 {
		return nil
	}
	if _, err := e.front.Add(items); err != nil {
		return fmt.Errorf("crawl: queue %d handed-off URLs: %w", len(items), err)
	}
	return nil
}

// AddLinks routes the out-links of a page this crawler did not fetch
// itself, as it routes a fetched page's: a page whose history was
// recovered from elsewhere (the index sink, after its crawler died) is
// not fetched again, and the URLs only that crawler had queued are found
// again through its links. Links already seen or handed off are dropped;
// the others are queued here or handed to their owners, at depth 1 (the
// page's depth is not known). It returns an error when some links could
// not be routed or stored.
func (e *Engine) AddLinks(ctx context.Context, page string, links []string) error {
	ls := make([]extract.Link, len(links))
	for i, l := range links {
		ls[i] = extract.Link{URL: l}
	}
	return e.enqueueLinks(ctx, frontier.Item{URL: page, Depth: 0}, ls)
}

// Frontier exposes the engine's frontier to the node that composes it with
// the overlay (page history export and import).
func (e *Engine) Frontier() *frontier.Frontier { return e.front }

// ResolveHost resolves host the way the engine does for its router and
// fetcher (one cache for both), or reports false when the engine does not
// resolve (its router needs no IP).
func (e *Engine) ResolveHost(ctx context.Context, host string) (netip.Addr, bool, error) {
	if !e.router.NeedsIP() {
		return netip.Addr{}, false, nil
	}
	a, err := e.resolve(ctx, host)
	return a, err == nil, err
}
