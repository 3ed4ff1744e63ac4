package search

import (
	"context"
	"encoding/json"
	"fmt"
	"log/slog"
	"math"
	"net/http"
	"net/http/httptest"
	"path/filepath"
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

func runSearch(t *testing.T, s *sink.Store, dir string) (*Search, func()) {
	t.Helper()
	se, err := Open(s, dir, slog.New(slog.DiscardHandler))
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
// rebuilt from the log answers the same.
func TestSearchFollowsTheLog(t *testing.T) {
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
	se, stop := runSearch(t, s, filepath.Join(dir, "search"))
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
	se, stop = runSearch(t, s, filepath.Join(dir, "search-rebuilt"))
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
}

// An index directory left empty or damaged (a crash while it was created)
// is rebuilt from the log rather than keeping the sink from starting.
func TestSearchDirWithoutIndexRebuilt(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	se, stop := runSearch(t, s, t.TempDir()) // exists, empty
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
		se := &Search{idx: idx, titleAnalyzer: idx.Mapping().AnalyzerNamed(standard.Name)}
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
	defer mapped.Close()
	defer hand.Close()
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
