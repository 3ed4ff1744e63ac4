package console_test

import (
	"bufio"
	"context"
	"encoding/json"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/search"
)

// sinkRig is an index sink over the nodes' carriers, for the sink page.
type sinkRig struct {
	url   string
	store *sink.Store
	word  string   // a word the index finds
	hits  []string // the URLs /v1/search answers for it (limit 20, the page's)
}

// startSink commits every carrier the nodes wrote (their outboxes empty
// first) into a sink with a full-text index, waits for the index to
// reach the head, serves the sink's HTTP API and opens a reader that
// follows the log to the head. It stops when the test ends.
func startSink(t *testing.T, ctx context.Context, nodes []*node.Node) *sinkRig {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, nd := range nodes {
		until(t, ctx, "the nodes' outboxes written out", func() bool {
			o := nd.Status().Outbox
			return o != nil && o.PendingRecords == 0 && o.PendingCarriers == 0
		})
	}
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { store.Close() })
	for _, nd := range nodes {
		files, err := pack.CarrierFiles(filepath.Join(nd.IDInfo().DataDir, "carriers"))
		if err != nil {
			t.Fatal(err)
		}
		for _, f := range files {
			b, err := os.ReadFile(f)
			if err != nil {
				t.Fatal(err)
			}
			if _, err := store.Commit("", b); err != nil {
				t.Fatalf("%s: %v", f, err)
			}
		}
	}
	head := store.Head()
	if head == 0 {
		t.Fatal("the nodes wrote no records")
	}
	idx, err := search.Open(store, t.TempDir(), search.Options{Shards: 1, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { idx.Close() })
	ictx, stop := context.WithCancel(context.Background())
	done := make(chan struct{})
	go func() { defer close(done); idx.Run(ictx) }()
	t.Cleanup(func() { stop(); <-done })
	until(t, ctx, "the full-text index at the head", func() bool { return idx.Indexed() == head })
	srv := httptest.NewServer(sink.Handler(store, idx, nil))
	t.Cleanup(func() { store.Stop(); srv.Close() })

	// a reader following the log, read to the head
	rctx, rcancel := context.WithCancel(ctx)
	req, _ := http.NewRequestWithContext(rctx, http.MethodGet, srv.URL+"/v1/records?follow=true", nil)
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { rcancel(); resp.Body.Close() })
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(nil, 1<<20)
	for seen := uint64(0); seen < head && sc.Scan(); {
		var r sink.StreamRecord
		if json.Unmarshal(sc.Bytes(), &r) == nil {
			seen = r.Seq
		}
	}
	until(t, ctx, "the reader at the head", func() bool {
		rs, _ := store.Readers()
		return len(rs) == 1 && rs[0].Cursor == head
	})

	// the word: the heaviest keyword of a page with a title
	es, _, err := store.Read(0, int(head), sink.Filter{Changed: true})
	if err != nil {
		t.Fatal(err)
	}
	rig := &sinkRig{url: srv.URL, store: store}
	for _, e := range es {
		if len(e.Record.Keywords) > 0 && e.Record.Title != "" {
			k := slices.MaxFunc(e.Record.Keywords, func(a, b pack.Keyword) int { return int(a.Weight) - int(b.Weight) })
			rig.word = k.Term
			break
		}
	}
	if rig.word == "" {
		t.Fatal("no record with keywords")
	}
	sresp, err := http.Get(srv.URL + "/v1/search?limit=20&q=" + url.QueryEscape(rig.word))
	if err != nil {
		t.Fatal(err)
	}
	defer sresp.Body.Close()
	var res sink.Results
	if err := json.NewDecoder(sresp.Body).Decode(&res); err != nil {
		t.Fatal(err)
	}
	for _, h := range res.Hits {
		rig.hits = append(rig.hits, h.URL)
	}
	if len(rig.hits) == 0 || !strings.HasPrefix(rig.hits[0], "http") {
		t.Fatalf("/v1/search?q=%s: %+v, want hits", rig.word, res)
	}
	return rig
}
