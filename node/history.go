package node

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/netip"
	"net/url"
	"time"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// pageHistory serves the crawler's per-page history by subnet to the
// overlay's page recovery (/micra/recover/1) and imports what a subnet's
// previous owner sends.
type pageHistory struct {
	eng    *crawl.Engine
	router *Router // subnet of a page = subnet of its host's mapped address
	// monitor: imported pages are scheduled for a revisit after sleep.
	monitor bool
	sleep   time.Duration
}

var _ overlay.PageHistory = (*pageHistory)(nil)

// History implements overlay.PageHistory. Hosts are resolved once each.
func (h *pageHistory) History(ctx context.Context, s hierarchy.NodeID, block netip.Prefix, emit func(overlay.PageState) error) error {
	inSubnet := map[string]bool{}
	return h.eng.Frontier().EachHistory(func(p *frontier.History) error {
		if err := ctx.Err(); err != nil {
			return err
		}
		if p.Fetches == 0 || p.URL == "" {
			return nil
		}
		host := hostOf(p.URL)
		in, ok := inSubnet[host]
		if !ok {
			_, in = h.hostIn(ctx, host, s, block)
			inSubnet[host] = in
		}
		if !in {
			return nil
		}
		ps := overlay.PageState{URL: p.URL, ETag: p.ETag, LastModified: p.LastModified,
			LastFetch: p.LastFetch, HTTPStatus: p.Status}
		if p.ContentHash != ([16]byte{}) {
			ps.ContentHash = append([]byte(nil), p.ContentHash[:]...)
		}
		// The smoothed total first, then the last fetch's: Import rebuilds
		// the mean from the first.
		if p.MeanTotal > 0 {
			ps.FetchTimes = append(ps.FetchTimes, p.MeanTotal)
		}
		if p.Total > 0 {
			ps.FetchTimes = append(ps.FetchTimes, p.Total)
		}
		return emit(ps)
	})
}

// Import implements overlay.PageHistory: pages this crawler has no history
// for join its seen-set with their validators, so the next visit is a
// conditional GET; their links (PageState.Links) are routed first, as a
// fetched page's. Every page whose host lies in s is kept, but only those
// whose host this crawler owns by the cached record join the seen-set and
// the revisit schedule: a block of the subnet may be another crawler's, and
// a page of it scheduled here would be crawled twice. The others are kept
// for the next recovery (frontier.KeepHistory): a subnet can move on before
// its history arrives here (a second move while the first is recovered),
// and the crawler it moves to asks this one, which sends what it holds.
// When this crawler owns the whole subnet (no block of it is another's), no
// host is resolved.
func (h *pageHistory) Import(ctx context.Context, s hierarchy.NodeID, pages []overlay.PageState) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	all := h.router.ownsAll(s)
	type place struct{ in, own bool }
	hosts := map[string]place{}
	hs := make([]frontier.History, 0, len(pages))
	var kept []frontier.History // of hosts another crawler owns now
	now := time.Now()
	for _, p := range pages {
		u, err := url.Parse(p.URL)
		if err != nil || u.Host == "" {
			continue // validated by the overlay; a bad one loses nothing else
		}
		host := u.Hostname()
		pl, ok := hosts[host]
		if !ok && all {
			pl, ok = place{true, true}, true
		}
		if !ok {
			pl.in, pl.own, err = h.router.hostPlace(ctx, host, s)
			if err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				// unresolvable now: the page is fetched afresh if its URL
				// reaches this crawler again, nothing else is lost
				h.router.log.Debug("node: recovered page's host not resolved", "url", p.URL, "err", err)
			}
			hosts[host] = pl
		}
		if !pl.in {
			continue // not of s: a sender's mistake, never this crawler's history
		}
		if len(p.Links) > 0 {
			// its links first: a page whose links could not be routed
			// is fetched again (overlap), never marked fetched with the
			// URLs only they lead to lost
			if err := h.eng.AddLinks(ctx, p.URL, p.Links); err != nil {
				if ctx.Err() != nil {
					return ctx.Err()
				}
				h.router.log.Debug("node: recovered page's links not routed; it will be fetched again", "url", p.URL, "err", err)
				continue
			}
		}
		if p.LastFetch.After(now) {
			p.LastFetch = now // a sender's clock ahead: never a revisit pushed out
		}
		// one fetch that found content, as visit counts a first fetch (a
		// page without a content hash, off the schedule, would otherwise
		// read as an old version's redirect mark and never be revisited)
		fh := frontier.History{URL: p.URL, Host: urlnorm.HostKey(u), FirstFetch: p.LastFetch, LastFetch: p.LastFetch,
			LastChange: p.LastFetch, Status: p.HTTPStatus, ETag: p.ETag, LastModified: p.LastModified, Fetches: 1, Changes: 1}
		copy(fh.ContentHash[:], p.ContentHash)
		if n := len(p.FetchTimes); n > 0 {
			fh.MeanTotal, fh.Total = p.FetchTimes[0], p.FetchTimes[n-1]
		}
		if !pl.own {
			kept = append(kept, fh)
			continue
		}
		if h.monitor && !p.LastFetch.IsZero() {
			fh.Interval = h.sleep
			fh.NextVisit = p.LastFetch.Add(h.sleep)
		}
		hs = append(hs, fh)
	}
	if len(kept) > 0 {
		if _, err := h.eng.Frontier().KeepHistory(kept); err != nil {
			return err
		}
	}
	if len(hs) == 0 {
		return nil
	}
	_, err := h.eng.Frontier().ImportHistory(hs)
	return err
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return u.Hostname()
}

var _ overlay.PageFence = (*pageHistory)(nil)

// Fence implements overlay.PageFence: it waits until the crawl engine is
// visiting no host of subnet s (of block, when valid) that this crawler
// does not own by its cached record. A worker takes a host before it
// re-checks the host's first queued URL, so once the record that moved
// the host is cached, every fetch of it decided before has ended (and its
// page is in the history) and every later one is a hand-off instead.
// Hosts are resolved once each.
func (h *pageHistory) Fence(ctx context.Context, s hierarchy.NodeID, block netip.Prefix) error {
	moved := map[string]bool{}
	return h.eng.WaitHostsIdle(ctx, func(hostKey string) bool {
		if m, ok := moved[hostKey]; ok {
			return m
		}
		host := hostKey
		if hn, _, err := net.SplitHostPort(hostKey); err == nil {
			host = hn
		}
		a, in := h.hostIn(ctx, host, s, block)
		if !in {
			moved[hostKey] = false
			return false
		}
		owner, ok := h.router.peer.CachedOwner(a)
		m := !ok || owner != h.router.peer.CrawlerID()
		moved[hostKey] = m
		return m
	})
}

// hostIn resolves host (as the router maps it) and reports whether its
// address lies in subnet s, and in block when that is valid.
func (h *pageHistory) hostIn(ctx context.Context, host string, s hierarchy.NodeID, block netip.Prefix) (netip.Addr, bool) {
	a, err := h.router.addrOf(ctx, host)
	if err != nil || h.router.tree.SmallestNonUnary(a) != s || (block.IsValid() && !block.Contains(a)) {
		return a, false
	}
	return a, true
}

// sinkArchive is the overlay's PageArchive on the index sink the node
// delivers to (sinkFinder: the configured one, else the network's): it
// holds every record this network's crawlers delivered, each with the
// address its host was placed at, so a dead owner's delivered pages are
// not fetched again by its subnet's next owner.
type sinkArchive struct {
	finder *sinkFinder
}

var _ overlay.PageArchive = (*sinkArchive)(nil)

// Pages implements overlay.PageArchive. It follows the sink's cursors; a
// failure that may pass (no sink announced for a moment, a busy sink, a
// broken stream) is asked again from the last cursor, after a pause that
// doubles up to archiveRetryMax, until ctx ends. A page that redirected
// within its host also marks its target as fetched, as the crawler that
// fetched it did (a target on another host may be another subnet's).
func (a *sinkArchive) Pages(ctx context.Context, first, last netip.Addr, emit func([]overlay.PageState) error) error {
	var after []byte
	pause := archiveRetry
	for {
		ai, err := a.finder.await(ctx)
		if err != nil {
			return err
		}
		ans, err := (&sink.Client{Host: a.finder.host, Sink: ai}).QueryPlaced(ctx, first, last, after)
		var qe *sink.QueryError
		switch {
		case err == nil:
		case ctx.Err() != nil || errors.As(err, &qe) && qe.Permanent():
			return err
		default:
			a.finder.log.Debug("node: page query to the sink failed; asking again", "err", err, "after", pause)
			select {
			case <-ctx.Done():
				return fmt.Errorf("%w (%w)", err, ctx.Err())
			case <-time.After(pause):
			}
			pause = min(2*pause, archiveRetryMax)
			continue
		}
		pause = archiveRetry
		if len(ans.Pages) > 0 {
			if err := emit(pageStates(ans.Pages)); err != nil {
				return err
			}
		}
		if ans.Done {
			return nil
		}
		after = ans.Next
	}
}

// archiveRetry and archiveRetryMax bound the pause before a failed page
// query to the sink is asked again.
const (
	archiveRetry    = 100 * time.Millisecond
	archiveRetryMax = 2 * time.Second
)

// pageStates are the sink's page records as page recovery imports them:
// a page that had out-links is recovered only with its links (the crawl
// ships them: ship_links), since the URLs its dead crawler had queued are
// found again only through them or by fetching it again.
func pageStates(ps []sink.PlacedPage) []overlay.PageState {
	out := make([]overlay.PageState, 0, len(ps))
	for _, p := range ps {
		r := &p.Record
		nofollow := r.Flags&pack.FlagNoFollow != 0
		if r.OutLinks > 0 && len(r.Links) == 0 && !nofollow {
			// its links were not shipped: only a fetch finds the URLs
			// its crawler had queued, so it is fetched again
			continue
		}
		s := overlay.PageState{URL: r.URL, ETag: r.ETag, LastModified: r.LastModified, LastFetch: r.FetchedAt, HTTPStatus: r.Status, Addr: r.Addr}
		if !nofollow {
			s.Links = r.Links
		}
		if r.ContentHash != ([16]byte{}) {
			s.ContentHash = append([]byte(nil), r.ContentHash[:]...)
		}
		if r.Timing.Total > 0 {
			s.FetchTimes = []time.Duration{r.Timing.Total}
		}
		out = append(out, s)
		if r.FinalURL != "" && r.FinalURL != r.URL && hostOf(r.FinalURL) == hostOf(r.URL) {
			out = append(out, overlay.PageState{URL: r.FinalURL, LastFetch: r.FetchedAt, HTTPStatus: r.Status, Addr: r.Addr})
		}
	}
	return out
}
