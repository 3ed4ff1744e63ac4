// Package delegation owns which crawler crawls which subnet: the IPMicra
// location-aware delegation procedure, its baselines (random, optimal/brute
// force, UbiCrawler consistent hashing), our own lower-probe policy, load
// balancing, dynamic calibration and migration across hierarchy rebuilds.
//
// It is pure logic: it talks to the world only through the small interfaces
// below (Directory, Prober, Membership, Clock), so the same code runs in the
// simulator (testnet/), in unit tests and on the libp2p overlay (overlay/).
// No sockets, no libp2p, no goroutines of its own.
package delegation

import (
	"context"
	"net/netip"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// CrawlerID names a crawler: its libp2p peer ID (string form) on the overlay,
// any unique string in the simulator. Ordering of IDs is byte-wise.
type CrawlerID string

// Crawler is what the delegation engine knows about a live crawler.
type Crawler struct {
	ID       CrawlerID
	Addr     netip.Addr // the crawler's own address; its subnet is delegated to it on join
	Capacity int        // pages it checks per day (load balancing, consistent-hash replicas)
}

// ProbeResult is the answer of one probe: crawler's round-trip time to a target.
type ProbeResult struct {
	Crawler CrawlerID
	RTT     time.Duration
	OK      bool // false: no answer (timeout, refused, outside time window)
}

// Record is one delegation: subnet → owner. It is what the overlay stores in
// the DHT under /micra/deleg/<subnet>.
type Record struct {
	Subnet    hierarchy.NodeID
	Snapshot  hierarchy.SnapshotID
	Owner     CrawlerID
	OwnerRTT  time.Duration
	Probes    []ProbeResult // the probe results that decided it (variance heuristic)
	Epoch     uint64        // bumped on every re-delegation of this subnet
	DecidedBy CrawlerID
	At        time.Time
}

// Directory is where delegations live: a map in the simulator, the DHT (plus a
// local cache) on the overlay.
type Directory interface {
	// Lookup returns the record for subnet s; ok is false when there is none
	// (or when its owner is known to be dead).
	Lookup(ctx context.Context, s hierarchy.NodeID) (rec Record, ok bool, err error)
	// Publish stores rec and returns the record that prevails for its subnet
	// (which may be a concurrent writer's, by the Select rule).
	Publish(ctx context.Context, rec Record) (Record, error)
	// HoldersUnder returns the crawlers holding at least one delegated subnet
	// in the subtree rooted at ancestor.
	HoldersUnder(ctx context.Context, ancestor hierarchy.NodeID) ([]CrawlerID, error)
	// HoldersOfOrg returns the crawlers holding at least one delegated subnet
	// registered to organisation org.
	HoldersOfOrg(ctx context.Context, org hierarchy.OrgID) ([]CrawlerID, error)
}

// Prober asks crawlers for their latency to a target. Every crawler in the
// list costs one probe; implementations may probe them in parallel. Results
// come back in the order of crawlers.
type Prober interface {
	Probe(ctx context.Context, target netip.Addr, crawlers []CrawlerID) []ProbeResult
}

// Membership lists the live crawlers (the failure detector's view).
type Membership interface {
	Live() []Crawler
}

// Clock gives the engine its notion of time (simulated or real).
type Clock interface {
	Now() time.Time
}
