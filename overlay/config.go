package overlay

import (
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"time"

	libp2pmetrics "github.com/libp2p/go-libp2p/core/metrics"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/overlay/pb"
)

// Config configures one overlay peer. The zero value is not usable; start
// from DefaultConfig and override.
type Config struct {
	// KeyFile holds the peer's Ed25519 identity (created on first start, mode 0600).
	// Empty: an ephemeral identity (tests, benches).
	KeyFile string
	// ListenAddrs are multiaddrs, e.g. /ip4/0.0.0.0/tcp/4001 and /ip4/0.0.0.0/udp/4001/quic-v1.
	ListenAddrs []string
	// Bootstrap peers as full multiaddrs with /p2p/<id>.
	Bootstrap []string
	// PSKFile, if set, makes the network private (pnet). QUIC refuses a PSK,
	// so a private network listens on TCP only.
	PSKFile string

	// Resource manager limits (a volunteer's machine): total connections,
	// streams and memory. ConnHighWater must stay below MaxConns so the
	// connection manager trims before the resource manager refuses.
	MaxConns      int
	MaxStreams    int
	MaxMemoryMiB  int64
	ConnLowWater  int
	ConnHighWater int
	ConnGrace     time.Duration
	// NullResourceManager disables resource limits (many hosts in one test process).
	NullResourceManager bool

	// Admission, if set, runs the peer in a network with admission: its
	// heartbeats carry its certificate, and it takes heartbeats, records and
	// calibration events only from admitted peers (admission.go). Nil: an
	// open network.
	Admission *Admission

	// PublicDHTFilters enables the public query/routing-table/address filters
	// (drop private and loopback addresses) for public deployments.
	PublicDHTFilters bool
	// MaxRecordAge bounds delegation records in the DHT; RepublishInterval is
	// how often an owner re-puts its delegations (must be well inside MaxRecordAge).
	MaxRecordAge time.Duration
	// LookupQuorum is how many DHT peers must answer an uncached lookup
	// before the best of their values is taken (0: every closest peer).
	// Gossip keeps caches converging, so a small quorum trades nothing for
	// latency; Publish reads back with PublishQuorum to see what prevails.
	LookupQuorum      int
	PublishQuorum     int
	RepublishInterval time.Duration
	ReprovideInterval time.Duration

	// Membership: heartbeat period and the silence after which a peer is dead.
	HeartbeatInterval time.Duration
	FailureTimeout    time.Duration
	// OwnerGrace is how long a member declared dead for its silence still
	// counts as the owner of its subnets: its subnets are not re-delegated
	// and URLs for it wait in the hand-off spool. A member stopped for a
	// few seconds (a stall, a quick restart on its data) then comes back
	// to its own frontier instead of finding its pages crawled twice; and
	// the deaths of a partition, declared within a heartbeat or two of
	// each other, are all in before the quorum is judged (members.go,
	// Members.IsLive). 0: re-delegated as soon as declared dead.
	OwnerGrace time.Duration
	// LeaveTimeout bounds how long Close spends announcing this peer's
	// leave (Peer.Leave) before it closes anyway (0: 2 s).
	LeaveTimeout time.Duration
	// Membership is the membership protocol; every member of a network
	// must run the same. MembershipSWIM (DefaultConfig's): SWIM probes on
	// /micra/swim/1, one per HeartbeatInterval, with members' signed
	// records piggybacked on them (swimrun.go; a peer's cost stays flat).
	// MembershipHeartbeat (or "", the zero value): each member's heartbeat
	// reaches every peer on micra/membership/1 each HeartbeatInterval (a
	// peer's cost grows with the network).
	Membership string
	// FloodPublish makes a publisher send to every topic peer it knows, not
	// only its mesh: one hop to everyone in small networks (the default);
	// turn it off in large ones, where it multiplies traffic.
	FloodPublish bool
	// LoopbackTestnet disables the gossipsub IP-colocation penalty (all peers share 127.0.0.1).
	LoopbackTestnet bool
	// IdentitiesPerIP and IdentitiesPerPeer bound, in an open network (no
	// Admission), the members whose heartbeats came over their own
	// connection from one IP, and the members one neighbour introduced by
	// relaying their heartbeats (identities.go); 0: no limit. A testnet on
	// loopback, where every peer shares 127.0.0.1, has no per-IP limit.
	IdentitiesPerIP, IdentitiesPerPeer int

	// Crawler facts advertised in heartbeats.
	CrawlerAddr netip.Addr // the address whose subnet is delegated to this peer on join
	Capacity    int        // pages per day
	// Lat, Lon: where the crawler says it runs (degrees; a volunteer states
	// it coarsely), advertised when HasPos. The micra policy uses positions
	// as a distance prior (delegation.Crawler.Lat/Lon/HasPos).
	Lat, Lon float64
	HasPos   bool

	// Probe server: the guard decides which targets may be probed (default
	// PublicOnly; testnets use LoopbackOnly); Window is the daily time window
	// in which this crawler probes (zero: always).
	ProbeGuard  Guard
	ProbeWindow Window
	// ProbeMethod and ProbePort: how this peer asks others to measure a target.
	ProbeMethod pb.ProbeMethod
	ProbePort   uint16
	// Seed drives the delegation policy's random choices (0: from the peer id).
	Seed uint64
	// Bandwidth, if set, counts the bytes of every stream by protocol and
	// peer (libp2p's bandwidth reporter): the overlay's own cost, for
	// benchmarks and metrics.
	Bandwidth *libp2pmetrics.BandwidthCounter
	// WireDelay, if set, is the emulated round trip to a peer listening at
	// an address (0: none): connections this peer dials over TCP pay it
	// (a testnet's emulated world; see delay.go).
	WireDelay func(remote netip.Addr) time.Duration
	// Partition, if set, gates this peer's connections (a testnet's
	// network partitions; see partition.go).
	Partition *Partition

	// Request deadlines.
	RequestTimeout time.Duration

	// Audit checks members' probe answers and crawl progress (audit.go).
	Audit AuditConfig

	// Handoff batching: URLs queued for one subnet that trigger an early
	// flush, and the flush period (one message per owner per flush).
	HandoffBatch    int
	HandoffInterval time.Duration
	// HandoffDir is the Badger directory of the hand-off spool: URLs handed
	// off stay there until their owner acknowledges them, and are re-sent
	// after a restart. Required unless HandoffInMemory.
	HandoffDir string
	// HandoffInMemory keeps the spool in memory (tests and benches only: a
	// crash loses the hand-offs Handoff acknowledged).
	HandoffInMemory bool
	// HandoffSyncWrites fsyncs every spool commit (survives power loss;
	// without it a killed process still loses nothing, Badger's log being
	// memory-mapped). Default on.
	HandoffSyncWrites bool

	Logger     *slog.Logger
	Registerer prometheus.Registerer // nil: metrics not registered
}

// DefaultConfig returns limits fit for a volunteer's machine.
func DefaultConfig() Config {
	return Config{
		ListenAddrs:       []string{"/ip4/0.0.0.0/tcp/4001", "/ip4/0.0.0.0/udp/4001/quic-v1"},
		MaxConns:          256,
		MaxStreams:        2048,
		MaxMemoryMiB:      512,
		ConnLowWater:      96,
		ConnHighWater:     192,
		ConnGrace:         30 * time.Second,
		MaxRecordAge:      48 * time.Hour,
		LookupQuorum:      4,
		PublishQuorum:     8,
		RepublishInterval: 12 * time.Hour,
		ReprovideInterval: 12 * time.Hour,
		HeartbeatInterval: time.Second,
		FailureTimeout:    5 * time.Second,
		OwnerGrace:        30 * time.Second,
		LeaveTimeout:      2 * time.Second,
		Membership:        MembershipSWIM,
		FloodPublish:      true,
		Capacity:          100000,
		ProbeGuard:        PublicOnly,
		RequestTimeout:    10 * time.Second,
		HandoffBatch:      256,
		HandoffInterval:   500 * time.Millisecond,
		HandoffSyncWrites: true,
		IdentitiesPerIP:   8,
		IdentitiesPerPeer: 512,
	}
}

// TestnetConfig is DefaultConfig for in-process loopback networks: loopback
// listen address, ephemeral key, no resource limits, fast failure detection,
// probes restricted to loopback.
func TestnetConfig() Config {
	c := DefaultConfig()
	c.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	c.NullResourceManager = true
	c.LoopbackTestnet = true
	c.IdentitiesPerIP = 0 // every peer is at 127.0.0.1
	c.ProbeGuard = LoopbackOnly
	c.HeartbeatInterval = time.Second
	c.FailureTimeout = 4 * time.Second
	c.OwnerGrace = 8 * time.Second
	c.RequestTimeout = 10 * time.Second
	c.HandoffInterval = 50 * time.Millisecond
	c.HandoffInMemory = true // set HandoffDir and clear this to test durability
	return c
}

// Validate reports the first inconsistency in c.
func (c *Config) Validate() error {
	var errs []error
	if !c.NullResourceManager {
		if c.MaxConns <= 0 {
			errs = append(errs, errors.New("overlay: MaxConns must be > 0"))
		}
		// (0 would be libp2p's default in silence, -2 "block all")
		if c.MaxStreams <= 0 || c.MaxMemoryMiB <= 0 || c.MaxMemoryMiB > 1<<43 {
			errs = append(errs, fmt.Errorf("overlay: MaxStreams (%d) and MaxMemoryMiB (%d) must be > 0", c.MaxStreams, c.MaxMemoryMiB))
		}
		if c.ConnHighWater >= c.MaxConns {
			errs = append(errs, fmt.Errorf("overlay: ConnHighWater (%d) must be below MaxConns (%d) so the connection manager trims before the resource manager refuses", c.ConnHighWater, c.MaxConns))
		}
	}
	if c.ConnLowWater <= 0 || c.ConnLowWater >= c.ConnHighWater {
		errs = append(errs, fmt.Errorf("overlay: need 0 < ConnLowWater (%d) < ConnHighWater (%d)", c.ConnLowWater, c.ConnHighWater))
	}
	if w := c.ProbeWindow; w != (Window{}) && (w.From < 0 || w.To < 0 || w.From >= 24*time.Hour || w.To > 24*time.Hour || w.From == w.To) {
		// such a window is never open: every probe would be refused
		errs = append(errs, fmt.Errorf("overlay: ProbeWindow %v..%v: want two different offsets within a day", w.From, w.To))
	}
	if c.HeartbeatInterval < 10*time.Millisecond || c.HeartbeatInterval > time.Minute {
		// every peer's heartbeat validator refuses others: such a peer
		// would never be a member anywhere
		errs = append(errs, fmt.Errorf("overlay: HeartbeatInterval (%v) must be 10ms..1m, as heartbeats on the wire", c.HeartbeatInterval))
	}
	if c.HeartbeatInterval <= 0 || c.FailureTimeout < 2*c.HeartbeatInterval {
		errs = append(errs, fmt.Errorf("overlay: FailureTimeout (%v) must be at least two heartbeats (%v)", c.FailureTimeout, c.HeartbeatInterval))
	}
	if c.OwnerGrace < 0 || c.OwnerGrace > memberForget/2 {
		// past memberForget the dead member is forgotten, grace or not
		errs = append(errs, fmt.Errorf("overlay: OwnerGrace (%v) must be 0..%v", c.OwnerGrace, memberForget/2))
	}
	if c.Membership != "" && c.Membership != MembershipHeartbeat && c.Membership != MembershipSWIM {
		errs = append(errs, fmt.Errorf("overlay: Membership %q: want %q or %q", c.Membership, MembershipHeartbeat, MembershipSWIM))
	}
	if c.LeaveTimeout < 0 || c.LeaveTimeout > time.Minute {
		errs = append(errs, fmt.Errorf("overlay: LeaveTimeout (%v) must be 0..1m: Close waits for it", c.LeaveTimeout))
	}
	if c.MaxRecordAge <= 0 || c.RepublishInterval <= 0 || c.RepublishInterval > c.MaxRecordAge/2 {
		errs = append(errs, fmt.Errorf("overlay: RepublishInterval (%v) must be positive and at most half of MaxRecordAge (%v)", c.RepublishInterval, c.MaxRecordAge))
	}
	if c.ReprovideInterval <= 0 {
		errs = append(errs, errors.New("overlay: ReprovideInterval must be > 0"))
	}
	if c.RequestTimeout <= 0 || c.RequestTimeout > time.Hour {
		// (the transfer budgets are small multiples of it: an hour keeps
		// them far from overflowing)
		errs = append(errs, fmt.Errorf("overlay: RequestTimeout %v must be > 0 and at most 1h", c.RequestTimeout))
	}
	if c.HandoffBatch <= 0 || c.HandoffBatch > maxHandoffURLs {
		errs = append(errs, fmt.Errorf("overlay: HandoffBatch must be in 1..%d", maxHandoffURLs))
	}
	if c.HandoffInterval <= 0 {
		errs = append(errs, errors.New("overlay: HandoffInterval must be > 0"))
	}
	if c.HasPos && !plausiblePos(c.Lat, c.Lon) {
		errs = append(errs, fmt.Errorf("overlay: position %g,%g outside -90..90, -180..180", c.Lat, c.Lon))
	}
	if c.ProbeGuard == nil {
		errs = append(errs, errors.New("overlay: ProbeGuard is required (PublicOnly, LoopbackOnly, or your own)"))
	}
	return errors.Join(errs...)
}

// validatePeer adds the checks only a peer (not a bare host) needs.
func (c *Config) validatePeer() error {
	if err := c.Validate(); err != nil {
		return err
	}
	if c.HandoffDir == "" && !c.HandoffInMemory {
		return errors.New("overlay: HandoffDir is required (the durable hand-off spool); HandoffInMemory only for tests")
	}
	if c.Admission != nil && c.Admission.Own() == nil {
		return errors.New("overlay: a network with admission needs this peer's certificate (micra admit)")
	}
	if c.HandoffDir != "" && c.HandoffInMemory {
		return errors.New("overlay: HandoffDir and HandoffInMemory exclude each other")
	}
	return nil
}

func (c *Config) logger() *slog.Logger {
	if c.Logger != nil {
		return c.Logger
	}
	return slog.Default()
}

// leaveTimeout is LeaveTimeout, 2 s when unset.
func (c *Config) leaveTimeout() time.Duration {
	if c.LeaveTimeout <= 0 {
		return 2 * time.Second
	}
	return c.LeaveTimeout
}
