package main

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"net/netip"
	"os"
	"runtime"
	"strconv"
	"strings"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/spf13/cobra"
)

func init() {
	h := &cobra.Command{
		Use:   "hierarchy",
		Short: "build, inspect and query the IP-address hierarchy",
		Long: `The IP-address hierarchy: a tree of IPv4 and IPv6 ranges built from IANA and RIR
registry data and a range CSV, shipped embedded in the binary. Commands that read a
snapshot use the embedded default unless --snapshot names a file.`,
	}
	h.AddCommand(hierarchyBuildCmd(), hierarchyStatsCmd(), hierarchyLookupCmd(), hierarchyDiffCmd())
	rootCmd.AddCommand(h)
}

func hierarchyBuildCmd() *cobra.Command {
	var src hierarchy.Sources
	var out string
	var compress bool
	c := &cobra.Command{
		Use:   "build --iana FILE… --rir FILE… --rpsl FILE… --ranges FILE… --countries FILE… -o SNAPSHOT",
		Short: "build a snapshot from registry files (strict: the first bad line fails)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			if len(src.IANA)+len(src.RIR)+len(src.RPSL)+len(src.Ranges) == 0 {
				return fmt.Errorf("no input: give at least one of --iana, --rir, --rpsl, --ranges")
			}
			if out == "" {
				return fmt.Errorf("-o is required")
			}
			t0 := time.Now()
			t, rep, err := hierarchy.BuildSources(cmd.Context(), src)
			if err != nil {
				return err
			}
			if err := hierarchy.WriteSnapshotFile(out, t, compress); err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			for _, l := range rep.Loads {
				fmt.Fprintf(w, "%-60s %8d lines %8d ranges %6d ignored %6d skipped\n", l.File, l.Lines, l.Records, l.Ignored, l.Skipped)
				for _, e := range l.Errors {
					fmt.Fprintf(w, "  skipped %v\n", e)
				}
			}
			st := rep.Stats
			fmt.Fprintf(w, "derived aggregates %d; duplicates merged %d; partial overlaps split %d (+%d pieces)\n",
				rep.Aggregates, st.Duplicates, st.PartialOverlaps, st.SplitPieces)
			fmt.Fprintf(w, "nodes %d (IPv4 %d, IPv6 %d), orgs %d, height %d, per level %v\n",
				st.Nodes, st.IPv4Nodes, st.IPv6Nodes, st.Orgs, st.Height, st.PerLevel)
			fmt.Fprintf(w, "countries: %d nodes with a country (%d filled from %d country ranges → %d segments)\n",
				st.WithCountry, st.CountryFilled, st.CountryRanges, st.CountrySegments)
			fi, _ := os.Stat(out)
			size := int64(0)
			if fi != nil {
				size = fi.Size()
			}
			fmt.Fprintf(w, "load %v, tree build %v, total %v; wrote %s (%d bytes), id %s\n",
				rep.LoadTime.Round(time.Millisecond), st.Duration.Round(time.Millisecond),
				time.Since(t0).Round(time.Millisecond), out, size, hex.EncodeToString(idBytes(t)))
			return nil
		},
	}
	f := c.Flags()
	f.StringArrayVar(&src.IANA, "iana", nil, "IANA IPv4 address-space or IPv6 unicast-assignments CSV (repeatable)")
	f.StringArrayVar(&src.RIR, "rir", nil, "RIR statistics exchange file, plain or extended (repeatable)")
	f.StringArrayVar(&src.RPSL, "rpsl", nil, "RPSL inetnum/inet6num dump (repeatable)")
	f.StringArrayVar(&src.Ranges, "ranges", nil, "range CSV start,end,asn,organisation (repeatable)")
	f.StringArrayVar(&src.Countries, "countries", nil, "country-range CSV start,end,cc: a node without a country takes the one covering > half its range (repeatable)")
	f.BoolVar(&src.Lenient, "lenient", false, "skip and count bad lines instead of failing on the first")
	f.BoolVar(&src.NoDerive, "no-derive", false, "do not derive organisation aggregates from the range CSVs")
	f.BoolVar(&compress, "zstd", false, "write the snapshot zstd-compressed (the id is unchanged)")
	f.StringVarP(&out, "output", "o", "", "snapshot file to write")
	return c
}

func idBytes(t *hierarchy.Tree) []byte { id := t.ID(); return id[:] }

// loadSnapshot returns the named snapshot, or the embedded default.
func loadSnapshot(path string) (*hierarchy.Tree, string, time.Duration, error) {
	t0 := time.Now()
	if path == "" {
		t, err := hierarchy.Default()
		return t, "embedded default", time.Since(t0), err
	}
	t, err := hierarchy.ReadSnapshotFile(path)
	return t, path, time.Since(t0), err
}

// StatsReport is the output of `micra hierarchy stats`.
type StatsReport struct {
	Snapshot     string  `json:"snapshot"`
	ID           string  `json:"id"`
	Nodes        int     `json:"nodes"`
	IPv4Nodes    int     `json:"ipv4_nodes"`
	IPv6Nodes    int     `json:"ipv6_nodes"`
	Height       int     `json:"height"`
	PerLevel     []int   `json:"per_level"`
	Orgs         int     `json:"orgs"`
	UnaryNodes   int     `json:"unary_nodes"`
	WithCountry  int     `json:"nodes_with_country"`
	Countries    int     `json:"countries"` // distinct country codes
	Segments4    int     `json:"lookup_segments_ipv4"`
	Segments6    int     `json:"lookup_segments_ipv6"`
	Bytes        int     `json:"bytes"`
	BytesZstd    int     `json:"bytes_zstd,omitempty"`
	LoadMillis   float64 `json:"load_ms"`
	RebuildMilli float64 `json:"rebuild_ms"`
	HeapMB       float64 `json:"heap_mb"` // live heap with the tree loaded (after GC)
	RSSMB        float64 `json:"rss_mb"`  // process resident set after loading (before the rebuild)
}

func hierarchyStatsCmd() *cobra.Command {
	var snap string
	var asJSON, zstdSize bool
	c := &cobra.Command{
		Use:   "stats",
		Short: "counts per level, height, organisations, build time and size of a snapshot",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, args []string) error {
			t, name, loadTime, err := loadSnapshot(snap)
			if err != nil {
				return err
			}
			enc := t.Encode()
			rep := StatsReport{Snapshot: name, ID: hex.EncodeToString(idBytes(t)), Nodes: t.Len(), Height: t.Height(),
				PerLevel: t.PerLevel(), Orgs: t.NumOrgs() - 1, Bytes: len(enc), LoadMillis: ms(loadTime)}
			rep.Segments4, rep.Segments6 = t.Segments()
			runtime.GC()
			var mem runtime.MemStats
			runtime.ReadMemStats(&mem)
			rep.HeapMB = float64(mem.HeapAlloc) / (1 << 20)
			rep.RSSMB = processRSSMB()
			ccs := map[string]bool{}
			for id := 1; id < t.Len(); id++ {
				n := t.Node(hierarchy.NodeID(id))
				if n.Start.Is4() {
					rep.IPv4Nodes++
				} else {
					rep.IPv6Nodes++
				}
				if n.Unary() {
					rep.UnaryNodes++
				}
				if n.Country != "" {
					rep.WithCountry++
					ccs[n.Country] = true
				}
			}
			rep.Countries = len(ccs)
			// Build time: rebuild the tree from its own ranges; the result
			// must be the very same snapshot.
			t0 := time.Now()
			b := hierarchy.NewBuilder()
			for _, r := range t.Ranges() {
				if err := b.Add(r); err != nil {
					return err
				}
			}
			rt, _, err := b.Build()
			if err != nil {
				return err
			}
			rep.RebuildMilli = ms(time.Since(t0))
			if rt.ID() != t.ID() {
				return fmt.Errorf("rebuilding %s from its own ranges gave a different snapshot", name)
			}
			if zstdSize {
				z, err := hierarchy.CompressSnapshot(enc)
				if err != nil {
					return err
				}
				rep.BytesZstd = len(z)
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, rep)
			}
			fmt.Fprintf(w, "snapshot   %s\nid         %s\n", rep.Snapshot, rep.ID)
			fmt.Fprintf(w, "nodes      %d (IPv4 %d, IPv6 %d, unary %d)\n", rep.Nodes, rep.IPv4Nodes, rep.IPv6Nodes, rep.UnaryNodes)
			fmt.Fprintf(w, "height     %d\n", rep.Height)
			for d, n := range rep.PerLevel {
				fmt.Fprintf(w, "  level %d  %d\n", d, n)
			}
			fmt.Fprintf(w, "orgs       %d\n", rep.Orgs)
			fmt.Fprintf(w, "countries  %d nodes of %d with a country (%d codes)\n", rep.WithCountry, rep.Nodes-1, rep.Countries)
			fmt.Fprintf(w, "segments   %d IPv4, %d IPv6 (lookup index)\n", rep.Segments4, rep.Segments6)
			fmt.Fprintf(w, "bytes      %d canonical", rep.Bytes)
			if zstdSize {
				fmt.Fprintf(w, ", %d zstd", rep.BytesZstd)
			}
			fmt.Fprintf(w, "\nload       %.1f ms\nrebuild    %.1f ms (tree from its %d ranges)\n", rep.LoadMillis, rep.RebuildMilli, rep.Nodes-1)
			fmt.Fprintf(w, "memory     %.0f MB live heap, %.0f MB RSS after loading\n", rep.HeapMB, rep.RSSMB)
			return nil
		},
	}
	c.Flags().StringVar(&snap, "snapshot", "", "snapshot file (default: the embedded one)")
	c.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	c.Flags().BoolVar(&zstdSize, "zstd-size", false, "also report the zstd-compressed size")
	return c
}

// LookupStep is one node on the path of a looked-up address.
type LookupStep struct {
	ID       hierarchy.NodeID `json:"id"`
	Depth    int              `json:"depth"`
	Range    string           `json:"range"`
	Start    string           `json:"start,omitempty"`
	End      string           `json:"end,omitempty"`
	Org      string           `json:"org,omitempty"`
	OrgID    hierarchy.OrgID  `json:"org_id,omitempty"`
	Registry string           `json:"registry,omitempty"`
	Status   string           `json:"status,omitempty"`
	Country  string           `json:"country,omitempty"`
	ASN      uint32           `json:"asn,omitempty"`
	SameOrg  int              `json:"same_org_nodes,omitempty"`
}

// LookupResult is the answer for one address.
type LookupResult struct {
	IP               string           `json:"ip"`
	Smallest         hierarchy.NodeID `json:"smallest"`
	SmallestNonUnary hierarchy.NodeID `json:"smallest_non_unary"`
	Path             []LookupStep     `json:"path"` // root first
}

func hierarchyLookupCmd() *cobra.Command {
	var snap string
	var asJSON bool
	c := &cobra.Command{
		Use:   "lookup IP…",
		Short: "show the path root→leaf of each address, with organisation names",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			t, _, _, err := loadSnapshot(snap)
			if err != nil {
				return err
			}
			var results []LookupResult
			var bad []string // reported after the others are shown
			for _, a := range args {
				ip, err := netip.ParseAddr(a)
				if err != nil {
					bad = append(bad, strconv.Quote(a))
					continue
				}
				results = append(results, lookupPath(t, ip))
			}
			badErr := func(err error) error {
				if err == nil && len(bad) > 0 {
					err = fmt.Errorf("lookup: not an IP address: %s", strings.Join(bad, ", "))
				}
				return err
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return badErr(writeJSON(w, results))
			}
			for _, r := range results {
				fmt.Fprintf(w, "%s\n", r.IP)
				for _, s := range r.Path {
					mark := ""
					if s.ID == r.SmallestNonUnary {
						mark = "  ← smallest non-unary"
					}
					attrs := []string{}
					for _, kv := range [][2]string{{"", s.Org}, {"registry ", s.Registry}, {"status ", s.Status}, {"country ", s.Country}} {
						if kv[1] != "" {
							attrs = append(attrs, kv[0]+kv[1])
						}
					}
					if s.ASN != 0 {
						attrs = append(attrs, fmt.Sprintf("AS%d", s.ASN))
					}
					fmt.Fprintf(w, "  %s%-8d %-40s %s%s\n", strings.Repeat("  ", s.Depth), s.ID, s.Range, strings.Join(attrs, ", "), mark)
				}
			}
			return badErr(nil)
		},
	}
	c.Flags().StringVar(&snap, "snapshot", "", "snapshot file (default: the embedded one)")
	c.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	return c
}

func lookupPath(t *hierarchy.Tree, ip netip.Addr) LookupResult {
	leaf := t.Lookup(ip)
	res := LookupResult{IP: ip.String(), Smallest: leaf, SmallestNonUnary: t.SmallestNonUnary(ip)}
	chain := append([]hierarchy.NodeID{leaf}, t.Ancestors(leaf)...)
	for i := len(chain) - 1; i >= 0; i-- {
		id := chain[i]
		n := t.Node(id)
		s := LookupStep{ID: id, Depth: int(n.Depth), Range: n.String(), Org: t.OrgName(n.Org), OrgID: n.Org,
			Registry: n.Registry.String(), Status: n.Status.String(), Country: n.Country, ASN: n.ASN}
		if n.Start.IsValid() {
			s.Start, s.End = n.Start.String(), n.End.String()
		}
		if n.Org != 0 {
			s.SameOrg = len(t.OrgNodes(n.Org)) - 1
		}
		res.Path = append(res.Path, s)
	}
	return res
}

// DiffReport compares two snapshots.
type DiffReport struct {
	Old            string `json:"old"`
	New            string `json:"new"`
	OldID          string `json:"old_id"`
	NewID          string `json:"new_id"`
	OldNodes       int    `json:"old_nodes"`
	NewNodes       int    `json:"new_nodes"`
	OldOrgs        int    `json:"old_orgs"`
	NewOrgs        int    `json:"new_orgs"`
	SameRange      int    `json:"same_range"`      // old nodes whose exact range exists in new
	SameAttributes int    `json:"same_attributes"` // … with equal org name, registry, status, country and ASN
	MovedUp        int    `json:"moved_up"`        // old nodes that map to a strictly larger new node
	ToRoot         int    `json:"to_root"`         // old nodes covered by nothing but Root in new
	Added          int    `json:"added"`           // new nodes whose range did not exist in old
}

func hierarchyDiffCmd() *cobra.Command {
	var asJSON bool
	c := &cobra.Command{
		Use:   "diff OLD NEW   (a file, or \"default\" for the embedded snapshot)",
		Short: "compare two snapshots and show how Migrate carries old nodes over",
		Args:  cobra.ExactArgs(2),
		RunE: func(cmd *cobra.Command, args []string) error {
			load := func(p string) (*hierarchy.Tree, error) {
				if p == "default" {
					return hierarchy.Default()
				}
				return hierarchy.ReadSnapshotFile(p)
			}
			old, err := load(args[0])
			if err != nil {
				return err
			}
			nw, err := load(args[1])
			if err != nil {
				return err
			}
			d := DiffReport{Old: args[0], New: args[1], OldID: hex.EncodeToString(idBytes(old)), NewID: hex.EncodeToString(idBytes(nw)),
				OldNodes: old.Len(), NewNodes: nw.Len(), OldOrgs: old.NumOrgs() - 1, NewOrgs: nw.NumOrgs() - 1}
			m := hierarchy.Migrate(old, nw)
			hit := make([]bool, nw.Len())
			for id := 1; id < old.Len(); id++ {
				o, n := old.Node(hierarchy.NodeID(id)), nw.Node(m[id])
				switch {
				case m[id] == hierarchy.Root:
					d.ToRoot++
				case o.Start == n.Start && o.End == n.End:
					d.SameRange++
					hit[m[id]] = true
					if old.OrgName(o.Org) == nw.OrgName(n.Org) && o.Registry == n.Registry && o.Status == n.Status &&
						o.Country == n.Country && o.ASN == n.ASN {
						d.SameAttributes++
					}
				default:
					d.MovedUp++
				}
			}
			for id := 1; id < nw.Len(); id++ {
				if !hit[id] {
					d.Added++
				}
			}
			w := cmd.OutOrStdout()
			if asJSON {
				return writeJSON(w, d)
			}
			fmt.Fprintf(w, "old %s: %d nodes, %d orgs, id %.16s\nnew %s: %d nodes, %d orgs, id %.16s\n", d.Old, d.OldNodes, d.OldOrgs, d.OldID, d.New, d.NewNodes, d.NewOrgs, d.NewID)
			fmt.Fprintf(w, "old nodes kept with the same range   %d (same attributes %d)\n", d.SameRange, d.SameAttributes)
			fmt.Fprintf(w, "old nodes carried to a larger node   %d\n", d.MovedUp)
			fmt.Fprintf(w, "old nodes carried to root            %d\n", d.ToRoot)
			fmt.Fprintf(w, "new ranges not in old                %d\n", d.Added)
			return nil
		},
	}
	c.Flags().BoolVar(&asJSON, "json", false, "machine-readable output")
	return c
}

func writeJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// processRSSMB reads the resident set size from /proc (0 where unavailable).
func processRSSMB() float64 {
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		return 0
	}
	for _, l := range strings.Split(string(b), "\n") {
		if f := strings.Fields(l); len(f) >= 2 && f[0] == "VmRSS:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			return kb / 1024
		}
	}
	return 0
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }
