package node

import (
	"context"
	"fmt"
	"time"
)

// SeedWait is when a node given seeds routes them: once the membership has
// formed. Routing a seed delegates its subnet over the crawlers this node
// knows at that moment, and IPMicra asks only the crawlers that hold a
// subnet already; a node that routes before the others are known and have
// joined owns every subnet, fetches, and then hands hosts over as the
// others join — robots.txt and pages fetched twice (2–3× per
// host, 1.7 % of pages, on a testnet).
//
// The membership has formed when every condition holds:
//   - with bootstrap peers, another member has been heard (the node is in
//     a network, not alone);
//   - Members > 0: at least Members members are live, this node included
//     (a testnet or a script that knows its size); Members 0: no member
//     joined for Quiet (everyone already running has heartbeated by then);
//   - no live crawler is still to publish its own subnet (its heartbeats
//     state a crawler address and no subnet held: IPMicra would not ask it);
//   - the DHT routing table holds the live members (up to one k-bucket),
//     so decisions read and publish among all of them.
//
// Max bounds the wait: the seeds are then routed over the membership there
// is, with a warning naming what was missing. Each condition the node still
// waits for is logged once when it starts waiting for it.
type SeedWait struct {
	Members int
	// Quiet: with Members 0, the membership has formed once no member
	// joined for this long (0: three heartbeat intervals).
	Quiet time.Duration
	// Max: route anyway after waiting this long (0: one minute).
	Max time.Duration
}

// formationView is what the rule reads: the membership and routing table
// at one moment. Tests build it by hand (no clock, no network).
type formationView struct {
	now       time.Time
	quietFrom time.Time // when members could first be heard (the node opened), or the last join if later
	live      int       // live members, this node included
	joining   int       // live crawlers still to publish their own subnet
	rt        int       // DHT routing table size
	bootstrap bool      // the node was given bootstrap peers
}

// routingTableTarget: the routing table should hold the live members up
// to one k-bucket (overlay's meshBelow, kad-dht's bucket size).
const routingTableTarget = 20

// formed reports whether the membership has formed; if not, what it waits
// for (a stable phrase, logged when it changes) and the detail (numbers).
func (w SeedWait) formed(v formationView, quiet time.Duration) (ok bool, waitsFor, detail string) {
	switch {
	case v.bootstrap && v.live < 2:
		return false, "a first member (the bootstrap peers)", "no member heard yet"
	case w.Members > 0 && v.live < w.Members:
		return false, fmt.Sprintf("%d members", w.Members), fmt.Sprintf("%d live", v.live)
	case w.Members <= 0 && v.now.Sub(v.quietFrom) < quiet:
		return false, fmt.Sprintf("no member joining for %v", quiet), fmt.Sprintf("%d live, last change %v ago", v.live, v.now.Sub(v.quietFrom).Round(time.Millisecond))
	case v.joining > 0:
		return false, "members to publish their own subnet", fmt.Sprintf("%d still to publish", v.joining)
	case v.rt < min(v.live-1, routingTableTarget):
		return false, "the routing table to hold the members", fmt.Sprintf("%d of %d", v.rt, min(v.live-1, routingTableTarget))
	}
	return true, "", ""
}

// quiet and maxWait are Quiet and Max with their defaults.
func (w SeedWait) quiet(heartbeat time.Duration) time.Duration {
	if w.Quiet > 0 {
		return w.Quiet
	}
	return 3 * heartbeat
}

func (w SeedWait) maxWait() time.Duration {
	if w.Max > 0 {
		return w.Max
	}
	return time.Minute
}

// view reads the membership and the routing table now.
func (n *Node) formationView() formationView {
	f := n.peer.Formation()
	v := formationView{now: time.Now(), quietFrom: n.opened, live: f.Live, joining: len(f.Joining),
		rt: n.peer.DHT().RoutingTable().Size(), bootstrap: len(n.cfg.Overlay.Bootstrap) > 0}
	if f.LastJoin.After(v.quietFrom) {
		v.quietFrom = f.LastJoin
	}
	return v
}

// waitFormed waits until the membership has formed (SeedWait), at most
// SeedWait.Max, checking four times a heartbeat. It returns ctx's error if
// ctx ends first.
func (n *Node) waitFormed(ctx context.Context) error {
	w := n.cfg.SeedWait
	quiet, limit := w.quiet(n.cfg.Overlay.HeartbeatInterval), w.maxWait()
	start := time.Now()
	tick := time.NewTicker(n.cfg.Overlay.HeartbeatInterval / 4)
	defer tick.Stop()
	last := ""
	for {
		v := n.formationView()
		ok, waitsFor, detail := w.formed(v, quiet)
		if ok {
			n.log.Info("membership formed: routing the seeds", "members", v.live, "waited", time.Since(start).Round(time.Millisecond))
			return nil
		}
		if time.Since(start) >= limit {
			n.log.Warn("routing the seeds before the membership formed: their subnets are delegated over the members known now",
				"waited", limit, "waiting_for", waitsFor, "detail", detail, "members", v.live)
			return nil
		}
		if waitsFor != last {
			n.log.Info("seeds wait for the membership", "waiting_for", waitsFor, "detail", detail)
			last = waitsFor
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-tick.C:
		}
	}
}
