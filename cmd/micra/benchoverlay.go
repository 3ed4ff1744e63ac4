package main

// `micra bench overlay`: flags and printing of testnet/bench's overlay
// experiment (in-process peers beside the simulator).

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/bench"
	"github.com/micra-crawler/micra/testnet/sim"
)

type benchOverlayOptions struct {
	peers, hosts, train, calRounds, lookups, replicas, pagesPerPeer, linksPerPage int
	seed                                                                          uint64
	policy, membership                                                            string
	threshold, heartbeat, failTimeout, timeout                                    time.Duration
	asJSON, heartbeatSet, failTimeoutSet                                          bool
	cpuProfile                                                                    string
}

func init() {
	o := &benchOverlayOptions{}
	cmd := &cobra.Command{
		Use:   "overlay",
		Short: "build an in-process overlay on 127.0.0.1 and measure lookups, gossip, failure detection and delegation quality beside the simulator",
		Long: `overlay starts --peers libp2p peers on 127.0.0.1 (TCP, Noise, yamux, Kademlia DHT
under /micra, gossipsub) and places them as the crawlers of the simulator's world
(same seed): each peer answers /micra/probe/1 with the world model's latency from its
position, so no probe traffic leaves the process. It then delegates the simulator's
host stream over the real overlay (host i decided by peer i mod N) and prints, beside
their targets and the simulator's own figures for the same world and seed:
cached and uncached (DHT) owner lookups, time for a calibration event to reach every
peer, time for a killed peer to be declared dead by all, owner disagreements after
settling, hand-off messages per crawled page, and % optimal / probes per URL.`,
		Example: `  micra bench overlay
  micra bench overlay --peers 50 --hosts 500 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.heartbeatSet, o.failTimeoutSet = cmd.Flags().Changed("heartbeat"), cmd.Flags().Changed("failure-timeout")
			return runBenchOverlay(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.peers, "peers", 20, "overlay peers (crawlers), 2–100")
	f.IntVar(&o.hosts, "hosts", 300, "web hosts delegated (the simulator's host stream)")
	f.IntVar(&o.train, "train", -1, "hosts that train before evaluation (default 65%)")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (shared with the simulator)")
	f.StringVar(&o.policy, "policy", "ipmicra,micra", "delegation policies, comma-separated (ipmicra, ipmicra-parallel, micra, optimal, hash, random); each runs on its own fresh overlay beside the simulator, the first one's network is also measured for lookups, gossip, hand-offs and failure detection")
	f.DurationVar(&o.threshold, "threshold", 50*time.Millisecond, "probing threshold")
	f.IntVar(&o.replicas, "replicas", 10, "simulator replicas (other probe/policy seeds) for the noise band")
	f.IntVar(&o.calRounds, "calibration-rounds", 10, "calibration events timed")
	f.IntVar(&o.lookups, "lookups", 200, "uncached DHT lookups timed")
	f.IntVar(&o.pagesPerPeer, "pages", 100, "pages each peer 'crawls' for the hand-off figure")
	f.IntVar(&o.linksPerPage, "links", 10, "links per page for the hand-off figure")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "membership heartbeat interval")
	f.StringVar(&o.membership, "membership", "swim", "membership protocol: swim (the product's default) or heartbeat")
	f.DurationVar(&o.failTimeout, "failure-timeout", 5*time.Second, "silence after which a peer is declared dead")
	f.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the overlay phases to this file")
	benchParentCmd().AddCommand(cmd)
}

func runBenchOverlay(ctx context.Context, out io.Writer, o *benchOverlayOptions) error {
	if o.peers < 2 || o.peers > 100 {
		return fmt.Errorf("--peers %d: want 2..100", o.peers)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--hosts", o.hosts}, {"--replicas", o.replicas}, {"--pages", o.pagesPerPeer}, {"--links", o.linksPerPage}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want at least 1", f.name, f.v)
		}
	}
	var policies []string
	for _, name := range strings.Split(o.policy, ",") {
		name = strings.TrimSpace(name)
		if _, ok := sim.LookupPolicy(name); !ok {
			return fmt.Errorf("--policy: unknown policy %q", name)
		}
		if !slices.Contains(policies, name) {
			policies = append(policies, name)
		}
	}
	opts := bench.OverlayOptions{Peers: o.peers, Hosts: o.hosts, Train: o.train, Seed: o.seed, Policies: policies,
		Threshold: o.threshold, Replicas: o.replicas, CalibrationRounds: o.calRounds, Lookups: o.lookups,
		PagesPerPeer: o.pagesPerPeer, LinksPerPage: o.linksPerPage}
	switch o.membership {
	case "heartbeat":
	case "swim":
		opts.Membership = overlay.MembershipSWIM
	default:
		return fmt.Errorf("--membership %q: want heartbeat or swim", o.membership)
	}
	// Unset, they are left to the experiment, which slows them down past
	// 20 peers.
	if o.heartbeatSet {
		opts.Heartbeat = o.heartbeat
	}
	if o.failTimeoutSet {
		opts.FailureTimeout = o.failTimeout
	}
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		opts.CPUProfile = f
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	rep, err := bench.RunOverlay(ctx, opts)
	if err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeBenchOverlay(out, rep)
}

func writeBenchOverlay(out io.Writer, r *bench.OverlayReport) error {
	fmt.Fprintf(out, "micra bench overlay — %d peers in one process (%s)\n", r.Peers, r.Transport)
	fmt.Fprintf(out, "world seed %d: %d hosts (%d train), policy %s, threshold %.0f ms; heartbeat %.0f ms, flood publish %v; setup %.1f s\n\n",
		r.Seed, r.Hosts, r.Train, r.Policy, r.ThresholdMs, r.HeartbeatMs, r.Flood, r.SetupS)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\toverlay\ttarget / peer\t")
	fmt.Fprintf(tw, "— network of policy %s\t\t\t\n", r.Policies[0].Policy)
	fmt.Fprintf(tw, "cached owner lookup\t%.0f ns\t≤ 1000 ns (Directory.Lookup: %.0f ns)\t\n", r.CachedLookupNs, r.DirectoryLookupNs)
	fmt.Fprintf(tw, "uncached DHT lookup p95\t%.2f ms\t≤ 50 ms (p50 %.2f ms, %d lookups)\t\n", r.UncachedP95Ms, r.UncachedP50Ms, r.UncachedSamples)
	fmt.Fprintf(tw, "calibration event to all %d peers\t%.1f ms p50\t≤ 1000 ms (max %.1f ms, %d rounds, %d missed)\t\n",
		r.Peers, r.CalibrationAllP50Ms, r.CalibrationAllMaxMs, r.CalibrationRounds, r.CalibrationMissed)
	ref := "configured timeout"
	if r.Membership == "swim" {
		ref = "SWIM's bound for the first"
	}
	fmt.Fprintf(tw, "killed peer declared dead by all\t%.0f ms\t%s %.0f ms (first %.0f ms, by %d of %d)\t\n",
		r.FailureDetectAllMs, ref, r.FailureTimeoutMs, r.FailureDetectFirstMs, r.FailureDetectedBy, r.Peers-1)
	fmt.Fprintf(tw, "hand-off messages per crawled page\t%.3f\t< 1 (UbiCrawler); %d URLs in %d messages, %d pages\t\n",
		r.HandoffMsgPerPage, r.HandoffURLs, r.HandoffMessages, r.HandoffPages)
	for _, pr := range r.Policies {
		fmt.Fprintf(tw, "— policy %s (own fresh network, setup %.1f s)\t\t\t\n", pr.Policy, pr.SetupS)
		fmt.Fprintf(tw, "owner disagreements after settling\t%d\t0 (of %d subnets)\t\n", pr.Disagreements, pr.Subnets)
		fmt.Fprintf(tw, "delegation latency\t%.1f ms p50\tp95 %.1f ms\t\n", pr.DelegateP50Ms, pr.DelegateP95Ms)
		sp := pr.SimulatorSpread
		fmt.Fprintf(tw, "optimal %% (evaluation hosts)\t%.1f %%\tsimulator %.1f %%; %d reseeded runs %.1f ± %.1f (%.1f–%.1f)\t\n",
			pr.Overlay.OptimalPct, pr.Simulator.OptimalPct, sp.Replicas, sp.OptimalPctMean, sp.OptimalPctSD, sp.OptimalPctMin, sp.OptimalPctMax)
		dp := pr.DistributedSpread
		fmt.Fprintf(tw, "  same loop, one engine per crawler\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			dp.Replicas, dp.OptimalPctMean, dp.OptimalPctSD, dp.OptimalPctMin, dp.OptimalPctMax, dp.ProbesPerURLMean, dp.ProbesPerURLSD)
		hp := pr.SharedSpread
		fmt.Fprintf(tw, "  one engine per crawler, records shared\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			hp.Replicas, hp.OptimalPctMean, hp.OptimalPctSD, hp.OptimalPctMin, hp.OptimalPctMax, hp.ProbesPerURLMean, hp.ProbesPerURLSD)
		ip := pr.PeerIDSpread
		fmt.Fprintf(tw, "  the same, crawlers named by this run's peer IDs\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			ip.Replicas, ip.OptimalPctMean, ip.OptimalPctSD, ip.OptimalPctMin, ip.OptimalPctMax, ip.ProbesPerURLMean, ip.ProbesPerURLSD)
		fmt.Fprintf(tw, "optimal %% (all hosts)\t%.1f %%\tsimulator %.1f %%\t\n", pr.Overlay.OptimalPctAll, pr.Simulator.OptimalPctAll)
		fmt.Fprintf(tw, "probes per URL\t%.2f\tsimulator %.2f; reseeded %.2f ± %.2f (%.2f–%.2f)\t\n",
			pr.Overlay.ProbesPerURL, pr.Simulator.ProbesPerURL, sp.ProbesPerURLMean, sp.ProbesPerURLSD, sp.ProbesPerURLMin, sp.ProbesPerURLMax)
		fmt.Fprintf(tw, "probes per URL (evaluation)\t%.2f\tsimulator %.2f\t\n", pr.Overlay.ProbesPerURLEval, pr.Simulator.ProbesPerURLEval)
		fmt.Fprintf(tw, "decisions by reason\t%s\tsimulator %s\t\n", reasonLine(pr.Overlay.Reasons), reasonLine(pr.Simulator.Reasons))
	}
	return tw.Flush()
}

func reasonLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%s=%d", k, m[k])
	}
	return string(b)
}
