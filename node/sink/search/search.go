// Package search is the index sink's full-text index (Bleve), fed from
// the sink's change log; a package of its own so that a crawler node,
// which imports node/sink for its client, does not carry Bleve.
package search

import (
	"context"
	"errors"
	"fmt"
	"hash/fnv"
	"log/slog"
	"net/url"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/custom"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"
	"github.com/blevesearch/bleve/v2/analysis/token/lowercase"
	"github.com/blevesearch/bleve/v2/analysis/tokenizer/whitespace"
	"github.com/blevesearch/bleve/v2/mapping"
	"github.com/blevesearch/bleve/v2/search/query"
	index "github.com/blevesearch/bleve_index_api"

	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

// Search is the sink's full-text index (Bleve), fed from the change log
// by Run, never by ingest: a commit does not wait for it, and deleting its
// directory rebuilds it from the log. One document per page (the URL is
// its id; a later record replaces it, a gone page leaves). Pages are found
// by their keywords — the crawlers' stemmed terms, each counted by the
// logarithm of its weight, so the crawlers' ranking counts — and by their
// titles.
//
// The index is split by URL into shards, each a Bleve index of its own
// with its own writer, so that batches are built on several cores; a
// query asks them together (bleve.IndexAlias).
type Search struct {
	store  *sink.Store
	opt    Options
	shards []*shard
	query  bleve.Index // the shards together (the one shard, if one)
	log    *slog.Logger
	// the title field's analyzer, as the mapping names it
	titleAnalyzer analysis.Analyzer
}

// shard is one Bleve index of the split, with its own cursor.
type shard struct {
	idx     bleve.Index
	indexed atomic.Uint64 // the last log sequence it holds (searchable)

	// the records of batches searchable but not persisted yet (held in
	// memory by scorch), and a signal at each persist
	mu          sync.Mutex
	unpersisted int
	persisted   chan struct{}
}

// Options tune the index. Zero values take the defaults.
type Options struct {
	// Shards is how many Bleve indexes the pages are split into by URL,
	// written in parallel and searched together (default 1). An index
	// on disk keeps the count it was made with.
	Shards int
	// MaxBatch bounds the records of one Bleve batch (default 5,000). A
	// shard takes in one batch every record read while it was busy, up to
	// this: small batches when the index keeps up (a short lag), large
	// ones when it is behind (less work per record).
	MaxBatch int
	Logger   *slog.Logger
}

func (o *Options) defaults() {
	o.Shards = max(o.Shards, 1)
	if o.MaxBatch <= 0 {
		o.MaxBatch = 5000
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// termsAnalyzer splits the keywords field on spaces and lower-cases: the
// terms are stemmed by the crawlers already.
const termsAnalyzer = "micra_terms"

// kCursor is a shard's own record of the last sequence it indexed,
// written in the same batch as the documents.
const kCursor = "micra_cursor"

// scorchConfig is each shard's Bleve (scorch) configuration.
//
// unsafe_batch: a batch returns once it is searchable (introduced), not
// once scorch has persisted it; the persister writes it in the background.
// A crash loses the batches not persisted yet, and the shard's cursor,
// persisted in the same snapshot, goes back with them: Run indexes them
// again from the log, which holds every record. Waiting for each fsync
// kept the index's writer idle for most of a batch.
//
// (A new map each time: bleve writes the index's path into it.)
func scorchConfig() map[string]any { return map[string]any{"unsafe_batch": true} }

// Open opens (or creates) the index in dir over the store's log.
func Open(store *sink.Store, dir string, o Options) (*Search, error) {
	o.defaults()
	log := o.Logger.With("component", "search")
	if _, err := os.Stat(filepath.Join(dir, "index_meta.json")); err == nil {
		// one index in the directory itself: made before the split
		log.Warn("search index of an earlier layout, rebuilt from the log", "dir", dir)
		if err := os.RemoveAll(dir); err != nil {
			return nil, fmt.Errorf("sink: search index %s: %w", dir, err)
		}
	}
	n, err := shardCount(dir, o.Shards)
	if err != nil {
		return nil, fmt.Errorf("sink: search index %s: %w", dir, err)
	}
	if n != o.Shards {
		log.Info("search index keeps its shard count (delete the directory to change it)", "dir", dir, "shards", n, "asked", o.Shards)
	}
	s := &Search{store: store, opt: o, log: log}
	for i := range n {
		idx, err := openShard(filepath.Join(dir, fmt.Sprintf("shard-%d", i)), log)
		if err == nil {
			s.shards = append(s.shards, &shard{idx: idx, persisted: make(chan struct{}, 1)})
			err = s.shards[i].loadCursor()
		}
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("sink: search index %s: %w", dir, err)
		}
	}
	if n == 1 {
		s.query = s.shards[0].idx
	} else {
		alias := make([]bleve.Index, n)
		for i, sh := range s.shards {
			alias[i] = sh.idx
		}
		s.query = bleve.NewIndexAlias(alias...)
	}
	m := s.shards[0].idx.Mapping()
	s.titleAnalyzer = m.AnalyzerNamed(m.AnalyzerNameForPath("title"))
	return s, nil
}

// shardCount is the shard count the file dir/shards records, written
// with want if there is none: a shard whose directory is missing is
// rebuilt, not dropped.
func shardCount(dir string, want int) (int, error) {
	f := filepath.Join(dir, "shards")
	b, err := os.ReadFile(f)
	if errors.Is(err, os.ErrNotExist) {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return 0, err
		}
		return want, os.WriteFile(f, []byte(strconv.Itoa(want)+"\n"), 0o644)
	}
	if err != nil {
		return 0, err
	}
	n, err := strconv.Atoi(strings.TrimSpace(string(b)))
	if err != nil || n < 1 || n > 1024 {
		return 0, fmt.Errorf("damaged shard count %q in %s (delete the directory to rebuild the index)", b, f)
	}
	return n, nil
}

func openShard(dir string, log *slog.Logger) (bleve.Index, error) {
	idx, err := bleve.OpenUsing(dir, scorchConfig())
	if errors.Is(err, bleve.ErrorIndexMetaMissing) || errors.Is(err, bleve.ErrorIndexMetaCorrupt) {
		// an index whose creation did not finish (a crash): it is derived
		// data, rebuilt from the log
		log.Warn("search index unreadable, rebuilt from the log", "dir", dir, "err", err)
		if err = os.RemoveAll(dir); err == nil {
			err = bleve.ErrorIndexPathDoesNotExist
		}
	}
	if errors.Is(err, bleve.ErrorIndexPathDoesNotExist) {
		idx, err = bleve.NewUsing(dir, searchMapping(), bleve.Config.DefaultIndexType, bleve.Config.DefaultKVStore, scorchConfig())
	}
	return idx, err
}

func (sh *shard) loadCursor() error {
	v, err := sh.idx.GetInternal([]byte(kCursor))
	if err != nil || len(v) == 0 {
		return err
	}
	n, err := strconv.ParseUint(string(v), 10, 64)
	if err != nil {
		return fmt.Errorf("damaged cursor %q (delete the directory to rebuild it)", v)
	}
	sh.indexed.Store(n)
	return nil
}

// searchMapping is the index's mapping: how each field is queried. The
// documents are built by hand (buildDoc), indexing each field as it is
// declared here.
func searchMapping() *mapping.IndexMappingImpl {
	m := bleve.NewIndexMapping()
	if err := m.AddCustomAnalyzer(termsAnalyzer, map[string]any{
		"type": custom.Name, "tokenizer": whitespace.Name, "token_filters": []string{lowercase.Name},
	}); err != nil {
		panic(err) // a static configuration
	}
	doc := bleve.NewDocumentStaticMapping()
	// no composite _all field, no term vectors (no phrase queries or
	// highlighting), no doc values (no sorting by field): each doubled
	// the indexing work and nothing asks for them
	lean := func(f *mapping.FieldMapping) *mapping.FieldMapping {
		f.IncludeInAll, f.IncludeTermVectors, f.DocValues = false, false, false
		return f
	}
	terms := lean(bleve.NewTextFieldMapping())
	terms.Analyzer = termsAnalyzer
	terms.Store = false
	doc.AddFieldMappingsAt("terms", terms)
	title := lean(bleve.NewTextFieldMapping())
	title.Analyzer = standard.Name
	doc.AddFieldMappingsAt("title", title)
	host := lean(bleve.NewKeywordFieldMapping()) // (the URL is the document's id)
	host.Store = false
	doc.AddFieldMappingsAt("host", host)
	lang := lean(bleve.NewKeywordFieldMapping())
	lang.Index = false
	doc.AddFieldMappingsAt("lang", lang)
	seq := lean(bleve.NewNumericFieldMapping())
	seq.Index = false
	doc.AddFieldMappingsAt("seq", seq)
	m.DefaultMapping = doc
	return m
}

// Indexed returns the last log sequence the index holds: every record
// up to it is searchable.
func (s *Search) Indexed() uint64 {
	low := s.shards[0].indexed.Load()
	for _, sh := range s.shards[1:] {
		low = min(low, sh.indexed.Load())
	}
	return low
}

// part is what a shard is given of the records read: its pages' entries
// and the last sequence read, which its cursor reaches once they are in.
type part struct {
	es   []*sink.Entry
	last uint64
}

// Run feeds the index from the log until ctx ends. One goroutine reads
// the log and hands each shard its pages; each shard indexes, in one
// batch, all it was handed while it indexed the batch before.
func (s *Search) Run(ctx context.Context) {
	var wg sync.WaitGroup
	ins := make([]chan part, len(s.shards))
	for i := range s.shards {
		ins[i] = make(chan part, 2)
		wg.Go(func() { s.runShard(ctx, i, ins[i]) })
	}
	s.feed(ctx, ins)
	for _, in := range ins {
		close(in)
	}
	wg.Wait()
}

// feed reads the log after the lowest shard cursor and hands each shard
// the entries of its pages that it does not hold yet.
func (s *Search) feed(ctx context.Context, ins []chan part) {
	cursor := s.Indexed()
	for ctx.Err() == nil {
		es, last, err := s.store.Read(cursor, s.opt.MaxBatch, sink.Filter{})
		var bs *sink.BeforeStartError
		if errors.As(err, &bs) {
			// the log's retention dropped records the index had not
			// read: it goes on from the log's start (the pages of the
			// records dropped are not indexed)
			s.log.Warn("search: records dropped by the log's retention before they were indexed", "after", cursor, "start", bs.Start)
			cursor = bs.Start - 1
			for _, sh := range s.shards {
				if sh.indexed.Load() < cursor {
					sh.indexed.Store(cursor)
				}
			}
			continue
		}
		if err != nil {
			s.log.Error("search: read the log", "after", cursor, "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		if last <= cursor {
			if !s.store.Wait(ctx, cursor) {
				return // (ctx ended, or the store stopped: no record will come)
			}
			continue
		}
		parts := make([]part, len(s.shards))
		for i := range es {
			k := s.shardOf(es[i].Record.URL)
			if es[i].Seq > s.shards[k].indexed.Load() {
				parts[k].es = append(parts[k].es, &es[i])
			}
		}
		for k := range parts {
			parts[k].last = last
			select {
			case ins[k] <- parts[k]:
			case <-ctx.Done():
				return
			}
		}
		cursor = last
	}
}

func (s *Search) shardOf(url string) int {
	if len(s.shards) == 1 {
		return 0
	}
	h := fnv.New64a()
	h.Write([]byte(url))
	return int(h.Sum64() % uint64(len(s.shards)))
}

// runShard indexes what shard k is handed, all that waits at once (up to
// MaxBatch records) in one batch. A batch that fails is tried again every
// second.
func (s *Search) runShard(ctx context.Context, k int, in <-chan part) {
	sh := s.shards[k]
	for p := range in {
		es, last := p.es, p.last
	more:
		for len(es) < s.opt.MaxBatch {
			select {
			case q, ok := <-in:
				if !ok {
					break more
				}
				es, last = append(es, q.es...), q.last
			default:
				break more
			}
		}
		for len(es) > 0 && ctx.Err() == nil {
			err := s.index(ctx, sh, es, last)
			if err == nil {
				break
			}
			s.log.Error("search: index", "shard", k, "last", last, "err", err)
			sleepCtx(ctx, time.Second)
		}
		if ctx.Err() != nil {
			return
		}
		sh.indexed.Store(last)
	}
}

// maxUnpersisted bounds the records a shard holds searchable but not yet
// persisted, in batches of at most MaxBatch: past it a batch waits for
// the persister. unsafe_batch has no such bound of its own: a writer
// faster than the persister piled up in-memory segments (a sink at
// 1,000,000 records reached 2.3 GB).
func (s *Search) maxUnpersisted() int { return 4 * s.opt.MaxBatch }

func (s *Search) index(ctx context.Context, sh *shard, es []*sink.Entry, last uint64) error {
	for {
		sh.mu.Lock()
		n := sh.unpersisted
		sh.mu.Unlock()
		if n == 0 || n+len(es) <= s.maxUnpersisted() {
			break
		}
		select {
		case <-sh.persisted:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	b := sh.idx.NewBatch()
	for _, e := range es {
		switch e.Record.Change {
		case pack.ChangeGone:
			b.Delete(e.Record.URL)
		case pack.ChangeNew, pack.ChangeChanged:
			if e.Record.Flags&pack.FlagNoIndex != 0 {
				b.Delete(e.Record.URL) // the page asked not to be indexed
				continue
			}
			if err := b.IndexAdvanced(buildDoc(e, s.titleAnalyzer)); err != nil {
				return err
			}
		}
	}
	b.SetInternal([]byte(kCursor), []byte(strconv.FormatUint(last, 10)))
	n := len(es)
	sh.mu.Lock()
	sh.unpersisted += n
	sh.mu.Unlock()
	released := false
	release := func() {
		sh.mu.Lock()
		if !released {
			released = true
			sh.unpersisted -= n
		}
		sh.mu.Unlock()
		select {
		case sh.persisted <- struct{}{}:
		default:
		}
	}
	b.SetPersistedCallback(func(error) { release() }) // (scorch calls it once the batch is on disk)
	err := sh.idx.Batch(b)
	if err != nil {
		release() // (not introduced: it will never be persisted)
	}
	return err
}

// Query finds the pages matching every word of q (in their keywords,
// stemmed as the crawlers stem, or in their titles), best first; host,
// if set, restricts them to one host.
func (s *Search) Query(q, host string, limit int) (sink.Results, error) {
	words := strings.Fields(q)
	if len(words) == 0 {
		return sink.Results{}, errors.New("an empty query")
	}
	start := time.Now()
	indexed := s.Indexed()
	has, done, err := s.termChecker()
	if err != nil {
		return sink.Results{}, err
	}
	defer done()
	none := sink.Results{Indexed: indexed}
	// Each word is a disjunction: its lower-case and stemmed forms in the
	// keywords, its tokens in the title at half weight. A form no page
	// holds is left out: it matched nothing, yet every disjunction paid
	// for it on each page it visited (a third of a frequent word's time).
	var must []query.Query
	for _, w := range words {
		var alts []query.Query
		for _, t := range uniq(strings.ToLower(w), extract.Stem("en", w)) {
			if has("terms", t) {
				alts = append(alts, termQuery("terms", t, 1))
			}
		}
		// what a match query on the title made of w (its analyzer's tokens)
		var title []query.Query
		for _, tok := range s.titleAnalyzer.Analyze([]byte(w)) {
			if t := string(tok.Term); has("title", t) {
				title = append(title, termQuery("title", t, 0.5))
			}
		}
		switch len(title) {
		case 0:
		case 1:
			alts = append(alts, title[0])
		default:
			d := query.NewDisjunctionQuery(title)
			d.SetMin(1)
			d.SetBoost(0.5)
			alts = append(alts, d)
		}
		switch len(alts) {
		case 0:
			return none, nil // no page holds the word
		case 1:
			must = append(must, alts[0])
		default:
			must = append(must, query.NewDisjunctionQuery(alts))
		}
	}
	if host != "" {
		h := strings.ToLower(host)
		if !has("host", h) {
			return none, nil
		}
		must = append(must, termQuery("host", h, 1))
	}
	var qq query.Query = query.NewConjunctionQuery(must)
	if len(must) == 1 {
		qq = must[0]
	}
	req := bleve.NewSearchRequestOptions(qq, max(1, min(limit, 1000)), 0, false)
	req.Fields = []string{"title", "lang", "seq"}
	res, err := s.query.Search(req)
	if err != nil {
		return sink.Results{}, err
	}
	out := sink.Results{Total: res.Total, TookMs: float64(time.Since(start).Microseconds()) / 1000, Indexed: indexed}
	for _, h := range res.Hits {
		hit := sink.Hit{URL: h.ID, Score: h.Score}
		hit.Title, _ = h.Fields["title"].(string)
		hit.Lang, _ = h.Fields["lang"].(string)
		if v, ok := h.Fields["seq"].(float64); ok {
			hit.Seq = uint64(v)
		}
		out.Hits = append(out.Hits, hit)
	}
	return out, nil
}

func termQuery(field, term string, boost float64) *query.TermQuery {
	q := query.NewTermQuery(term)
	q.SetField(field)
	q.SetBoost(boost)
	return q
}

// termChecker returns has, which reports whether any page of any shard
// holds term in field (a dictionary look-up per segment), and done, which
// releases the shards' snapshots it reads.
func (s *Search) termChecker() (has func(field, term string) bool, done func(), err error) {
	readers := make([]index.IndexReader, 0, len(s.shards))
	done = func() {
		for _, r := range readers {
			r.Close()
		}
	}
	for _, sh := range s.shards {
		ix, err := sh.idx.Advanced()
		if err != nil {
			done()
			return nil, nil, err
		}
		r, err := ix.Reader()
		if err != nil {
			done()
			return nil, nil, err
		}
		readers = append(readers, r)
	}
	has = func(field, term string) bool {
		for _, r := range readers {
			tfr, err := r.TermFieldReader(context.Background(), []byte(term), field, false, false, false)
			if err != nil {
				return true // (not known: the query asks)
			}
			n := tfr.Count()
			tfr.Close()
			if n > 0 {
				return true
			}
		}
		return false
	}
	return has, done, nil
}

// Close persists what the index holds and closes it (after Run has
// returned): a clean stop loses no indexing work.
func (s *Search) Close() error {
	var errs []error
	for i, sh := range s.shards {
		if err := sh.flush(); err != nil {
			errs = append(errs, fmt.Errorf("search: shard %d not persisted (it is indexed again from the log at the next start): %w", i, err))
		}
		errs = append(errs, sh.idx.Close())
	}
	return errors.Join(errs...)
}

// flush writes the shard's cursor in a last batch and waits until scorch
// has persisted it, and with it every batch before (unsafe_batch returns
// before they are).
func (sh *shard) flush() error {
	persisted := make(chan error, 1)
	b := sh.idx.NewBatch()
	b.SetInternal([]byte(kCursor), []byte(strconv.FormatUint(sh.indexed.Load(), 10)))
	b.SetPersistedCallback(func(err error) {
		select {
		case persisted <- err:
		default:
		}
	})
	if err := sh.idx.Batch(b); err != nil {
		return err
	}
	t := time.NewTimer(time.Minute)
	defer t.Stop()
	select {
	case err := <-persisted:
		return err
	case <-t.C:
		return errors.New("scorch did not persist it within a minute")
	}
}

func uniq(a, b string) []string {
	if a == b {
		return []string{a}
	}
	return []string{a, b}
}

func hostOf(raw string) string {
	u, err := url.Parse(raw)
	if err != nil {
		return ""
	}
	return strings.ToLower(u.Hostname())
}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return false
	case <-t.C:
		return true
	}
}
