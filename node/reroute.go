package node

import (
	"bytes"
	"context"
	"errors"
	"net"
	"net/url"
	"time"

	"github.com/dgraph-io/badger/v4"

	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/delegation"
)

// The hand-off ledger: every URL this node handed off, under the owner it
// went to (nh/<owner>\x00<url hash> → URL), in the crawler's Badger store.
// The owner's acknowledgement makes the URL its responsibility; if that
// owner dies, what it had queued dies with it. So when the failure
// detector declares an owner dead, the node routes the URLs it gave that
// owner again: the subnets' new owners (re-delegated lazily) queue them,
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

// ledgerSweepEvery: how often the ledger's owners are checked against the
// membership, besides the death events (see sweepLedger).
const ledgerSweepEvery = 5 * time.Minute

// rerouteLoop re-routes the ledger of every owner declared dead, and
// sweeps the ledger for owners that are not live — deaths this node did
// not see: it was down, or a burst of deaths overflowed the event queue.
// The first sweep waits two failure timeouts, so that the membership of a
// node that just started has heard every live member.
func (n *Node) rerouteLoop(ctx context.Context, dead <-chan delegation.CrawlerID) {
	sweep := time.NewTimer(2 * n.cfg.Overlay.FailureTimeout)
	defer sweep.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-sweep.C:
			n.sweepLedger(ctx)
			sweep.Reset(ledgerSweepEvery)
		case owner := <-dead:
			// Let the failure detector settle everywhere before re-delegating
			// (every peer declares the death within about one heartbeat).
			select {
			case <-ctx.Done():
				return
			case <-time.After(n.cfg.Overlay.HeartbeatInterval):
			}
			n.rerouteOwner(ctx, owner, "declared dead")
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

// reroute routes the ledger of owner again, in chunks; each chunk leaves
// the ledger only once it is queued here or spooled for its new owner.
func (n *Node) reroute(ctx context.Context, owner delegation.CrawlerID) (int, error) {
	pre := ledgerPrefix(owner)
	moved := 0
	for {
		var keys [][]byte
		var urls []string
		err := n.db.View(func(txn *badger.Txn) error {
			it := txn.NewIterator(badger.IteratorOptions{Prefix: pre, PrefetchValues: true})
			defer it.Close()
			for it.Rewind(); it.Valid() && len(keys) < 1024; it.Next() {
				v, err := it.Item().ValueCopy(nil)
				if err != nil {
					return err
				}
				keys = append(keys, it.Item().KeyCopy(nil))
				urls = append(urls, string(v))
			}
			return nil
		})
		if err != nil || len(keys) == 0 {
			return moved, err
		}
		if n.peer != nil && n.peer.Members().IsLive(owner) {
			return moved, nil // back (a heartbeat, a restart): its ledger stands
		}
		var own, foreign []string
		var done [][]byte // the keys of the URLs dealt with, to delete
		kept, back := 0, false
		for i, s := range urls {
			u, err := url.Parse(s)
			if err != nil {
				done = append(done, keys[i])
				continue
			}
			a, err := n.router.addrOf(ctx, u.Hostname())
			if err != nil {
				if ctx.Err() != nil {
					return moved, ctx.Err() // (shutting down: the chunk stays)
				}
				var de *net.DNSError
				if errors.As(err, &de) && de.IsNotFound {
					n.log.Warn("re-route: host does not exist; URL dropped", "url", s, "err", err)
					done = append(done, keys[i])
					continue
				}
				// a passing failure: the URL stays in the ledger for the
				// next sweep
				n.log.Warn("re-route: no address now; URL kept for the next sweep", "url", s, "err", err)
				kept++
				continue
			}
			mine, err := n.router.Owns(ctx, u, a)
			if err != nil {
				return moved, err
			}
			switch {
			case mine:
				own = append(own, s)
				done = append(done, keys[i])
			default:
				foreign = append(foreign, s)
				if o, ok := n.router.peer.CachedOwner(a); ok && o == owner {
					back = true // Handoff writes this very ledger key again: keep it
				} else {
					done = append(done, keys[i])
				}
			}
		}
		if len(own) > 0 {
			if err := n.eng.Accept(ctx, own); err != nil {
				return moved, err
			}
		}
		if len(foreign) > 0 {
			if err := n.router.Handoff(ctx, foreign); err != nil {
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
		if err := wb.Flush(); err != nil {
			return moved, err
		}
		moved += len(own) + len(foreign)
		if kept > 0 || back {
			// keys left under the prefix would be read again at once: the
			// rest waits for the next sweep (or stands, the owner being back)
			return moved, nil
		}
	}
}
