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

	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/swim"
	"github.com/micra-crawler/micra/testnet/bench"
)

type benchOverlayCostOptions struct {
	peers, membership, simPeers       string
	transport, profileDir             string
	window, heartbeat, failureTimeout time.Duration
	simWindow                         time.Duration
	simLoss                           float64
	seed                              uint64
	wave                              int
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
process itself may be the bottleneck (false suspicions show it).

The peers run SWIM (overlay/swim, the product's default; --membership heartbeat:
every heartbeat to every peer), and --sim sizes simulate SWIM at thousands of peers (the real state
machine and message encoding in a discrete-event simulation, each message lost with
--sim-loss), with a member's record and each message's framing as large as measured
on this run's real peers.`,
		Example: `  micra bench overlay-cost
  micra bench overlay-cost --peers 20,50,100 --window 30s --json
  micra bench overlay-cost --membership heartbeat --peers 20,50
  micra bench overlay-cost --peers 20,50,100 --sim 1000,10000 --sim-loss 0.01`,
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
	f.StringVar(&o.membership, "membership", "swim", "membership protocol: swim (the product's default) or heartbeat")
	f.StringVar(&o.transport, "transport", "tcp", "the peers' transport on 127.0.0.1: tcp, or quic (one socket per peer: 200 peers fit one process)")
	f.StringVar(&o.simPeers, "sim", "", "with --membership swim: network sizes to simulate SWIM at, comma-separated (3..100000 each)")
	f.Float64Var(&o.simLoss, "sim-loss", 0.01, "fraction of the simulated messages lost")
	f.DurationVar(&o.simWindow, "sim-window", time.Minute, "simulated measurement window (simulated time)")
	f.IntVar(&o.wave, "wave", 0, "open each network's peers this many at a time, each wave a formed membership before the next opens (a bench setting; 0: all at once)")
	f.StringVar(&o.profileDir, "profile", "", "write pprof profiles of each size to this directory: CPU while forming and while measured, heap at the end")
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
	if o.wave < 0 {
		return fmt.Errorf("--wave %d: want 0 (all at once) or a number of peers", o.wave)
	}
	if o.window < time.Second {
		return fmt.Errorf("--window %v: want at least 1s", o.window)
	}
	var membership string
	switch o.membership {
	case "heartbeat":
	case "swim":
		membership = overlay.MembershipSWIM
	default:
		return fmt.Errorf("--membership %q: want heartbeat or swim", o.membership)
	}
	if o.transport != "tcp" && o.transport != "quic" {
		return fmt.Errorf("--transport %q: want tcp or quic", o.transport)
	}
	var simSizes []int
	if o.simPeers != "" {
		if membership != overlay.MembershipSWIM {
			return fmt.Errorf("--sim %q needs --membership swim (the simulation is sized by the real SWIM peers)", o.simPeers)
		}
		for _, s := range strings.Split(o.simPeers, ",") {
			n, err := strconv.Atoi(strings.TrimSpace(s))
			if err != nil || n < 3 || n > 100_000 {
				return fmt.Errorf("--sim %q: want sizes of 3..100000, comma-separated", o.simPeers)
			}
			simSizes = append(simSizes, n)
		}
	}
	if o.simLoss < 0 || o.simLoss >= 1 {
		return fmt.Errorf("--sim-loss %v: want 0 <= loss < 1", o.simLoss)
	}
	opts := bench.OverlayCostOptions{PeerCounts: sizes, Window: o.window, Heartbeat: o.heartbeat, FailureTimeout: o.failureTimeout, Seed: o.seed,
		Membership: membership, Transport: o.transport, SimPeerCounts: simSizes, SimLoss: o.simLoss, SimWindow: o.simWindow,
		ProfileDir: o.profileDir, Wave: o.wave,
		Each: func(r bench.OverlayCostRow) {
			fmt.Fprintf(log, "%d peers: %.0f B/s in, %.0f B/s out per peer (membership+calibration %.0f B/s); %d false suspicions; formed in %.0f s (%.0f CPU-s), then %.4f CPU-s/s, %.1f MiB and %.1f connections per peer (load %.1f)\n",
				r.Peers, r.InBps, r.OutBps, r.MembershipBps, r.FalseSuspicions, r.SetupS+r.QuietS, r.FormCPUS, r.CPUPerPeer, r.HeapPerPeerMiB, r.ConnsPerPeer, r.LoadAvg)
		},
		EachSim: func(r swim.SimResult) {
			fmt.Fprintf(log, "simulated %d peers: %.0f B/s out per peer; suspected by all %.1f s, dead at all %.1f s\n", r.N, r.BytesOutPerS, r.SuspectedAllS, r.DeadAllS)
		}}
	rep, err := bench.RunOverlayCost(ctx, opts)
	if rep == nil || len(rep.Rows) == 0 {
		return err
	}
	// the sizes measured before a failure are printed: a big size is run
	// once, and the smaller ones' figures are not lost with it
	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		if jerr := enc.Encode(rep); jerr != nil {
			return jerr
		}
	} else {
		printOverlayCost(out, rep)
	}
	return err
}

func printOverlayCost(w io.Writer, rep *bench.OverlayCostReport) {
	fmt.Fprintf(w, "overlay cost per idle peer (%s; membership %s, period %.0f ms)\n\n", rep.Transport, rep.Membership, rep.HeartbeatMs)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peers\tin B/s\tout B/s\tmembership+calibration B/s\tmembership msgs/s in\tcontrol B/s in\tdht B/s\tfalse suspicions\tdetected (all) ms\t")
	for _, r := range rep.Rows {
		m := r.ByTopic["micra/membership/1"]
		msgs := m.MsgsIn
		if rep.Membership == "swim" {
			msgs = r.SWIMMsgsIn
		}
		c := r.ByTopic["control"]
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.1f\t%.0f\t%.0f\t%d\t%.0f\t\n", r.Peers, r.InBps, r.OutBps, r.MembershipBps, msgs, c.BytesIn,
			r.ByProtocol["dht"], r.FalseSuspicions, r.FailureDetectAllMs)
	}
	tw.Flush()
	fmt.Fprintln(w, "\nwhat the peers cost this process (all peers of a size in it):")
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
	fmt.Fprintln(tw, "peers\tsetup s\tquiet s\tforming CPU-s\tCPU-s/s per peer\theap MiB per peer\tgoroutines per peer\tconns per peer\tload avg\t")
	for _, r := range rep.Rows {
		fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.0f\t%.4f\t%.2f\t%.0f\t%.1f\t%.1f\t\n", r.Peers, r.SetupS, r.QuietS, r.FormCPUS, r.CPUPerPeer, r.HeapPerPeerMiB, r.GoroutinesPerPeer, r.ConnsPerPeer, r.LoadAvg)
	}
	tw.Flush()
	if len(rep.Rows) < 2 {
		fmt.Fprintln(w, "\ngrowth: one size measured (give --peers two or more to fit it)")
	} else {
		fmt.Fprintf(w, "\ngrowth: a peer's bytes/s ≈ a·N^%.2f (1: linear in the network's size, 0: constant); +%.0f B/s per peer for each added peer\n",
			rep.Exponent, rep.PerAddedPeer)
		fmt.Fprintf(w, "membership+calibration bytes/s ≈ a·N^%.2f", rep.MembershipExponent)
		if n := len(rep.Rows); rep.Rows[0].MembershipBps > 0 {
			fmt.Fprintf(w, "; at %d peers %.2f× its value at %d", rep.Rows[n-1].Peers, rep.Rows[n-1].MembershipBps/rep.Rows[0].MembershipBps, rep.Rows[0].Peers)
		}
		fmt.Fprintln(w)
	}
	if len(rep.Sim) > 0 {
		fmt.Fprintf(w, "\nSWIM simulated (record %d B, framing %.0f B per message as measured above; %.0f%% of messages lost):\n", rep.SimRecordBytes, rep.SimOverheadBytes, 100*rep.Sim[0].Loss)
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "peers\tout B/s\tin B/s\tmsgs/s out\tfalse suspicions /peer·h\tfalse deaths /peer·h\tsuspected first s\tsuspected by all s\tdead at all s\ttarget\t")
		for _, r := range rep.Sim {
			fmt.Fprintf(tw, "%d\t%.0f\t%.0f\t%.2f\t%.3f\t%.3f\t%.1f\t%.1f\t%.1f\t≤ 5000 B/s, suspected ≤ 30 s, < 1 /peer·h\t\n", r.N, r.BytesOutPerS, r.BytesInPerS, r.MsgsOutPerS,
				r.FalseSuspicionsPerHour, r.FalseDeathsPerHour, r.SuspectedFirstS, r.SuspectedAllS, r.DeadAllS)
		}
		tw.Flush()
	}
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
