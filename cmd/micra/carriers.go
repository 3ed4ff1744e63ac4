package main

import (
	"encoding/json"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/spf13/cobra"
)

// micra carriers: read the carrier files `micra crawl` writes (one zstd
// carrier per .mcar file), for people checking a crawl and for the sink that
// will consume them.

func init() {
	c := &cobra.Command{
		Use:   "carriers",
		Short: "inspect carrier files (.mcar) written by micra crawl",
	}
	var asJSON bool
	var keywords int
	cat := &cobra.Command{
		Use:   "cat PATH…",
		Short: "print the records of carrier files or directories of them (--json: one JSON object per line)",
		Long: `Decodes carriers (checksum, version and size checks included) and prints one line
per record: change, status, URL, title and the top keywords. PATH is a .mcar file
or a directory of them (read in crawler and sequence order). A damaged file is
reported as "file: reason" on stderr and the others are still printed; the exit
status is then non-zero.`,
		Args: cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return carriersCat(cmd.OutOrStdout(), cmd.ErrOrStderr(), args, asJSON, keywords)
		},
	}
	cat.Flags().BoolVar(&asJSON, "json", false, "one JSON object per record (all fields, carrier id included)")
	cat.Flags().IntVar(&keywords, "keywords", 8, "keywords shown per record in text output (JSON has all)")
	stats := &cobra.Command{
		Use:   "stats PATH…",
		Short: "summarise carrier files: carriers, records by change, bytes shipped, crawlers, time span",
		Args:  cobra.MinimumNArgs(1),
		RunE: func(cmd *cobra.Command, args []string) error {
			return carriersStats(cmd.OutOrStdout(), cmd.ErrOrStderr(), args)
		},
	}
	c.AddCommand(cat, stats)
	rootCmd.AddCommand(c)
}

// carrierPaths expands directories into their carrier files, in order. A
// path that cannot be read is reported on errw and counted in bad; the
// others are still listed.
func carrierPaths(errw io.Writer, args []string) (paths []string, bad int) {
	for _, a := range args {
		fi, err := os.Stat(a)
		if err != nil {
			fmt.Fprintln(errw, err) // (names the path)
			bad++
			continue
		}
		if !fi.IsDir() {
			paths = append(paths, a)
			continue
		}
		files, err := pack.CarrierFiles(a)
		if err != nil {
			fmt.Fprintf(errw, "%s: %v\n", a, err)
			bad++
			continue
		}
		paths = append(paths, files...)
	}
	return paths, bad
}

// eachCarrier decodes every carrier under args; damaged ones are reported on
// errw and skipped. It returns an error naming how many were damaged.
func eachCarrier(errw io.Writer, args []string, fn func(path string, size int64, h pack.Header, recs []pack.Record) error) error {
	paths, pathBad := carrierPaths(errw, args)
	bad := pathBad
	for _, p := range paths {
		h, recs, err := pack.ReadFile(p)
		if err != nil {
			bad++
			fmt.Fprintln(errw, err) // ReadFile names the file
			continue
		}
		var size int64
		if fi, err := os.Stat(p); err == nil {
			size = fi.Size()
		}
		if err := fn(p, size, h, recs); err != nil {
			return err
		}
	}
	if bad > 0 {
		return fmt.Errorf("%d of %d carrier files unreadable", bad, len(paths)+pathBad)
	}
	return nil
}

func carriersCat(w, errw io.Writer, args []string, asJSON bool, keywords int) error {
	enc := json.NewEncoder(w)
	enc.SetEscapeHTML(false)
	return eachCarrier(errw, args, func(_ string, _ int64, h pack.Header, recs []pack.Record) error {
		id := pack.Carrier{CrawlerID: h.CrawlerID, Seq: h.Seq}.ID()
		for i := range recs {
			r := &recs[i]
			if asJSON {
				if err := enc.Encode(r.JSON(id)); err != nil {
					return err
				}
				continue
			}
			var kw []string
			for j, k := range r.Keywords {
				if j >= keywords {
					break
				}
				kw = append(kw, k.Term)
			}
			title := strings.Join(strings.Fields(r.Title), " ")
			if _, err := fmt.Fprintf(w, "%-9s %3d %s %q [%s]\n", r.Change, r.Status, r.URL, title, strings.Join(kw, " ")); err != nil {
				return err
			}
		}
		return nil
	})
}

func carriersStats(w, errw io.Writer, args []string) error {
	if paths, bad := carrierPaths(io.Discard, args); len(paths) == 0 && bad > 0 {
		// no summary of nothing: say why
		carrierPaths(errw, args)
		return fmt.Errorf("no readable carrier path among %d", bad)
	}
	var carriers, records, fileBytes, rawBytes, htmlBytes int64
	changes := map[string]int64{}
	crawlers := map[string]int64{}
	var first, last time.Time
	err := eachCarrier(errw, args, func(_ string, size int64, h pack.Header, recs []pack.Record) error {
		carriers++
		fileBytes += size
		rawBytes += int64(h.RawBytes)
		crawlers[h.CrawlerID] += int64(len(recs))
		for i := range recs {
			r := &recs[i]
			records++
			changes[r.Change.String()]++
			htmlBytes += r.BodyBytes
			if first.IsZero() || r.FetchedAt.Before(first) {
				first = r.FetchedAt
			}
			if r.FetchedAt.After(last) {
				last = r.FetchedAt
			}
		}
		return nil
	})
	tw := tabwriter.NewWriter(w, 0, 0, 2, ' ', 0)
	fmt.Fprintf(tw, "carriers\t%d\n", carriers)
	fmt.Fprintf(tw, "records\t%d\n", records)
	for _, c := range sortedCounts(changes) {
		fmt.Fprintf(tw, "  %s\t%d\n", c, changes[c])
	}
	fmt.Fprintf(tw, "carrier bytes\t%d (records %d raw, zstd %.1f×)\n", fileBytes, rawBytes, byteRatio(rawBytes, fileBytes))
	fmt.Fprintf(tw, "page bytes described\t%d (%.1f× the carrier bytes)\n", htmlBytes, byteRatio(htmlBytes, fileBytes))
	for _, c := range sortedCounts(crawlers) {
		fmt.Fprintf(tw, "crawler %s\t%d records\n", c, crawlers[c])
	}
	if records > 0 {
		fmt.Fprintf(tw, "fetched\t%s … %s\n", first.UTC().Format(time.RFC3339), last.UTC().Format(time.RFC3339))
	}
	if ferr := tw.Flush(); err == nil {
		err = ferr
	}
	return err
}

func byteRatio(a, b int64) float64 {
	if b == 0 {
		return 0
	}
	return float64(a) / float64(b)
}

func sortedCounts(m map[string]int64) []string {
	out := make([]string, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}
