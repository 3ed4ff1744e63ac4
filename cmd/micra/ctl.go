package main

// `micra id`, `status`, `peers`, `owners`, `seed`, `pause`, `resume`: a running node, asked
// through its local control API (node.ControlClient; docs/node.md,
// "Control API"). This file only parses flags and prints.

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/node"
)

// apiEnv names a node's control API when neither --api nor --data does.
const apiEnv = "MICRA_API"

type ctlOptions struct {
	api, data, home string
	asJSON          bool
}

func (o *ctlOptions) flags(cmd *cobra.Command) {
	f := cmd.Flags()
	f.StringVar(&o.api, "api", "", "the node's control API URL (default: DIR/api of --data, else $"+apiEnv+")")
	f.StringVar(&o.data, "data", "", "the running node's data directory (its control API URL is in DIR/api)")
	f.StringVar(&o.home, "home", "", "the running node's micra home (its config.toml names the data directory; default $"+homeEnv+", else ~/.micra)")
	f.BoolVar(&o.asJSON, "json", false, "print the API's JSON")
}

// client is a client of the node the flags name, and a function that
// explains a failed call (a node gone from behind its api file).
func (o *ctlOptions) client() (*node.ControlClient, func(error) error, error) {
	explain := func(err error) error { return err }
	if o.api == "" && o.data == "" && (o.home != "" || os.Getenv(apiEnv) == "") {
		// the home's configuration names the data directory
		path, err := configFile("", o.home)
		if err != nil {
			return nil, nil, err
		}
		if path != "" {
			f, err := node.ReadFile(path)
			if err != nil {
				return nil, nil, err
			}
			o.data = f.DataDir
		}
	}
	var base string
	switch {
	case o.api != "":
		base = o.api
	case o.data != "":
		file := filepath.Join(o.data, node.APIFile)
		u, err := node.ReadAPIFile(o.data)
		if errors.Is(err, fs.ErrNotExist) {
			return nil, nil, fmt.Errorf("no node running at %s: %s not found — start one with `micra node --data-dir %s`", o.data, file, o.data)
		}
		if err != nil {
			return nil, nil, err
		}
		base = u
		explain = func(err error) error {
			var ue *node.UnreachableError
			if !errors.As(err, &ue) {
				return err
			}
			return fmt.Errorf("no node running at %s: %s names %s, which does not answer (a node that did not stop cleanly leaves it behind): %w",
				o.data, file, u, ue.Err)
		}
	case os.Getenv(apiEnv) != "":
		base = os.Getenv(apiEnv)
	default:
		return nil, nil, fmt.Errorf("which node? give --home DIR (its micra home), --data DIR (its data directory), --api URL or set %s", apiEnv)
	}
	c, err := node.NewControlClient(base)
	return c, explain, err
}

// ctlCommand builds one of the control commands around run.
func ctlCommand(use, short, long string, args cobra.PositionalArgs, run func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, args []string) error) *cobra.Command {
	o := &ctlOptions{}
	cmd := &cobra.Command{
		Use: use, Short: short, Long: long, Args: args,
		RunE: func(cmd *cobra.Command, args []string) error {
			c, explain, err := o.client()
			if err != nil {
				return err
			}
			return explain(run(cmd.Context(), cmd.OutOrStdout(), c, o, args))
		},
	}
	o.flags(cmd)
	rootCmd.AddCommand(cmd)
	return cmd
}

const ctlLong = `

The node is found by --api URL, else --data DIR (a running node writes its
control API URL to DIR/api), else $MICRA_API. --json prints the API's JSON
(docs/node.md, "Control API").`

func init() {
	ctlCommand("id", "print a running node's identity: peer id, addresses, role, policy, hierarchy, version",
		"Prints who a running node is: its peer id and listen addresses (with /p2p/<id>, for\nother nodes' --bootstrap), role and capacity, crawler address, delegation policy,\nhierarchy snapshot and build."+ctlLong,
		cobra.NoArgs, func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, _ []string) error {
			v, err := c.ID(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(w, v)
			}
			printID(w, v)
			return nil
		})
	ctlCommand("status", "print what a running node is doing: peers, subnets owned, frontier, outbox, hand-offs, sink, caught up",
		"Prints a running node's state: peers connected and live members, subnets and blocks\nit owns, frontier, pages fetched and errors, outbox backlog, hand-off spool, sink,\nand whether it is caught up (nothing due in the frontier, outbox and hand-off\nspool empty)."+ctlLong,
		cobra.NoArgs, func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, _ []string) error {
			v, err := c.Status(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(w, v)
			}
			printStatus(w, v, time.Now())
			return nil
		})
	ctlCommand("peers", "list the overlay members a running node knows: state, address, capacity, load, last heard",
		"Lists this node and every overlay member it has heard: alive, suspected (silent\nfor two heartbeats) or dead (silent for the failure timeout), connected or not,\ncrawler address, capacity and load, and when its last heartbeat came."+ctlLong,
		cobra.NoArgs, func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, _ []string) error {
			v, err := c.Peers(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(w, node.PeersInfo{Peers: v})
			}
			printPeers(w, v, time.Now())
			return nil
		})

	var lookup, mine bool
	cmd := ctlCommand("owners [ADDR|HOST…]", "who crawls each address (owner, subnet, epoch, block, the decision's explanation)",
		"For each address (or host name, resolved as the node's crawler resolves it): its\nsubnet in the hierarchy, the crawler that owns it (its block's owner where a block\nis delegated), the record's epoch and decider, the probes it was decided by and the\ndecision's explanation, from the node's cached records; --lookup asks the\noverlay (and delegates the subnet if nobody live owns it). Without addresses:\nevery record the node has cached (--mine: those of its own subnets and blocks)."+ctlLong,
		cobra.ArbitraryArgs, func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, args []string) error {
			v, err := c.Owners(ctx, args, lookup, mine)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(w, node.OwnersInfo{Owners: v})
			}
			if len(args) == 0 {
				printRecords(w, v)
				return nil
			}
			printOwners(w, v)
			return nil
		})
	cmd.Flags().BoolVar(&lookup, "lookup", false, "look the owners up in the overlay (and delegate undelegated subnets) instead of reading the cache")
	cmd.Flags().BoolVar(&mine, "mine", false, "without addresses: only the records of this node's subnets and blocks")

	pauseRun := func(pause bool) func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, _ []string) error {
		return func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, _ []string) error {
			call := c.Resume
			if pause {
				call = c.Pause
			}
			v, err := call(ctx)
			if err != nil {
				return err
			}
			if o.asJSON {
				return writeJSON(w, v)
			}
			printPause(w, v, time.Now())
			return nil
		}
	}
	ctlCommand("pause", "pause a running node's crawl: no new fetches, everything stays queued, until `micra resume`",
		"Pauses a running crawler node's fetching: the fetches in flight finish, no new one\n"+
			"starts, and every queued URL stays queued (seeds and hand-offs that arrive are\n"+
			"queued too). The node stays a member of the network and keeps delivering its\n"+
			"outbox. The pause survives a restart (DATA/paused) until `micra resume`."+ctlLong,
		cobra.NoArgs, pauseRun(true))
	ctlCommand("resume", "resume a paused node's crawl",
		"Resumes a paused crawler node's fetching where it stopped."+ctlLong,
		cobra.NoArgs, pauseRun(false))

	var file string
	cmd = ctlCommand("seed URL…", "add seeds to a running node: it queues those it owns and hands the others to their owners",
		"Adds seeds to a running crawler node (any node of a network: each seed goes to the\ncrawler that owns its host). Prints each seed's fate: queued, known (seen\nalready), handed_off (to its owner) or rejected with the reason; exits 1 when any\nwas rejected. --file F reads one URL per line (# comments; - for stdin)."+ctlLong,
		cobra.ArbitraryArgs, func(ctx context.Context, w io.Writer, c *node.ControlClient, o *ctlOptions, args []string) error {
			seeds := slices.Clone(args)
			var bad []string
			if file != "" {
				s, b, err := readSeeds(file, urlnorm.New(urlnorm.DefaultOptions()))
				if err != nil {
					return err
				}
				seeds, bad = append(seeds, s...), b
			}
			for _, b := range bad {
				fmt.Fprintln(os.Stderr, "rejected:", b)
			}
			if len(seeds) == 0 {
				if len(bad) > 0 {
					return fmt.Errorf("seed: all %d seeds rejected", len(bad))
				}
				return errors.New("seed: no seeds (give URLs or --file F)")
			}
			v, err := c.Seed(ctx, seeds)
			if err != nil && len(v.Seeds) == 0 {
				return err
			}
			if o.asJSON {
				if perr := writeJSON(w, v); perr != nil {
					return perr
				}
			} else {
				printSeeds(w, v)
			}
			if err != nil {
				return err
			}
			if n := v.Rejected + len(bad); n > 0 {
				return fmt.Errorf("seed: %d of %d seeds rejected", n, len(seeds)+len(bad))
			}
			return nil
		})
	cmd.Flags().StringVar(&file, "file", "", "read seeds from this file (one URL per line; - for stdin)")
}

func printID(w io.Writer, v node.IDInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "peer id\t%s\n", v.PeerID)
	role := v.Role
	if v.Role == "crawler" {
		role += fmt.Sprintf(" (capacity %d pages/day)", v.Capacity)
	}
	fmt.Fprintf(tw, "role\t%s\n", role)
	if v.CrawlerAddr != "" {
		fmt.Fprintf(tw, "crawler addr\t%s\n", v.CrawlerAddr)
	}
	fmt.Fprintf(tw, "policy\t%s\n", v.Policy)
	fmt.Fprintf(tw, "hierarchy\t%s\n", v.Hierarchy)
	if v.Sink != "" {
		fmt.Fprintf(tw, "sink\t%s\n", v.Sink)
	}
	fmt.Fprintf(tw, "data\t%s\n", v.DataDir)
	fmt.Fprintf(tw, "version\t%s\n", v.Version.Short())
	for i, a := range v.Addrs {
		label := ""
		if i == 0 {
			label = "addrs"
		}
		fmt.Fprintf(tw, "%s\t%s\n", label, a)
	}
	tw.Flush()
}

func yesNo(b bool) string {
	if b {
		return "yes"
	}
	return "no"
}

func printPause(w io.Writer, v node.PauseInfo, now time.Time) {
	switch {
	case v.Paused && v.Changed:
		fmt.Fprintf(w, "crawl paused: no new fetches (%d workers stopped, the others finish the fetch in hand); %s stay queued — `micra resume` continues\n",
			v.HeldWorkers, plural(v.Queued, "URL"))
	case v.Paused:
		fmt.Fprintf(w, "crawl already paused since %s (%s ago); %s queued\n", v.Since.Local().Format(time.DateTime),
			now.Sub(*v.Since).Round(time.Second), plural(v.Queued, "URL"))
	case v.Changed:
		fmt.Fprintf(w, "crawl resumed; %s queued\n", plural(v.Queued, "URL"))
	default:
		fmt.Fprintf(w, "crawl not paused; %s queued\n", plural(v.Queued, "URL"))
	}
	if v.Warning != "" {
		fmt.Fprintln(w, "warning:", v.Warning)
	}
}

func printStatus(w io.Writer, v node.StatusInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	since := "-"
	if !v.Since.IsZero() {
		since = fmt.Sprintf("%s (%s ago)", v.Since.Local().Format(time.DateTime), now.Sub(v.Since).Round(time.Second))
	}
	fmt.Fprintf(tw, "peer id\t%s\n", v.PeerID)
	fmt.Fprintf(tw, "running since\t%s\n", since)
	fmt.Fprintf(tw, "caught up\t%s\n", yesNo(v.CaughtUp))
	if v.Paused && v.PausedSince != nil {
		fmt.Fprintf(tw, "paused\tsince %s (%s ago): no new fetches until `micra resume`\n", v.PausedSince.Local().Format(time.DateTime),
			now.Sub(*v.PausedSince).Round(time.Second))
	}
	fmt.Fprintf(tw, "peers\t%d connected; %s (%s), this node included\n", v.PeersConnected,
		plural(int64(v.MembersLive), "live member"), plural(int64(v.CrawlersLive), "crawler"))
	if nw := v.Network; nw != nil {
		fmt.Fprintf(tw, "network\t%s: admitted until %s", nw.ID, nw.CertificateExpires.Local().Format(time.DateTime))
		if nw.Revocations > 0 {
			fmt.Fprintf(tw, "; revocation list %d", nw.Revocations)
		}
		fmt.Fprintln(tw)
	} else {
		fmt.Fprintf(tw, "network\topen: anyone who runs micra is a member\n")
	}
	fmt.Fprintf(tw, "owns\t%s, %s\n", plural(int64(v.SubnetsOwned), "subnet"), plural(int64(v.BlocksOwned), "block"))
	if f := v.Frontier; f != nil {
		s := fmt.Sprintf("%d queued, %d hosts active, %d ready, %d seen; %d revisits scheduled", f.Queued, f.ActiveHosts, f.ReadyHosts, f.Seen, f.Scheduled)
		if f.RevisitsDue {
			s += " (due)"
		} else if f.NextRevisit != nil {
			s += ", next " + f.NextRevisit.Local().Format(time.DateTime)
		}
		if f.Refused > 0 {
			s += fmt.Sprintf("; %d refused (address not allowed)", f.Refused)
		}
		fmt.Fprintf(tw, "frontier\t%s\n", s)
	}
	if c := v.Crawl; c != nil {
		s := fmt.Sprintf("%s fetched, %d not modified, %s", plural(c.PagesFetched, "page"), c.NotModified, plural(c.Errors, "error"))
		if len(c.ErrorsByReason) > 0 {
			var rs []string
			for r, n := range c.ErrorsByReason {
				rs = append(rs, fmt.Sprintf("%s %d", r, n))
			}
			sort.Strings(rs)
			s += " (" + strings.Join(rs, ", ") + ")"
		}
		s += fmt.Sprintf("; %d URLs handed off", c.HandedOff)
		fmt.Fprintf(tw, "crawl\t%s\n", s)
	}
	if o := v.Outbox; o != nil {
		fmt.Fprintf(tw, "outbox\t%d records, %d carriers pending; %d carriers delivered, %d delivery errors\n",
			o.PendingRecords, o.PendingCarriers, o.CarriersDelivered, o.DeliveryErrors)
	}
	h := v.Handoff
	fmt.Fprintf(tw, "hand-off\t%d URLs pending; %d URLs in %d batches acknowledged, %d failures\n", h.Pending, h.URLs, h.Messages, h.Failures)
	if s := v.Sink; s != nil {
		var where string
		switch {
		case s.Addr != "":
			where = s.Addr
			if s.Source == "network" {
				where += ", found on the network"
			}
			if s.Connected {
				where += " (connected)"
			} else {
				where += " (not connected)"
			}
		case s.Source == "network":
			where = "none announced on the network yet (carriers wait in the outbox)"
		case s.CarriersDir != "":
			where = "files in " + s.CarriersDir
		default:
			where = "(receiver)"
		}
		last := "no delivery yet"
		if s.LastDelivery != nil {
			last = "last delivery " + s.LastDelivery.Local().Format(time.DateTime)
			if s.LastOK {
				last += " ok"
			} else {
				last += " failed: " + s.LastError
			}
		}
		fmt.Fprintf(tw, "sink\t%s; %s (%d delivered, %d failed)\n", where, last, s.Delivered, s.Failed)
	}
	if r := v.Release; r != nil {
		fmt.Fprintf(tw, "release\t%s\n", releaseLine(r, now))
		if r.Network != nil {
			fmt.Fprintf(tw, "releases\t%s\n", networkReleasesLine(r.Network))
		}
	}
	tw.Flush()
}

// releaseLine is the status's release line: what runs, whether a verified
// newer release is available, the last refusal.
func releaseLine(r *node.ReleaseStatus, now time.Time) string {
	s := "running " + r.Running + "; auto_update " + string(r.AutoUpdate)
	if !r.Trusted {
		return s + "; " + r.Note
	}
	s += fmt.Sprintf("; root v%d", r.RootVersion)
	switch a := r.Available; {
	case a != nil:
		s += fmt.Sprintf("; %s AVAILABLE, verified (%s, sha256 %s…", a.Version, a.Target, a.SHA256[:min(12, len(a.SHA256))])
		if r.BinaryVerified {
			s += ", binary checked"
		}
		s += ")"
		switch {
		case r.InstallAt != nil:
			s += ", installed here at " + r.InstallAt.Local().Format(time.DateTime) + " (this node's wave)"
		case r.AutoUpdate == node.AutoUpdateNotify:
			s += " — install it by hand, or set auto_update = \"on\""
		}
	case r.Checked.IsZero():
		s += "; no release offered yet"
	default:
		s += fmt.Sprintf("; up to date (checked %s ago)", now.Sub(r.Checked).Round(time.Second))
	}
	if t := r.OnTrial; t != nil {
		s += fmt.Sprintf("; ON TRIAL since %s (from %s; rolled back unless healthy)", t.At.Local().Format(time.DateTime), t.From)
	}
	if rb := r.RolledBack; rb != nil {
		s += fmt.Sprintf("; %s ROLLED BACK %s: %s", rb.Version, rb.At.Local().Format(time.DateTime), rb.Reason)
	}
	if r.Paused != "" {
		s += fmt.Sprintf("; HELD BACK since %s: %s", r.PausedSince.Local().Format(time.DateTime), r.Paused)
	}
	if r.Refusal != "" {
		s += fmt.Sprintf("; last refused %s: %s", r.RefusedAt.Local().Format(time.DateTime), r.Refusal)
	}
	return s
}

// networkReleasesLine is the status's line of what the members report:
// the versions they run and the releases they rolled back.
func networkReleasesLine(n *node.NetworkReleases) string {
	vs := slices.Sorted(maps.Keys(n.Running))
	var run []string
	for _, v := range vs {
		run = append(run, fmt.Sprintf("%s on %d", v, n.Running[v]))
	}
	s := fmt.Sprintf("%d nodes report: %s", n.Members, strings.Join(run, ", "))
	if n.OnTrial > 0 {
		s += fmt.Sprintf(" (%d on trial)", n.OnTrial)
	}
	for _, rb := range n.RolledBack {
		s += fmt.Sprintf("; %s ROLLED BACK on %d nodes (sha256 %s…: %s)", rb.Version, rb.Nodes, rb.SHA256[:min(12, len(rb.SHA256))], rb.Reason)
	}
	return s
}

func printPeers(w io.Writer, ps []node.PeerInfo, now time.Time) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "PEER\tSTATE\tCONNECTED\tCRAWLER ADDR\tCAPACITY\tLOAD\tLAST HEARD")
	for _, p := range ps {
		load, heard := "-", "-"
		if p.Load != nil {
			load = fmt.Sprint(*p.Load)
		}
		if p.LastHeard != nil {
			heard = now.Sub(*p.LastHeard).Round(time.Millisecond).String() + " ago"
		}
		addr := p.CrawlerAddr
		switch {
		case p.Sink:
			addr = "(index sink)"
		case addr == "":
			addr = "-"
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%d\t%s\t%s\n", p.PeerID, p.State, yesNo(p.Connected), addr, p.Capacity, load, heard)
	}
	tw.Flush()
}

func ownerLabel(o node.OwnerInfo) string {
	switch {
	case o.Owner == "":
		return "nobody live"
	case o.Mine:
		return o.Owner + " (this node)"
	}
	return o.Owner
}

func printOwners(w io.Writer, owners []node.OwnerInfo) {
	for i, o := range owners {
		if i > 0 {
			fmt.Fprintln(w)
		}
		head := o.Query
		if o.Addr != "" && o.Addr != o.Query {
			head += " (" + o.Addr + ")"
		}
		if o.Mapped != "" {
			head += " mapped to " + o.Mapped
		}
		if o.Error != "" && o.Owner == "" {
			fmt.Fprintf(w, "%s: %s\n", head, o.Error)
			if o.Range != "" {
				fmt.Fprintf(w, "  subnet  %d %s\n", o.Subnet, subnetLabel(o))
			}
			continue
		}
		fmt.Fprintf(w, "%s → %s\n", head, ownerLabel(o))
		tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
		fmt.Fprintf(tw, "  subnet\t%d %s\n", o.Subnet, subnetLabel(o))
		if o.SubnetOwner == "" {
			fmt.Fprintf(tw, "  record\tnone published\n")
		} else {
			rec := fmt.Sprintf("epoch %d, owner %s", o.Epoch, o.SubnetOwner)
			if !o.OwnerLive {
				rec += " (not live)"
			}
			rec += fmt.Sprintf(" at %.1f ms", o.OwnerRTTMs)
			if o.DecidedBy != "" {
				rec += ", decided by " + o.DecidedBy
			}
			if o.DecidedAt != nil {
				rec += " " + o.DecidedAt.Local().Format(time.DateTime)
			}
			if o.Stale {
				rec += " (stale: re-read before routing)"
			}
			fmt.Fprintf(tw, "  record\t%s\n", rec)
		}
		if b := o.Block; b != nil {
			live := ""
			if !b.OwnerLive {
				live = " (not live)"
			}
			fmt.Fprintf(tw, "  block\t%s → %s at %.1f ms%s\n", b.Block, b.Owner, b.OwnerRTTMs, live)
		}
		src := "cache"
		if !o.Cached {
			src = "lookup"
		}
		fmt.Fprintf(tw, "  reason\t%s (%s)\n", o.Reason, src)
		if o.Explanation != "" {
			fmt.Fprintf(tw, "  path\t%s\n", o.Explanation)
		}
		if len(o.Probes) > 0 {
			var ps []string
			for _, p := range o.Probes {
				if p.OK {
					ps = append(ps, fmt.Sprintf("%s %.1f ms", p.Crawler, p.RTTMs))
				} else {
					ps = append(ps, p.Crawler+" no answer")
				}
			}
			fmt.Fprintf(tw, "  probes\t%s\n", strings.Join(ps, "; "))
		}
		tw.Flush()
	}
}

func subnetLabel(o node.OwnerInfo) string {
	s := o.Range
	if o.Country != "" {
		s += " " + o.Country
	}
	if o.Org != "" {
		s += " (" + o.Org + ")"
	}
	return s
}

func printRecords(w io.Writer, owners []node.OwnerInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintln(tw, "SUBNET\tRANGE\tOWNER\tEPOCH\tRTT\tBLOCKS")
	for _, o := range owners {
		blocks := "-"
		if len(o.Blocks) > 0 {
			var bs []string
			for _, b := range o.Blocks {
				bs = append(bs, b.Block+"→"+b.Owner)
			}
			blocks = strings.Join(bs, " ")
		}
		fmt.Fprintf(tw, "%d\t%s\t%s\t%d\t%.1f ms\t%s\n", o.Subnet, o.Range, ownerLabel(o), o.Epoch, o.OwnerRTTMs, blocks)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d records\n", len(owners))
}

func printSeeds(w io.Writer, v node.SeedsInfo) {
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	for _, s := range v.Seeds {
		note := s.Reason
		if s.Status == node.SeedHandedOff {
			note = "to " + s.Owner
			if s.Owner == "" {
				note = "owner not decided yet: waits in the hand-off spool"
			}
		}
		fmt.Fprintf(tw, "%s\t%s\t%s\n", s.Status, s.URL, note)
	}
	tw.Flush()
	fmt.Fprintf(w, "%d queued, %d handed off, %d known, %d rejected\n", v.Queued, v.HandedOff, v.Known, v.Rejected)
}
