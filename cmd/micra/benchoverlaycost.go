package main

// `micra bench overlay-cost`: flags and printing of testnet/bench's
// measurement of what an idle member costs each peer as the network grows.

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"sort"
	"strconv"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/bench"
)

type benchOverlayCostOptions struct {
	peers                             string
	window, heartbeat, failureTimeout time.Duration
	seed                              uint64
	asJSON                            bool
}

func init() {
	o := &benchOverlayCostOptions{}
	cmd := &cobra.Command{
		Use:   "overlay-cost",
		Short: "measure what membership, gossip and the DHT cost each peer as the overlay grows",
		Long: `overlay-cost starts, for each size in --peers, a fresh overlay of that many idle
crawlers in this process on 127.0.0.1 (the product's heartbeat and failure timeout
unless set), waits until every peer sees every other, and measures over --window
what each peer sends and receives: bytes of every libp2p stream by protocol (libp2p's
bandwidth reporter) and gossip messages and bytes by topic (the pubsub tracer). It
counts live peers wrongly declared dead during the window, then kills one peer and
times its detection, and fits the growth of a peer's bytes/s with the network's size
(N^b). All peers share this machine's CPUs: past ~100 peers at a 1 s heartbeat the
process itself may be the bottleneck (false suspicions show it).`,
		Example: `  micra bench overlay-cost
  micra bench overlay-cost --peers 20,50,100 --window 30s --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runBenchOverlayCost(cmd.Context(), cmd.OutOrStdout(), cmd.ErrOrStderr(), o)
		},
	}
	f := cmd.Flags()
	f.StringVar(&o.peers, "peers", "20,50,100", "network sizes, comma-separated (3..300 each)")
	f.DurationVar(&o.window, "window", 20*time.Second, "measurement window per size")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "membership heartbeat interval (the product's default)")
	f.DurationVar(&o.failureTimeout, "failure-timeout", 5*time.Second, "silence after which a peer is declared dead (the product's default)")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (the peers' places)")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	benchParentCmd().AddCommand(cmd)
}

func runBenchOverlayCost(ctx context.Context, out, log io.Writer, o *benchOverlayCostOptions) error {
	var sizes []int
	for _, s := range strings.Split(o.peers, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(s))
		if err != nil || n < 3 || n > 300 {
			return fmt.Errorf("--peers %q: want sizes of 3..300, comma-separated", o.peers)
		}
		sizes = append(sizes, n)
	}
	if o.window < time.Second {
		return fmt.Errorf("--window %v: want at least 1s", o.window)
	}
	opts := bench.OverlayCostOptions{PeerCounts: sizes, Window: o.window, Heartbeat: o.heartbeat, FailureTimeout: o.failureTimeout, Seed: o.seed,
		Each: func(r bench.OverlayCostRow) {
			fmt.Fprintf(log, "%d peers: %.0f B/s in, %.0f B/s out per peer; %d false suspicions\n", r.Peers, r.InBps, r.OutBps, r.FalseSuspicions)
		}}
	rep, err := bench.RunOverlayCost(ctx, opts)
	if err != nil {
		return err
	}
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	printOverlayCost(out, rep)
	return nil
}

func printOverlayCost(w io.Writer, rep *bench.OverlayCostReport) {
	fmt.Fprintf(w, "overlay cost per idle peer (%s; heartbeat %.0f ms)\n\n", rep.Transport, rep.HeartbeatMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peers\tin B/s\tout B/s\tmembership msgs/s in\tmembership B/s in\tcontrol B/s in\tdht B/s\tfalse suspicions\tdetected (all) ms\t")
	for _, r := range rep.Rows {
		m := r.ByTopic["micra/membership/1"]
		c := r.ByTopic["control"]
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%.0f\t%d\t%.0f\t\n", r.Peers, r.InBps, r.OutBps, m.MsgsIn, m.BytesIn, c.BytesIn,
			r.ByProtocol["dht"], r.FalseSuspicions, r.FailureDetectAllMs)
	}
	tw.Flush()
	fmt.Fprintf(w, "\ngrowth: a peer's bytes/s ≈ a·N^%.2f (1: linear in the network's size, 0: constant); +%.0f B/s per peer for each added peer\n",
		rep.Exponent, rep.PerAddedPeer)
	if len(rep.Rows) > 0 {
		last := rep.Rows[len(rep.Rows)-1]
		fmt.Fprintf(w, "at %d peers, by protocol (B/s per peer, in+out):", last.Peers)
		for _, p := range last.TopProtocols() {
			if last.ByProtocol[p] >= 1 {
				fmt.Fprintf(w, " %s %.0f;", p, last.ByProtocol[p])
			}
		}
		fmt.Fprintln(w)
		topics := make([]string, 0, len(last.ByTopic))
		for t := range last.ByTopic {
			topics = append(topics, t)
		}
		sort.Strings(topics)
		fmt.Fprintf(w, "at %d peers, gossip by topic (per peer per second):", last.Peers)
		for _, t := range topics {
			c := last.ByTopic[t]
			fmt.Fprintf(w, " %s %.1f msgs/%.0f B in, %.1f msgs/%.0f B out;", t, c.MsgsIn, c.BytesIn, c.MsgsOut, c.BytesOut)
		}
		fmt.Fprintln(w)
	}
}
