// Package cluster owns `micra testnet`: a network of real micra processes
// on loopback — N crawler nodes, an index sink and a synthetic web — that
// stands in an emulated world (testnet/emu), so each host is crawled by the
// crawler nearest to it as it would be on the Internet.
//
// Up starts it and writes DIR/testnet.json (State) for the commands that
// watch and stop it from another terminal; Testnet.Crawl seeds it and waits
// until the crawl has reached the sink; Testnet.Down stops every process
// gracefully. Each node has its own home under DIR/nodes/NN (data, log),
// the sink under DIR/sink; DIR/world.json is the emulated world every node
// reads.
package cluster

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/emu"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// Options configures a testnet.
type Options struct {
	Dir    string // the testnet's directory (created)
	Binary string // the micra binary every process runs
	Peers  int    // crawler nodes (default 12)
	// Spare places the world keeps for crawlers that join later (`micra
	// testnet up --spare`; DIR/join.toml names the first): the world is
	// then the simulator's for Peers+Spare crawlers, and a crawl's scores
	// count the spare places among the crawlers a host may be nearest to.
	Spare int
	Sink  bool // start an index sink; crawlers deliver to it
	// Open runs an open network (anyone who runs micra is a member);
	// otherwise DIR/network.key admits the testnet's nodes and sink
	// (docs/SECURITY.md: networks with admission).
	Open   bool
	Policy string // delegation policy of every node (default micra)
	// World is the emulated world; Crawlers and Hosts are filled in from
	// Peers and Web. Seed 0 means 1.
	World emu.Spec
	// Web shapes the synthetic web (HostsPerIP is forced to 1: each host
	// has its own address, hence its own place in the world).
	Web synthweb.Config
	// NodeArgs are extra flags for every `micra node`.
	NodeArgs []string
	// NodeBinary, if set, is the binary node i runs instead of Binary (a
	// node that installs releases replaces its own executable);
	// NodeArgsFor, if set, adds flags to node i's after NodeArgs.
	NodeBinary  func(i int) string
	NodeArgsFor func(i int) []string
	// Kill is how many crawler nodes a crawl SIGKILLs once KillAt (a
	// fraction, default 0.3) of the web's pages have been fetched: crash
	// faults, measured at the sink (coverage, overlap) and the web (pages
	// fetched twice). Nodes 1, 2, …
	// are killed: node 0 (every node's bootstrap peer) and the seeded
	// node are not.
	Kill   int
	KillAt float64
	// Restart, if positive, starts the killed nodes (and a killed sink)
	// again this long after the kill, on their homes: same identity and
	// data. Zero leaves killed nodes dead (a killed sink is started again
	// after 5 s: a crawl is measured at the sink).
	Restart time.Duration
	// KillSink SIGKILLs the sink at the kill point too.
	KillSink bool
	// Partition, if positive, splits the crawlers into two halves at the
	// kill point (nodes 0…N/2-1 with the sink, and the rest) for this long,
	// then heals it and measures how long the owners take to agree.
	Partition time.Duration
	// Subscriber starts an indexer beside the sink: a `micra subscribe
	// --follow --cursor-file` process writing every record it reads to
	// DIR/subscriber/records.ndjson (CheckSubscriber reads it).
	Subscriber bool
	// Tree is the hierarchy the world is placed on (nil: the embedded one).
	Tree *hierarchy.Tree
	// Log receives one line per step (nil: discarded).
	Log io.Writer
}

func (o *Options) defaults() {
	if o.Peers <= 0 {
		o.Peers = 12
	}
	if o.KillAt <= 0 {
		o.KillAt = 0.3
	}
	if o.Policy == "" {
		o.Policy = "micra"
	}
	if o.World.Seed == 0 {
		o.World.Seed = 1
	}
	if o.Web.Seed == 0 {
		o.Web.Seed = o.World.Seed
	}
	if o.Web.Hosts <= 0 {
		o.Web.Hosts = 200
	}
	if o.Web.PagesPerHost <= 0 {
		o.Web.PagesPerHost = 10
	}
	o.Web.HostsPerIP = 1
	o.Web = o.Web.Realistic()
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// State is DIR/testnet.json: what `micra testnet status` and `down` read.
type State struct {
	Supervisor int         `json:"supervisor_pid"` // the process that runs the testnet (`micra testnet up`)
	Policy     string      `json:"policy"`
	WebPort    int         `json:"web_port"`
	Seeds      string      `json:"seeds"`               // the synthetic web's home pages, one per line
	World      string      `json:"world"`               // world.json, the emulated world every node reads
	Places     int         `json:"places"`              // the world's crawler places: the nodes', then the spare ones
	Join       string      `json:"join"`                // join.toml: the configuration of a node that joins (JoinConfig)
	Network    string      `json:"network,omitempty"`   // the network key's id (empty: an open network)
	NodeArgs   []string    `json:"node_args,omitempty"` // the extra flags every node runs with (Options.NodeArgs)
	Sink       *SinkState  `json:"sink,omitempty"`
	Nodes      []NodeState `json:"nodes"`
	// Subscriber is the records file of the indexer beside the sink
	// (Options.Subscriber).
	Subscriber string `json:"subscriber,omitempty"`
}

// SinkState is the sink's addresses.
type SinkState struct {
	PID  int    `json:"pid"`
	Addr string `json:"addr"` // multiaddr/p2p/ID crawlers deliver to
	HTTP string `json:"http"` // http://HOST:PORT of its streams and status
	Log  string `json:"log"`
}

// NodeState is one node's identity and addresses.
type NodeState struct {
	Index  int      `json:"index"`
	PID    int      `json:"pid"`
	PeerID string   `json:"peer_id"`
	Addrs  []string `json:"addrs"` // multiaddrs with /p2p/ID
	Data   string   `json:"data"`
	API    string   `json:"api"` // its control API (http://127.0.0.1:PORT)
	Log    string   `json:"log"`
	// Place is the world's address, position and capacity it stands at.
	Place     string  `json:"place"`
	Lat       float64 `json:"lat"`
	Lon       float64 `json:"lon"`
	Capacity  int     `json:"capacity"`
	Bootstrap bool    `json:"bootstrap,omitempty"`
}

// Testnet is a running testnet.
type Testnet struct {
	o     Options
	Web   *synthweb.Web
	World *emu.World
	State State

	key    *NetworkKey // nil: an open network
	sink   *proc
	nodes  []*proc
	killed map[int]bool // nodes a crawl SIGKILLed (by index), while they are down
	// sinkDown: the sink was SIGKILLed and not started again
	sinkDown bool
	// stalled: nodes stopped with SIGSTOP (StallNode), by index
	stalled map[int]bool
	// partitioned: a partition is in force (Partition)
	partitioned bool
	sub         *proc // the subscriber (Options.Subscriber)
	down        sync.Once
}

// StateFile is the path of a testnet directory's State.
func StateFile(dir string) string { return filepath.Join(dir, "testnet.json") }

// ReadState reads a testnet directory's State.
func ReadState(dir string) (State, error) {
	b, err := os.ReadFile(StateFile(dir))
	if errors.Is(err, os.ErrNotExist) {
		return State{}, fmt.Errorf("no testnet in %s (%s not found): start one with `micra testnet up --dir %s`", dir, StateFile(dir), dir)
	}
	if err != nil {
		return State{}, err
	}
	var s State
	if err := json.Unmarshal(b, &s); err != nil {
		return State{}, fmt.Errorf("%s: %w", StateFile(dir), err)
	}
	return s, nil
}

// Up starts the synthetic web, the sink and the nodes, and returns once
// every node is listening. On error it stops what it started.
func Up(ctx context.Context, o Options) (t *Testnet, err error) {
	o.defaults()
	if o.Dir == "" || o.Binary == "" {
		return nil, errors.New("cluster: Dir and Binary are required")
	}
	if _, err := os.Stat(StateFile(o.Dir)); err == nil {
		if s, err := ReadState(o.Dir); err == nil && processAlive(s.Supervisor) {
			return nil, fmt.Errorf("a testnet runs in %s already (pid %d): stop it with `micra testnet down --dir %s`", o.Dir, s.Supervisor, o.Dir)
		}
	}
	if _, err := mkdir(o.Dir); err != nil {
		return nil, err
	}
	t = &Testnet{o: o, State: State{Supervisor: os.Getpid(), Policy: o.Policy}}
	defer func() {
		if err != nil {
			t.Down()
			t = nil
		}
	}()
	if t.Web, err = synthweb.Start(o.Web); err != nil {
		return t, err
	}
	t.State.WebPort = t.Web.Port()
	seeds := filepath.Join(o.Dir, "seeds.txt")
	if err := os.WriteFile(seeds, []byte(strings.Join(t.Web.Seeds(), "\n")+"\n"), 0o644); err != nil {
		return t, err
	}
	t.State.Seeds = seeds
	if !o.Open {
		if t.key, err = NewNetworkKey(o.Dir); err != nil {
			return t, err
		}
		t.State.Network = t.key.id.String()
	}

	spec := o.World
	if o.Spare < 0 {
		return t, fmt.Errorf("cluster: Spare %d: want 0 or more", o.Spare)
	}
	spec.Crawlers, spec.Hosts = o.Peers+o.Spare, nil
	for i, name := range t.Web.Hosts() {
		spec.Hosts = append(spec.Hosts, emu.Host{Name: name, Loopback: t.Web.HostIP(i)})
	}
	tree := o.Tree
	if tree == nil {
		if tree, err = hierarchy.Default(); err != nil {
			return t, err
		}
	}
	if t.World, err = spec.Build(ctx, tree); err != nil {
		return t, fmt.Errorf("cluster: world: %w", err)
	}
	for i := range t.World.Spec.Places {
		// the simulator's capacity counts hosts (one decision each); a
		// node's counts pages (every URL its frontier takes on)
		t.World.Spec.Places[i].Capacity *= o.Web.PagesPerHost
	}
	worldFile := filepath.Join(o.Dir, "world.json")
	if err := t.World.Spec.WriteFile(worldFile); err != nil {
		return t, err
	}
	t.State.World, t.State.Places = worldFile, spec.Crawlers
	fmt.Fprintf(o.Log, "world: %d crawlers and %d hosts placed (seed %d, %s hosts, %s latency); synthetic web on port %d\n",
		spec.Crawlers, len(spec.Hosts), spec.Seed, or(spec.HostDist, "zipf"), or(spec.Latency, "formula"), t.Web.Port())

	// The first node is the others' bootstrap peer and the sink's; the
	// rest start together. No node is told the sink: they find it on the
	// network (it announces itself in its membership heartbeats), and it
	// admits the members it hears.
	if err := t.startNode(ctx, 0, worldFile, nil); err != nil {
		return t, err
	}
	boot := t.State.Nodes[0].Addrs
	if o.Sink {
		if err := t.startSink(ctx, boot, "", ""); err != nil {
			return t, err
		}
	}
	errs := make([]error, o.Peers)
	var wg sync.WaitGroup
	for i := 1; i < o.Peers; i++ {
		t.State.Nodes = append(t.State.Nodes, NodeState{})
		t.nodes = append(t.nodes, nil)
	}
	for i := 1; i < o.Peers; i++ {
		wg.Go(func() { errs[i] = t.startNode(ctx, i, worldFile, boot) })
	}
	wg.Wait()
	if err := errors.Join(errs...); err != nil {
		return t, err
	}
	if err := t.writeJoin(); err != nil {
		return t, err
	}
	if o.Sink && o.Subscriber {
		if err := t.startSubscriber(); err != nil {
			return t, err
		}
	}
	if err := t.writeState(); err != nil {
		return t, err
	}
	fmt.Fprintf(o.Log, "%d nodes up (policy %s)\n", o.Peers, o.Policy)
	return t, nil
}

// membershipArg is the membership protocol node flags set (--membership
// X or --membership=X; the last one), "" if none.
func membershipArg(args []string) string {
	m := ""
	for i, a := range args {
		switch {
		case strings.HasPrefix(a, "--membership="):
			m = strings.TrimPrefix(a, "--membership=")
		case a == "--membership" && i+1 < len(args):
			m = args[i+1]
		}
	}
	return m
}

// startSink starts the sink on DIR/sink; listen and httpAddr are its
// addresses ("": any free port), the last run's when it starts again.
func (t *Testnet) startSink(ctx context.Context, boot []string, listen, httpAddr string) error {
	dir, err := mkdir(t.o.Dir, "sink")
	if err != nil {
		return err
	}
	args := []string{"sink", "--data", filepath.Join(dir, "data"),
		"--listen", or(listen, "/ip4/127.0.0.1/tcp/0"), "--http", or(httpAddr, "127.0.0.1:0"), "--no-sync"}
	if t.key != nil {
		if err := t.key.Admit(filepath.Join(dir, "data"), true); err != nil {
			return err
		}
		args = append(args, "--network", t.key.id.String())
	}
	for _, b := range boot {
		args = append(args, "--bootstrap", b)
	}
	if m := membershipArg(t.o.NodeArgs); m != "" {
		args = append(args, "--membership", m) // the network's: the nodes'
	}
	p, err := start("sink", t.o.Binary, filepath.Join(dir, "sink.log"), args...)
	if err != nil {
		return err
	}
	t.sink = p
	wctx, cancel := context.WithTimeout(ctx, time.Minute)
	defer cancel()
	addr, err := p.await(wctx, "sink listening ")
	if err != nil {
		return err
	}
	streams, err := p.await(wctx, "sink streams ")
	if err != nil {
		return err
	}
	httpURL, _, _ := strings.Cut(streams, "/v1/records")
	t.State.Sink = &SinkState{PID: p.pid(), Addr: addr, HTTP: httpURL, Log: p.logPath()}
	fmt.Fprintf(t.o.Log, "sink: %s, %s\n", addr, httpURL)
	return nil
}

// writeHome makes home a micra home of a loopback testnet node, as micra
// init --testnet does (the identity key is created on the first start): the
// node reads its config.toml, not the user's ~/.micra (and start keeps the
// shell's MICRA_<KEY> variables from it).
func writeHome(home string, i int, network string) error {
	var b strings.Builder
	b.WriteString("# a node of micra testnet (the testnet's flags override this file)\n")
	// each peer on a loopback address of its own: the emulated wire knows
	// peers by their addresses (emu.Place.WireRTT)
	f := node.File{DataDir: "data", Testnet: true, Network: network, Listen: []string{"/ip4/" + emu.PeerLoopback(i).String() + "/tcp/0"}}
	if err := node.WriteTOML(&b, f); err != nil {
		return err
	}
	return os.WriteFile(filepath.Join(home, "config.toml"), []byte(b.String()), 0o600)
}

// startNode starts node i and waits until it listens and serves its
// control API.
func (t *Testnet) startNode(ctx context.Context, i int, worldFile string, boot []string) error {
	home, err := mkdir(t.o.Dir, "nodes", fmt.Sprintf("%02d", i))
	if err != nil {
		return err
	}
	data := filepath.Join(home, "data")
	if err := writeHome(home, i, t.State.Network); err != nil {
		return err
	}
	if t.key != nil {
		if err := t.key.Admit(data, false); err != nil {
			return err
		}
	}
	args := []string{"node", "--home", home,
		"--emulate", worldFile, "--emulate-peer", fmt.Sprint(i), "--policy", t.o.Policy}
	for _, b := range boot {
		args = append(args, "--bootstrap", b)
	}
	args = append(args, t.o.NodeArgs...)
	bin := t.o.Binary
	if t.o.NodeBinary != nil {
		bin = t.o.NodeBinary(i)
	}
	if t.o.NodeArgsFor != nil {
		args = append(args, t.o.NodeArgsFor(i)...)
	}
	p, err := start(fmt.Sprintf("node %d", i), bin, filepath.Join(home, "node.log"), args...)
	if err != nil {
		return err
	}
	if i < len(t.nodes) {
		t.nodes[i] = p // (started again, or one of a group started together)
	} else {
		t.nodes = append(t.nodes, p)
		t.State.Nodes = append(t.State.Nodes, NodeState{})
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	if _, err := p.await(wctx, "listening "); err != nil {
		return err
	}
	c := t.World.Crawler(i)
	ns := NodeState{Index: i, PID: p.pid(), Data: data, Log: p.logPath(), Addrs: p.all("listening "),
		Place: c.Addr.String(), Lat: c.Lat, Lon: c.Lon, Capacity: c.Capacity, Bootstrap: i == 0}
	if len(ns.Addrs) > 0 {
		_, ns.PeerID, _ = strings.Cut(ns.Addrs[0], "/p2p/")
	}
	// the control API's URL appears in the data directory once Run starts
	for ns.API == "" {
		if ns.API, err = node.ReadAPIFile(data); err != nil && (p.exited() || wctx.Err() != nil) {
			return fmt.Errorf("node %d: %w (its log: %s)", i, err, p.logPath())
		}
		if ns.API == "" {
			time.Sleep(20 * time.Millisecond)
		}
	}
	t.State.Nodes[i] = ns
	return nil
}

func (t *Testnet) writeState() error {
	b, err := json.MarshalIndent(t.State, "", "  ")
	if err != nil {
		return err
	}
	tmp := StateFile(t.o.Dir) + ".tmp"
	if err := os.WriteFile(tmp, append(b, '\n'), 0o644); err != nil {
		return err
	}
	return os.Rename(tmp, StateFile(t.o.Dir))
}

// Down stops the nodes (SIGTERM: each announces it leaves and flushes its
// state), then the sink and the synthetic web, and removes testnet.json and
// join.toml.
func (t *Testnet) Down() error {
	var errs []error
	t.down.Do(func() {
		var mu sync.Mutex
		var wg sync.WaitGroup
		for i := range t.stalled {
			t.ResumeNode(i) // (a stopped process would not stop)
		}
		if t.sub != nil {
			errs = append(errs, t.sub.stop(10*time.Second))
		}
		for i, p := range t.nodes {
			if p == nil || t.killed[i] {
				continue // (a node the crawl killed on purpose)
			}
			wg.Go(func() {
				if err := p.stop(30 * time.Second); err != nil {
					mu.Lock()
					errs = append(errs, err)
					mu.Unlock()
				}
			})
		}
		wg.Wait()
		if t.sink != nil && !t.sinkDown {
			errs = append(errs, t.sink.stop(30*time.Second))
		}
		if t.Web != nil {
			errs = append(errs, t.Web.Close())
		}
		// join.toml names addresses nobody listens on any more
		for _, f := range []string{t.State.Join, StateFile(t.o.Dir)} {
			if f == "" {
				continue
			}
			if err := os.Remove(f); err != nil && !errors.Is(err, os.ErrNotExist) {
				errs = append(errs, err)
			}
		}
	})
	return errors.Join(errs...)
}

func processAlive(pid int) bool {
	if pid <= 0 {
		return false
	}
	p, err := os.FindProcess(pid)
	if err != nil {
		return false
	}
	return p.Signal(syscallZero) == nil
}

func or(s, def string) string {
	if s == "" {
		return def
	}
	return s
}
