package main

// `micra node`: one crawler peer of the overlay, until interrupted.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"strings"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/node"
)

type nodeOptions struct {
	config, data, seeds, crawlerAddr, policy, hierarchy, metrics, sink string
	api                                                                string
	listen, bootstrap                                                  []string
	testnet, noCrawl, allowPrivate                                     bool
	concurrency, seedMembers                                           int
	emulate                                                            string
	emulatePeer                                                        int
}

func init() {
	o := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node [--config FILE] [--data DIR] [--listen MULTIADDR] [--bootstrap MULTIADDR/p2p/ID] [--seeds FILE]",
		Short: "run one micra peer: overlay (DHT, gossip, hand-offs) + crawler of the subnets delegated to it",
		Long: `Runs one micra node until interrupted (Ctrl-C / SIGTERM): a libp2p peer of the
overlay that takes part in delegation and, with the crawler role (default), crawls
the subnets delegated to it, hands every other URL to its owner and accepts the URLs
others hand to it. Everything lives under the data directory (identity key, crawl
state, hand-off spool, carriers), so a restarted node resumes.

--config FILE reads a JSON configuration (node.File: data_dir, listen, bootstrap,
crawler_addr, policy, seeds, concurrency, min_delay, metrics, …; unknown keys are
errors; relative paths in it are relative to the file's directory). Flags given on
the command line override the file; their paths are relative to the working directory.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNode(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.config, "config", "", "JSON configuration file")
	f.StringVar(&o.data, "data", "", "data directory (identity, state, hand-off spool, carriers)")
	f.StringArrayVar(&o.listen, "listen", nil, "listen multiaddr (repeatable; default /ip4/0.0.0.0/tcp/4001 and QUIC)")
	f.StringArrayVar(&o.bootstrap, "bootstrap", nil, "bootstrap peer multiaddr with /p2p/<id> (repeatable)")
	f.StringVar(&o.seeds, "seeds", "", "seed file (one URL per line, # comments); give seeds to any one node")
	f.StringVar(&o.crawlerAddr, "crawler-addr", "", "this crawler's public address (its subnet is delegated to it on join)")
	f.StringVar(&o.policy, "policy", "", "delegation policy: ipmicra (default), micra, hash, random")
	f.StringVar(&o.hierarchy, "hierarchy", "", "hierarchy snapshot file (default: the embedded one)")
	f.StringVar(&o.metrics, "metrics", "", "serve Prometheus /metrics on this address (e.g. 127.0.0.1:9102)")
	f.StringVar(&o.api, "api", "", "control API address on loopback, for micra id/status/peers/owners/seed (default 127.0.0.1:0, named in DATA/api; \"off\")")
	f.StringVar(&o.sink, "sink", "", "deliver carriers to this index sink (its multiaddr with /p2p/<id>, as `micra sink` prints it)")
	f.BoolVar(&o.testnet, "testnet", false, "loopback testnet defaults (probes and fetches to loopback allowed)")
	f.BoolVar(&o.noCrawl, "no-crawl", false, "overlay peer only: no crawler role")
	f.BoolVar(&o.allowPrivate, "allow-private", false, "allow fetching private and loopback addresses")
	f.IntVar(&o.concurrency, "concurrency", 0, "hosts crawled in parallel (default 64)")
	f.StringVar(&o.emulate, "emulate", "", "testnet only: stand in this emulated world (the world.json `micra testnet up` writes)")
	f.IntVar(&o.emulatePeer, "emulate-peer", 0, "with --emulate: this node is the world's crawler number N")
	f.IntVar(&o.seedMembers, "seed-members", 0, "route the seeds once this many members (this node included) are live (default: once no member joined for 3 heartbeats)")
	rootCmd.AddCommand(cmd)
}

func runNode(cmd *cobra.Command, o *nodeOptions) error {
	var cfg node.Config
	var err error
	switch {
	case o.config != "":
		if cfg, err = node.LoadFile(o.config); err != nil {
			return err
		}
		if o.testnet {
			return errors.New("node: --testnet with --config: set \"testnet\": true in the file")
		}
	case o.testnet:
		cfg = node.TestnetConfig()
	default:
		cfg = node.DefaultConfig()
	}
	fl := cmd.Flags()
	if fl.Changed("data") {
		cfg.DataDir = o.data
	}
	if fl.Changed("listen") {
		cfg.Overlay.ListenAddrs = o.listen
	}
	if fl.Changed("bootstrap") {
		cfg.Overlay.Bootstrap = o.bootstrap
	}
	if fl.Changed("crawler-addr") {
		a, err := netip.ParseAddr(o.crawlerAddr)
		if err != nil {
			return fmt.Errorf("node: --crawler-addr: %w", err)
		}
		cfg.Overlay.CrawlerAddr = a
	}
	if fl.Changed("policy") {
		cfg.Policy = o.policy
	}
	if fl.Changed("hierarchy") {
		cfg.HierarchyFile = o.hierarchy
	}
	if fl.Changed("metrics") {
		cfg.MetricsAddr = o.metrics
	}
	if fl.Changed("api") {
		cfg.ControlAddr = o.api
	}
	if fl.Changed("sink") {
		cfg.Sink = o.sink
	}
	if fl.Changed("no-crawl") {
		cfg.Crawler = !o.noCrawl
	}
	if fl.Changed("allow-private") {
		cfg.Crawl.Fetch.AllowPrivate = o.allowPrivate
	}
	if fl.Changed("concurrency") {
		if o.concurrency < 0 {
			return fmt.Errorf("node: --concurrency %d must not be negative", o.concurrency)
		}
		cfg.Crawl.Concurrency = o.concurrency
	}
	if fl.Changed("seed-members") {
		cfg.SeedWait.Members = o.seedMembers
	}
	if o.seeds != "" {
		seeds, bad, err := readSeeds(o.seeds, urlnorm.New(urlnorm.DefaultOptions()))
		for _, b := range bad {
			fmt.Fprintln(os.Stderr, b)
		}
		if err != nil {
			return err
		}
		cfg.Seeds = append(cfg.Seeds, seeds...)
	}
	if cfg.DataDir == "" {
		return errors.New("node: a data directory is required (--data or data_dir in --config)")
	}
	cfg.Logger = slog.Default()
	ctx := cmd.Context()
	if o.emulate != "" {
		if !cfg.Overlay.LoopbackTestnet {
			return errors.New("node: --emulate is for loopback testnets (add --testnet)")
		}
		if err := applyEmulation(ctx, &cfg, o.emulate, o.emulatePeer); err != nil {
			return err
		}
	}
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return err
	}
	var addrs []string
	for _, a := range n.Peer().Host().Addrs() {
		addrs = append(addrs, fmt.Sprintf("%s/p2p/%s", a, n.Peer().ID()))
		fmt.Printf("listening %s\n", addrs[len(addrs)-1])
	}
	done := make(chan struct{})
	go func() {
		select { // the line a script waits for: the node has joined
		case <-n.Ready():
			fmt.Printf("ready peer=%s addrs=%s\n", n.Peer().ID(), strings.Join(addrs, ","))
		case <-done:
		}
	}()
	runErr := n.Run(ctx)
	close(done)
	// Close announces the leave (peers re-route at once) and flushes the
	// stores; the engine flushed its outbox as Run returned.
	closeErr := n.Close()
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return errors.Join(runErr, closeErr)
	}
	var in interrupted
	if errors.As(context.Cause(ctx), &in) {
		// stopped by a signal: say so and exit 128+signal (main)
		return errors.Join(fmt.Errorf("node: %w; state kept in %s — run the same command to resume", in, cfg.DataDir), closeErr)
	}
	return closeErr
}
