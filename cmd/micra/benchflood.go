package main

// `micra bench flood`: flags and printing of testnet/hostile's flood.

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/hostile"
)

func init() {
	var o hostile.Options
	var asJSON bool
	var seconds int
	cmd := &cobra.Command{
		Use:   "flood",
		Short: "a hostile peer floods a real micra node with identities, hand-offs and streams; the node's memory beside its idle memory",
		Long: `Starts one victim, a micra node process on loopback (testnet settings), in a
network with admission (a network key made for the run admits it alone) or, with
--open, in an open network. It samples the victim's resident memory idle (VmRSS, the
reference measured in the same run), then this process attacks it for --seconds
from one machine, on loopback only:

  identities  --identities peer identities announced over one connection: gossipsub
              RPCs written by hand, each heartbeat of the victim's snapshot and signed
              by its own identity (a 60 s interval: one heartbeat keeps it live 3 min)
  hand-offs   maximal /micra/handoff/1 messages (4096 URLs, ~4 MiB), --handoff-streams
              at once, each sent as soon as the last is answered
  streams     --streams concurrent streams of each of probe, endorse, recover,
              revocations, snapshot and the DHT: half held open, half reset

and prints the victim's RSS under the flood (peak, mean) over its idle RSS (goal:
at most 1.2×), its RSS after the flood, what it counted (members live, gossip
rejected, hand-offs refused) and what the attacker sent and was answered.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if seconds <= 0 {
				return fmt.Errorf("--seconds %d: want a positive number of seconds", seconds)
			}
			if o.Identities <= 0 {
				return fmt.Errorf("--identities %d: want at least 1", o.Identities)
			}
			o.Duration = time.Duration(seconds) * time.Second
			bin, err := os.Executable()
			if err != nil {
				return err
			}
			if o.Binary == "" {
				o.Binary = bin
			}
			if !asJSON {
				o.Log = os.Stderr
			}
			r, err := hostile.RunFlood(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			printFlood(r)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&seconds, "seconds", 60, "length of the attack")
	f.BoolVar(&o.Open, "open", false, "an open network (default: a network with admission that admits the victim)")
	f.IntVar(&o.Identities, "identities", 20_000, "peer identities announced over one connection")
	f.IntVar(&o.HandoffStreams, "handoff-streams", 4, "hand-off messages in flight at once")
	f.IntVar(&o.StreamsPerProtocol, "streams", 32, "concurrent streams of each protocol")
	f.StringVar(&o.Dir, "dir", "", "the victim's home, kept (default: a temporary directory, removed)")
	f.StringVar(&o.HeapProfile, "heap", "", "save the victim's heap profile at the end of the attack to this file (go tool pprof)")
	f.StringVar(&o.Binary, "binary", "", "the micra binary the victim runs (default: this one)")
	f.StringArrayVar(&o.VictimArgs, "victim-arg", nil, "an extra flag for the victim's micra node (repeatable), e.g. --victim-arg=--memory-limit=off")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	benchParentCmd().AddCommand(cmd)
}

func printFlood(r hostile.Report) {
	verdict := "within the goal"
	if r.PeakRatio > r.Goal {
		verdict = "ABOVE the goal"
	}
	fmt.Printf("flood of one victim (%s network), %.0f s from one machine (load average %.1f at the start, %.1f at the end, on %d cores)\n",
		r.Network, r.Seconds, r.LoadAvg[0], r.LoadAvg[1], runtime.NumCPU())
	fmt.Printf("  victim RSS idle (reference)      %7.1f MB mean  (%.1f–%.1f MB, %d samples)\n", r.Idle.MeanMB, r.Idle.MinMB, r.Idle.PeakMB, r.Idle.Samples)
	fmt.Printf("  victim RSS under the flood       %7.1f MB peak  %.2f× idle   (goal ≤ %.1f×: %s)\n", r.Flood.PeakMB, r.PeakRatio, r.Goal, verdict)
	fmt.Printf("                                   %7.1f MB mean  %.2f× idle\n", r.Flood.MeanMB, r.MeanRatio)
	fmt.Printf("  victim RSS after the flood       %7.1f MB mean\n", r.After.MeanMB)
	fmt.Printf("  victim alive after the flood     %v\n", r.VictimAlive)
	a, v := r.Attack, r.Victim
	fmt.Printf("attack sent                        victim took / counted\n")
	fmt.Printf("  %9d heartbeats of %6d ids  members live %d (crawlers %d); membership gossip rejected or ignored %.0f; their stream cut %d times\n",
		a.Heartbeats, r.Identities, v.MembersLive, v.CrawlersLive, v.MembershipRejected, a.GossipStreamsCut)
	fmt.Printf("  %9d hand-off messages        %d URLs accepted of %d; %d refused, %d other status, %d unanswered; victim counted %.0f refused\n",
		a.HandoffMsgs, a.HandoffAccepted, a.HandoffURLs, a.HandoffRefused, a.HandoffOther, a.HandoffErrors, v.HandoffsRefused)
	fmt.Printf("  %9d streams opened           %d held (%d closed by the victim), %d reset, %d failed to open\n",
		a.StreamsOpened, a.StreamsHeld, a.StreamsClosedByVictim, a.StreamsReset, a.StreamErrors)
	fmt.Printf("victim at the end of the attack: %d peers connected, frontier %d queued (%d seen), heap in use %.1f MB, %.0f goroutines\n",
		v.PeersConnected, v.FrontierQueued, v.FrontierSeen, v.HeapInuseMB, v.Goroutines)
	for _, g := range v.GossipRejected {
		fmt.Printf("  gossip rejected %-22s %-22s %8.0f\n", g.Topic, g.Reason, g.Count)
	}
	if r.HeapProfile != "" {
		fmt.Printf("victim heap profile: %s\n", r.HeapProfile)
	}
}
