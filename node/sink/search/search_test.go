package search

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/blevesearch/bleve/v2"
	"github.com/blevesearch/bleve/v2/analysis/analyzer/standard"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
	"go.uber.org/goleak"
)

func runSearch(t *testing.T, s *sink.Store, dir string, shards int) (*Search, func()) {
	t.Helper()
	se, err := Open(s, dir, Options{Shards: shards, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { se.Run(ctx) })
	return se, func() { cancel(); wg.Wait(); se.Close() }
}

// bleve keeps a package-wide pool of analysis workers for the process's life.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/blevesearch/bleve_index_api.AnalysisWorker"))
}

func waitIndexed(t *testing.T, se *Search, seq uint64) {
	t.Helper()
	deadline := time.Now().Add(10 * time.Second)
	for se.Indexed() < seq {
		if time.Now().After(deadline) {
			t.Fatalf("index at %d, want %d", se.Indexed(), seq)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

func pageRecord(url, title string, change pack.Change, kw ...pack.Keyword) pack.Record {
	return pack.Record{URL: url, Title: title, Status: 200, Change: change, FetchedAt: time.Now(), Lang: "en", Keywords: kw}
}

// The index follows the log: a query's words are stemmed as the crawlers
// stem keywords ("headers" finds "header"), weights rank, titles count, a
// later record of a page replaces it, a gone page leaves, and the index
// rebuilt from the log answers the same; split into shards or not.
func TestSearchFollowsTheLog(t *testing.T) {
	for _, shards := range []int{1, 3} {
		t.Run(fmt.Sprintf("shards=%d", shards), func(t *testing.T) { testSearchFollowsTheLog(t, shards) })
	}
}

func testSearchFollowsTheLog(t *testing.T, shards int) {
	dir := t.TempDir()
	s, err := sink.Open(sink.Options{Dir: filepath.Join(dir, "log"), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	recs := []pack.Record{
		pageRecord("http://a.example/http", "HTTP headers explained", pack.ChangeNew,
			pack.Keyword{Term: "header", Weight: 30}, pack.Keyword{Term: "http", Weight: 20}),
		pageRecord("http://b.example/mail", "Mail", pack.ChangeNew,
			pack.Keyword{Term: "mail", Weight: 30}, pack.Keyword{Term: "header", Weight: 2}),
		pageRecord("http://b.example/old", "Old page", pack.ChangeNew, pack.Keyword{Term: "header", Weight: 9}),
	}
	if _, err := s.Commit("c", pack.EncodeCarrier("c", 0, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
	later := []pack.Record{
		pageRecord("http://b.example/old", "", pack.ChangeGone),
		pageRecord("http://b.example/mail", "Mail", pack.ChangeChanged, pack.Keyword{Term: "mail", Weight: 30}, pack.Keyword{Term: "smtp", Weight: 5}),
	}
	if _, err := s.Commit("c", pack.EncodeCarrier("c", 1, time.Now(), later).Data); err != nil {
		t.Fatal(err)
	}
	se, stop := runSearch(t, s, filepath.Join(dir, "search"), shards)
	waitIndexed(t, se, s.Head())
	check := func(label string, se *Search) {
		t.Helper()
		res, err := se.Query("Headers", "", 10)
		if err != nil || len(res.Hits) != 1 || res.Hits[0].URL != "http://a.example/http" || res.Hits[0].Title != "HTTP headers explained" {
			t.Fatalf("%s: headers → %+v, %v; want the http page only (the old page is gone, the mail page changed)", label, res, err)
		}
		if res, _ := se.Query("mail smtp", "b.example", 10); len(res.Hits) != 1 || res.Hits[0].Seq != 5 {
			t.Fatalf("%s: mail smtp on b.example → %+v", label, res)
		}
		if res, _ := se.Query("mail", "a.example", 10); len(res.Hits) != 0 {
			t.Fatalf("%s: host filter → %+v", label, res)
		}
	}
	check("live", se)
	stop()
	// rebuilt from the log
	se, stop = runSearch(t, s, filepath.Join(dir, "search-rebuilt"), shards)
	defer stop()
	waitIndexed(t, se, s.Head())
	check("rebuilt", se)

	srv := httptest.NewServer(sink.Handler(s, se, nil))
	defer srv.Close()
	resp, err := http.Get(srv.URL + "/v1/search?q=header&limit=5")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var res sink.Results
	if err := json.NewDecoder(resp.Body).Decode(&res); err != nil || res.Total != 1 || res.Indexed != s.Head() {
		t.Fatalf("GET /v1/search: %+v, %v", res, err)
	}
	// the status says how far the index has read
	c, err := sink.NewHTTPClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	if st, err := c.Status(context.Background()); err != nil || st.SearchIndexed == nil || *st.SearchIndexed != s.Head() {
		t.Fatalf("GET /v1/status: %+v, %v; want search_indexed %d", st, err, s.Head())
	}
}

// An index directory left empty or damaged (a crash while it was created)
// is rebuilt from the log rather than keeping the sink from starting.
func TestSearchDirWithoutIndexRebuilt(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	se, stop := runSearch(t, s, t.TempDir(), 2) // exists, empty
	defer stop()
	if se.Indexed() != 0 {
		t.Fatalf("indexed %d", se.Indexed())
	}
}

// mappedDoc is what the index held before documents were built by hand:
// a struct mapped by bleve through searchMapping, each keyword repeated
// termCopies times in one string the micra_terms analyzer splits again.
type mappedDoc struct {
	Host  string  `json:"host"`
	Title string  `json:"title"`
	Lang  string  `json:"lang"`
	Terms string  `json:"terms"`
	Seq   float64 `json:"seq"`
}

func mappedDocOf(e *sink.Entry) mappedDoc {
	r := &e.Record
	var b strings.Builder
	for _, k := range r.Keywords {
		for range termCopies(k.Weight) {
			b.WriteString(k.Term)
			b.WriteByte(' ')
		}
	}
	return mappedDoc{Host: hostOf(r.URL), Title: r.Title, Lang: r.Lang, Terms: b.String(), Seq: float64(e.Seq)}
}

// The hand-built documents rank as the mapped ones did: the same hits
// with the same scores for one-word, two-word, title and host queries,
// keywords in upper case or holding a space included.
func TestHandBuiltDocumentsRankAsMapped(t *testing.T) {
	var entries []sink.Entry
	for i := range 300 {
		kw := []pack.Keyword{{Term: fmt.Sprintf("w%d", i%17), Weight: uint32(1 + i%40)}, {Term: fmt.Sprintf("w%d", i%5), Weight: 3},
			{Term: "common", Weight: uint32(1 + i%9)}}
		switch i % 50 {
		case 7:
			kw = append(kw, pack.Keyword{Term: "Mixed", Weight: 12})
		case 8:
			kw = append(kw, pack.Keyword{Term: "two words", Weight: 20}, pack.Keyword{Term: "w3", Weight: 5}) // w3 twice
		}
		entries = append(entries, sink.Entry{Seq: uint64(i + 1), Record: pageRecord(fmt.Sprintf("http://h%d.example/p%d", i%7, i),
			fmt.Sprintf("Page %d on topic w%d", i, i%11), pack.ChangeNew, kw...)})
	}
	open := func(hand bool) *Search {
		idx, err := bleve.NewMemOnly(searchMapping())
		if err != nil {
			t.Fatal(err)
		}
		se := &Search{shards: []*shard{{idx: idx}}, query: idx, titleAnalyzer: idx.Mapping().AnalyzerNamed(standard.Name)}
		b := idx.NewBatch()
		for i := range entries {
			if hand {
				err = b.IndexAdvanced(buildDoc(&entries[i], se.titleAnalyzer))
			} else {
				err = b.Index(entries[i].Record.URL, mappedDocOf(&entries[i]))
			}
			if err != nil {
				t.Fatal(err)
			}
		}
		if err := idx.Batch(b); err != nil {
			t.Fatal(err)
		}
		return se
	}
	mapped, hand := open(false), open(true)
	defer mapped.query.Close() // (in memory: nothing to persist)
	defer hand.query.Close()
	for _, q := range []struct{ q, host string }{{"w3", ""}, {"common", ""}, {"w3 common", ""}, {"mixed", ""}, {"words", ""},
		{"two", ""}, {"topic", ""}, {"page w4", ""}, {"w1", "h3.example"}, {"nothing", ""}} {
		want, err := mapped.Query(q.q, q.host, 1000)
		if err != nil {
			t.Fatal(err)
		}
		got, err := hand.Query(q.q, q.host, 1000)
		if err != nil {
			t.Fatal(err)
		}
		if got.Total != want.Total || len(got.Hits) != len(want.Hits) {
			t.Fatalf("%q on %q: %d hits, mapped %d", q.q, q.host, got.Total, want.Total)
		}
		for i := range want.Hits {
			w, g := want.Hits[i], got.Hits[i]
			if g.URL != w.URL || math.Abs(g.Score-w.Score) > 1e-9*w.Score || g.Title != w.Title || g.Lang != w.Lang || g.Seq != w.Seq {
				t.Fatalf("%q on %q, hit %d: %+v, mapped %+v", q.q, q.host, i, g, w)
			}
		}
		if q.q != "nothing" && want.Total == 0 {
			t.Fatalf("%q: no hits, the comparison shows nothing", q.q)
		}
	}
}

// commitPages commits n pages (page i has the keyword "k<i mod 10>" and
// "all") from crawler c as carrier seq; change and a title prefix are
// the same for all.
func commitPages(t *testing.T, s *sink.Store, seq uint64, from, n int, change pack.Change, title string) {
	t.Helper()
	var recs []pack.Record
	for i := from; i < from+n; i++ {
		recs = append(recs, pageRecord(fmt.Sprintf("http://h%d.example/p%d", i%13, i), fmt.Sprintf("%s %d", title, i), change,
			pack.Keyword{Term: fmt.Sprintf("k%d", i%10), Weight: 10}, pack.Keyword{Term: "all", Weight: 1}))
	}
	if _, err := s.Commit("c", pack.EncodeCarrier("c", seq, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
}

func docCounts(t *testing.T, se *Search) (total uint64, per []uint64) {
	t.Helper()
	for _, sh := range se.shards {
		n, err := sh.idx.DocCount()
		if err != nil {
			t.Fatal(err)
		}
		total += n
		per = append(per, n)
	}
	return total, per
}

// Split into shards, every page is in exactly one of them, and a query
// asks them all: a later record of a page replaces it in its shard, a
// gone page leaves it.
func TestShardsHoldEachPageOnce(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commitPages(t, s, 0, 0, 300, pack.ChangeNew, "first")
	se, stop := runSearch(t, s, t.TempDir(), 3)
	defer stop()
	waitIndexed(t, se, s.Head())
	total, per := docCounts(t, se)
	if total != 300 || slices.Contains(per, 0) {
		t.Fatalf("%d documents, per shard %v: want 300, in every shard", total, per)
	}
	if res, err := se.Query("all", "", 1000); err != nil || res.Total != 300 || len(res.Hits) != 300 {
		t.Fatalf("all → %d hits, %v", res.Total, err)
	}
	commitPages(t, s, 1, 0, 100, pack.ChangeChanged, "second") // pages 0-99 again
	commitPages(t, s, 2, 100, 50, pack.ChangeGone, "")         // 100-149 gone
	waitIndexed(t, se, s.Head())
	if total, _ := docCounts(t, se); total != 250 {
		t.Fatalf("%d documents after 100 changed and 50 gone, want 250", total)
	}
	res, err := se.Query("second", "", 1000)
	if err != nil || res.Total != 100 {
		t.Fatalf("second → %d hits, %v", res.Total, err)
	}
	if res, _ := se.Query("first", "", 1000); res.Total != 150 {
		t.Fatalf("first → %d hits, want the 150 pages neither changed nor gone", res.Total)
	}
	if res, _ := se.Query("k3 all", "h3.example", 1000); res.Total == 0 {
		t.Fatal("two words on one host: no hit")
	}
}

// A restarted index resumes from its shards' cursors, where a clean stop
// left them, and keeps the shard count it was made with; a shard lost (its directory deleted) is rebuilt
// from the log while the others skip what they hold.
func TestSearchResumesAcrossRestarts(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	dir := t.TempDir()
	commitPages(t, s, 0, 0, 200, pack.ChangeNew, "page")
	se, stop := runSearch(t, s, dir, 2)
	waitIndexed(t, se, s.Head())
	stop()

	commitPages(t, s, 1, 200, 100, pack.ChangeNew, "page")
	se, err = Open(s, dir, Options{Shards: 4, Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	if len(se.shards) != 2 || se.Indexed() != 200 {
		t.Fatalf("reopened: %d shards at %d; want the 2 it was made with, at 200 (where it stopped)", len(se.shards), se.Indexed())
	}
	se.Close()
	se, stop = runSearch(t, s, dir, 4)
	waitIndexed(t, se, s.Head())
	if total, _ := docCounts(t, se); total != 300 {
		t.Fatalf("%d documents, want 300", total)
	}
	stop()

	if err := os.RemoveAll(filepath.Join(dir, "shard-1")); err != nil {
		t.Fatal(err)
	}
	se, stop = runSearch(t, s, dir, 2)
	defer stop()
	if se.Indexed() != 0 {
		t.Fatalf("a shard rebuilt: indexed %d, want 0", se.Indexed())
	}
	waitIndexed(t, se, s.Head())
	if total, _ := docCounts(t, se); total != 300 {
		t.Fatalf("%d documents after a shard was rebuilt, want 300", total)
	}
	if res, _ := se.Query("all", "", 1000); res.Total != 300 {
		t.Fatalf("all → %d hits", res.Total)
	}
}

// An index of the layout before shards (one Bleve index in the directory
// itself) is rebuilt from the log, not opened as a broken shard.
func TestEarlierLayoutRebuilt(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commitPages(t, s, 0, 0, 20, pack.ChangeNew, "page")
	dir := t.TempDir()
	old, err := bleve.New(filepath.Join(dir, "search"), searchMapping())
	if err != nil {
		t.Fatal(err)
	}
	if err := old.SetInternal([]byte(kCursor), []byte("20")); err != nil {
		t.Fatal(err)
	}
	old.Close()
	se, stop := runSearch(t, s, filepath.Join(dir, "search"), 1)
	defer stop()
	waitIndexed(t, se, s.Head())
	if res, _ := se.Query("all", "", 100); res.Total != 20 {
		t.Fatalf("all → %d hits, want 20", res.Total)
	}
}

// An index behind the log's start (its retention dropped records the
// index had not read) goes on from the start rather than stopping.
func TestSearchBehindTheLogsStart(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Retain: sink.Retention{Age: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	commitPages(t, s, 0, 0, 200, pack.ChangeNew, "old")
	if _, err := s.Trim(time.Now().Add(2 * time.Hour)); err != nil || s.Start() != 201 {
		t.Fatalf("start %d, %v", s.Start(), err)
	}
	commitPages(t, s, 1, 200, 50, pack.ChangeNew, "new")
	se, stop := runSearch(t, s, t.TempDir(), 2)
	defer stop()
	waitIndexed(t, se, s.Head())
	if res, _ := se.Query("new", "", 100); res.Total != 50 {
		t.Fatalf("new → %d hits, want the 50 pages after the start", res.Total)
	}
	if total, _ := docCounts(t, se); total != 50 {
		t.Fatalf("%d documents", total)
	}
}
