package node

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"net/url"
	"testing"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay"
)

// ledgerOnlyNode is a Node with only what reroute touches: the store (the
// ledger) and a router over a fake owner. No engine: the tests route no URL
// to this crawler itself.
func ledgerOnlyNode(t *testing.T, r *Router) *Node {
	t.Helper()
	db, err := frontier.OpenDB(t.TempDir(), frontier.DBOptions{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { db.Close() })
	n := &Node{db: db, router: r, log: quiet}
	r.ledger = n.recordHandoff
	return n
}

// ledgerURLCount counts the ledger entries held for owner.
func ledgerURLCount(t *testing.T, n *Node, owner delegation.CrawlerID) int {
	t.Helper()
	pre := ledgerPrefix(owner)
	c := 0
	err := n.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: pre})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			if bytes.HasPrefix(it.Item().Key(), pre) {
				c++
			}
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// ctxResolver resolves every host to one address, and — like
// net.Resolver — fails once its context is done.
type ctxResolver struct{ a netip.Addr }

func (r ctxResolver) LookupNetIP(ctx context.Context, _, _ string) ([]netip.Addr, error) {
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("lookup: %w", err)
	}
	return []netip.Addr{r.a}, nil
}

// TestRerouteInterruptedKeepsLedger: the node stops (Run's context ends)
// while the ledger of a dead owner is being re-routed. Every host that is
// not in the router's in-memory host map (all of them after a restart, when
// the sweep re-routes) now fails to resolve; reroute logs "URL dropped",
// deletes the chunk's ledger keys anyway and goes on to the next chunk, so
// the whole ledger of the dead owner is erased and nothing was re-routed:
// the URLs it had acknowledged are crawled by nobody. A transient DNS
// failure does the same to the URLs it hits.
func TestRerouteInterruptedKeepsLedger(t *testing.T) {
	r, err := newRouter(loopbackTree(t), nil, ctxResolver{netip.MustParseAddr("127.0.0.9")}, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	r.peer = &timingOwner{tree: r.tree}
	n := ledgerOnlyNode(t, r)
	const dead = delegation.CrawlerID("12D3KooWDeadOwner")
	var urls []string
	for i := range 2500 {
		urls = append(urls, fmt.Sprintf("http://h%d.example/p", i))
	}
	if err := n.recordHandoff(dead, urls); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	cancel() // the node is shutting down mid-reroute
	moved, err := n.reroute(ctx, dead)
	if left := ledgerURLCount(t, n, dead); left != len(urls) {
		t.Fatalf("reroute interrupted by shutdown (moved %d, err %v): %d of %d URLs handed to the dead owner left in the ledger; the rest are lost for good",
			moved, err, left, len(urls))
	}
}

// revivedOwner: the owner declared dead is live again (a later heartbeat
// revived it, or it restarted with its identity and its frontier): the
// cached record names it and Delegate answers it.
type revivedOwner struct {
	*timingOwner
	owner  delegation.CrawlerID
	handed int
}

func (o *revivedOwner) Delegate(_ context.Context, ip netip.Addr) (delegation.Decision, error) {
	return delegation.Decision{IP: ip, Subnet: o.subnet(ip), Owner: o.owner, Cached: true, Reason: delegation.ReasonCached}, nil
}
func (o *revivedOwner) CachedOwner(netip.Addr) (delegation.CrawlerID, bool) { return o.owner, true }
func (o *revivedOwner) HandoffAll(_ context.Context, items []overlay.HandoffItem) error {
	for _, it := range items {
		o.handed += len(it.URLs)
	}
	return nil
}

// TestRerouteToSameOwnerKeepsLedger: the death event of owner A is
// followed one heartbeat later by the re-route, with no liveness check; if
// A is live again by then (or revives during a long re-route), its URLs are
// routed to A again: Router.Handoff writes their ledger entries under A —
// the very keys being re-routed — and reroute then deletes those keys. The
// URLs sit at A with no ledger entry: when A dies for good, they are not
// re-routed and nobody crawls them (an owner dying twice loses them).
func TestRerouteToSameOwnerKeepsLedger(t *testing.T) {
	r, err := newRouter(loopbackTree(t), nil, mapResolver{}, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	const a = delegation.CrawlerID("12D3KooWOwnerA")
	own := &revivedOwner{timingOwner: &timingOwner{tree: r.tree}, owner: a}
	r.peer = own
	n := ledgerOnlyNode(t, r)
	var urls []string
	for i := range 10 {
		urls = append(urls, fmt.Sprintf("http://127.0.0.%d/p", 10+i))
	}
	if err := n.recordHandoff(a, urls); err != nil {
		t.Fatal(err)
	}
	moved, err := n.reroute(context.Background(), a)
	if err != nil {
		t.Fatal(err)
	}
	if own.handed != len(urls) {
		t.Fatalf("handed %d URLs to A again, want %d", own.handed, len(urls))
	}
	if left := ledgerURLCount(t, n, a); left != len(urls) {
		t.Fatalf("re-route moved %d URLs back to the same owner A, but only %d of %d remain in A's ledger: if A dies again they are lost",
			moved, left, len(urls))
	}
}

// undecidedOwner: the overlay decides no owner (Delegate fails with err)
// and spools what it is handed.
type undecidedOwner struct {
	*timingOwner
	err     error
	spooled []overlay.HandoffItem
}

func (o *undecidedOwner) Delegate(context.Context, netip.Addr) (delegation.Decision, error) {
	return delegation.Decision{}, o.err
}
func (o *undecidedOwner) HandoffAll(_ context.Context, items []overlay.HandoffItem) error {
	o.spooled = append(o.spooled, items...)
	return nil
}

// A URL whose owner cannot be decided now is routed to no owner and waits
// in the hand-off spool, written in no ledger: whether nobody may delegate
// its subnet (no quorum: the other side of a partition might delegate it
// elsewhere) or a decision failed (a lookup or a publish refused while
// load balancing moves the subnet). Before, a failed route either had the
// page that linked the URL fetched again or, for any error but a deadline,
// dropped the link: pages never crawled.
func TestUndecidedOwnerRoutesToTheSpool(t *testing.T) {
	for _, err := range []error{
		fmt.Errorf("lookup: %w", overlay.ErrNoQuorum),
		errors.New("delegation: publish subnet 9: record refused: a newer epoch is held"),
		fmt.Errorf("delegation: lookup subnet 9: %w", context.DeadlineExceeded),
	} {
		t.Run(err.Error(), func(t *testing.T) {
			reg := prometheus.NewRegistry()
			r, rerr := newRouter(loopbackTree(t), nil, mapResolver{}, delegation.Config{}, quiet, reg)
			if rerr != nil {
				t.Fatal(rerr)
			}
			o := &undecidedOwner{timingOwner: &timingOwner{tree: r.tree}, err: err}
			r.peer = o
			ledgered := 0
			r.ledger = func(delegation.CrawlerID, []string) error { ledgered++; return nil }
			u, _ := url.Parse("http://h1.example/p")
			ip := netip.MustParseAddr("127.0.0.9")
			rt, rerr := r.Route(context.Background(), u, ip)
			if rerr != nil {
				t.Fatalf("route without an owner: %v, want a route to the spool", rerr)
			}
			if rt.Mine || rt.Owner != "" || rt.Subnet != uint32(r.tree.SmallestNonUnary(ip)) {
				t.Fatalf("route %+v: want no owner, not mine, in the address's subnet", rt)
			}
			if n := counterOf(t, r.undecided); n != 1 {
				t.Fatalf("micra_node_urls_undecided_total %v, want 1", n)
			}
			if rerr := r.Handoff(context.Background(), []crawl.Routed{{URL: u.String(), Route: rt}}); rerr != nil {
				t.Fatal(rerr)
			}
			if len(o.spooled) != 1 || o.spooled[0].Owner != "" || len(o.spooled[0].URLs) != 1 || ledgered != 0 {
				t.Fatalf("spooled %+v, %d ledger writes: want the URL spooled with no owner, no ledger entry", o.spooled, ledgered)
			}
		})
	}
}

// TestRerouteUndecidedOwnerKeepsLedger: when no new owner can be decided
// for a dead owner's URLs, the re-route counts a failed attempt and keeps
// their ledger entries (back-off, then the fallback here), as for a failed
// lookup; it does not spool them without an owner and drop the entries.
func TestRerouteUndecidedOwnerKeepsLedger(t *testing.T) {
	r, err := newRouter(loopbackTree(t), nil, mapResolver{}, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	o := &undecidedOwner{timingOwner: &timingOwner{tree: r.tree}, err: errors.New("delegation: publish subnet 9: refused")}
	r.peer = o
	n := ledgerOnlyNode(t, r)
	const a = delegation.CrawlerID("12D3KooWOwnerA")
	var urls []string
	for i := range 5 {
		urls = append(urls, fmt.Sprintf("http://127.0.0.%d/p", 10+i))
	}
	if err := n.recordHandoff(a, urls); err != nil {
		t.Fatal(err)
	}
	if _, err := n.reroute(context.Background(), a); err != nil {
		t.Fatal(err)
	}
	if left := ledgerURLCount(t, n, a); left != len(urls) || len(o.spooled) != 0 {
		t.Fatalf("%d of %d ledger entries left, %d items spooled: want every entry kept for the next attempt, nothing spooled",
			left, len(urls), len(o.spooled))
	}
}

// The overlay's spool tells the ledger of URLs an owner acknowledged that
// were spooled for no owner or another one (overlay.HandoffLedger): they
// are recorded under that owner, to be routed again if it dies.
func TestHandoffLedgerRecordsDeliveries(t *testing.T) {
	r, err := newRouter(loopbackTree(t), nil, mapResolver{}, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	n := ledgerOnlyNode(t, r)
	var l overlay.HandoffLedger = handoffLedger{n}
	const b = delegation.CrawlerID("12D3KooWOwnerB")
	if err := l.Delivered(b, []string{"http://127.0.0.9/a", "http://127.0.0.9/b"}); err != nil {
		t.Fatal(err)
	}
	if got := ledgerURLCount(t, n, b); got != 2 {
		t.Fatalf("%d ledger entries under the owner that acknowledged, want 2", got)
	}
}
