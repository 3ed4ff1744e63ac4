package main

// `micra testnet up|run|status|down`: a loopback network of real micra
// processes in an emulated world (testnet/cluster).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"text/tabwriter"
	"time"

	"github.com/schollz/progressbar/v3"
	"github.com/spf13/cobra"
	"golang.org/x/term"

	"github.com/micra-crawler/micra/testnet/cluster"
)

type testnetOptions struct {
	dir, policy, latency, hostDist, sites, rtt string
	peers, hosts, pages, spare                 int
	seed                                       uint64
	capacity, wireScale, killAt                float64
	kill                                       int
	sink, json, killSink, open                 bool
	restart, partition                         time.Duration
	show                                       int
	experiment, report                         string
	policies, nodeFlags                        []string
	timeout                                    time.Duration
}

func (o *testnetOptions) flags(cmd *cobra.Command, up bool) {
	f := cmd.Flags()
	f.StringVar(&o.dir, "dir", "testnet", "the testnet's directory (node homes, sink, logs, world.json, testnet.json)")
	if !up {
		return
	}
	f.IntVarP(&o.peers, "peers", "n", 12, "crawler nodes")
	f.BoolVar(&o.sink, "sink", true, "start an index sink the crawlers deliver to")
	f.BoolVar(&o.open, "open", false, "an open network, where anyone who runs micra is a member (default: DIR/network.key admits the testnet's nodes and sink)")
	f.StringVar(&o.policy, "policy", "micra", "delegation policy of every node: micra, ipmicra, hash, random")
	f.IntVar(&o.hosts, "hosts", 200, "hosts of the synthetic web")
	f.IntVar(&o.pages, "pages-per-host", 10, "pages per host")
	f.Uint64Var(&o.seed, "seed", 1, "world and web seed (the same seed gives `micra sim` the same world)")
	f.StringVar(&o.latency, "world", "formula", "latency model: formula, hubs, or matrix (with --sites and --rtt)")
	f.StringVar(&o.hostDist, "host-dist", "zipf", "hosts' addresses: zipf (clustered in hosting subnets) or uniform")
	f.StringVar(&o.sites, "sites", "", "measured matrix: sites CSV (with --world matrix)")
	f.StringVar(&o.rtt, "rtt", "", "measured matrix: RTT CSV (with --world matrix)")
	f.Float64Var(&o.wireScale, "wire-scale", 1, "round trips between peers on the wire: this many times the world's (0: none)")
	f.Float64Var(&o.capacity, "capacity-factor", 2, "each crawler's capacity: this many times its even share of the web's pages")
	f.StringArrayVar(&o.nodeFlags, "node-flag", nil, "pass this flag to every `micra node` (repeatable; e.g. --node-flag=--balance=release)")
}

func (o *testnetOptions) options() (cluster.Options, error) {
	bin, err := os.Executable()
	if err != nil {
		return cluster.Options{}, err
	}
	dir, err := filepath.Abs(o.dir)
	if err != nil {
		return cluster.Options{}, err
	}
	c := cluster.Options{Dir: dir, Binary: bin, Peers: o.peers, Spare: o.spare, Sink: o.sink, Open: o.open, Policy: o.policy, NodeArgs: o.nodeFlags, Log: os.Stderr,
		Kill: o.kill, KillAt: o.killAt, Restart: o.restart, KillSink: o.killSink, Partition: o.partition}
	// a fault run follows the sink with an indexer, to check what it reads
	c.Subscriber = o.sink && (o.kill > 0 || o.killSink || o.partition > 0)
	if o.kill < 0 || o.kill > 0 && o.kill > o.peers-2 {
		return c, fmt.Errorf("testnet: --kill %d: want 0 to %d (node 0 and the seeded node stay)", o.kill, max(0, o.peers-2))
	}
	if (o.kill > 0 || o.killSink || o.partition > 0) && (o.killAt <= 0 || o.killAt >= 1) {
		return c, fmt.Errorf("testnet: --kill-at %v: want a fraction between 0 and 1", o.killAt)
	}
	if o.restart < 0 || o.restart > 0 && o.kill == 0 {
		return c, fmt.Errorf("testnet: --restart %v: want a positive duration, with --kill", o.restart)
	}
	if o.partition < 0 || o.partition > 0 && o.peers < 2 {
		return c, fmt.Errorf("testnet: --partition %v: want a positive duration and at least 2 peers", o.partition)
	}
	c.World.Seed, c.World.Latency, c.World.HostDist, c.World.Sites, c.World.RTT = o.seed, o.latency, o.hostDist, o.sites, o.rtt
	c.World.CapacityFactor, c.World.WireScale = o.capacity, o.wireScale
	if o.wireScale < 0 {
		return c, fmt.Errorf("testnet: --wire-scale %v: want 0 (no delay) or more", o.wireScale)
	}
	c.Web.Seed, c.Web.Hosts, c.Web.PagesPerHost = o.seed, o.hosts, o.pages
	if o.peers < 1 || o.peers > 100 {
		return c, fmt.Errorf("testnet: --peers %d: want 1 to 100", o.peers)
	}
	if o.spare < 0 || o.peers+o.spare > 100 {
		return c, fmt.Errorf("testnet: --spare %d: want 0 or more, with at most 100 places in all", o.spare)
	}
	return c, nil
}

func init() {
	root := &cobra.Command{
		Use:   "testnet",
		Short: "a loopback network of real micra nodes, an index sink and a synthetic web, in an emulated world",
		Long: `A testnet is real micra processes on 127.0.0.1: N crawler nodes (each with its
own home under DIR/nodes/NN), an index sink (DIR/sink) and a synthetic web. Every node
and every web host stands at a real address of the embedded hierarchy, placed by the
simulator for the seed (the same world as ` + "`micra sim --seed S --host-dist zipf`" + `), and
each node's probes and fetches take the round trip the world's latency model gives
between its place and the host's: delegation by nearness works as on the Internet.
Traffic between the nodes themselves is not delayed.`,
	}
	up := &testnetOptions{}
	upCmd := &cobra.Command{
		Use:   "up [--dir DIR] [-n 12] [--world formula|hubs|matrix] [--policy micra]",
		Short: "start a testnet and keep it running until Ctrl-C (or `micra testnet down`)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o, err := up.options()
			if err != nil {
				return err
			}
			t, err := cluster.Up(cmd.Context(), o)
			if err != nil {
				return err
			}
			printTestnet(os.Stdout, t.State)
			<-cmd.Context().Done()
			fmt.Fprintln(os.Stderr, "stopping the testnet…")
			if err := t.Down(); err != nil {
				return err
			}
			return cmd.Context().Err()
		},
	}
	up.flags(upCmd, true)
	upCmd.Flags().IntVar(&up.spare, "spare", 0, "places the world keeps for crawlers that join later (DIR/join.toml names the first); the world is then `micra sim`'s for N+spare crawlers")

	run := &testnetOptions{}
	runCmd := &cobra.Command{
		Use:   "run [--dir DIR] [-n 12] [--policy micra] [--json]",
		Short: "start a testnet, crawl the synthetic web to the sink, print the results, stop it",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return runTestnet(cmd.Context(), run) },
	}
	run.flags(runCmd, true)
	runCmd.Flags().BoolVar(&run.json, "json", false, "print the result as JSON")
	runCmd.Flags().StringVar(&run.experiment, "experiment", "", "paper: crawl the same web once per delegation policy (--policies) on fresh testnets and print the paper's table beside the simulator's figures")
	runCmd.Flags().StringSliceVar(&run.policies, "policies", cluster.PaperPolicies, "with --experiment: the policies, in order")
	runCmd.Flags().StringVar(&run.report, "report", "", "with --experiment: the report's directory (SVG figures, index.html, experiment.json; default DIR/report)")
	runCmd.Flags().IntVar(&run.show, "show", 3, "then show this many records of a subscription and a search at the sink (0: none)")
	runCmd.Flags().DurationVar(&run.timeout, "timeout", 10*time.Minute, "give up on a crawl after this long")
	runCmd.Flags().IntVar(&run.kill, "kill", 0, "crash faults: SIGKILL this many crawler nodes mid-crawl (never node 0, the bootstrap, nor the seeded node)")
	runCmd.Flags().Float64Var(&run.killAt, "kill-at", 0.3, "with --kill, --kill-sink or --partition: when this fraction of the web's pages has been fetched")
	runCmd.Flags().DurationVar(&run.restart, "restart", 0, "with --kill: start the killed nodes again on their homes this long after the kill (0: they stay dead)")
	runCmd.Flags().BoolVar(&run.killSink, "kill-sink", false, "crash fault: SIGKILL the sink at the kill point and start it again on its data (after --restart, else 5s)")
	runCmd.Flags().DurationVar(&run.partition, "partition", 0, "split the crawlers into two halves at the kill point for this long, then heal and measure how long the owners take to agree")

	st := &testnetOptions{}
	statusCmd := &cobra.Command{
		Use:   "status [--dir DIR]",
		Short: "the running testnet's processes and addresses",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := cluster.ReadState(st.dir)
			if err != nil {
				return err
			}
			if st.json {
				return writeJSON(os.Stdout, s)
			}
			printTestnet(os.Stdout, s)
			return nil
		},
	}
	st.flags(statusCmd, false)
	statusCmd.Flags().BoolVar(&st.json, "json", false, "print testnet.json")

	dn := &testnetOptions{}
	downCmd := &cobra.Command{
		Use:   "down [--dir DIR]",
		Short: "stop the testnet `micra testnet up` runs in DIR",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			s, err := cluster.ReadState(dn.dir)
			if err != nil {
				return err
			}
			p, err := os.FindProcess(s.Supervisor)
			if err == nil {
				err = p.Signal(syscall.SIGTERM)
			}
			if err != nil {
				return fmt.Errorf("testnet down: process %d: %w (remove %s if it is gone)", s.Supervisor, err, cluster.StateFile(dn.dir))
			}
			// up removes testnet.json once every process has stopped
			for range 600 {
				if _, err := os.Stat(cluster.StateFile(dn.dir)); errors.Is(err, os.ErrNotExist) {
					fmt.Println("testnet stopped")
					return nil
				}
				time.Sleep(100 * time.Millisecond)
			}
			return fmt.Errorf("testnet down: still running after 60 s (pid %d)", s.Supervisor)
		},
	}
	dn.flags(downCmd, false)
	root.AddCommand(upCmd, runCmd, statusCmd, downCmd, chaosCommand(), upgradeCommand())
	rootCmd.AddCommand(root)
}

func printTestnet(w io.Writer, s cluster.State) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPEER ID\tPLACE\tLAT,LON\tAPI\tLOG")
	for _, n := range s.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%.1f,%.1f\t%s\t%s\n", n.Index, shortID(n.PeerID), n.Place, n.Lat, n.Lon, n.API, n.Log)
	}
	tw.Flush()
	if len(s.Nodes) > 0 && s.Nodes[0].API != "" {
		fmt.Fprintf(w, "web console: %s/console/network (each node's API serves its own: API/console/)\n", s.Nodes[0].API)
	}
	if s.Network != "" {
		fmt.Fprintf(w, "network %s: members only (admit or revoke with micra admit --key %s)\n", s.Network, filepath.Join(filepath.Dir(s.World), "network.key"))
	} else {
		fmt.Fprintf(w, "an open network: anyone who runs micra is a member\n")
	}
	if s.Sink != nil {
		fmt.Fprintf(w, "sink: %s\n  records: %s/v1/records?follow=1   status: %s/v1/status   console: %s/console/\n", s.Sink.Addr, s.Sink.HTTP, s.Sink.HTTP, s.Sink.HTTP)
	}
	if len(s.Nodes) > 0 && s.Seeds != "" {
		fmt.Fprintf(w, "crawl the synthetic web: micra seed --api %s --file %s\n", s.Nodes[len(s.Nodes)-1].API, s.Seeds)
	}
	if s.Join == "" {
		return
	}
	// the snippet as written (status shows the file up wrote)
	b, err := os.ReadFile(s.Join)
	if err != nil {
		fmt.Fprintf(w, "join: %v\n", err)
		return
	}
	fmt.Fprintf(w, "\njoin the testnet with this configuration (%s):\n\n%s", s.Join, b)
}

func shortID(id string) string {
	if len(id) > 16 {
		return id[:8] + "…" + id[len(id)-6:]
	}
	return id
}

func runTestnet(ctx context.Context, o *testnetOptions) error {
	co, err := o.options()
	if err != nil {
		return err
	}
	if !co.Sink {
		return errors.New("testnet run: the crawl is measured at the sink: drop --sink=false")
	}
	switch o.experiment {
	case "":
	case "paper":
		return runExperiment(ctx, co, o)
	default:
		return fmt.Errorf("testnet run: --experiment %q: want paper", o.experiment)
	}
	t, err := cluster.Up(ctx, co)
	if err != nil {
		return err
	}
	defer t.Down()
	cctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	var bar *progressbar.ProgressBar
	if term.IsTerminal(int(os.Stderr.Fd())) && !o.json {
		bar = progressbar.NewOptions(t.Web.TotalPages(), progressbar.OptionSetWriter(os.Stderr),
			progressbar.OptionSetDescription("pages at the sink"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
	}
	r, err := t.Crawl(cctx, func(p cluster.Progress) {
		if bar != nil {
			_ = bar.Set64(p.AtSink)
		}
	})
	if bar != nil {
		_ = bar.Finish()
	}
	if err != nil {
		return err
	}
	if err := t.Simulate(ctx, r); err != nil {
		return err
	}
	var sample *cluster.SinkSample
	if o.show > 0 {
		sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
		sample, err = t.Sample(sctx, o.show)
		cancel()
		if err != nil {
			return err
		}
	}
	if err := t.Down(); err != nil {
		return err
	}
	if o.json {
		return writeJSON(os.Stdout, struct {
			*cluster.Result
			Sink *cluster.SinkSample `json:"sink,omitempty"`
		}{r, sample})
	}
	printResult(os.Stdout, r)
	if sample != nil {
		printSample(os.Stdout, sample)
	}
	return nil
}

// printSample shows what an indexer gets: the first records of a
// subscription and a search.
func printSample(w io.Writer, s *cluster.SinkSample) {
	fmt.Fprintf(w, "\nfirst records of a subscription from cursor 0 (micra subscribe --sink URL):\n")
	for _, r := range s.First {
		var kw []string
		for _, k := range r.Keywords[:min(5, len(r.Keywords))] {
			kw = append(kw, k.Term)
		}
		fmt.Fprintf(w, "  %d  %s  by %s  [%s]\n", r.Seq, r.URL, shortID(r.CrawlerID), strings.Join(kw, " "))
	}
	if s.Query != "" {
		fmt.Fprintf(w, "search %q: %d pages (%.1f ms)\n", s.Query, s.Search.Total, s.Search.TookMs)
		for _, h := range s.Search.Hits {
			fmt.Fprintf(w, "  %.3f  %s  %s\n", h.Score, h.URL, h.Title)
		}
	}
}

func printResult(w io.Writer, r *cluster.Result) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "policy\t%s (%d crawlers, %d hosts)\n", r.Policy, r.Peers, r.Hosts)
	fmt.Fprintf(tw, "pages at the sink\t%d of %d (coverage %.1f %%)\n", r.Pages, r.TotalPages, r.CoveragePct)
	if len(r.SeedsRejected) > 0 {
		fmt.Fprintf(tw, "seeds rejected\t%d (e.g. %s)\n", len(r.SeedsRejected), r.SeedsRejected[0])
	}
	if len(r.Killed) > 0 {
		fmt.Fprintf(tw, "crash faults\tnodes %v SIGKILLed with %d pages fetched", r.Killed, r.KilledAtPages)
		if len(r.Restarted) > 0 {
			fmt.Fprintf(tw, "; %v started again", r.Restarted)
		}
		fmt.Fprintln(tw)
	}
	if r.SinkKilled {
		fmt.Fprintf(tw, "sink\tSIGKILLed during ingest and started again\n")
	}
	if r.PartitionS > 0 {
		conv := fmt.Sprintf("owners agreed %.1f s after the heal", r.ConvergedS)
		if r.ConvergedS < 0 {
			conv = "owners still disagreed a minute after the heal"
		}
		fmt.Fprintf(tw, "partition\ttwo halves for %.0f s, at most %d subnets with two owners; %s\n", r.PartitionS, r.DisagreeMax, conv)
	}
	if d := r.Delivery; d != nil {
		fmt.Fprintf(tw, "subscriber\t%d of %d records, %d gaps, %d repeats; %d acknowledged records lost, %d ingested twice (%d carriers redelivered)\n",
			d.Followed, d.Head, d.Gaps, d.Repeats, d.Lost, d.IngestedTwice, d.RedeliveredCarriers)
	}
	fmt.Fprintf(tw, "overlap at the sink\t%d records; %d pages fetched twice at the web (%.1f %% of the pages)\n", r.Overlap, r.DuplicateFetches, 100*float64(r.DuplicateFetches)/float64(max(1, r.Pages)))
	fmt.Fprintf(tw, "hosts at their nearest crawler\t%.1f %% (mean excess RTT %.1f ms; simulator, same world: %.1f %%)\n", r.OptimalPct, r.ExcessRTTMs, r.SimOptimalPct)
	fmt.Fprintf(tw, "probes per host\t%.2f (%d probes; simulator: %.2f per URL)\n", r.ProbesPerHost, r.Probes, r.SimProbesPerURL)
	fmt.Fprintf(tw, "busiest crawler\t%.0f %% of its capacity (%d crawlers above theirs)\n", r.MaxLoadPct, r.OverCapacity)
	fmt.Fprintf(tw, "crawl makespan\t%.1f s\n", r.MakespanS)
	fmt.Fprintf(tw, "Σ download time\t%.1f s\n", r.DownloadS)
	fmt.Fprintf(tw, "peak RSS\tnode %.0f MB (the largest of %d), sink %.0f MB\n", r.NodePeakRSSMB, r.Peers, r.SinkPeakRSSMB)
	fmt.Fprintf(tw, "bytes to the sink / fetched\t%d / %d (%.1f %%)\n", r.BytesToSink, r.BytesFetched, 100*float64(r.BytesToSink)/float64(max(1, r.BytesFetched)))
	tw.Flush()
}

func runExperiment(ctx context.Context, co cluster.Options, o *testnetOptions) error {
	tty := term.IsTerminal(int(os.Stderr.Fd())) && !o.json
	var bar *progressbar.ProgressBar
	var current string
	ex, err := cluster.RunExperiment(ctx, co, o.policies, o.timeout, func(r cluster.Row, p cluster.Progress) {
		if r.Pages > 0 { // a crawl done
			if bar != nil {
				_ = bar.Finish()
				bar = nil
			}
			fmt.Fprintf(os.Stderr, "%-8s %d pages, makespan %.1f s, %.1f %% at the nearest crawler (%.0f s)\n", r.Policy, r.Pages, r.MakespanS, r.OptimalPct, r.WallS)
			return
		}
		if tty && (bar == nil || current != r.Policy) {
			current = r.Policy
			bar = progressbar.NewOptions(p.Total, progressbar.OptionSetWriter(os.Stderr),
				progressbar.OptionSetDescription(r.Policy+": pages at the sink"), progressbar.OptionShowCount(), progressbar.OptionClearOnFinish())
		}
		if bar != nil {
			_ = bar.Set64(p.AtSink)
		}
	})
	if err != nil {
		return err
	}
	dir := o.report
	if dir == "" {
		dir = filepath.Join(co.Dir, "report")
	}
	if _, err := cluster.WriteReport(dir, ex, cluster.ShellQuote(append([]string{"micra"}, os.Args[1:]...))); err != nil {
		return err
	}
	if o.json {
		fmt.Fprintf(os.Stderr, "report: %s\n", filepath.Join(dir, "index.html"))
		return writeJSON(os.Stdout, ex)
	}
	printExperiment(os.Stdout, ex)
	fmt.Fprintf(os.Stdout, "\nreport: %s (figures as SVG, the data in experiment.json)\n", filepath.Join(dir, "index.html"))
	return nil
}

// printExperiment prints the paper's table: each policy's crawl on the
// testnet beside the simulator's figures for the same world.
func printExperiment(w io.Writer, ex *cluster.Experiment) {
	fmt.Fprintf(w, "\n%d crawlers, %d hosts (%d pages), %s hosts, %s latency, seed %d — testnet crawl | simulator, same world\n",
		ex.Peers, ex.Hosts, ex.Pages, ex.HostDist, ex.Latency, ex.Seed)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "policy\toptimal %\t(sim)\tprobes/host\t(sim)\tmakespan s\tvs random\tΣ download s\tvs random\t(sim)\tvs optimal\tcoverage %\toverlap\tfetched twice\t")
	for _, r := range ex.Rows {
		fmt.Fprintf(tw, "%s\t%.1f\t%.1f\t%.2f\t%.2f\t%.1f\t%.2f\t%.1f\t%.2f\t%.2f\t%.2f\t%.1f\t%d\t%d\t\n",
			r.Policy, r.OptimalPct, r.SimOptimalPct, r.ProbesPerHost, r.SimProbesPerURL, r.MakespanS, r.MakespanVsRandom,
			r.DownloadS, r.DownloadVsRandom, r.SimCostVsRandom, r.DownloadVsOptimal, r.CoveragePct, r.Overlap, r.DuplicateFetches)
	}
	tw.Flush()
}
