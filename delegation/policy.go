package delegation

import (
	"context"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"strings"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// Deps is everything a policy reads from the outside world. All of it is
// supplied by the caller: the simulator, a unit test or the overlay node.
type Deps struct {
	Tree    Tree
	Dir     Directory
	Prober  Prober
	Members Membership
	Clock   Clock
	// Rand drives every random choice (random policy, tie-breaking shuffles).
	// Same Deps state and same seed → same decisions.
	Rand *rand.Rand
	// Loads is where per-crawler load (pages per day) is accounted for load
	// balancing. Nil: the policy keeps its own in-memory book (simulator,
	// tests); the overlay passes a book fed by membership gossip.
	Loads LoadBook
}

// BalanceMode selects what happens when the best crawler for a new subnet has
// no room left (Crawler.Capacity reached).
type BalanceMode uint8

const (
	// BalanceOff ignores capacity: the best crawler always takes the subnet.
	BalanceOff BalanceMode = iota
	// BalanceRelease is the paper's option (a): the best crawler takes the new
	// subnet and releases the subnet of its own whose probe results have the
	// smallest variance to that subnet's next-best crawler with room.
	BalanceRelease
	// BalanceSecondBest is the paper's option (b): the new subnet goes to the
	// best-ranked crawler that still has room.
	BalanceSecondBest
	// BalanceLeastCost is option (b) with moves chosen by what they cost:
	// a new subnet goes to the best-ranked crawler with room, and when an
	// owner is full, whichever of its subnets (the one taking a page
	// included) adds the least RTT × pages at its next recorded crawler
	// with room moves, not necessarily the one taking the page. Among
	// thousands of crawlers the arriving subnet's next best is often far
	// while another subnet of the owner has a next best a millisecond
	// away (docs/experiments/2026-11-scale-excess.md).
	BalanceLeastCost
)

func (m BalanceMode) String() string {
	switch m {
	case BalanceOff:
		return "off"
	case BalanceRelease:
		return "release"
	case BalanceSecondBest:
		return "second-best"
	case BalanceLeastCost:
		return "least-cost"
	}
	return fmt.Sprintf("BalanceMode(%d)", uint8(m))
}

// ParseBalanceMode accepts "off", "release", "second-best" and "least-cost".
func ParseBalanceMode(s string) (BalanceMode, error) {
	switch strings.ToLower(s) {
	case "off", "", "none":
		return BalanceOff, nil
	case "release", "a":
		return BalanceRelease, nil
	case "second-best", "secondbest", "b":
		return BalanceSecondBest, nil
	case "least-cost", "leastcost":
		return BalanceLeastCost, nil
	}
	return 0, fmt.Errorf("delegation: unknown balance mode %q (want off, release, second-best or least-cost)", s)
}

// Config holds the tunables. The zero value of a field means "default"; see
// DefaultConfig.
type Config struct {
	// Self is the crawler running the decisions (Record.DecidedBy).
	Self CrawlerID
	// Threshold is IPMicra's probing threshold: the first crawler answering
	// under it wins. Default 50 ms.
	Threshold time.Duration
	// HashReplicas is the number of consistent-hashing replicas of a crawler
	// of average capacity (UbiCrawler: 100–200). Default 200.
	HashReplicas int
	// HashCapacityUnit is the capacity that earns HashReplicas replicas
	// (replicas ∝ capacity). Zero: every crawler gets HashReplicas.
	HashCapacityUnit int
	// HashProbes is the number of probe points per key on the ring
	// (multi-probe consistent hashing; 1 = classic ring). Default 21.
	HashProbes int
	// ParallelLevels makes IPMicra ask all crawlers of one walk level at
	// once (every one costs a probe; the fastest under the threshold wins)
	// instead of one at a time in random order (stop at the first under).
	ParallelLevels bool
	// Micra tunes our own policy (NewMicra); zero fields take defaults.
	Micra MicraConfig
	// Balance selects the load-balancing option. Default BalanceOff.
	Balance BalanceMode
	// BalanceHold is how long a delegation stands before load balancing
	// may move it to another crawler (by its record's At, on Deps.Clock).
	// A move is not free on an overlay: the new owner pulls the old one's
	// page history and waits for it, and subnets moved on to a third
	// crawler before that came in were crawled twice; a hold makes each
	// move stick. New subnets still go to crawlers with room. Zero: none.
	BalanceHold time.Duration
	// MoveAsk: with BalanceLeastCost, when the least-cost recorded move of
	// a full owner's subnets (RTT added × pages) costs more than this per
	// page, the crawlers with room are asked (RoomProbes of them) for the
	// subnet taking the page, and it moves to the best answer unless that
	// recorded move costs less per page. Zero: always the least-cost
	// recorded move (probing only when none has room). On the scale
	// preset 3 ms bought 0.09 ms of excess for 0.23 probes per URL: off
	// there (docs/experiments/2026-11-scale-excess.md).
	MoveAsk time.Duration
	// RoomProbes caps the crawlers probed for room when no ranked or
	// recorded alternative has any (load balancing's last resort): micra
	// asks those it predicts nearest, other policies the holders nearest
	// in the hierarchy, then random ones. Default 12.
	RoomProbes int
	// CalibrationFactor: a page time larger than this factor × its history
	// (median) counts as slow. Default 2.
	CalibrationFactor float64
	// CalibrationStreak: slow times in a row needed to emit a calibration
	// event ("more than once in a row"). Default 2.
	CalibrationStreak int
	// CalibrationHistory is how many past times per page are kept. Default 8.
	CalibrationHistory int
	// CalibrationMinDelta: a slow time must also exceed the history's
	// median by this much — a page going from 0.3 to 0.8 ms (loopback, a
	// LAN, a loaded machine) has not moved away. Default 10 ms; negative:
	// none.
	CalibrationMinDelta time.Duration
	// CalibrationMaxPages bounds the pages with a history. When it is
	// reached, histories idle for CalibrationIdle are dropped and, if none
	// is, new pages get no history until some are: a crawl revisits its
	// pages in a cycle, and dropping any history to admit another page
	// would, over a cycle longer than the bound, leave none to compare
	// with. Default 1<<18 (about 100 bytes each).
	CalibrationMaxPages int
	// CalibrationIdle is how long a page's history lasts without a fetch
	// once CalibrationMaxPages is reached. Default 7 days.
	CalibrationIdle time.Duration
}

// DefaultConfig returns the paper's settings.
func DefaultConfig() Config { return Config{}.withDefaults() }

func (c Config) withDefaults() Config {
	if c.Threshold <= 0 {
		c.Threshold = 50 * time.Millisecond
	}
	if c.HashReplicas <= 0 {
		c.HashReplicas = 200
	}
	if c.HashProbes <= 0 {
		c.HashProbes = 21
	}
	if c.RoomProbes <= 0 {
		c.RoomProbes = 12
	}
	if !(c.CalibrationFactor > 1) { // NaN too: it would make every comparison false
		c.CalibrationFactor = 2
	}
	if c.CalibrationStreak <= 0 {
		c.CalibrationStreak = 2
	}
	if c.CalibrationHistory <= 0 {
		c.CalibrationHistory = 8
	}
	if c.CalibrationMaxPages <= 0 {
		c.CalibrationMaxPages = 1 << 18
	}
	if c.CalibrationIdle <= 0 {
		c.CalibrationIdle = 7 * 24 * time.Hour
	}
	if c.CalibrationMinDelta == 0 {
		c.CalibrationMinDelta = 10 * time.Millisecond
	}
	c.Micra = c.Micra.withDefaults()
	return c
}

// Policy decides which crawler crawls the subnet of an IP address.
// Implementations are not safe for concurrent use: the engine is a
// deterministic state machine; callers serialise.
type Policy interface {
	// Name is the short name printed in tables: ipmicra, random, optimal,
	// hash, micra.
	Name() string
	// Join places a crawler: its own subnet is delegated to it.
	Join(ctx context.Context, c Crawler) (Decision, error)
	// Delegate returns the owner of ip's subnet, delegating it first if
	// nobody (alive) owns it. Each call accounts one page to the subnet.
	Delegate(ctx context.Context, ip netip.Addr) (Decision, error)
	// Redelegate re-runs the decision for the subnet of ip (a calibration
	// event for a page on ip): the record's epoch is bumped and the winner
	// published. It accounts one page, like Delegate.
	Redelegate(ctx context.Context, ip netip.Addr) (Decision, error)
}

// Reason says why a decision stopped where it did.
type Reason uint8

const (
	ReasonNone             Reason = iota
	ReasonCached                  // the subnet was already delegated to a live crawler
	ReasonPlacement               // a joining crawler owns its own subnet
	ReasonSameOrg                 // a crawler holding a subnet of the same organisation answered under the threshold
	ReasonUnderThreshold          // a crawler asked during the bottom-up walk answered under the threshold
	ReasonLowestProbe             // nobody answered under the threshold: the lowest probe won
	ReasonOutsideHierarchy        // the IP is in no registered range: consistent hashing
	ReasonNoAnswer                // no probe answered: consistent hashing
	ReasonRandom                  // random policy
	ReasonBruteForce              // every live crawler probed, lowest wins
	ReasonHashed                  // consistent-hashing policy
	ReasonConfident               // our policy: no unprobed crawler is likely to beat the best answer
	ReasonAllProbed               // our policy: every plausible candidate probed, lowest wins
	ReasonPredicted               // our policy: the learned statistics leave no doubt; no probe
	ReasonKept                    // review: the owner stays (nearest, or nearest for most of the subnet's hosts)
	ReasonHandedOver              // review: another crawler was nearest for most of the subnet's reviewed hosts
	ReasonBlockDelegated          // review: another crawler was clearly nearest for this host; its block goes there
)

var reasonNames = [...]string{
	ReasonNone:             "none",
	ReasonCached:           "cached",
	ReasonPlacement:        "placement",
	ReasonSameOrg:          "same-org-under-threshold",
	ReasonUnderThreshold:   "under-threshold",
	ReasonLowestProbe:      "lowest-probe",
	ReasonOutsideHierarchy: "outside-hierarchy-hashed",
	ReasonNoAnswer:         "no-answer-hashed",
	ReasonRandom:           "random",
	ReasonBruteForce:       "brute-force",
	ReasonHashed:           "hashed",
	ReasonConfident:        "confident",
	ReasonAllProbed:        "all-candidates-probed",
	ReasonPredicted:        "predicted-no-probe",
	ReasonKept:             "review-kept",
	ReasonHandedOver:       "review-handed-over",
	ReasonBlockDelegated:   "review-block-delegated",
}

func (r Reason) String() string {
	if int(r) < len(reasonNames) {
		return reasonNames[r]
	}
	return fmt.Sprintf("Reason(%d)", uint8(r))
}

// StepKind names one stage of a decision's walk.
type StepKind uint8

const (
	StepLookup     StepKind = iota // directory lookup of the subnet
	StepSameOrg                    // asked holders of same-organisation subnets
	StepLevel                      // asked holders under an ancestor (bottom-up walk)
	StepPredict                    // our policy: probed predicted candidates
	StepBruteForce                 // probed every live crawler
	StepHash                       // consistent-hash fallback or policy
	StepRandom                     // random pick
	StepBalance                    // load balancing changed or displaced an owner
)

var stepNames = [...]string{
	StepLookup: "lookup", StepSameOrg: "same-org", StepLevel: "level", StepPredict: "predict",
	StepBruteForce: "brute-force", StepHash: "hash", StepRandom: "random", StepBalance: "balance",
}

func (k StepKind) String() string {
	if int(k) < len(stepNames) {
		return stepNames[k]
	}
	return fmt.Sprintf("StepKind(%d)", uint8(k))
}

// Step is one stage of the path a decision walked: which hierarchy node it
// looked at, which crawlers it asked and what they answered.
type Step struct {
	Kind   StepKind
	Node   hierarchy.NodeID // subnet or ancestor examined (None if n/a)
	Probes []ProbeResult    // probes issued at this step, in order
	Note   string           // short human explanation
}

// Decision is the outcome of one call, with its full explanation.
type Decision struct {
	IP     netip.Addr
	Subnet hierarchy.NodeID // hierarchy.None when the IP is outside the hierarchy
	Owner  CrawlerID
	// OwnerRTT is the owner's probed RTT (0 when not probed).
	OwnerRTT time.Duration
	Record   Record // the prevailing record (zero when nothing was published)
	Probes   int    // probes issued by this call
	Cached   bool   // true when the subnet was already delegated
	Reason   Reason
	Steps    []Step
	// Moved lists records re-published by load balancing (option a).
	Moved []Record
}

// String renders the explanation on one line, for logs and test failures.
func (d Decision) String() string {
	var b strings.Builder
	fmt.Fprintf(&b, "%v subnet=%d owner=%s rtt=%v probes=%d reason=%s", d.IP, d.Subnet, d.Owner, d.OwnerRTT, d.Probes, d.Reason)
	for _, s := range d.Steps {
		fmt.Fprintf(&b, " | %s", s.Kind)
		if s.Node != hierarchy.None {
			fmt.Fprintf(&b, "@%d", s.Node)
		}
		for _, p := range s.Probes {
			if p.OK {
				fmt.Fprintf(&b, " %s=%v", p.Crawler, p.RTT)
			} else {
				fmt.Fprintf(&b, " %s=-", p.Crawler)
			}
		}
		if s.Note != "" {
			fmt.Fprintf(&b, " (%s)", s.Note)
		}
	}
	return b.String()
}

// LogValue makes a Decision log as a structured group with log/slog.
func (d Decision) LogValue() slog.Value {
	attrs := []slog.Attr{
		slog.String("ip", d.IP.String()),
		slog.Uint64("subnet", uint64(d.Subnet)),
		slog.String("owner", string(d.Owner)),
		slog.Duration("owner_rtt", d.OwnerRTT),
		slog.Int("probes", d.Probes),
		slog.Bool("cached", d.Cached),
		slog.String("reason", d.Reason.String()),
		slog.Uint64("epoch", d.Record.Epoch),
	}
	if len(d.Moved) > 0 {
		attrs = append(attrs, slog.Int("moved", len(d.Moved)))
	}
	if !d.Cached {
		attrs = append(attrs, slog.String("path", d.String()))
	}
	return slog.GroupValue(attrs...)
}

// LoadBook accounts pages per day per subnet and per crawler.
type LoadBook interface {
	// Load is the pages per day currently assigned to crawler c.
	Load(c CrawlerID) int
	// Pages is the pages per day of subnet s.
	Pages(s hierarchy.NodeID) int
	// AddPages adds n pages to subnet s, owned by owner.
	AddPages(s hierarchy.NodeID, owner CrawlerID, n int)
	// Move transfers subnet s (and its pages) to owner to.
	Move(s hierarchy.NodeID, to CrawlerID)
	// Subnets lists the subnets owned by c, ascending.
	Subnets(c CrawlerID) []hierarchy.NodeID
	// Owner returns the owner of s in the book.
	Owner(s hierarchy.NodeID) (CrawlerID, bool)
}
