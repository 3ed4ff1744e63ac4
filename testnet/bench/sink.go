package bench

import (
	"bufio"
	"cmp"
	"context"
	"encoding/binary"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"syscall"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// SinkOptions size the sink experiment.
type SinkOptions struct {
	Crawlers   int // crawler hosts pushing at once (default 4)
	Carriers   int // carriers per crawler (default 50)
	PerCarrier int // records per carrier (default 1000: a default carrier of ≈1 MiB)
	NoSync     bool
	Dir        string // where the stores go (default a temporary directory, removed)
	// Search runs the full-text index beside the ingest and measures its
	// lag and its queries.
	Search bool
	// Rate, if positive, paces the pushers to this many records/s in all
	// (the index's lag is read at an offered rate, not at the fastest).
	Rate float64
	// SearchShards splits the full-text index (search.Options.Shards).
	SearchShards int
	// SinkProcess, if set, is the micra binary to run the sink as a
	// process of its own (`micra sink`, with its full-text index): its
	// peak memory is then the sink's alone, and the bench reads its
	// progress, search and log over HTTP.
	SinkProcess string
	SinkEnv     []string // more environment for it (tests)
}

// SinkResult is what RunSink measured, each figure beside its reference
// measured in the same run on the same disk.
type SinkResult struct {
	Records  int  `json:"records"`
	Carriers int  `json:"carriers"`
	Sync     bool `json:"sync"`
	// IngestPerSec: records/s from the first push to the last
	// acknowledgement, over /micra/carrier/1 from Crawlers libp2p hosts,
	// each record durably committed before its carrier's acknowledgement.
	IngestPerSec float64 `json:"ingest_records_per_s"`
	// BadgerPerSec: the reference, the same records' log entries written
	// with Badger WriteBatch (one batch per carrier, synced as the sink's
	// commits are), no verification, no page index, no protocol.
	BadgerPerSec float64 `json:"badger_batch_records_per_s"`
	IngestShare  float64 `json:"ingest_share_of_badger"`
	// The process's CPU time (user + system) per record during the
	// reference's writes and during the ingest (the pushers' side of the
	// protocol included): steadier than the rates when other work shares
	// the machine.
	BadgerCPUPerRecordUs float64 `json:"badger_batch_cpu_us_per_record"`
	IngestCPUPerRecordUs float64 `json:"ingest_cpu_us_per_record"`
	// CatchUpPerSec: records/s a subscriber reads the whole log from
	// cursor 0 over HTTP NDJSON.
	CatchUpPerSec float64 `json:"catch_up_records_per_s"`
	// With Search: each record's lag, from its commit to its being
	// searchable (both read every 2 ms: the index's cursor is the lowest
	// of its shards'), its p50, p95 and max; how long the index took to
	// catch up after the last commit; its rate over the whole run; and the
	// latency of queries over the whole index (SearchQueries: by kind).
	SearchLagP50Ms    float64     `json:"search_lag_p50_ms,omitempty"`
	SearchLagP95Ms    float64     `json:"search_lag_p95_ms,omitempty"`
	SearchLagMaxMs    float64     `json:"search_lag_max_ms,omitempty"`
	SearchCatchUpMs   float64     `json:"search_catch_up_ms,omitempty"`
	SearchQueryP50Ms  float64     `json:"search_query_p50_ms,omitempty"`
	SearchQueryP95Ms  float64     `json:"search_query_p95_ms,omitempty"`
	SearchQueries     []QueryKind `json:"search_queries,omitempty"`
	SearchDocsIndexed uint64      `json:"search_indexed,omitempty"`
	SearchIndexPerSec float64     `json:"search_index_records_per_s,omitempty"`
	SearchShards      int         `json:"search_shards,omitempty"`
	// LoadAvg is the machine's 1-minute load average (/proc/loadavg) at
	// the start and at the end of the run: other work on the machine
	// slows every figure, the reference too.
	LoadAvg [2]float64 `json:"load_avg,omitempty"`
	// PeakRSSMB is the peak resident memory (VmHWM) of the sink's
	// process: with SinkProcess a `micra sink` of its own; else the
	// bench's, which also holds every carrier of the run, the crawler
	// hosts and the reference's store (RSSOf says which).
	PeakRSSMB float64 `json:"peak_rss_mb"`
	RSSOf     string  `json:"rss_of"`
	// With SinkProcess, the most anonymous (heap, Badger's memtables) and
	// file-backed (mapped tables and logs, reclaimable) resident memory
	// seen, read every 100 ms.
	PeakAnonMB float64 `json:"peak_anon_mb,omitempty"`
	PeakFileMB float64 `json:"peak_file_mb,omitempty"`
	// ElapsedS is the whole run's wall time, carriers made to catch-up.
	ElapsedS float64 `json:"elapsed_s"`
}

// RunSink measures the sink's ingest and catch-up rates.
func RunSink(ctx context.Context, o SinkOptions) (*SinkResult, error) {
	o.Crawlers, o.Carriers, o.PerCarrier = cmp.Or(o.Crawlers, 4), cmp.Or(o.Carriers, 50), cmp.Or(o.PerCarrier, 1000)
	began := time.Now()
	dir := o.Dir
	if dir == "" {
		tmp, err := os.MkdirTemp("", "micra-bench-sink-")
		if err != nil {
			return nil, err
		}
		defer os.RemoveAll(tmp)
		dir = tmp
	}
	// the carriers, made before any clock starts
	type crawlerLoad struct {
		host     host.Host
		carriers []pack.Carrier
	}
	loads := make([]crawlerLoad, o.Crawlers)
	var all []pack.Carrier
	for i := range loads {
		h, err := overlay.NewHost(overlay.TestnetConfig())
		if err != nil {
			return nil, err
		}
		defer h.Close()
		loads[i].host = h
		id := h.ID().String()
		for c := range o.Carriers {
			recs := make([]pack.Record, o.PerCarrier)
			for j := range recs {
				n := c*o.PerCarrier + j
				recs[j] = pack.Record{URL: fmt.Sprintf("http://h%d.c%d.example/page/%d", n%97, i, n), Status: 200,
					Change: pack.ChangeNew, FetchedAt: time.Now(), CrawlerID: id, ContentType: "text/html", Lang: "en",
					Title: fmt.Sprintf("Page %d of crawler %d", n, i), BodyBytes: 20_000, TextBytes: 6_000, OutLinks: 40,
					Keywords: benchKeywords(n)}
			}
			loads[i].carriers = append(loads[i].carriers, pack.EncodeCarrier(id, uint64(c), time.Now(), recs))
		}
		all = append(all, loads[i].carriers...)
	}
	total := o.Crawlers * o.Carriers * o.PerCarrier
	res := &SinkResult{Records: total, Carriers: o.Crawlers * o.Carriers, Sync: !o.NoSync}
	res.LoadAvg[0] = loadAvg()
	defer func() { res.LoadAvg[1] = loadAvg() }()

	// the reference: Badger batched writes of the same records
	ref, refCPU, err := badgerReference(filepath.Join(dir, "reference"), all, !o.NoSync)
	if err != nil {
		return nil, err
	}
	res.BadgerPerSec = float64(total) / ref.Seconds()
	res.BadgerCPUPerRecordUs = float64(refCPU.Nanoseconds()) / 1e3 / float64(total)

	var target sinkTarget
	if o.SinkProcess != "" {
		o.Search = true // (micra sink always runs its index)
		target, err = startChild(ctx, o.SinkProcess, filepath.Join(dir, "sink-process"), o)
		res.RSSOf = "a micra sink process of its own"
	} else {
		target, err = startInProcess(ctx, dir, o)
		res.RSSOf = "the bench's process: the sink, every carrier of the run, the crawler hosts, the reference's store"
	}
	if err != nil {
		return nil, err
	}
	defer func() {
		if target != nil {
			target.close()
		}
	}()
	info := target.addr()
	var lagStop func() []time.Duration
	if o.Search {
		res.SearchShards = max(o.SearchShards, 1)
		every := 2 * time.Millisecond
		if o.SinkProcess != "" {
			every = 5 * time.Millisecond // (over HTTP)
		}
		lagStop = sampleLag(target, every)
	}
	start, cpu0, sinkCPU0 := time.Now(), cpuTime(), target.cpu()
	var wg sync.WaitGroup
	errs := make(chan error, o.Crawlers)
	for _, l := range loads {
		client := &sink.Client{Host: l.host, Sink: info, Timeout: time.Minute}
		wg.Go(func() {
			for k, c := range l.carriers {
				if o.Rate > 0 {
					// paced: this crawler's share of the offered rate,
					// carrier k due at k carriers' worth of records
					due := start.Add(time.Duration(float64(k*o.PerCarrier*o.Crawlers) / o.Rate * float64(time.Second)))
					if d := time.Until(due); d > 0 {
						select {
						case <-time.After(d):
						case <-ctx.Done():
							errs <- ctx.Err()
							return
						}
					}
				}
				if err := client.Deliver(ctx, c); err != nil {
					errs <- err
					return
				}
			}
		})
	}
	wg.Wait()
	ingest, ingestCPU := time.Since(start), cpuTime()-cpu0+target.cpu()-sinkCPU0
	select {
	case err := <-errs:
		return nil, err
	default:
	}
	head, _, err := target.progress()
	if err != nil {
		return nil, err
	}
	if head != uint64(total) {
		return nil, fmt.Errorf("bench sink: %d records committed, want %d", head, total)
	}
	res.IngestPerSec = float64(total) / ingest.Seconds()
	res.IngestCPUPerRecordUs = float64(ingestCPU.Nanoseconds()) / 1e3 / float64(total)
	res.IngestShare = res.IngestPerSec / res.BadgerPerSec
	if o.Search {
		var indexed uint64
		for indexed < head && ctx.Err() == nil {
			time.Sleep(5 * time.Millisecond)
			if _, indexed, err = target.progress(); err != nil {
				return nil, err
			}
		}
		res.SearchCatchUpMs = millis(time.Since(start) - ingest)
		lags := lagStop() // (sampled until the index caught up)
		res.SearchLagP50Ms, res.SearchLagP95Ms, res.SearchLagMaxMs = quantileMs(lags, 0.5), quantileMs(lags, 0.95), quantileMs(lags, 1)
		res.SearchIndexPerSec = float64(indexed) / time.Since(start).Seconds()
		res.SearchDocsIndexed = indexed
		if res.SearchQueries, res.SearchQueryP50Ms, res.SearchQueryP95Ms, err = timeQueries(target.query, total); err != nil {
			return nil, err
		}
	}

	start = time.Now()
	n, err := countStream(ctx, target.httpURL()+"/v1/records?after=0")
	if err != nil {
		return nil, err
	}
	if n != total {
		return nil, fmt.Errorf("bench sink: catch-up read %d records, want %d", n, total)
	}
	res.CatchUpPerSec = float64(n) / time.Since(start).Seconds()
	res.PeakRSSMB = float64(target.peakRSS()) / (1 << 20)
	anon, file := target.peakAnonFile()
	res.PeakAnonMB, res.PeakFileMB = float64(anon)/(1<<20), float64(file)/(1<<20)
	err, target = target.close(), nil
	res.ElapsedS = time.Since(began).Seconds()
	return res, err
}

// benchVocabulary is the number of distinct keywords of the bench's
// pages, drawn Zipf-distributed (s 1.05, v 10): term0 is on about a third
// of the pages, term50000 on a few in a million, as a web's vocabulary
// has both frequent and rare words.
const benchVocabulary = 100_000

// benchKeywords are page n's 24 keywords, distinct, heaviest first.
func benchKeywords(n int) []pack.Keyword {
	r := rand.New(rand.NewPCG(uint64(n), 0x5eed))
	z := rand.NewZipf(r, 1.05, 10, benchVocabulary-1)
	kw := make([]pack.Keyword, 0, 24)
	seen := make(map[uint64]bool, 24)
	for len(kw) < 24 {
		t := z.Uint64()
		if seen[t] {
			continue
		}
		seen[t] = true
		kw = append(kw, pack.Keyword{Term: "term" + strconv.FormatUint(t, 10), Weight: uint32(40 - len(kw))})
	}
	return kw
}

// QueryKind is the latency of one kind of query.
type QueryKind struct {
	Kind    string  `json:"kind"`
	Example string  `json:"example"`
	Queries int     `json:"queries"`
	P50Ms   float64 `json:"p50_ms"`
	P95Ms   float64 `json:"p95_ms"`
	// MeanHits is how many pages a query of this kind matched, on average.
	MeanHits float64 `json:"mean_hits"`
}

// timeQueries runs 50 queries of each kind (top 10 hits each, after a
// warm-up) and returns each kind's latency and all of them together.
func timeQueries(query func(q, host string, limit int) (sink.Results, error), pages int) ([]QueryKind, float64, float64, error) {
	r := rand.New(rand.NewPCG(7, 7))
	frequent := func() string { return "term" + strconv.Itoa(r.IntN(10)) }
	rare := func() string { return "term" + strconv.Itoa(20_000+r.IntN(benchVocabulary-20_000)) }
	kinds := []struct {
		kind string
		q    func() string
	}{
		{"one word, frequent (term0-9, on 10-30 % of the pages)", frequent},
		{"one word, rare (term20000 and past)", rare},
		{"one word in every title (page)", func() string { return "page" }},
		{"two words, both frequent", func() string { return frequent() + " " + frequent() }},
		{"two words, frequent and rare", func() string { return frequent() + " " + rare() }},
		{"two words, title and keyword", func() string { return "crawler " + frequent() }},
	}
	for range 20 { // warm-up
		if _, err := query(frequent(), "", 10); err != nil {
			return nil, 0, 0, err
		}
	}
	var out []QueryKind
	var all []time.Duration
	for _, k := range kinds {
		var took []time.Duration
		hits := 0
		qk := QueryKind{Kind: k.kind}
		for range 50 {
			q := k.q()
			qk.Example = q
			t0 := time.Now()
			res, err := query(q, "", 10)
			if err != nil {
				return nil, 0, 0, err
			}
			took = append(took, time.Since(t0))
			hits += int(res.Total)
		}
		qk.Queries, qk.MeanHits = len(took), float64(hits)/float64(len(took))
		qk.P50Ms, qk.P95Ms = quantileMs(took, 0.5), quantileMs(took, 0.95)
		out = append(out, qk)
		all = append(all, took...)
	}
	return out, quantileMs(all, 0.5), quantileMs(all, 0.95), nil
}

// badgerReference writes every record of the carriers as a log entry with
// Badger WriteBatch, one batch per carrier, each flushed (and synced when
// sync) before the next: the local limit the sink's commits are held to.
// (The sink, too, writes one value per record: each page's state is in
// memory, node/sink/pages.go.) It returns the writes' wall and CPU time.
func badgerReference(dir string, cars []pack.Carrier, sync bool) (time.Duration, time.Duration, error) {
	db, err := badger.Open(badger.DefaultOptions(dir).WithSyncWrites(sync).WithMemTableSize(64 << 20).WithLogger(nil))
	if err != nil {
		return 0, 0, err
	}
	defer db.Close()
	// decoding is the sink's work too: done here before the clock, so the
	// reference is the writes alone
	batches := make([][][]byte, len(cars))
	for i, c := range cars {
		_, recs, err := pack.Decode(c.Data)
		if err != nil {
			return 0, 0, err
		}
		for j := range recs {
			batches[i] = append(batches[i], recs[j].AppendBinary(nil))
		}
	}
	seq := uint64(0)
	start, cpu0 := time.Now(), cpuTime()
	for _, b := range batches {
		wb := db.NewWriteBatch()
		for _, v := range b {
			seq++
			if err := wb.Set(binary.BigEndian.AppendUint64([]byte("sl/"), seq), v); err != nil {
				wb.Cancel()
				return 0, 0, err
			}
		}
		if err := wb.Flush(); err != nil {
			return 0, 0, err
		}
	}
	return time.Since(start), cpuTime() - cpu0, nil
}

// cpuTime is the process's CPU time so far, user and system.
func cpuTime() time.Duration {
	var ru syscall.Rusage
	if err := syscall.Getrusage(syscall.RUSAGE_SELF, &ru); err != nil {
		return 0
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// loadAvg is the 1-minute load average, 0 where /proc/loadavg is not.
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	f := strings.Fields(string(b))
	if len(f) == 0 {
		return 0
	}
	v, _ := strconv.ParseFloat(f[0], 64)
	return v
}

func countStream(ctx context.Context, u string) (int, error) {
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, err
	}
	defer resp.Body.Close()
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	n := 0
	for sc.Scan() {
		if len(sc.Bytes()) > 0 {
			n++
		}
	}
	return n, sc.Err()
}

// sampleLag reads the log's head and the index's cursor every interval;
// the returned function stops it and returns each record's lag: from the
// first reading at which the head held it (committed) to the first at
// which the index did (searchable).
func sampleLag(t sinkTarget, every time.Duration) func() []time.Duration {
	type mark struct {
		at            time.Time
		head, indexed uint64
	}
	stop := make(chan struct{})
	done := make(chan []time.Duration)
	go func() {
		var marks []mark
		tick := time.NewTicker(every)
		defer tick.Stop()
		for {
			select {
			case <-stop:
				done <- recordLags(len(marks), func(i int) (time.Time, uint64, uint64) {
					return marks[i].at, marks[i].head, marks[i].indexed
				})
				return
			case now := <-tick.C:
				if head, indexed, err := t.progress(); err == nil {
					marks = append(marks, mark{now, head, indexed})
				}
			}
		}
	}()
	return func() []time.Duration { close(stop); return <-done }
}

// recordLags turns n readings (time, head, indexed; both counts never
// decrease) into each record's lag, for the records the last reading's
// index holds: the time from the first reading whose head held the
// record to the first whose index did.
func recordLags(n int, at func(i int) (time.Time, uint64, uint64)) []time.Duration {
	if n == 0 {
		return nil
	}
	_, _, last := at(n - 1)
	lags := make([]time.Duration, 0, last)
	c, x := 0, 0 // the first readings whose head, index, holds seq
	for seq := uint64(1); seq <= last; seq++ {
		for ; c < n; c++ {
			if _, h, _ := at(c); h >= seq {
				break
			}
		}
		for ; x < n; x++ {
			if _, _, i := at(x); i >= seq {
				break
			}
		}
		tc, _, _ := at(min(c, x))
		tx, _, _ := at(x)
		lags = append(lags, tx.Sub(tc))
	}
	return lags
}

// quantileMs is the q-quantile of durations, in milliseconds.
func quantileMs(d []time.Duration, q float64) float64 {
	ms := make([]float64, len(d))
	for i, x := range d {
		ms[i] = millis(x)
	}
	return quantile(ms, q)
}
