package node

// The whole-ledger re-route: regressions found by a review of 9fabde7. Each
// comment above a test describes the defect it caught.

import (
	"context"
	"fmt"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// movedResolver answers moved.example with an address outside the
// hierarchy (the site moved to a network the hierarchy does not cover), every
// other host with a loopback address inside it.
type movedResolver struct{}

func (movedResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if host == "moved.example" {
		return []netip.Addr{netip.MustParseAddr("10.1.2.3")}, nil
	}
	return []netip.Addr{netip.MustParseAddr("127.0.1.50")}, nil
}

// 9fabde7 makes one re-route walk the whole ledger so that URLs that cannot
// go now do not hold back those behind them. But a URL that resolves and
// then cannot be handed off — Router.Handoff refuses an address outside the
// hierarchy (Delegate hashes it to another crawler), or Owns fails for its
// host — makes reroute return an error for the whole chunk: no key of the
// chunk is deleted, the chunks after it are never read, and every sweep
// stops at the same place. One such URL stops the dead owner's ledger for
// good: the head-of-line blocking the commit set out to remove.
func TestRerouteOneUnhandableURLDoesNotBlockLedger(t *testing.T) {
	tree := loopbackTree(t)
	if s := tree.SmallestNonUnary(netip.MustParseAddr("10.1.2.3")); s != hierarchy.None && s != hierarchy.Root {
		t.Fatalf("test premise: 10.1.2.3 is in subnet %d of the test hierarchy", s)
	}
	n, own := handingLedgerNode(t, tree, movedResolver{})
	const dead = deadOwner
	var good []string
	for i := range 3000 {
		good = append(good, fmt.Sprintf("http://h%d.example/p", i))
	}
	if err := n.recordHandoff(dead, append([]string{"http://moved.example/p"}, good...)); err != nil {
		t.Fatal(err)
	}
	var errs []error
	const sweeps = 3
	for range sweeps {
		if _, err := n.reroute(context.Background(), dead); err != nil {
			errs = append(errs, err)
		}
	}
	own.mu.Lock()
	handed := slices.Clone(own.handed)
	own.mu.Unlock()
	if len(handed) != len(good) {
		t.Fatalf("after %d sweeps %d of %d resolvable URLs re-routed (%d left in the ledger) behind one URL whose host now lies outside the hierarchy; reroute errors: %v",
			sweeps, len(handed), len(good), ledgerURLCount(t, n, dead), errs)
	}
}

// The next try is kept as a wall-clock time (Unix seconds) and compared with
// the wall clock only. A back-off is at most rerouteBackoff(5) = 80 min, so
// a next try further ahead than that can only come from a clock that was
// wrong when it was written (set ahead, then corrected by NTP): such a URL
// then waits until the wrong date — here a year — before it is looked up
// again, and is neither re-routed nor queued here meanwhile.
func TestRerouteBackoffBoundedAfterClockCorrection(t *testing.T) {
	n, own := handingLedgerNode(t, loopbackTree(t), movedResolver{})
	const dead = deadOwner
	// written by a sweep while the clock read a year ahead: 1 attempt, next
	// try 5 min after that wrong "now"
	e := ledgerEntry{url: "http://h1.example/p", attempts: 1, next: time.Now().AddDate(1, 0, 0).Add(rerouteBackoff(1))}
	writeLedger(t, n, dead, e)
	if _, err := n.reroute(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	own.mu.Lock()
	handed := len(own.handed)
	own.mu.Unlock()
	if handed != 1 {
		left := ledgerEntries(t, n, dead)[e.url]
		t.Fatalf("a URL whose next try lies %v ahead (more than the longest back-off, %v) is not tried: it waits until %v (attempts %d)",
			time.Until(left.next).Round(time.Hour), rerouteBackoff(rerouteMaxAttempts-1), left.next.Format(time.DateOnly), left.attempts)
	}
}
