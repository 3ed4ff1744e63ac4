// Package delegation owns which crawler crawls which subnet: the IPMicra
// location-aware delegation procedure, its baselines (random, optimal/brute
// force, UbiCrawler consistent hashing), our own lower-probe policy, load
// balancing, dynamic calibration and migration across hierarchy rebuilds.
//
// It is pure logic: it talks to the world only through the small interfaces
// below (Directory, Prober, Membership, Clock), so the same code runs in the
// simulator (testnet/), in unit tests and on the libp2p overlay (overlay/).
// No sockets, no libp2p, no goroutines of its own.
//
// # Using it (simulator, node)
//
//	members := delegation.NewMemMembership(crawlers...)
//	dir := delegation.NewMemDirectory(tree, members) // or the overlay's DHT directory
//	deps := delegation.Deps{Tree: tree, Dir: dir, Prober: p, Members: members,
//		Clock: clk, Rand: rand.New(rand.NewPCG(seed, 0))}
//	pol := delegation.NewIPMicra(deps, delegation.Config{Threshold: 50 * time.Millisecond})
//	for _, c := range crawlers { pol.Join(ctx, c) } // placement: each owns its subnet
//	dec, err := pol.Delegate(ctx, hostIP)           // dec.Owner, dec.Probes, dec.Steps, dec.Reason
//
// Policies: NewIPMicra (the paper), NewRandom, NewOptimal (brute force),
// NewConsistentHash (UbiCrawler), NewMicra (ours). Each policy instance is a
// deterministic state machine: give each its own Directory, LoadBook and
// Rand, and call it from one goroutine. A decision's Steps and Reason explain
// it; Decision.String renders them on one line.
//
// Around the policies: Ring (consistent hashing, also the fallback when an IP
// is outside the hierarchy or nobody answers a probe), Calibrator (per-page
// timing history → calibration events → Policy.Redelegate), MinCostAssign
// (exact min-cost reference for load balancing), MigrateDirectory (carry
// records across a hierarchy rebuild).
package delegation

import (
	"context"
	"errors"
	"math"
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
	// Lat, Lon are where the crawler says it runs (degrees; a volunteer
	// states it, coarsely), when HasPos. NewMicra uses them with the
	// registry country of a subnet as a distance prior; nobody else does.
	Lat, Lon float64
	HasPos   bool
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
	OwnerRTT  time.Duration // the owner's answer to a probe; 0: not measured (a prediction, a guess, a placement)
	Probes    []ProbeResult // the probe results that decided it (variance heuristic)
	Epoch     uint64        // bumped on every re-delegation of this subnet
	DecidedBy CrawlerID
	At        time.Time
	// Blocks are blocks of the subnet delegated to other crawlers than
	// Owner (at most MaxBlocks, distinct, inside the subnet): a lower
	// delegation that supersedes the subnet's for the hosts of the block.
	Blocks []BlockDelegation
}

// BlockDelegation gives one block of a subnet — the /24 (IPv4) or /48
// (IPv6) of a host, the longest prefixes routed across the Internet, so
// hosts of one block share their route — to another crawler than the
// subnet's owner (MicraConfig.BlockMargin: a review found that crawler
// clearly nearer for a host of the block). It covers the hosts of the
// block that the tree puts in the record's subnet.
type BlockDelegation struct {
	Host     netip.Addr // the host it was decided for: a host of the block in the subnet
	Owner    CrawlerID
	OwnerRTT time.Duration
	// Consent is the block owner's signed agreement to this delegation,
	// opaque here: the directory asks for it when it publishes a block
	// without one, and a block carried into a successor record keeps it.
	Consent []byte
}

// Block is the delegated block: BlockOf(Host).
func (b BlockDelegation) Block() netip.Prefix { return BlockOf(b.Host) }

// MaxBlocks bounds a record's block delegations (a subnet whose hosts are
// nearer other crawlers in many blocks changes hands by its reviews' tally
// instead).
const MaxBlocks = 16

// BlockOf is the block of ip: its /24 for IPv4, its /48 for IPv6.
func BlockOf(ip netip.Addr) netip.Prefix {
	bits := 48
	if ip.Is4() || ip.Is4In6() {
		ip, bits = ip.Unmap(), 24
	}
	p, _ := ip.Prefix(bits)
	return p
}

// BlockOwner returns the delegation of ip's block in r, if r has one
// (whether its owner is live or not).
func (r Record) BlockOwner(ip netip.Addr) (BlockDelegation, bool) {
	if len(r.Blocks) == 0 {
		return BlockDelegation{}, false
	}
	b := BlockOf(ip)
	for _, d := range r.Blocks {
		if d.Block() == b {
			return d, true
		}
	}
	return BlockDelegation{}, false
}

// LiveBlock returns the delegation of ip's block in r when r delegates it
// to a crawler that live reports live (nil live: every crawler is). A block
// whose owner died goes back to the subnet's owner until it is re-decided.
func (r Record) LiveBlock(ip netip.Addr, live func(CrawlerID) bool) (BlockDelegation, bool) {
	b, ok := r.BlockOwner(ip)
	if !ok || (live != nil && !live(b.Owner)) {
		return BlockDelegation{}, false
	}
	return b, true
}

// OwnerOf is the one rule for who crawls ip under r: the owner of ip's
// block when r delegates the block to a live crawler (LiveBlock), else the
// subnet's owner. Whether r stands at all (its owner alive) is the
// caller's to judge: a dead owner's record is re-decided, not read. The
// engine, the overlay's directory, hand-off and router, and the simulator
// all ask this.
func (r Record) OwnerOf(ip netip.Addr, live func(CrawlerID) bool) CrawlerID {
	if b, ok := r.LiveBlock(ip, live); ok {
		return b.Owner
	}
	return r.Owner
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

// ErrBusy is what a Directory's Publish may answer for a record of a subnet
// that another call is deciding at this moment (the overlay, whose calls
// for different subnets overlap). Load balancing then leaves that subnet
// where it is instead of moving it under the other call's feet.
var ErrBusy = errors.New("delegation: subnet being decided by another call")

// ErrRefused is what a Directory's Publish may answer when a crawler the
// record names will not sign it (the overlay: its new owner or a block's
// crawler measured another RTT than the record claims, or does not count
// the decider a member). Load balancing then leaves that subnet where it
// is: a move refused is a move not made, not a failed decision of the
// subnet that needed the room.
var ErrRefused = errors.New("delegation: a crawler named in the record refused to sign it")

// Prober asks crawlers for their latency to a target. Every crawler in the
// list costs one probe; implementations may probe them in parallel. Results
// come back in the order of crawlers. Implementations must not modify the
// crawlers slice.
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

// Tree is the subset of *hierarchy.Tree the engine reads. Keeping it an
// interface lets tests use small hand-built trees and keeps the engine free
// of the concrete snapshot type.
type Tree interface {
	Len() int
	ID() hierarchy.SnapshotID
	Node(id hierarchy.NodeID) hierarchy.Node
	// SmallestNonUnary returns the subnet IPMicra delegates for ip; Root or
	// None when ip is outside every registered range.
	SmallestNonUnary(ip netip.Addr) hierarchy.NodeID
	Parent(id hierarchy.NodeID) hierarchy.NodeID
	Children(id hierarchy.NodeID) []hierarchy.NodeID
	// Ancestors lists id's ancestors, parent first, Root last.
	Ancestors(id hierarchy.NodeID) []hierarchy.NodeID
	// SameOrg lists the nodes registered to id's organisation.
	SameOrg(id hierarchy.NodeID) []hierarchy.NodeID
	Contains(id hierarchy.NodeID, ip netip.Addr) bool
}

// EpochSlack is how far a record's epoch may run ahead of its time in
// milliseconds (EpochCeiling): deciders' clocks differ by up to a few
// minutes (the overlay accepts records up to 5 minutes in its future), and a
// subnet re-decided more than once in a millisecond counts up past its
// clock.
const EpochSlack = 10 * 60 * 1000

// NextEpoch is the epoch of a record that replaces one of epoch prev and is
// decided at: a hybrid logical clock, the later of prev+1 and at in
// milliseconds since 1970 (prev+1 alone when at is zero: a simulation
// without a clock). Epochs so stay at or below EpochCeiling(at), which
// every peer checks, and a record cannot jump ahead of its honest
// successors: with counters alone, an epoch of 2^64−1 won every comparison
// until the record expired and wrapped its successor's to 0. A record whose
// decider's clock ran ahead is passed by honest decisions once their clocks
// reach it.
func NextEpoch(prev uint64, at time.Time) uint64 {
	if prev == math.MaxUint64 {
		return prev // never valid (EpochCeiling); does not wrap
	}
	next := prev + 1
	if ms := at.UnixMilli(); !at.IsZero() && ms > 0 && uint64(ms) > next {
		next = uint64(ms)
	}
	return next
}

// EpochCeiling is the highest epoch a record decided at may carry: at in
// milliseconds since 1970 (0 for the zero time) plus EpochSlack.
func EpochCeiling(at time.Time) uint64 {
	var ms uint64
	if m := at.UnixMilli(); !at.IsZero() && m > 0 {
		ms = uint64(m)
	}
	return ms + EpochSlack
}

// Compare is the Select order, the one total order every peer applies to
// competing records of one subnet: the higher epoch wins, then the lower
// owner RTT (a measured one before none), then the lower owner ID, then
// the later time (an owner's refresh supersedes its older copy), then the
// lower decider ID. It
// returns a negative number when a wins, positive when b wins, and 0 when
// the fields it reads tie — only two values one decider sealed for the
// same subnet at the same instant; the overlay breaks that tie by the
// sealed values' digests (overlay.Better).
func Compare(a, b Record) int {
	switch {
	case a.Epoch != b.Epoch:
		return cmpBool(a.Epoch > b.Epoch)
	case a.OwnerRTT != b.OwnerRTT:
		return cmpBool(rttOrder(a.OwnerRTT) < rttOrder(b.OwnerRTT))
	case a.Owner != b.Owner:
		return cmpBool(a.Owner < b.Owner)
	case !a.At.Equal(b.At):
		return cmpBool(a.At.After(b.At))
	case a.DecidedBy != b.DecidedBy:
		return cmpBool(a.DecidedBy < b.DecidedBy)
	}
	return 0
}

// rttOrder ranks an owner RTT for Compare: a measured one before any
// claim of none (0), so a prediction never beats a measurement.
func rttOrder(d time.Duration) time.Duration {
	if d == 0 {
		return math.MaxInt64
	}
	return d
}

// cmpBool is -1 when a wins, else 1.
func cmpBool(aWins bool) int {
	if aWins {
		return -1
	}
	return 1
}

// Better reports whether a strictly beats b by the Select order (Compare).
func Better(a, b Record) bool { return Compare(a, b) < 0 }
