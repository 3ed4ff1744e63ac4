package main

// `micra testnet upgrade`: a signed release rolled over a crawling testnet,
// with the crawl's invariants checked (testnet/upgrade).

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/cluster"
	"github.com/micra-crawler/micra/testnet/upgrade"
)

type upgradeOptions struct {
	testnetOptions
	from, to, toVersion, expect string
	rollout, grace, limit       time.Duration
	publishAt                   float64
}

func upgradeCommand() *cobra.Command {
	o := &upgradeOptions{}
	cmd := &cobra.Command{
		Use:   "upgrade --to BIN [--from BIN] [-n 12] [--rollout 2m] [--expect upgrade|rollback]",
		Short: "start a testnet on one build, release another to it over the overlay while it crawls, and check that every node took it (or rolled it back) and nothing was lost",
		Long: `Starts a testnet (a sink and an indexer following it) whose nodes run --from (default:
this binary), each its own copy under a supervisor with auto_update = "on" and a TUF
root made for the testnet (operator keys in DIR/release/repo). Once --publish-at of the
web's pages are fetched it signs --to with --rollout as its window and publishes it to
node 0's release feed; the others hear of it over the overlay and fetch the binary from
members. It watches every node's status until each runs --to confirmed healthy, or, with
--expect rollback (a --to that fails), until each is back on --from — rolled back, or
holding the release back because others rolled it back — and every node's status
reports the rollbacks. Then it waits for the crawl and checks coverage, overlap at the
sink, records acknowledged and lost, and the subscriber's stream. It prints the
timeline, a table per node and the checks, and exits non-zero when one did not hold.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runUpgrade(cmd.Context(), os.Stdout, o) },
	}
	o.flags(cmd, true)
	f := cmd.Flags()
	f.StringVar(&o.from, "from", "", "build A, which the nodes start on (default: this binary)")
	f.StringVar(&o.to, "to", "", "build B, the release (a micra binary with another `micra version`)")
	f.StringVar(&o.toVersion, "to-version", "", "the release's version (default: what `BIN version` says; needed for a --to that cannot say it)")
	f.StringVar(&o.expect, "expect", "upgrade", "what the release does: upgrade (every node ends on it) or rollback (it fails on the nodes that try it)")
	f.DurationVar(&o.rollout, "rollout", 2*time.Minute, "the release's rollout window: each node installs it at a delay within it")
	f.DurationVar(&o.grace, "grace", time.Minute, "what a node may take beyond the window to run the release (fetch, stop, start, trial)")
	f.DurationVar(&o.limit, "rollback-limit", 2*time.Minute, "with --expect rollback: every node back on --from within this of publishing")
	f.Float64Var(&o.publishAt, "publish-at", 0.2, "publish the release once this fraction of the web's pages is fetched")
	f.BoolVar(&o.json, "json", false, "print the report as JSON")
	f.DurationVar(&o.timeout, "timeout", 5*time.Minute, "after the release, give up waiting for the crawl to complete after this long")
	return cmd
}

func runUpgrade(ctx context.Context, w io.Writer, o *upgradeOptions) error {
	if o.to == "" {
		return errors.New("testnet upgrade: --to BIN is required: the build to release")
	}
	if !o.sink {
		return errors.New("testnet upgrade: the crawl is checked at the sink: drop --sink=false")
	}
	if o.peers < 2 {
		return fmt.Errorf("testnet upgrade: --peers %d: want at least 2 (the release spreads over the overlay)", o.peers)
	}
	if o.publishAt <= 0 || o.publishAt >= 1 {
		return fmt.Errorf("testnet upgrade: --publish-at %v: want a fraction between 0 and 1", o.publishAt)
	}
	if o.rollout < 0 || o.grace < 0 || o.limit < 0 {
		return errors.New("testnet upgrade: --rollout, --grace and --rollback-limit: want durations of 0 or more")
	}
	co, err := o.options()
	if err != nil {
		return err
	}
	if o.from != "" {
		if co.Binary, err = filepath.Abs(o.from); err != nil {
			return err
		}
	}
	to, err := filepath.Abs(o.to)
	if err != nil {
		return err
	}
	for flag, bin := range map[string]string{"--from": co.Binary, "--to": to} {
		if fi, err := os.Stat(bin); err != nil || fi.IsDir() || fi.Mode()&0o111 == 0 {
			return fmt.Errorf("testnet upgrade: %s %s: not an executable file", flag, bin)
		}
	}
	rep, err := upgrade.Run(ctx, upgrade.Options{Cluster: co, To: to, ToVersion: o.toVersion, Rollout: o.rollout, Grace: o.grace,
		RollbackLimit: o.limit, PublishAt: o.publishAt, Expect: upgrade.Expect(o.expect), Timeout: o.timeout, Log: os.Stderr})
	if err != nil {
		return fmt.Errorf("testnet upgrade: %w", err)
	}
	if o.json {
		if err := writeJSON(w, rep); err != nil {
			return err
		}
	} else {
		printUpgrade(w, rep)
	}
	if !rep.Held {
		n := cluster.NotHeld(rep.Checks)
		return fmt.Errorf("testnet upgrade: %d checks did not hold", n)
	}
	return nil
}

func printUpgrade(w io.Writer, rep *upgrade.Report) {
	fmt.Fprintf(w, "upgrade: %d nodes from %s to %s (sha256 %.12s…, rollout %.0f s), expected: %s; published %.1f s into the crawl\n",
		rep.Peers, rep.FromVersion, rep.ToVersion, rep.ToSHA256, rep.RolloutS, rep.Expect, rep.PublishedS)
	fmt.Fprintln(w, "\ntimeline (seconds since the first seeds):")
	for _, e := range rep.Timeline {
		fmt.Fprintf(w, "  %7.1fs  %-11s %s\n", e.AtS, e.Kind, e.What)
	}
	fmt.Fprintln(w, "\nper node (seconds after publishing; - never):")
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "NODE\tPEER\tVERSION\tSWITCHED\tCONFIRMED\tROLLED BACK\tHELD BACK\tREPORTS ROLLBACKS\tWHY")
	s := func(v float64) string {
		if v < 0 {
			return "-"
		}
		return fmt.Sprintf("%.1f", v)
	}
	for _, n := range rep.Nodes {
		fmt.Fprintf(tw, "%d\t%s\t%s\t%s\t%s\t%s\t%s\t%d\t%s\n", n.Index, shortPeerID(n.PeerID), n.Version,
			s(n.SwitchedS), s(n.ConfirmedS), s(n.RolledBackS), s(n.HeldBackS), n.Reported, n.Reason)
	}
	tw.Flush()
	fmt.Fprintln(w)
	tw = tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "CHECK\tGOAL\tMEASURED\tHELD")
	for _, c := range rep.Checks {
		held := "yes"
		if !c.Held {
			held = "NO"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\n", c.Invariant, c.Goal, c.Measured, held)
	}
	tw.Flush()
}

func shortPeerID(id string) string {
	if len(id) > 8 {
		return "…" + id[len(id)-6:]
	}
	return id
}
