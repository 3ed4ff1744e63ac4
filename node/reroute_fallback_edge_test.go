package node

import (
	"context"
	"net"
	"net/netip"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/delegation"
)

// writeLedger writes entries as a re-route that failed before left them.
func writeLedger(t *testing.T, n *Node, owner delegation.CrawlerID, ents ...ledgerEntry) {
	t.Helper()
	wb := n.db.NewWriteBatch()
	for _, e := range ents {
		h := frontier.HashURL(e.url)
		if err := wb.Set(append(ledgerPrefix(owner), h[:]...), e.value()); err != nil {
			t.Fatal(err)
		}
	}
	if err := wb.Flush(); err != nil {
		t.Fatal(err)
	}
}

func ledgerEntries(t *testing.T, n *Node, owner delegation.CrawlerID) map[string]ledgerEntry {
	t.Helper()
	out := map[string]ledgerEntry{}
	err := n.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: ledgerPrefix(owner)})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			v, err := it.Item().ValueCopy(nil)
			if err != nil {
				return err
			}
			e := decodeLedger(it.Item().KeyCopy(nil), v)
			out[e.url] = e
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// The cap: a URL whose host fails its last attempt is queued in this
// crawler's own frontier (the engine resolves it again before fetching and
// hands it to its owner, or reports the failure), not dropped; one that
// fails an earlier attempt waits longer; one in back-off is not looked up.
// rerouteNodeWithEngine is a node with a ledger, a router resolving hosts
// with res whose peer owns nothing, and a crawl engine to queue URLs here.
func rerouteNodeWithEngine(t *testing.T, res fetch.Resolver) (*Node, *crawl.Engine) {
	t.Helper()
	n, _ := handingLedgerNode(t, loopbackTree(t), res)
	eng, err := crawl.New(crawl.Config{DB: n.db, Router: n.router, Receiver: pack.FileSink{Dir: t.TempDir()}, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { eng.Close() })
	n.eng = eng
	return n, eng
}

func TestRerouteUnresolvableQueuedHereAfterLastAttempt(t *testing.T) {
	res := &servfailResolver{addr: netip.MustParseAddr("127.0.1.50")}
	n, eng := rerouteNodeWithEngine(t, res)

	const dead = deadOwner
	past, future := time.Now().Add(-time.Minute), time.Now().Add(time.Hour)
	last := ledgerEntry{url: "http://bad-last.example/p", attempts: rerouteMaxAttempts - 1, next: past}
	again := ledgerEntry{url: "http://bad-again.example/p", attempts: 2, next: past}
	waiting := ledgerEntry{url: "http://bad-waiting.example/p", attempts: 3, next: future}
	writeLedger(t, n, dead, last, again, waiting)

	start := time.Now()
	moved, err := n.reroute(context.Background(), dead)
	if err != nil {
		t.Fatal(err)
	}
	if moved != 1 {
		t.Errorf("moved %d URLs, want 1 (the one past its last attempt)", moved)
	}
	if seen, err := eng.Frontier().Seen(last.url); err != nil || !seen {
		t.Errorf("a URL past its last re-route attempt is not queued here (seen %v, %v): acknowledged by the dead owner, it is crawled by nobody", seen, err)
	}
	left := ledgerEntries(t, n, dead)
	if _, ok := left[last.url]; ok {
		t.Errorf("%s queued here but still in the dead owner's ledger", last.url)
	}
	if e, ok := left[again.url]; !ok || e.attempts != 3 || e.next.Before(start.Add(rerouteBackoff(3)-time.Second)) {
		t.Errorf("%s after a third failure: %+v (in ledger %v), want 3 attempts and its next try %v later", again.url, e, ok, rerouteBackoff(3))
	}
	if e, ok := left[waiting.url]; !ok || e.attempts != 3 || !e.next.Equal(future.Truncate(time.Second)) {
		t.Errorf("%s in back-off: %+v (in ledger %v), want it untouched", waiting.url, e, ok)
	}
	if asked := res.lookups(func(h string) bool { return h == "bad-waiting.example" }); asked != 0 {
		t.Errorf("a URL in back-off was looked up %d times", asked)
	}
}

// nxdomainResolver answers NXDOMAIN for every host (a resolver briefly
// wrong, or a site whose name lapsed).
type nxdomainResolver struct{}

func (nxdomainResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

// Regression (the defect it caught): a re-route dropped every URL whose
// host answered NXDOMAIN, so one passing NXDOMAIN (a resolver misconfigured
// for a minute) lost URLs the dead owner had acknowledged. They are queued
// here: the engine resolves the host again before fetching and reports a
// failure like any fetch — the fate they had at the dead owner.
func TestRerouteNXDOMAINQueuedHereNotDropped(t *testing.T) {
	n, eng := rerouteNodeWithEngine(t, nxdomainResolver{})

	const dead = deadOwner
	e := ledgerEntry{url: "http://lapsed.example/p"}
	writeLedger(t, n, dead, e)
	if _, err := n.reroute(context.Background(), dead); err != nil {
		t.Fatal(err)
	}
	if seen, err := eng.Frontier().Seen(e.url); err != nil || !seen {
		t.Errorf("a URL whose host answered NXDOMAIN is not queued here (seen %v, %v): acknowledged by the dead owner, it is lost", seen, err)
	}
	if left := ledgerEntries(t, n, dead); len(left) != 0 {
		t.Errorf("ledger still holds %v", left)
	}
}
