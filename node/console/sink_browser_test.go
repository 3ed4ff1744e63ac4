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
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/search"
	"github.com/micra-crawler/micra/overlay"
)

// sinkRig is an index sink over the nodes' carriers, for the sink page.
type sinkRig struct {
	url   string
	store *sink.Store
	word  string   // a word the index finds
	hits  []string // the URLs /v1/search answers for it (limit 20, the page's)
}

// startSink serves the sink the nodes delivered to (their outboxes empty
// first) with a full-text index, waits for the index to reach the head,
// serves the sink's HTTP API and opens a reader that follows the log to
// the head. It stops when the test ends.
func startSink(t *testing.T, ctx context.Context, nodes []*node.Node, store *sink.Store) *sinkRig {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, nd := range nodes {
		until(t, ctx, "the nodes' outboxes delivered", func() bool {
			o := nd.Status().Outbox
			return o != nil && o.PendingRecords == 0 && o.PendingCarriers == 0
		})
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

// openSink is an in-process index sink on its own libp2p host: carriers
// in over /micra/carrier/1, the change log out over /micra/subscribe/1
// (what the nodes' network page reads). It returns the store and the
// multiaddr the nodes deliver to; both stop when the test ends.
func openSink(t *testing.T) (*sink.Store, string) {
	t.Helper()
	quiet := slog.New(slog.NewTextHandler(io.Discard, nil))
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true, Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		store.Close()
		t.Fatal(err)
	}
	t.Cleanup(func() {
		store.Stop() // ends the streams that follow the log
		h.Close()
		store.Close()
	})
	(&sink.Server{Store: store, Logger: quiet}).Register(h)
	store.RegisterSubscribe(h, 10*time.Second)
	return store, h.Addrs()[0].String() + "/p2p/" + h.ID().String()
}
