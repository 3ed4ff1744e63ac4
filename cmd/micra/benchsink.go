package main

// `micra bench sink`: flags and printing of testnet/bench's sink experiment.

import (
	"encoding/json"
	"fmt"
	"os"
	"runtime"
	"runtime/pprof"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/testnet/bench"
)

func init() {
	var o bench.SinkOptions
	var asJSON, sinkProcess bool
	var cpuProfile string
	cmd := &cobra.Command{
		Use:   "sink",
		Short: "ingest carriers into the index sink over libp2p, beside Badger batched writes of the same records; then catch up over HTTP",
		Long: `Starts an index sink and --crawlers libp2p hosts in this process, pushes
--carriers carriers of --per-carrier records from each over /micra/carrier/1 (every
record committed, fsync'd, before its acknowledgement), and prints records/s beside
the reference measured in the same run on the same disk: the same records written
with Badger WriteBatch, one synced batch per carrier. Then a subscriber reads the
whole log from cursor 0 over HTTP NDJSON.

--search runs the full-text index beside the ingest and prints each record's lag
from its commit to its being searchable (p50, p95, max), best paced at an offered
rate (--rate 20000), then the latency of six kinds of query over the whole index
(one and two words, frequent and rare: the pages' keywords are drawn from a
100,000-word Zipf vocabulary).

--sink-process runs the sink as a micra sink process of its own, with its index:
the bench reads its progress, search and log over HTTP as an indexer would, and
prints its own peak memory (VmHWM), where the in-process run can only print the
bench's (every carrier of the run, the crawler hosts, the reference's store). At
1,000,000 records: micra bench sink --sink-process --carriers 250 (minutes).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			if cpuProfile != "" {
				f, err := os.Create(cpuProfile)
				if err != nil {
					return err
				}
				defer f.Close()
				if err := pprof.StartCPUProfile(f); err != nil {
					return err
				}
				defer pprof.StopCPUProfile()
			}
			if sinkProcess {
				bin, err := os.Executable()
				if err != nil {
					return err
				}
				o.SinkProcess = bin
			}
			r, err := bench.RunSink(cmd.Context(), o)
			if err != nil {
				return err
			}
			if asJSON {
				enc := json.NewEncoder(os.Stdout)
				enc.SetIndent("", "  ")
				return enc.Encode(r)
			}
			fmt.Printf("sink ingest: %d records in %d carriers from %d crawlers, sync %v\n", r.Records, r.Carriers, max(o.Crawlers, 4), r.Sync)
			fmt.Printf("  (machine load, 1-minute average: %.1f at the start, %.1f at the end, on %d cores)\n", r.LoadAvg[0], r.LoadAvg[1], runtime.NumCPU())
			fmt.Printf("  micra sink over /micra/carrier/1   %10.0f records/s\n", r.IngestPerSec)
			if o.Rate > 0 {
				fmt.Printf("  (paced at %.0f records/s: the references below are not what the sink could take)\n", o.Rate)
			}
			fmt.Printf("  Badger WriteBatch (reference)      %10.0f records/s   sink = %.0f %% of it\n", r.BadgerPerSec, 100*r.IngestShare)
			fmt.Printf("  CPU per record (the process's)     sink %.1f µs (pushers' side included), Badger WriteBatch %.1f µs\n", r.IngestCPUPerRecordUs, r.BadgerCPUPerRecordUs)
			fmt.Printf("  catch-up from cursor 0 (NDJSON)    %10.0f records/s\n", r.CatchUpPerSec)
			fmt.Printf("  peak RSS                           %10.0f MB of %s\n", r.PeakRSSMB, r.RSSOf)
			if r.PeakAnonMB > 0 {
				fmt.Printf("    of which at most %.0f MB anonymous (heap, memtables), %.0f MB file-backed (mapped tables and logs)\n", r.PeakAnonMB, r.PeakFileMB)
			}
			if r.SearchShards > 0 {
				fmt.Printf("search index (Bleve, %d shard(s), fed from the log while ingesting)\n", r.SearchShards)
				fmt.Printf("  indexing                           %10.0f records/s; caught up %.0f ms after the last commit\n",
					r.SearchIndexPerSec, r.SearchCatchUpMs)
				fmt.Printf("  lag, commit to searchable          p50 %.0f ms, p95 %.0f ms, max %.0f ms (at %.0f records/s ingested)\n",
					r.SearchLagP50Ms, r.SearchLagP95Ms, r.SearchLagMaxMs, r.IngestPerSec)
				fmt.Printf("  queries over %d records          p50 %.2f ms, p95 %.2f ms (top 10 hits)\n", r.SearchDocsIndexed, r.SearchQueryP50Ms, r.SearchQueryP95Ms)
				for _, k := range r.SearchQueries {
					fmt.Printf("    %-55s p50 %7.2f ms  p95 %7.2f ms  %9.0f hits  e.g. %q\n", k.Kind, k.P50Ms, k.P95Ms, k.MeanHits, k.Example)
				}
			}
			fmt.Printf("(%.0f s in all)\n", r.ElapsedS)
			return nil
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.Crawlers, "crawlers", 4, "crawler hosts pushing at once")
	f.IntVar(&o.Carriers, "carriers", 50, "carriers per crawler")
	f.IntVar(&o.PerCarrier, "per-carrier", 1000, "records per carrier")
	f.Float64Var(&o.Rate, "rate", 0, "offer this many records/s in all (0: as fast as the sink takes them)")
	f.BoolVar(&o.NoSync, "no-sync", false, "no fsync per commit (sink and reference alike)")
	f.StringVar(&o.Dir, "dir", "", "directory for the stores (default: a temporary one, removed)")
	f.BoolVar(&o.Search, "search", false, "run the full-text index beside the ingest: its lag and query latency")
	f.IntVar(&o.SearchShards, "search-shards", 2, "with --search: split the index into this many Bleve indexes, written in parallel and searched together")
	f.BoolVar(&sinkProcess, "sink-process", false, "run the sink as a micra sink process of its own (with its index: implies --search), so its peak memory is its own")
	f.BoolVar(&asJSON, "json", false, "print the result as JSON")
	f.StringVar(&cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file")
	benchParentCmd().AddCommand(cmd)
}
