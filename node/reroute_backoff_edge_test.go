package node

import (
	"bytes"
	"context"
	"fmt"
	"net"
	"net/netip"
	"slices"
	"strings"
	"sync"
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// servfailResolver answers hosts named bad* with a failure that is not
// NXDOMAIN (SERVFAIL, for ever), others with addr; it counts lookups per
// host.
type servfailResolver struct {
	addr netip.Addr
	mu   sync.Mutex
	asks map[string]int
}

func (r *servfailResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	r.mu.Lock()
	if r.asks == nil {
		r.asks = map[string]int{}
	}
	r.asks[host]++
	r.mu.Unlock()
	if strings.HasPrefix(host, "bad") {
		return nil, &net.DNSError{Err: "server misbehaving", Name: host, IsTemporary: true}
	}
	return []netip.Addr{r.addr}, nil
}

func (r *servfailResolver) lookups(match func(host string) bool) int {
	r.mu.Lock()
	defer r.mu.Unlock()
	n := 0
	for h, c := range r.asks {
		if match(h) {
			n += c
		}
	}
	return n
}

// handingOwner owns nothing: every address is "other"'s; it counts the URLs
// handed off.
type handingOwner struct {
	*timingOwner
	mu     sync.Mutex
	handed []string
}

func (o *handingOwner) Delegate(_ context.Context, ip netip.Addr) (delegation.Decision, error) {
	return delegation.Decision{IP: ip, Subnet: o.subnet(ip), Owner: "other", Cached: true, Reason: delegation.ReasonCached}, nil
}
func (o *handingOwner) CachedOwner(netip.Addr) (delegation.CrawlerID, bool) { return "other", true }
func (o *handingOwner) HandoffAll(_ context.Context, items []overlay.HandoffItem) error {
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, it := range items {
		o.handed = append(o.handed, it.URLs...)
	}
	return nil
}

// deadOwner is the crawler whose ledger the re-route tests walk.
const deadOwner = delegation.CrawlerID("12D3KooWDeadOwner")

// handingLedgerNode is a node with a ledger and a router over tree that
// resolves hosts with res, whose peer owns nothing (handingOwner).
func handingLedgerNode(t *testing.T, tree *hierarchy.Tree, res fetch.Resolver) (*Node, *handingOwner) {
	t.Helper()
	r, err := newRouter(tree, nil, res, delegation.Config{}, quiet, prometheus.NewRegistry())
	if err != nil {
		t.Fatal(err)
	}
	own := &handingOwner{timingOwner: &timingOwner{tree: tree}}
	r.peer = own
	return ledgerOnlyNode(t, r), own
}

// A re-route kept the URLs whose host could not be resolved for now and
// stopped, to start again from the head of the owner's ledger at the next
// sweep; each pass read the first 1024 entries. With 1024 or more URLs at
// the head whose lookups fail for good without an NXDOMAIN (SERVFAIL,
// timeouts), every sweep read the same 1024, kept them all and stopped:
// the URLs after them were never re-routed, and the dead owner's ledger
// stopped moving.
func TestRerouteProgressesPastUnresolvableHead(t *testing.T) {
	res := &servfailResolver{addr: netip.MustParseAddr("127.0.1.50")}
	n, own := handingLedgerNode(t, loopbackTree(t), res)
	const dead = deadOwner

	// 1500 URLs that never resolve; the resolvable ones all sort after the
	// first 1100 of them in the ledger (keys are URL hashes)
	var bad []frontier.Hash
	var badURLs []string
	for i := range 1500 {
		u := fmt.Sprintf("http://bad%d.example/p", i)
		badURLs = append(badURLs, u)
		bad = append(bad, frontier.HashURL(u))
	}
	slices.SortFunc(bad, func(a, b frontier.Hash) int { return bytes.Compare(a[:], b[:]) })
	head := bad[1100]
	var good []string
	for i := 0; len(good) < 40; i++ {
		u := fmt.Sprintf("http://good%d.example/p", i)
		if h := frontier.HashURL(u); bytes.Compare(h[:], head[:]) > 0 {
			good = append(good, u)
		}
	}
	if err := n.recordHandoff(dead, append(slices.Clone(badURLs), good...)); err != nil {
		t.Fatal(err)
	}

	const sweeps = 3
	for range sweeps {
		if _, err := n.reroute(context.Background(), dead); err != nil {
			t.Fatal(err)
		}
	}
	own.mu.Lock()
	handed := slices.Clone(own.handed)
	own.mu.Unlock()
	slices.Sort(handed)
	slices.Sort(good)
	if !slices.Equal(handed, good) {
		t.Fatalf("after %d sweeps %d of the %d resolvable URLs re-routed, behind %d URLs whose hosts never resolve: the dead owner's ledger does not move",
			sweeps, len(handed), len(good), len(badURLs))
	}
	if left := ledgerURLCount(t, n, dead); left != len(badURLs) {
		t.Errorf("%d URLs left in the dead owner's ledger, want the %d unresolvable ones (kept, not dropped)", left, len(badURLs))
	}
	// they are in back-off: each host was asked once, by the first sweep
	if asked := res.lookups(func(h string) bool { return strings.HasPrefix(h, "bad") }); asked != len(badURLs) {
		t.Errorf("%d lookups of the %d failing hosts over %d sweeps; want one each (then back-off)", asked, len(badURLs), sweeps)
	}
}
