package node

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net/netip"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"github.com/prometheus/client_golang/prometheus"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
)

// Config configures one node. Start from DefaultConfig (or TestnetConfig)
// and override; LoadFile reads the file form.
type Config struct {
	// DataDir holds everything the node keeps: identity.key, state/ (the
	// crawler's Badger store: frontier, page history, outbox), handoff/
	// (the overlay's hand-off spool).
	DataDir string

	// Crawler is the crawler role: fetch the subnets delegated to this
	// peer and accept hand-offs. Without it the node is an overlay peer
	// only (DHT, gossip, membership), advertising no capacity.
	Crawler bool

	// Network is the network key's identity (a peer id, as `micra admit
	// init` prints it): the node joins that network with admission,
	// presenting its certificate (CertificateFile, default
	// DataDir/membership.cert) and keeping the network's revocation list
	// in DataDir/revocations (node/admission.go). Empty: an open network.
	Network         string
	CertificateFile string

	// Overlay configures the peer. KeyFile and HandoffDir default to files
	// under DataDir; Logger and Registerer are set by the node.
	Overlay overlay.Config
	// Crawl configures the engine. StateDir/DB, Router, Receiver (unless
	// set), CrawlerID, Logger and Registerer are set by the node.
	Crawl crawl.Config
	// Sink is the index sink's multiaddr with /p2p/<id>, or /p2p/<id>
	// alone (its addresses then come from its heartbeats): the crawler
	// delivers its carriers to it over /micra/carrier/1 (node/sink). Empty,
	// and no Crawl.Receiver (the carriers setting): to the sink the network
	// announces (a live member whose heartbeats carry the sink role;
	// carriers wait in the outbox while none is). Its carriers name the
	// crawler by this node's peer id, the identity the sink checks.
	Sink string
	// Seeds are routed at Run once the membership has formed (SeedWait):
	// queued here when this crawler owns them, else handed to their
	// owners. Give seeds to any one node.
	Seeds []string
	// SeedWait says when the membership has formed (node/formation.go).
	SeedWait SeedWait

	// Policy is the delegation policy: ipmicra (default), micra, hash, random.
	Policy string
	// Balance is the load balancing this peer's decisions apply when the
	// nearest crawler has no room (its advertised capacity reached): off,
	// release (the paper's option (a)), second-best (option (b), the
	// default) or least-cost (option (b), a full owner moving whichever of
	// its subnets costs least to move). On the testnet with moves fenced and held (BalanceHold),
	// second-best kept every crawler under its capacity with nothing
	// fetched twice and the makespan of no balancing; release moved more
	// subnets farther away (docs/experiments/2026-11-testnet-log.md).
	Balance delegation.BalanceMode
	// BalanceHold is how long a delegation stands before load balancing may
	// move it again (delegation.Config.BalanceHold); 0: no hold.
	BalanceHold time.Duration
	// Hierarchy is the IP hierarchy; nil: HierarchyFile, else the embedded default.
	Hierarchy     *hierarchy.Tree
	HierarchyFile string

	// AddrMapper maps resolved host addresses onto the addresses delegation
	// works on (nil: identity). Measurer answers probes (nil: real probes).
	AddrMapper AddrMapper
	Measurer   overlay.Measurer
	// World places crawled hosts on the console's network page (a
	// testnet's emulated world); nil: each host at its address's registry
	// country.
	World HostWorld

	// MetricsAddr, if set, serves /metrics for this node's registry while Run runs.
	MetricsAddr string
	// MemoryLimit is the soft limit of the Go runtime's memory in bytes
	// that `micra node` sets for its process (runtime/debug.SetMemoryLimit;
	// Open does not set it: it is the process's, not one node's): 0 means
	// the default (ProcessMemoryLimit); NoMemoryLimit sets none (the
	// memory_limit setting, docs/node.md).
	MemoryLimit int64
	// Release: signed releases, how this node checks and takes them
	// (update.go, docs/releases.md).
	Release ReleaseConfig

	// ControlConfig: the local control API (ControlAddr, default
	// 127.0.0.1:0; "off" disables it), served while Run runs (control.go).
	ControlConfig

	Logger *slog.Logger
	// Registry receives every metric of this node (nil: a new one per node,
	// so many nodes in one process never collide).
	Registry *prometheus.Registry
}

// DefaultConfig is a volunteer's crawler node: overlay.DefaultConfig, the
// engine's defaults, IPMicra delegation.
func DefaultConfig() Config {
	c := Config{Crawler: true, Overlay: overlay.DefaultConfig(), Policy: "micra",
		Balance: delegation.BalanceSecondBest, BalanceHold: defaultBalanceHold}
	// a volunteer's node on the Internet: peers' private and loopback
	// addresses are neither kept nor dialled (the private_peers setting)
	c.Overlay.PublicDHTFilters = true
	// the sink keeps the pages' links: a dead crawler's delivered pages
	// are recovered from it with them, not fetched again; and a record
	// waits at most 2 s to be shipped, so a crash loses little more than
	// the fetches in flight (docs/testnet.md, crash faults)
	c.Crawl.ShipLinks = true
	c.Crawl.MaxCarrierHold = defaultCarrierHold
	return c
}

// TestnetConfig is a crawler node for in-process loopback networks:
// overlay.TestnetConfig and a fetcher allowed to reach loopback hosts.
func TestnetConfig() Config {
	c := DefaultConfig()
	c.Overlay = overlay.TestnetConfig() // (peers on loopback: no public filters)
	// A node has a data directory: its hand-off spool is the durable one,
	// without an fsync per commit (a testnet does not lose power).
	c.Overlay.HandoffInMemory = false
	c.Overlay.HandoffSyncWrites = false
	// A node is one host, bounded as a deployed one is: libp2p's resource
	// manager refuses a peer's streams past its limits before a goroutine
	// is spent on them (a flood of streams otherwise piles up goroutines
	// without bound: docs/SECURITY.md). Loopback connections are not
	// limited per address, so a testnet's peers all fit.
	c.Overlay.NullResourceManager = false
	c.Crawl.Fetch.AllowPrivate = true
	return c
}

// processTestnetGrace is a testnet node process's owner grace.
const processTestnetGrace = 20 * time.Second

// defaultCarrierHold: on a 12-crawler testnet with 4 killed, 2 s left 29
// pages (1.5 %) fetched twice against 193 at 30 s, for 2.2 % of the bytes
// fetched sent to the sink against 1.9 %; 1 s fetched no fewer twice and
// sent 2.6 %.
const defaultCarrierHold = 2 * time.Second

// defaultBalanceHold: a move costs a history transfer and a pause of the
// subnet's crawl, and moving it on before that settled crawled pages
// twice; a delegation that stood 10 minutes has been crawled from there.
const defaultBalanceHold = 10 * time.Minute

var policies = map[string]func(delegation.Deps, delegation.Config) delegation.Policy{
	"ipmicra": delegation.NewIPMicra,
	"micra":   delegation.NewMicra,
	"hash":    delegation.NewConsistentHash,
	"random":  delegation.NewRandom,
	// every crawler probed for every subnet: the reference experiments
	// measure the others against (costly: one probe per crawler)
	"optimal": delegation.NewOptimal,
}

// Validate reports every inconsistency in c, after the node's defaults are applied.
func (c *Config) Validate() error {
	var errs []error
	if c.DataDir == "" {
		errs = append(errs, errors.New("node: DataDir is required"))
	}
	if _, ok := policies[c.Policy]; !ok && c.Policy != "" {
		errs = append(errs, fmt.Errorf("node: unknown delegation policy %q (ipmicra, micra, hash, random, optimal)", c.Policy))
	}
	if c.Hierarchy != nil && c.HierarchyFile != "" {
		errs = append(errs, errors.New("node: Hierarchy and HierarchyFile exclude each other"))
	}
	if err := c.Release.validate(); err != nil {
		errs = append(errs, err)
	}
	if w := c.SeedWait; w.Members < 0 || w.Quiet < 0 || w.Max < 0 {
		errs = append(errs, fmt.Errorf("node: SeedWait %+v: no field may be negative", w))
	}
	if !c.Crawler && len(c.Seeds) > 0 {
		errs = append(errs, errors.New("node: seeds need the crawler role"))
	}
	if c.Sink != "" {
		if _, err := peer.AddrInfoFromString(c.Sink); err != nil {
			errs = append(errs, fmt.Errorf("node: sink %q: want a multiaddr ending in /p2p/<peer id>: %w", c.Sink, err))
		}
		if c.Crawl.Receiver != nil {
			errs = append(errs, errors.New("node: a sink and a carrier receiver (carriers) exclude each other"))
		}
	}
	if c.Crawl.DB != nil || c.Crawl.StateDir != "" || c.Crawl.Router != nil {
		errs = append(errs, errors.New("node: Crawl.DB, Crawl.StateDir and Crawl.Router are the node's to set"))
	}
	if err := c.validateControl(); err != nil {
		errs = append(errs, err)
	}
	if c.Crawler && c.Overlay.Capacity <= 0 {
		// a peer advertising capacity 0 is no crawler to the others
		errs = append(errs, fmt.Errorf("node: capacity %d: a crawler needs a positive capacity (pages per day)", c.Overlay.Capacity))
	}
	if c.Overlay.LoopbackTestnet || c.Crawl.Fetch.AllowPrivate {
		// such a node fetches private and loopback addresses: reachable by
		// other machines, they could make it fetch the operator's network
		for _, a := range c.Overlay.ListenAddrs {
			m, err := ma.NewMultiaddr(a)
			if err != nil {
				continue // the overlay reports it
			}
			if !manet.IsIPLoopback(m) {
				errs = append(errs, fmt.Errorf("node: listen address %s: a testnet node (private fetches allowed) listens on loopback only", a))
			}
		}
	}
	oc := c.Overlay
	c.overlayDefaults(&oc)
	if err := oc.Validate(); err != nil {
		errs = append(errs, err)
	}
	return errors.Join(errs...)
}

// overlayDefaults fills the overlay fields the node owns.
func (c *Config) overlayDefaults(oc *overlay.Config) {
	if c.DataDir == "" {
		return
	}
	if oc.KeyFile == "" {
		oc.KeyFile = filepath.Join(c.DataDir, "identity.key")
	}
	if oc.HandoffDir == "" && !oc.HandoffInMemory {
		oc.HandoffDir = filepath.Join(c.DataDir, "handoff")
	}
	if !c.Crawler {
		oc.Capacity = 0
	}
}

// File is the file form of a node's configuration (LoadFile, ReadFile:
// TOML, or JSON for older files); every key is a Setting (settings.go), also
// given as MICRA_<KEY> or a flag. Durations are Go duration strings ("1s",
// "24h"); unknown fields are errors, so a misspelt key is reported, not
// silently ignored. Relative paths (data_dir, key_file, psk_file, hierarchy,
// carriers, seeds_file: a new path field joins them in resolvePaths) are
// relative to the file's directory.
type File struct {
	DataDir string `json:"data_dir"`
	Crawler *bool  `json:"crawler,omitempty"` // default true
	Testnet bool   `json:"testnet,omitempty"` // start from TestnetConfig (loopback)
	// PrivatePeers keeps peers' private addresses (overlay.Config.PublicDHTFilters off)
	PrivatePeers bool `json:"private_peers,omitempty"`
	// IdentitiesPerIP and IdentitiesPerPeer: an open network's identity
	// limits (overlay.Config's); 0: the default
	IdentitiesPerIP   int      `json:"identities_per_ip,omitempty"`
	IdentitiesPerPeer int      `json:"identities_per_peer,omitempty"`
	Listen            []string `json:"listen,omitempty"`
	Bootstrap         []string `json:"bootstrap,omitempty"`
	KeyFile           string   `json:"key_file,omitempty"`
	PSKFile           string   `json:"psk_file,omitempty"`
	Network           string   `json:"network,omitempty"`
	Certificate       string   `json:"certificate,omitempty"`
	Membership        string   `json:"membership,omitempty"` // swim (default), heartbeat
	CrawlerAddr       string   `json:"crawler_addr,omitempty"`
	Capacity          int      `json:"capacity,omitempty"`
	Policy            string   `json:"policy,omitempty"`
	Balance           string   `json:"balance,omitempty"` // off, release, second-best (default), least-cost
	BalanceHold       string   `json:"balance_hold,omitempty"`
	Hierarchy         string   `json:"hierarchy,omitempty"`
	Metrics           string   `json:"metrics,omitempty"`
	API               string   `json:"api,omitempty"`          // control API host:port (default 127.0.0.1:0; "off")
	Pprof             bool     `json:"pprof,omitempty"`        // /debug/pprof/ on the control API
	MemoryLimit       string   `json:"memory_limit,omitempty"` // soft limit of the runtime's memory ("96MiB", "off")

	Seeds        []string `json:"seeds,omitempty"`
	SeedsFile    string   `json:"seeds_file,omitempty"`   // one URL a line, added to Seeds
	SeedMembers  int      `json:"seed_members,omitempty"` // route seeds once this many members are live (SeedWait.Members)
	Concurrency  int      `json:"concurrency,omitempty"`
	PerIP        int      `json:"per_ip,omitempty"`
	MinDelay     string   `json:"min_delay,omitempty"`
	MaxDepth     int      `json:"max_depth,omitempty"`
	AllowPrivate bool     `json:"allow_private,omitempty"`
	Carriers     string   `json:"carriers,omitempty"`   // default DataDir/carriers
	Sink         string   `json:"sink,omitempty"`       // the index sink's multiaddr/p2p/ID (instead of carriers)
	ShipLinks    *bool    `json:"ship_links,omitempty"` // records carry their pages' out-links (default true)
	Monitor      bool     `json:"monitor,omitempty"`
	Sleep        string   `json:"sleep,omitempty"`
	CarrierHold  string   `json:"carrier_hold,omitempty"`
	Sync         bool     `json:"sync,omitempty"`

	AutoUpdate  string `json:"auto_update,omitempty"`  // off, notify (default), on
	ReleaseRoot string `json:"release_root,omitempty"` // the trusted release root to install
	ReleaseFeed string `json:"release_feed,omitempty"` // a published release repository to read
	// ReleaseFeedEvery is how often the feed is read; ReleaseRate the bytes
	// a second served of release binaries
	ReleaseFeedEvery string `json:"release_feed_every,omitempty"`
	ReleaseRate      int    `json:"release_rate,omitempty"`
}

// LoadFile reads a node configuration, TOML or JSON by its extension
// (ReadFile). Errors name the file and, for syntax and type errors, the line.
func LoadFile(path string) (Config, error) {
	f, err := ReadFile(path)
	if err != nil {
		return Config{}, err
	}
	c, err := f.Config()
	if err != nil {
		return Config{}, fmt.Errorf("%s:%w", path, err)
	}
	return c, nil
}

// Parse decodes the JSON form (errors start with "line:col: "). There is no
// file, so relative paths stay as written (relative to the working directory).
func Parse(b []byte) (Config, error) {
	f, err := decodeFile(b)
	if err != nil {
		return Config{}, err
	}
	return f.Config()
}

func decodeFile(b []byte) (File, error) {
	dec := json.NewDecoder(bytes.NewReader(b))
	dec.DisallowUnknownFields()
	var f File
	if err := dec.Decode(&f); err != nil {
		return File{}, jsonError(b, dec, err)
	}
	if _, err := dec.Token(); err != io.EOF {
		return File{}, fmt.Errorf("%s: unexpected data after the configuration object", position(b, dec.InputOffset()))
	}
	return f, nil
}

// resolvePaths makes every relative path of f relative to dir, the
// directory of the file it was read from, so a configuration names the same
// files wherever the node is started; absolute paths stay as they are.
func (f *File) resolvePaths(dir string) {
	for _, p := range []*string{&f.DataDir, &f.KeyFile, &f.PSKFile, &f.Certificate, &f.Hierarchy, &f.Carriers, &f.SeedsFile, &f.ReleaseRoot, &f.ReleaseFeed} {
		if *p != "" && !filepath.IsAbs(*p) {
			*p = filepath.Join(dir, *p)
		}
	}
}

// Config turns the file form into a Config.
func (f File) Config() (Config, error) {
	c := DefaultConfig()
	if f.Testnet {
		c = TestnetConfig()
		// A process testnet's killed node is started again 8–15 s later
		// (micra testnet chaos) and takes a few seconds to open: its
		// subnets wait for it rather than be crawled twice
		// (overlay.Config.OwnerGrace; in-process tests keep 8 s).
		c.Overlay.OwnerGrace = processTestnetGrace
	}
	var errs []error
	dur := func(name, s string, dst *time.Duration) {
		if s == "" {
			return
		}
		d, err := time.ParseDuration(s)
		if err != nil || d < 0 {
			errs = append(errs, fmt.Errorf(" %s: %q is not a duration (e.g. \"1s\", \"24h\")", name, s))
			return
		}
		*dst = d
	}
	for name, v := range map[string]int{"capacity": f.Capacity, "max_depth": f.MaxDepth, "concurrency": f.Concurrency, "per_ip": f.PerIP, "seed_members": f.SeedMembers,
		"identities_per_ip": f.IdentitiesPerIP, "identities_per_peer": f.IdentitiesPerPeer} {
		if v < 0 {
			errs = append(errs, fmt.Errorf(" %s: %d must not be negative", name, v))
		}
	}
	c.DataDir = f.DataDir
	if f.Crawler != nil {
		c.Crawler = *f.Crawler
	}
	if len(f.Listen) > 0 {
		c.Overlay.ListenAddrs = f.Listen
	}
	c.Overlay.Bootstrap = f.Bootstrap
	c.Overlay.KeyFile = f.KeyFile
	c.Overlay.PSKFile = f.PSKFile
	c.Network, c.CertificateFile = f.Network, f.Certificate
	if f.CrawlerAddr != "" {
		a, err := netip.ParseAddr(f.CrawlerAddr)
		if err != nil {
			errs = append(errs, fmt.Errorf(" crawler_addr: %w", err))
		}
		c.Overlay.CrawlerAddr = a
	}
	if f.Capacity != 0 {
		c.Overlay.Capacity = f.Capacity
	}
	if f.Policy != "" {
		c.Policy = strings.ToLower(f.Policy)
	}
	if f.Balance != "" {
		b, err := delegation.ParseBalanceMode(f.Balance)
		if err != nil {
			errs = append(errs, fmt.Errorf(" balance: %w", err))
		}
		c.Balance = b
	}
	c.HierarchyFile = f.Hierarchy
	c.MetricsAddr = f.Metrics
	c.ControlAddr, c.Pprof = controlAddrSetting(f.API), f.Pprof
	if f.MemoryLimit != "" {
		n, err := ParseMemoryLimit(f.MemoryLimit)
		if err != nil {
			errs = append(errs, fmt.Errorf(" memory_limit: %w", err))
		}
		c.MemoryLimit = n
	}
	seeds, err := f.allSeeds()
	if err != nil {
		errs = append(errs, err)
	}
	c.Seeds = seeds
	c.SeedWait.Members = f.SeedMembers
	c.Crawl.Concurrency = f.Concurrency
	c.Crawl.Fetch.PerIPLimit = f.PerIP
	dur("min_delay", f.MinDelay, &c.Crawl.Fetch.MinDelay)
	if f.PrivatePeers {
		c.Overlay.PublicDHTFilters = false
	}
	if f.IdentitiesPerIP > 0 {
		c.Overlay.IdentitiesPerIP = f.IdentitiesPerIP
	}
	if f.IdentitiesPerPeer > 0 {
		c.Overlay.IdentitiesPerPeer = f.IdentitiesPerPeer
	}
	switch f.Membership {
	case "": // the default: swim
	case "swim":
		c.Overlay.Membership = overlay.MembershipSWIM
	case "heartbeat":
		c.Overlay.Membership = overlay.MembershipHeartbeat
	default:
		errs = append(errs, fmt.Errorf(" membership: %w", checkMembership(f.Membership)))
	}
	dur("balance_hold", f.BalanceHold, &c.BalanceHold)
	if f.MaxDepth != 0 {
		// on the default scope: a scope with only MaxDepth set would turn
		// every other trap limit off (the zero scope means the default)
		if sc := c.Crawl.Scope; sc.MaxDepth == 0 && sc.MaxPagesPerHost == 0 && sc.MaxURLLength == 0 &&
			sc.MaxPathRepeat == 0 && sc.MaxPathSegments == 0 && sc.MaxQueryParams == 0 {
			hosts := sc.Hosts
			c.Crawl.Scope = urlnorm.DefaultScope()
			c.Crawl.Scope.Hosts = hosts
		}
		c.Crawl.Scope.MaxDepth = f.MaxDepth
	}
	c.Crawl.Fetch.AllowPrivate = c.Crawl.Fetch.AllowPrivate || f.AllowPrivate
	if f.Carriers != "" {
		c.Crawl.Receiver = pack.FileSink{Dir: f.Carriers}
	}
	c.Sink = f.Sink
	if f.ShipLinks != nil {
		c.Crawl.ShipLinks = *f.ShipLinks
	}
	c.Crawl.Monitor.Enabled = f.Monitor
	dur("sleep", f.Sleep, &c.Crawl.Monitor.Sleep)
	dur("carrier_hold", f.CarrierHold, &c.Crawl.MaxCarrierHold)
	c.Crawl.SyncWrites = f.Sync
	if f.AutoUpdate != "" {
		m, err := ParseAutoUpdate(f.AutoUpdate)
		if err != nil {
			errs = append(errs, fmt.Errorf(" auto_update: %w", err))
		}
		c.Release.AutoUpdate = m
	}
	c.Release.Root, c.Release.Feed = f.ReleaseRoot, f.ReleaseFeed
	dur("release_feed_every", f.ReleaseFeedEvery, &c.Release.FeedEvery)
	if f.ReleaseRate < 0 {
		errs = append(errs, fmt.Errorf(" release_rate: %d: want bytes a second, more than 0", f.ReleaseRate))
	}
	c.Release.Rate = f.ReleaseRate
	if len(errs) > 0 {
		return Config{}, errors.Join(errs...)
	}
	return c, nil
}

func jsonError(b []byte, dec *json.Decoder, err error) error {
	var se *json.SyntaxError
	var te *json.UnmarshalTypeError
	switch {
	case errors.As(err, &se):
		return fmt.Errorf("%s: %v", position(b, se.Offset), err)
	case errors.As(err, &te):
		return fmt.Errorf("%s: %s: want %s, got JSON %s", position(b, te.Offset), te.Field, te.Type, te.Value)
	case errors.Is(err, io.EOF):
		return errors.New("1:1: empty configuration")
	}
	return fmt.Errorf("%s: %v", position(b, dec.InputOffset()), err)
}

// position renders a byte offset as line:column (1-based).
func position(b []byte, off int64) string {
	off = min(max(off, 0), int64(len(b)))
	line := 1 + bytes.Count(b[:off], []byte("\n"))
	col := off - int64(bytes.LastIndexByte(b[:off], '\n'))
	return fmt.Sprintf("%d:%d", line, col)
}

// resolver is the fetcher's resolver, or the system's.
func (c *Config) resolver() fetch.Resolver {
	if c.Crawl.Fetch.Resolver != nil {
		return c.Crawl.Fetch.Resolver
	}
	return nil
}
