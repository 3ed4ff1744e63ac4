package node

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"net"
	"net/netip"
	"net/url"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/delegation"
)

// The hand-off ledger: every URL this node handed off, under the owner it
// went to (nh/<owner>\x00<url hash> → URL), in the crawler's Badger store.
// The owner's acknowledgement makes the URL its responsibility; if that
// owner dies, what it had queued dies with it. So when the failure
// detector declares an owner dead and the membership gives its subnets up
// (after the owner grace, with a quorum: overlay.Members.IsLive), the node
// routes the URLs it gave that owner again: the subnets' new owners (re-delegated lazily) queue them,
// and their seen-sets drop those they already have. The price is that pages
// the dead owner had already fetched are fetched again by the new owner.
var pLedger = []byte("nh/")

func ledgerPrefix(owner delegation.CrawlerID) []byte {
	return append(append(append([]byte(nil), pLedger...), owner...), 0)
}

// recordHandoff writes urls under owner in the ledger.
func (n *Node) recordHandoff(owner delegation.CrawlerID, urls []string) error {
	if n.db == nil {
		return nil
	}
	wb := n.db.NewWriteBatch()
	pre := ledgerPrefix(owner)
	for _, u := range urls {
		h := frontier.HashURL(u)
		if err := wb.Set(append(bytes.Clone(pre), h[:]...), []byte(u)); err != nil {
			wb.Cancel()
			return err
		}
	}
	return wb.Flush()
}

// errOwnerUndecided: a re-routed URL whose new owner could not be decided.
var errOwnerUndecided = errors.New("no owner could be decided for its subnet now")

// handoffLedger is the ledger as the overlay's HandoffLedger: the URLs its
// spool delivered to an owner they were not routed to (none could be
// decided then, or the subnet moved meanwhile) are recorded under it too.
type handoffLedger struct{ n *Node }

func (l handoffLedger) Delivered(owner delegation.CrawlerID, urls []string) error {
	return l.n.recordHandoff(owner, urls)
}

// death is an owner the failure detector declared dead, and why
// (overlay.ReasonLeft or ReasonFailed).
type death struct {
	owner  delegation.CrawlerID
	reason string
}

// ledgerSweepEvery: how often the ledger's owners are checked against the
// membership, besides the death events (see sweepLedger).
const ledgerSweepEvery = 5 * time.Minute

// rerouteLoop re-routes the ledger of every owner declared dead once the
// membership gives its subnets up (overlay.Members.IsLive: after the
// owner grace, and only with a quorum), and sweeps the ledger for owners
// that are not live — deaths this node did not see: it was down, or a
// burst of deaths overflowed the event queue. The first sweep waits two
// failure timeouts, so that the membership of a node that just started
// has heard every live member.
func (n *Node) rerouteLoop(ctx context.Context, dead <-chan death) {
	sweep := time.NewTimer(2 * n.cfg.Overlay.FailureTimeout)
	defer sweep.Stop()
	// held: owners declared dead that the membership still holds live
	// (within the grace, or without a quorum), looked at each heartbeat
	held := map[delegation.CrawlerID]string{}
	check := time.NewTicker(n.cfg.Overlay.HeartbeatInterval)
	defer check.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			n.sweepLedger(ctx)
			sweep.Reset(ledgerSweepEvery)
		case d := <-dead:
			held[d.owner] = "declared dead: " + d.reason
		case <-check.C:
			for owner, why := range held {
				if ctx.Err() != nil {
					return
				}
				switch m := n.peer.Members(); {
				case m.Held(owner):
					continue // its grace, or no quorum: its URLs wait
				case m.IsLive(owner):
					delete(held, owner) // back: its ledger stands
				default:
					delete(held, owner)
					n.rerouteOwner(ctx, owner, why)
				}
			}
		}
	}
}

// rerouteOwner re-routes owner's ledger, counts and logs it; why says how
// the owner was found gone.
func (n *Node) rerouteOwner(ctx context.Context, owner delegation.CrawlerID, why string) {
	start := time.Now()
	moved, err := n.reroute(ctx, owner)
	if err != nil {
		n.log.Warn("re-routing the URLs handed to a gone owner", "owner", owner, "why", why, "urls", moved, "err", err)
		return
	}
	n.rerouted.Add(float64(moved))
	n.log.Info("URLs handed to a gone owner re-routed", "owner", owner, "why", why, "urls", moved, "took", time.Since(start))
}

// sweepLedger re-routes the ledger of every owner the membership does not
// hold live.
func (n *Node) sweepLedger(ctx context.Context) {
	owners, err := n.ledgerOwners()
	if err != nil {
		n.log.Warn("hand-off ledger sweep", "err", err)
		return
	}
	for _, owner := range owners {
		if ctx.Err() != nil || n.peer.Members().IsLive(owner) {
			continue
		}
		n.rerouteOwner(ctx, owner, "not live at the ledger sweep")
	}
}

// ledgerOwners lists the owners the ledger holds URLs for, one key read
// per owner (the iterator seeks past each owner's entries).
func (n *Node) ledgerOwners() ([]delegation.CrawlerID, error) {
	if n.db == nil {
		return nil, nil
	}
	var owners []delegation.CrawlerID
	err := n.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pLedger})
		defer it.Close()
		for it.Rewind(); it.Valid(); {
			rest := it.Item().Key()[len(pLedger):]
			i := bytes.IndexByte(rest, 0)
			if i < 0 { // not a ledger key of ours: skip it
				it.Next()
				continue
			}
			owner := delegation.CrawlerID(rest[:i])
			owners = append(owners, owner)
			// past every key of this owner: prefix, owner, then 0x01
			it.Seek(append(append(bytes.Clone(pLedger), owner...), 1))
		}
		return nil
	})
	return owners, err
}

// Re-routing a URL needs its host's address. A lookup that says the host
// does not exist (NXDOMAIN) queues the URL here at once (the fallback
// below). A lookup that fails otherwise (SERVFAIL, a timeout, a resolver
// down) leaves the URL in the ledger, to be tried again with back-off: its
// attempts and the time of its next try are kept in its ledger value. After
// rerouteMaxAttempts failures (about 2.5 hours of sweeps) the URL is queued
// in this crawler's own frontier — the hand-off fallback: this crawler is
// live and its frontier durable, and the engine, before fetching a queued
// URL, resolves its host and hands it to its owner if that is another
// crawler (Router.Route), or fetches it here and reports the DNS failure
// like any other. So a URL a dead owner had acknowledged is never dropped
// for a failing resolver, and a sweep is never held by such URLs: it walks
// the whole ledger of the owner, so failing entries at its head cannot
// stop the rest.
const (
	rerouteMaxAttempts = 6
	// rerouteChunk is how many ledger entries one pass reads and writes.
	rerouteChunk = 1024
	// rerouteLookups is how many host lookups a re-route runs at once, and
	// rerouteLookupTimeout how long each may take.
	rerouteLookups       = 8
	rerouteLookupTimeout = 15 * time.Second
)

// rerouteBackoff is the wait after a URL's attempts-th failed lookup: one
// sweep interval, doubling (5, 10, 20, 40, 80 min).
func rerouteBackoff(attempts int) time.Duration {
	return ledgerSweepEvery << min(max(attempts-1, 0), 10)
}

// ledgerRetry marks a ledger value that carries a re-route's attempts: 0,
// the attempts (1 byte), the next try (Unix seconds, 8 bytes big-endian),
// the URL. recordHandoff writes the bare URL (no URL starts with 0).
const ledgerRetry = 0

type ledgerEntry struct {
	key      []byte
	url      string
	attempts int
	next     time.Time // zero: due now
}

// due reports whether e is to be tried at now. A next try further ahead
// than the longest back-off was written under a clock since corrected (set
// ahead, then fixed by NTP): it is due now rather than at that wrong date.
func (e ledgerEntry) due(now time.Time) bool {
	return e.next.IsZero() || !now.Before(e.next) || e.next.Sub(now) > rerouteBackoff(rerouteMaxAttempts-1)
}

func decodeLedger(key, v []byte) ledgerEntry {
	e := ledgerEntry{key: key}
	if len(v) >= 10 && v[0] == ledgerRetry {
		e.attempts = int(v[1])
		e.next = time.Unix(int64(binary.BigEndian.Uint64(v[2:10])), 0)
		e.url = string(v[10:])
		return e
	}
	e.url = string(v)
	return e
}

func (e ledgerEntry) value() []byte {
	if e.attempts == 0 {
		return []byte(e.url)
	}
	v := make([]byte, 10, 10+len(e.url))
	v[0], v[1] = ledgerRetry, byte(min(e.attempts, 255))
	binary.BigEndian.PutUint64(v[2:10], uint64(e.next.Unix()))
	return append(v, e.url...)
}

// reroute routes the ledger of owner again, in chunks; each chunk leaves
// the ledger only once it is queued here or spooled for its new owner. It
// walks the whole ledger once: URLs whose host cannot be resolved now stay
// (with back-off, see rerouteMaxAttempts) and do not stop the walk.
func (n *Node) reroute(ctx context.Context, owner delegation.CrawlerID) (int, error) {
	pre := ledgerPrefix(owner)
	from := pre
	moved := 0
	var st rerouteStats
	defer st.log(n, owner)
	for {
		var ents []ledgerEntry
		err := n.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pre, PrefetchValues: true})
			defer it.Close()
			for it.Seek(from); it.Valid() && len(ents) < rerouteChunk; it.Next() {
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				ents = append(ents, decodeLedger(it.Item().KeyCopy(nil), v))
			}
			return nil
		})
		if err != nil || len(ents) == 0 {
			return moved, err
		}
		from = append(bytes.Clone(ents[len(ents)-1].key), 0) // the next pass starts past this chunk
		if n.peer != nil && n.peer.Members().IsLive(owner) {
			return moved, nil // back (a heartbeat, a restart): its ledger stands
		}
		now := time.Now()
		urls := make([]*url.URL, len(ents))
		addrs := n.resolveLedger(ctx, ents, urls, now)
		if ctx.Err() != nil {
			return moved, ctx.Err() // (shutting down: the chunk stays)
		}
		var own, fallback []string
		var done [][]byte       // the keys of the URLs dealt with, to delete
		var retry []ledgerEntry // URLs kept, with one more attempt counted
		back := false
		// failed counts a failed attempt at e (a lookup that did not say
		// NXDOMAIN, an ownership check or a hand-off that failed for this
		// URL alone): kept with back-off, or queued here after the last
		// attempt — one URL never holds the rest of the ledger
		failed := func(e ledgerEntry, err error) {
			e.attempts++
			if e.attempts >= rerouteMaxAttempts {
				// the fallback: queued here, never dropped (see rerouteMaxAttempts)
				fallback = append(fallback, e.url)
				done = append(done, e.key)
				st.fallback.add(e.url, err)
				return
			}
			e.next = now.Add(rerouteBackoff(e.attempts))
			retry = append(retry, e)
			st.kept.add(e.url, err)
		}
		var foreignEnts []ledgerEntry
		var foreignRoutes []crawl.Route
		var foreignDone []bool // whether the key goes once handed off
		for i, e := range ents {
			if !e.due(now) {
				st.waiting++
				continue
			}
			if urls[i] == nil {
				n.log.Warn("re-route: ledger entry is not a URL; dropped", "key", string(e.key), "value", e.url)
				done = append(done, e.key)
				continue
			}
			r := addrs[urls[i].Hostname()]
			if r.err != nil {
				var de *net.DNSError
				if errors.As(r.err, &de) && de.IsNotFound {
					// queued here, not dropped: a passing NXDOMAIN (a
					// resolver wrong for a minute) would lose URLs the
					// dead owner acknowledged; the engine resolves the
					// host again and reports a failure like any fetch
					fallback = append(fallback, e.url)
					done = append(done, e.key)
					st.fallback.add(e.url, r.err)
					continue
				}
				failed(e, r.err)
				continue
			}
			rt, err := n.router.Route(ctx, urls[i], r.a)
			if err == nil && !rt.Mine && rt.Owner == "" {
				// no owner could be decided (the route is to the spool): a
				// failed attempt, as a failed lookup, so the entry stays
				// with its back-off and, in the end, the fallback here
				err = errOwnerUndecided
			}
			if err != nil {
				if ctx.Err() != nil {
					return moved, ctx.Err() // (shutting down: the chunk stays)
				}
				failed(e, err)
				continue
			}
			switch {
			case rt.Mine:
				own = append(own, e.url)
				done = append(done, e.key)
			default:
				// Handoff writes this very ledger key again when the
				// owner is this one, back: keep it
				foreignEnts = append(foreignEnts, e)
				foreignRoutes = append(foreignRoutes, rt)
				foreignDone = append(foreignDone, delegation.CrawlerID(rt.Owner) != owner)
			}
		}
		if len(foreignEnts) > 0 {
			// one hand-off for the chunk; if it fails, one per URL, so a
			// URL that cannot be handed off (its host now outside the
			// hierarchy, its subnet's lookup failing) fails alone
			foreign := make([]crawl.Routed, len(foreignEnts))
			for i, e := range foreignEnts {
				foreign[i] = crawl.Routed{URL: e.url, Route: foreignRoutes[i]}
			}
			err := n.router.Handoff(ctx, foreign)
			for i, e := range foreignEnts {
				if err != nil {
					if ctx.Err() != nil {
						return moved, ctx.Err()
					}
					if err1 := n.router.Handoff(ctx, foreign[i:i+1]); err1 != nil {
						if ctx.Err() != nil {
							return moved, ctx.Err()
						}
						failed(e, err1)
						continue
					}
				}
				moved++
				if foreignDone[i] {
					done = append(done, e.key)
				} else {
					back = true
				}
			}
		}
		if len(own)+len(fallback) > 0 {
			if n.eng == nil {
				return moved, errors.New("node: re-route: no crawl engine to queue URLs here")
			}
			if err := n.eng.Accept(ctx, append(own, fallback...)); err != nil {
				return moved, err
			}
		}
		wb := n.db.NewWriteBatch()
		for _, k := range done {
			if err := wb.Delete(k); err != nil {
				wb.Cancel()
				return moved, err
			}
		}
		for _, e := range retry {
			if err := wb.Set(e.key, e.value()); err != nil {
				wb.Cancel()
				return moved, err
			}
		}
		if err := wb.Flush(); err != nil {
			return moved, err
		}
		moved += len(own) + len(fallback)
		if back {
			// the owner is live again: the rest of its ledger stands
			return moved, nil
		}
	}
}

type hostAddr struct {
	a   netip.Addr
	err error
}

// resolveLedger resolves, once per host and rerouteLookups at a time, the
// hosts of the entries that are due at now; it parses their URLs into urls
// (nil: not a URL).
func (n *Node) resolveLedger(ctx context.Context, ents []ledgerEntry, urls []*url.URL, now time.Time) map[string]hostAddr {
	hosts := map[string]hostAddr{}
	var names []string
	for i, e := range ents {
		if !e.due(now) {
			continue
		}
		u, err := url.Parse(e.url)
		if err != nil {
			continue
		}
		urls[i] = u
		if _, ok := hosts[u.Hostname()]; !ok {
			hosts[u.Hostname()] = hostAddr{}
			names = append(names, u.Hostname())
		}
	}
	var mu sync.Mutex
	var wg sync.WaitGroup
	sem := make(chan struct{}, rerouteLookups)
	for _, h := range names {
		sem <- struct{}{}
		wg.Go(func() {
			defer func() { <-sem }()
			lctx, cancel := context.WithTimeout(ctx, rerouteLookupTimeout)
			defer cancel()
			a, err := n.router.lookup(lctx, h)
			mu.Lock()
			hosts[h] = hostAddr{a, err}
			mu.Unlock()
		})
	}
	wg.Wait()
	return hosts
}

// rerouteStats sums up a re-route's URLs that could not go now, for a log
// line per kind rather than one per URL.
type rerouteStats struct {
	waiting  int      // in back-off, not tried
	kept     failNote // failed now, kept for a later sweep
	fallback failNote // failed for the last time, queued here
}

type failNote struct {
	n       int
	example string // the first URL that failed, and why
	err     error
}

func (f *failNote) add(u string, err error) {
	if f.n++; f.n == 1 {
		f.example, f.err = u, err
	}
}

func (st *rerouteStats) log(n *Node, owner delegation.CrawlerID) {
	if k := st.kept; k.n > 0 {
		n.log.Warn("re-route: hosts not resolvable now; URLs kept for a later sweep", "owner", owner,
			"urls", k.n, "example", k.example, "err", k.err)
	}
	if f := st.fallback; f.n > 0 {
		n.log.Warn("re-route: hosts still not resolvable after the last attempt; URLs queued here (the fetch resolves them again and hands them to their owner, or reports the failure)",
			"owner", owner, "urls", f.n, "attempts", rerouteMaxAttempts, "example", f.example, "err", f.err)
	}
	if st.waiting > 0 {
		n.log.Debug("re-route: URLs waiting for their next try", "owner", owner, "urls", st.waiting)
	}
}
