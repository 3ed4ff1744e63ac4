package main

// `micra testnet chaos`: random faults on a testnet while it crawls, with
// the invariants checked (testnet/chaos).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/chaos"
	"github.com/micra-crawler/micra/testnet/cluster"
)

type chaosOptions struct {
	testnetOptions
	minutes float64
	faults  []string
	gap     [2]time.Duration
}

func chaosCommand() *cobra.Command {
	o := &chaosOptions{}
	cmd := &cobra.Command{
		Use:   "chaos --minutes N [--seed S] [-n 12] [--faults kill,kill-sink,partition,stall]",
		Short: "start a testnet and put it through N minutes of random kills, restarts, stalls and partitions while it crawls; print what was done and what held",
		Long: `Starts a testnet with a sink and an indexer following it (micra subscribe), seeds
its web in waves, and for --minutes injects one fault at a time, drawn from --faults
with --seed: a crawler SIGKILLed and started again on its home, the sink SIGKILLed
during ingest and started again, the crawlers split into two halves and healed, a
crawler stopped (SIGSTOP) and continued. After each fault it waits until every live
node names the same owner for every subnet. Then it waits for the crawl to complete
and checks: coverage, overlap at the sink, records acknowledged and lost, records
ingested twice, the subscriber's stream (no gap, no repeat), and the time the owners
took to agree. It prints the timeline and a table of the invariants, and exits
non-zero when one did not hold. The same --seed gives the same world, web and
schedule of faults.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runChaos(cmd.Context(), os.Stdout, o) },
	}
	o.flags(cmd, true)
	f := cmd.Flags()
	f.Float64Var(&o.minutes, "minutes", 10, "how long faults are injected (the crawl's end is waited for after)")
	f.StringSliceVar(&o.faults, "faults", []string{"kill", "kill-sink", "partition", "stall"}, "the faults drawn from")
	f.DurationVar(&o.gap[0], "gap-min", 5*time.Second, "quiet time between two faults, at least")
	f.DurationVar(&o.gap[1], "gap-max", 15*time.Second, "quiet time between two faults, at most")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "after the faults, give up waiting for the crawl to complete after this long")
	return cmd
}

func runChaos(ctx context.Context, w io.Writer, o *chaosOptions) error {
	if o.minutes <= 0 || o.minutes > 24*60 {
		return fmt.Errorf("testnet chaos: --minutes %v: want more than 0, at most a day", o.minutes)
	}
	kinds, err := chaos.ParseKinds(o.faults)
	if err != nil {
		return fmt.Errorf("testnet chaos: --faults: %w", err)
	}
	if o.gap[0] <= 0 || o.gap[1] < o.gap[0] {
		return fmt.Errorf("testnet chaos: --gap-min %v, --gap-max %v: want 0 < min ≤ max", o.gap[0], o.gap[1])
	}
	if !o.sink {
		return errors.New("testnet chaos: the invariants are measured at the sink: drop --sink=false")
	}
	if o.peers < 2 {
		return fmt.Errorf("testnet chaos: --peers %d: want at least 2", o.peers)
	}
	co, err := o.options()
	if err != nil {
		return err
	}
	co.Subscriber = true
	t, err := cluster.Up(ctx, co)
	if err != nil {
		return err
	}
	defer t.Down()
	rep, err := chaos.Run(ctx, t, chaos.Options{Duration: time.Duration(o.minutes * float64(time.Minute)), Seed: o.seed,
		Kinds: kinds, GapMin: o.gap[0], GapMax: o.gap[1], Timeout: o.timeout, Log: os.Stderr})
	if err != nil {
		return err
	}
	if err := t.Down(); err != nil {
		fmt.Fprintf(os.Stderr, "stopping the testnet: %v\n", err)
	}
	if o.json {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else {
		printChaos(w, rep)
	}
	if !rep.Held {
		n := cluster.NotHeld(rep.Checks)
		return fmt.Errorf("testnet chaos: %d invariants did not hold (seed %d)", n, rep.Seed)
	}
	return nil
}

func printChaos(w io.Writer, rep *chaos.Report) {
	fmt.Fprintf(w, "chaos: %.1f minutes on %d crawlers, seed %d; faults:", rep.Minutes, rep.Peers, rep.Seed)
	for _, k := range chaos.Kinds {
		fmt.Fprintf(w, " %s %d", k, rep.Faults[k])
	}
	fmt.Fprintln(w)
	fmt.Fprintln(w, "\ntimeline:")
	for _, e := range rep.Timeline {
		fmt.Fprintf(w, "  %7.1fs  %-9s %s\n", e.AtS, e.Kind, e.What)
	}
	if len(rep.Costs) > 0 {
		fmt.Fprintf(w, "\npages fetched twice at the web, by fault (from its start to the next one's):")
		for _, c := range rep.Costs {
			fmt.Fprintf(w, " %s %d;", c.Kind, c.FetchedTwice)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "INVARIANT\tGOAL\tMEASURED\tHELD")
	for _, c := range rep.Checks {
		held := "yes"
		if !c.Held {
			held = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Invariant, c.Goal, c.Measured, held)
	}
	tw.Flush()
}
