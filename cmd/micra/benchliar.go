package main

// `micra bench liar`: flags and printing of testnet/bench's lying member.

import (
	"fmt"
	"io"
	"os"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/bench"
)

func init() {
	var o bench.LiarOptions
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "liar",
		Short: "a member answers every probe with 1 ms: its subnets over time, when it is detected, and false accusations, beside the same network honest",
		Long: `liar starts --peers in-process overlay peers on loopback (127.0.2.x), placed as
the crawlers of the simulator's world (the paper preset, --seed) and answering
probes from its latency model, and delegates the simulator's --hosts stream with
IPMicra (host i decided by peer i mod N). It runs twice on fresh networks: every
member honest (the reference), then crawler --liar answering 1 ms to every probe,
its own included. After the stream every honest peer routes every host once more
(a suspect's records are re-decided when looked up).

It prints, for both runs: the subnets honest peers route to the member and the
records naming it, at --samples points of the stream, at their peak and at the
end; the records naming it at the end for which it is the world's optimal crawler
of no host (a suspect's records stay in caches until re-decided, but no URL is
routed to it); when the first and
when every honest peer held it a suspect; the answers left out of decisions; and
the evidence and suspects against honest members — false accusations, which must
be 0.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if !asJSON {
				o.Log = os.Stderr
			}
			r, err := bench.RunLiar(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				return writeJSON(os.Stdout, r)
			}
			printLiar(os.Stdout, r)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Peers, "peers", 20, "crawlers (in-process peers), 3..100")
	f.IntVar(&o.Hosts, "hosts", 300, "hosts of the simulator's stream")
	f.Uint64Var(&o.Seed, "seed", 1, "the world's seed")
	f.IntVar(&o.Liar, "liar", 0, "index of the crawler that lies")
	f.DurationVar(&o.Threshold, "threshold", 50*time.Millisecond, "IPMicra's threshold")
	f.IntVar(&o.Samples, "samples", 10, "samples over the stream")
	f.BoolVar(&asJSON, "json", false, "print the report as JSON")
	benchParentCmd().AddCommand(cmd)
}

func printLiar(out io.Writer, r *bench.LiarReport) {
	fmt.Fprintf(out, "lying member: crawler %d of %d, %d hosts, seed %d (the world's optimal crawler of %d hosts)\n\n",
		r.Liar, r.Peers, r.Hosts, r.Seed, r.Lying.LiarOptimalHosts)
	secs := func(s float64) string {
		if s < 0 {
			return "never"
		}
		return fmt.Sprintf("%.1f s", s)
	}
	tw := tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\thonest network\tmember lying")
	row := func(name string, f func(bench.LiarRun) string) {
		fmt.Fprintf(tw, "%s\t%s\t%s\n", name, f(r.Honest), f(r.Lying))
	}
	row("subnets routed to it, peak (an honest peer's most)", func(x bench.LiarRun) string { return fmt.Sprint(x.RoutedPeak) })
	row("subnets routed to it at the end", func(x bench.LiarRun) string { return fmt.Sprint(x.RoutedEnd) })
	row("records naming it, peak (an honest peer's cache)", func(x bench.LiarRun) string { return fmt.Sprint(x.LiarSubnetsPeak) })
	row("records naming it at the end", func(x bench.LiarRun) string { return fmt.Sprint(x.LiarSubnetsEnd) })
	row("  of which it is optimal for no host", func(x bench.LiarRun) string { return fmt.Sprint(x.LiarAmissEnd) })
	row("first honest peer suspects it", func(x bench.LiarRun) string { return secs(x.FirstSuspectS) })
	row("every honest peer suspects it", func(x bench.LiarRun) string { return secs(x.AllSuspectS) })
	row("evidence against it", func(x bench.LiarRun) string { return fmt.Sprint(x.LiarEvidence) })
	row("answers left out of decisions", func(x bench.LiarRun) string { return fmt.Sprint(x.RefusedAnswers) })
	row("false evidence (against honest members)", func(x bench.LiarRun) string { return fmt.Sprint(x.FalseEvidence) })
	row("false suspects (peer, honest member)", func(x bench.LiarRun) string { return fmt.Sprint(x.FalseSuspects) })
	row("hosts to their optimal crawler (stream)", func(x bench.LiarRun) string { return fmt.Sprintf("%.1f %%", x.OptimalPct) })
	row("probes per URL (stream)", func(x bench.LiarRun) string { return fmt.Sprintf("%.2f", x.ProbesPerURL) })
	row("routes failed after the stream", func(x bench.LiarRun) string { return fmt.Sprint(x.RerouteErrors) })
	row("setup", func(x bench.LiarRun) string { return fmt.Sprintf("%.1f s", x.SetupS) })
	tw.Flush()
	fmt.Fprintln(out, "\nover the stream (subnets routed to the member, records naming it, honest peers suspecting it):")
	tw = tabwriter.NewWriter(out, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "hosts\thonest: routed\trecords\ts\tlying: routed\trecords\tsuspecting\ts")
	for i := range max(len(r.Honest.Samples), len(r.Lying.Samples)) {
		var h, l bench.LiarSample
		if i < len(r.Honest.Samples) {
			h = r.Honest.Samples[i]
		}
		if i < len(r.Lying.Samples) {
			l = r.Lying.Samples[i]
		}
		label := fmt.Sprint(l.Hosts)
		if i == len(r.Lying.Samples)-1 {
			label += " + re-routed"
		}
		fmt.Fprintf(tw, "%s\t%d\t%d\t%.1f\t%d\t%d\t%d/%d\t%.1f\n", label, h.Routed, h.LiarSubnets, h.ElapsedS,
			l.Routed, l.LiarSubnets, l.Suspecting, r.Peers-1, l.ElapsedS)
	}
	tw.Flush()
}
