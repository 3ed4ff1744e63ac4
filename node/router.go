package node

import (
	"context"
	"fmt"
	"log/slog"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// AddrMapper maps the address a host resolved to onto the address the node
// delegates on. Real deployments use the identity; a loopback testnet, where
// every host is 127.x.y.z, maps each host to the address it emulates.
type AddrMapper func(netip.Addr) netip.Addr

// Identity is the default AddrMapper.
func Identity(a netip.Addr) netip.Addr { return a }

// owner is the part of the overlay peer the router needs (an interface so
// the router's grouping can be read without libp2p in mind).
type owner interface {
	Delegate(ctx context.Context, ip netip.Addr) (delegation.Decision, error)
	HandoffAll(ctx context.Context, items []overlay.HandoffItem) error
	CrawlerID() delegation.CrawlerID
	Review(ctx context.Context, ip netip.Addr, took time.Duration) (delegation.Decision, bool, error)
	ReportSlowPage(ctx context.Context, ip netip.Addr, url string, observed, expected time.Duration) (delegation.Decision, error)
	CachedOwner(ip netip.Addr) (delegation.CrawlerID, bool)
	CachedRoute(ip netip.Addr) (delegation.CrawlerID, delegation.Record, bool)
	CachedRecord(s hierarchy.NodeID) (delegation.Record, bool)
	Arriving(ip netip.Addr) bool
}

var _ owner = (*overlay.Peer)(nil)

// Router is the overlay-backed crawl.Router: a URL is this crawler's when
// the delegation owner of its host's address is this peer. Each URL is
// routed once (Route); its crawl.Route carries the address, subnet, block,
// owner and epoch to the hand-off, the re-check before the fetch and the
// fetch observation, none of which resolves or asks for the owner again.
type Router struct {
	peer    owner
	tree    delegation.Tree
	mapAddr AddrMapper
	res     fetch.Resolver
	// resolveHost is the crawl engine's resolver (the fetcher's DNS cache),
	// for the node's own look-ups of hosts that come without a route (page
	// recovery, the ledger's re-routes, seeds); nil: res, uncached.
	resolveHost func(ctx context.Context, host string) (netip.Addr, error)

	mu sync.Mutex
	// the crawler's own fetch timings (Fetched): hosts whose first fetch
	// went to a review (bounded), and each page's time history
	reviewed map[netip.Addr]struct{}        // by mapped address: a round trip is the address's, not the site's
	lastSlow map[hierarchy.NodeID]time.Time // when a subnet's calibration event was last reported
	calib    *delegation.Calibrator
	log      *slog.Logger

	// ledger records URLs handed to an owner (nil: not recorded).
	ledger func(owner delegation.CrawlerID, urls []string) error

	owned, foreign, undecided, handedURLs, handoffCalls prometheus.Counter
	reviews                                             *prometheus.CounterVec
	slowPages                                           prometheus.Counter
}

var _ crawl.Router = (*Router)(nil)

const maxRememberedHosts = 1 << 16

// calibrationCooldown is how long a subnet's calibration events are not
// reported again after one was: when a host slows down, every one of its
// pages crosses the threshold, and one re-delegation is what they mean.
const calibrationCooldown = 10 * time.Minute

func newRouter(tree delegation.Tree, mapAddr AddrMapper, res fetch.Resolver, dc delegation.Config, log *slog.Logger, reg prometheus.Registerer) (*Router, error) {
	if mapAddr == nil {
		mapAddr = Identity
	}
	if res == nil {
		res = net.DefaultResolver
	}
	if log == nil {
		log = slog.Default()
	}
	r := &Router{tree: tree, mapAddr: mapAddr, res: res, reviewed: make(map[netip.Addr]struct{}),
		lastSlow: make(map[hierarchy.NodeID]time.Time), calib: delegation.NewCalibrator(tree, dc), log: log}
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Name: "micra_node_" + name, Help: help})
	}
	r.owned = c("urls_owned_total", "Discovered URLs whose host's subnet is delegated to this crawler.")
	r.foreign = c("urls_foreign_total", "Discovered URLs owned by another crawler.")
	r.undecided = c("urls_undecided_total", "URLs routed whose owner could not be decided then (no quorum, a failed lookup or publish): links and seeds wait in the hand-off spool, a dead owner's re-routed URLs are tried again later.")
	r.handedURLs = c("handoff_urls_total", "URLs handed to the overlay's durable hand-off.")
	r.handoffCalls = c("handoff_groups_total", "Groups (a subnet and block each) handed to the overlay.")
	r.slowPages = c("calibration_events_total", "Pages whose fetch times exceeded their history (calibration events announced, subnet re-delegated).")
	r.reviews = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "micra_node_reviews_total",
		Help: "First fetches from a host given to the policy's review, by outcome (kept, handed-over, block-delegated, other)."}, []string{"outcome"})
	if reg != nil {
		for _, m := range []prometheus.Collector{r.owned, r.foreign, r.undecided, r.handedURLs, r.handoffCalls, r.slowPages, r.reviews} {
			if err := reg.Register(m); err != nil {
				return nil, fmt.Errorf("node: register metrics: %w", err)
			}
		}
	}
	return r, nil
}

// NeedsIP implements crawl.Router: delegation is by subnet.
func (r *Router) NeedsIP() bool { return true }

// Route implements crawl.Router: the one routing step of a URL whose host
// resolved to ip (the address its fetch dials).
func (r *Router) Route(ctx context.Context, u *url.URL, ip netip.Addr) (crawl.Route, error) {
	if !ip.IsValid() {
		return crawl.Route{}, fmt.Errorf("node: %s: no address to delegate by", u.Host)
	}
	a := r.mapAddr(ip)
	d, err := r.peer.Delegate(ctx, a)
	if err != nil {
		if s := r.tree.SmallestNonUnary(a); s != hierarchy.None && s != hierarchy.Root {
			// The owner is not decided now: no quorum (nobody may
			// delegate the subnet), a lookup or publish that failed, a
			// subnet being moved. The URL waits in the hand-off spool,
			// which decides its owner again on each flush and delivers it
			// (here too, if it is this crawler's). An error would drop
			// the link, or have the page that linked it fetched again.
			r.log.Debug("node: owner not decided, URL spooled", "host", u.Host, "addr", a, "err", err)
			r.undecided.Inc()
			return r.routeOf(ip, a, s, "", 0), nil
		}
		return crawl.Route{}, fmt.Errorf("node: owner of %s (%v): %w", u.Host, a, err)
	}
	rt := r.routeOf(ip, a, d.Subnet, d.Owner, d.Record.Epoch)
	if rt.Mine && !d.Cached && d.Record.Owner == d.Owner {
		// this host decided the subnet: the decision counts it already
		// (a review tally starts with it), only further hosts are reviewed
		r.mu.Lock()
		r.markReviewedLocked(a)
		r.mu.Unlock()
	}
	if rt.Mine {
		r.owned.Inc()
	} else {
		r.foreign.Inc()
	}
	return rt, nil
}

// routeOf is the route of a host at ip (mapped: a, in subnet s) owned by
// owner under a record of epoch.
func (r *Router) routeOf(ip, a netip.Addr, s hierarchy.NodeID, owner delegation.CrawlerID, epoch uint64) crawl.Route {
	return crawl.Route{Addr: ip, Place: a, Mine: owner == r.peer.CrawlerID(), Owner: string(owner),
		Subnet: uint32(s), Block: delegation.BlockOf(a), Epoch: epoch}
}

// Recheck implements crawl.Rechecker: whether the URL queued here is still
// this crawler's — its subnet or block may have moved since (a review's
// hand-over, a calibration event, a placement). It answers from the cached
// record (no lookup, no load counted) and asks Delegate only when none is
// cached. Unlike Route it neither counts the URL nor marks its host as
// reviewed.
func (r *Router) Recheck(ctx context.Context, u *url.URL, ip netip.Addr) (crawl.Route, error) {
	if !ip.IsValid() {
		return crawl.Route{}, fmt.Errorf("node: %s: no address to delegate by", u.Host)
	}
	a := r.mapAddr(ip)
	var rt crawl.Route
	if owner, rec, ok := r.peer.CachedRoute(a); ok {
		rt = r.routeOf(ip, a, rec.Subnet, owner, rec.Epoch)
	} else {
		d, err := r.peer.Delegate(ctx, a)
		if err != nil {
			return crawl.Route{}, fmt.Errorf("node: owner of %s: %w", u.Host, err)
		}
		rt = r.routeOf(ip, a, d.Subnet, d.Owner, d.Record.Epoch)
	}
	if rt.Mine && r.peer.Arriving(a) {
		// the host's history is on its way from its previous owner: a
		// page of it fetched now may be one that owner fetched already
		rt.Wait = time.Now().Add(arrivalPoll)
	}
	return rt, nil
}

// arrivalPoll is how long a host whose page history is still arriving
// rests before its queue is re-checked.
const arrivalPoll = 100 * time.Millisecond

var _ crawl.Rechecker = (*Router)(nil)

// Handoff implements crawl.Router: the URLs are grouped by the subnet and
// block of their routes and each group is spooled durably by the overlay,
// which delivers it to the owner of the moment (the route's owner while
// the record keeps the route's epoch). The ledger records each group under
// the owner it was routed to.
func (r *Router) Handoff(ctx context.Context, urls []crawl.Routed) error {
	type key struct {
		sn    uint32
		block netip.Prefix
		owner string // (one block, one owner, unless routed under two records)
		epoch uint64
	}
	groups := map[key]*overlay.HandoffItem{}
	var order []key
	for _, u := range urls {
		rt := u.Route
		sn := hierarchy.NodeID(rt.Subnet)
		if !rt.Addr.IsValid() {
			return fmt.Errorf("node: hand-off %q: routed without an address", u.URL)
		}
		if sn == hierarchy.None || sn == hierarchy.Root {
			// The owner of an address outside the hierarchy is hashed per
			// address, but the overlay's hand-off is keyed by subnet.
			return fmt.Errorf("node: hand-off %q: %v is outside the hierarchy; the overlay hands off by subnet only", u.URL, rt.Addr)
		}
		k := key{rt.Subnet, rt.Block, rt.Owner, rt.Epoch}
		g := groups[k]
		if g == nil {
			g = &overlay.HandoffItem{Subnet: sn, IP: r.mapAddr(rt.Addr), Owner: delegation.CrawlerID(rt.Owner), Epoch: rt.Epoch}
			groups[k] = g
			order = append(order, k)
		}
		g.URLs = append(g.URLs, u.URL)
	}
	// one durable commit for all groups (one fsync per page, however many
	// subnets and blocks its links reach)
	items := make([]overlay.HandoffItem, len(order))
	for i, k := range order {
		items[i] = *groups[k]
	}
	if err := r.peer.HandoffAll(ctx, items); err != nil {
		return fmt.Errorf("node: hand-off of %d URLs in %d groups: %w", len(urls), len(items), err)
	}
	for _, g := range items {
		r.handoffCalls.Inc()
		r.handedURLs.Add(float64(len(g.URLs)))
		if r.ledger == nil || g.Owner == "" || g.Owner == r.peer.CrawlerID() {
			continue
		}
		// The URLs are spooled: the hand-off succeeded. A ledger entry
		// lost only means they are not re-routed if that owner dies;
		// reporting the hand-off failed would have the caller crawl them
		// here too.
		if err := r.ledger(g.Owner, g.URLs); err != nil {
			r.log.Warn("node: hand-off ledger not written; these URLs are not re-routed if their owner dies",
				"owner", g.Owner, "urls", len(g.URLs), "err", err)
		}
	}
	return nil
}

var _ crawl.FetchObserver = (*Router)(nil)

// Fetched implements crawl.FetchObserver: this crawler's own fetch timings
// feed delegation. The first fetch from each (mapped) host address that
// opens a connection goes to the policy's review of the host's subnet (delegation.Reviewer; a
// no-op unless the subnet is this crawler's and the policy reviews) with
// its connect time, a round trip as probes measure it (fetches on the
// connection robots.txt opened wait for a later one: their time to first
// byte includes the server's). Every page's request
// time (the final hop's total without DNS, connect and TLS) goes to the
// calibrator; a calibration event is announced and re-delegates
// the page's subnet. A host the router has not seen (handed-off URLs reach
// the engine through Accept, not Owns) is resolved as the engine resolved
// it; one that does not resolve is skipped.
func (r *Router) Fetched(ctx context.Context, u *url.URL, rt crawl.Route, t fetch.Timing, _ time.Duration) {
	host := u.Hostname()
	// the address the fetch reached, else the one its route dialled; a
	// look-up only for an observation that comes with neither
	raw := t.Remote
	if !raw.IsValid() {
		raw = rt.Addr
	}
	if !raw.IsValid() {
		var err error
		if raw, err = r.lookup(ctx, host); err != nil {
			r.log.Debug("node: fetch timing of an unresolvable host ignored", "host", host, "err", err)
			return
		}
	}
	a := r.mapAddr(raw)
	r.mu.Lock()
	_, done := r.reviewed[a]
	// only a new connection's connect time is a round trip, as probes
	// (TCP connect) measure it: a reused connection's time to first byte
	// adds the server's time, which would make the owner look far
	first := !done && !t.Reused && t.Connect > 0
	if first {
		r.markReviewedLocked(a)
	}
	var ev delegation.CalibrationEvent
	slow := false
	// the request's own time to its first byte: a revisit on a new
	// connection (DNS, connect, TLS: up to three round trips more than a
	// kept-alive one) is no slower path, and neither is a body (a 200
	// after 304s, a longer page)
	if req := t.FirstByte - t.DNS - t.Connect - t.TLS; req > 0 {
		ev, slow = r.calib.Observe(u.String(), a, req, time.Now())
	}
	r.mu.Unlock()
	if first {
		rtt := t.Connect
		d, reviewed, err := r.peer.Review(ctx, a, rtt)
		switch {
		case err != nil:
			r.reviews.WithLabelValues("other").Inc()
			if ctx.Err() == nil {
				r.log.Warn("node: review failed", "host", host, "addr", a, "err", err)
			}
		case !reviewed:
		case d.Reason == delegation.ReasonHandedOver:
			r.reviews.WithLabelValues("handed-over").Inc()
			r.log.Info("node: subnet handed over after review", "host", host, "subnet", d.Subnet, "to", d.Owner, "rtt", rtt)
		case d.Reason == delegation.ReasonBlockDelegated:
			r.reviews.WithLabelValues("block-delegated").Inc()
			r.log.Info("node: host's block delegated after review", "host", host, "block", delegation.BlockOf(a), "subnet", d.Subnet, "to", d.Owner, "rtt", rtt)
		case d.Reason == delegation.ReasonKept:
			r.reviews.WithLabelValues("kept").Inc()
		default:
			r.reviews.WithLabelValues("other").Inc()
		}
	}
	if slow {
		// only the owner's path says anything about the delegation: a
		// foreign host fetched here (a redirect target) is not reported
		// (from the cache when it knows: Delegate would count a page in
		// the load book for nothing; ReportSlowPage checks again)
		// (the route the fetch followed says, when the page is at its
		// address; a redirect target elsewhere asks the cache, and
		// ReportSlowPage checks again)
		if rt.Addr.IsValid() && rt.Addr == raw {
			if !rt.Mine {
				return
			}
		} else if o, ok := r.peer.CachedOwner(a); !ok || o != r.peer.CrawlerID() {
			return
		}
		r.mu.Lock()
		last, ok := r.lastSlow[ev.Subnet]
		cooling := ok && time.Since(last) < calibrationCooldown
		if !cooling {
			if len(r.lastSlow) >= maxRememberedHosts {
				clear(r.lastSlow)
			}
			r.lastSlow[ev.Subnet] = time.Now()
		}
		r.mu.Unlock()
		if cooling {
			return // this subnet was just reported: its other pages say the same
		}
		r.slowPages.Inc()
		if _, err := r.peer.ReportSlowPage(ctx, a, ev.Page, ev.Last, ev.Baseline); err != nil && ctx.Err() == nil {
			r.log.Warn("node: calibration failed", "page", ev.Page, "addr", a, "err", err)
		}
	}
}

// markReviewedLocked records that the first fetch from address a needs no
// review (one vote per address: the many sites of a shared-hosting address
// share its round trip). The caller holds r.mu.
func (r *Router) markReviewedLocked(a netip.Addr) {
	if len(r.reviewed) >= maxRememberedHosts {
		// a host reviewed again after this is one more vote in its
		// subnet's tally (and may probe): rare, and bounded memory is
		// worth it
		clear(r.reviewed)
	}
	r.reviewed[a] = struct{}{}
}

// lookup resolves host as the engine does, unmapped (for hosts that come
// without a route: recovered pages, the ledger's re-routes, seeds).
func (r *Router) lookup(ctx context.Context, host string) (netip.Addr, error) {
	if r.resolveHost != nil {
		return r.resolveHost(ctx, host)
	}
	return r.resolveRaw(ctx, host)
}

// addrOf returns the mapped address of host.
func (r *Router) addrOf(ctx context.Context, host string) (netip.Addr, error) {
	ip, err := r.lookup(ctx, host)
	if err != nil {
		return netip.Addr{}, err
	}
	return r.mapAddr(ip), nil
}

// hostPlace reports whether host lies in subnet s (by its mapped address)
// and whether this crawler owns its pages now by the cached record (no
// lookup, no decision): the owner of that address under s's record (its
// block's, if delegated to a live crawler) is this peer. Without a cached
// record it does not know, and says not owned.
func (r *Router) hostPlace(ctx context.Context, host string, s hierarchy.NodeID) (in, own bool, err error) {
	a, err := r.addrOf(ctx, host)
	if err != nil {
		return false, false, err
	}
	if r.tree.SmallestNonUnary(a) != s {
		return false, false, nil
	}
	owner, ok := r.peer.CachedOwner(a)
	return true, ok && owner == r.peer.CrawlerID(), nil
}

// ownsAll reports whether every page of subnet s is this crawler's by the
// cached record: it owns s and no block of s is another crawler's. Then no
// host needs resolving to tell.
func (r *Router) ownsAll(s hierarchy.NodeID) bool {
	rec, ok := r.peer.CachedRecord(s)
	return ok && rec.Owner == r.peer.CrawlerID() && len(rec.Blocks) == 0
}

// resolveRaw resolves host without a cache (first address), unmapped: the
// router's resolver before the engine gives it its own.
func (r *Router) resolveRaw(ctx context.Context, host string) (netip.Addr, error) {
	if ip, err := netip.ParseAddr(host); err == nil {
		return ip, nil
	}
	ips, err := r.res.LookupNetIP(ctx, "ip", host)
	if err != nil {
		return netip.Addr{}, err
	}
	if len(ips) == 0 {
		return netip.Addr{}, fmt.Errorf("no address for %s", host)
	}
	return ips[0].Unmap(), nil
}
