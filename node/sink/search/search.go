// Package search is the index sink's full-text index (Bleve), fed from
// the sink's change log; a package of its own so that a crawler node,
// which imports node/sink for its client, does not carry Bleve.
package search

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"net/url"
	"os"
	"strconv"
	"strings"
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

	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

// Search is the sink's full-text index (Bleve), fed from the change log
// by Run, never by ingest: a commit does not wait for it, and deleting its
// directory rebuilds it from the log. One document per page (the URL is
// its id; a later record replaces it, a gone page leaves). Pages are found
// by their keywords — the crawlers' stemmed terms, each repeated by the
// logarithm of its weight, so the crawlers' ranking counts — and by their
// titles.
type Search struct {
	store   *sink.Store
	idx     bleve.Index
	log     *slog.Logger
	indexed atomic.Uint64 // the last log sequence indexed
	// the title field's analyzer, as the mapping names it
	titleAnalyzer analysis.Analyzer
}

// termsAnalyzer splits the keywords field on spaces and lower-cases: the
// terms are stemmed by the crawlers already.
const termsAnalyzer = "micra_terms"

// kCursor is the index's own record of the last sequence it indexed,
// written in the same batch as the documents.
const kCursor = "micra_cursor"

// Open opens (or creates) the index in dir over the store's log.
func Open(store *sink.Store, dir string, logger *slog.Logger) (*Search, error) {
	if logger == nil {
		logger = slog.Default()
	}
	idx, err := bleve.Open(dir)
	if errors.Is(err, bleve.ErrorIndexMetaMissing) || errors.Is(err, bleve.ErrorIndexMetaCorrupt) {
		// an index whose creation did not finish (a crash): it is derived
		// data, rebuilt from the log
		logger.Warn("search index unreadable, rebuilt from the log", "dir", dir, "err", err)
		if err = os.RemoveAll(dir); err == nil {
			err = bleve.ErrorIndexPathDoesNotExist
		}
	}
	if errors.Is(err, bleve.ErrorIndexPathDoesNotExist) {
		idx, err = bleve.New(dir, searchMapping())
	}
	if err != nil {
		return nil, fmt.Errorf("sink: search index %s: %w", dir, err)
	}
	s := &Search{store: store, idx: idx, log: logger.With("component", "search"),
		titleAnalyzer: idx.Mapping().AnalyzerNamed(idx.Mapping().AnalyzerNameForPath("title"))}
	if v, err := idx.GetInternal([]byte(kCursor)); err == nil && len(v) > 0 {
		n, err := strconv.ParseUint(string(v), 10, 64)
		if err != nil {
			idx.Close()
			return nil, fmt.Errorf("sink: search index %s: damaged cursor %q (delete the directory to rebuild it)", dir, v)
		}
		s.indexed.Store(n)
	}
	return s, nil
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

// Indexed returns the last log sequence the index holds.
func (s *Search) Indexed() uint64 { return s.indexed.Load() }

// Run feeds the index from the log until ctx ends: batches of up to 1,000
// records, each with the cursor it reached.
func (s *Search) Run(ctx context.Context) {
	for ctx.Err() == nil {
		cursor := s.indexed.Load()
		es, last, err := s.store.Read(cursor, 1000, sink.Filter{})
		if err != nil {
			s.log.Error("search: read the log", "after", cursor, "err", err)
			if !sleepCtx(ctx, time.Second) {
				return
			}
			continue
		}
		if last > cursor {
			if err := s.index(es, last); err != nil {
				s.log.Error("search: index", "after", cursor, "err", err)
				if !sleepCtx(ctx, time.Second) {
					return
				}
				continue
			}
			continue
		}
		s.store.Wait(ctx, cursor)
	}
}

func (s *Search) index(es []sink.Entry, last uint64) error {
	b := s.idx.NewBatch()
	for i := range es {
		e := &es[i]
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
	if err := s.idx.Batch(b); err != nil {
		return err
	}
	s.indexed.Store(last)
	return nil
}

// Query finds the pages matching every word of q (in their keywords,
// stemmed as the crawlers stem, or in their titles), best first; host,
// if set, restricts them to one host.
func (s *Search) Query(q, host string, limit int) (sink.Results, error) {
	words := strings.Fields(q)
	if len(words) == 0 {
		return sink.Results{}, errors.New("an empty query")
	}
	var must []query.Query
	for _, w := range words {
		var alts []query.Query
		for _, t := range uniq(strings.ToLower(w), extract.Stem("en", w)) {
			tq := query.NewTermQuery(t)
			tq.SetField("terms")
			alts = append(alts, tq)
		}
		mq := query.NewMatchQuery(w)
		mq.SetField("title")
		mq.SetBoost(0.5)
		alts = append(alts, mq)
		must = append(must, query.NewDisjunctionQuery(alts))
	}
	if host != "" {
		hq := query.NewTermQuery(strings.ToLower(host))
		hq.SetField("host")
		must = append(must, hq)
	}
	req := bleve.NewSearchRequestOptions(query.NewConjunctionQuery(must), max(1, min(limit, 1000)), 0, false)
	req.Fields = []string{"title", "lang", "seq"}
	start := time.Now()
	res, err := s.idx.Search(req)
	if err != nil {
		return sink.Results{}, err
	}
	out := sink.Results{Total: res.Total, TookMs: float64(time.Since(start).Microseconds()) / 1000, Indexed: s.Indexed()}
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

// Close closes the index.
func (s *Search) Close() error { return s.idx.Close() }

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
