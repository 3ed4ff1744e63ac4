package sink

import (
	"bufio"
	"context"
	"encoding/json"
	"net/http/httptest"
	"strings"
	"testing"
	"time"
)

// IngestedSince counts the records committed at or after a time: checked
// against a scan of the log's own commit times, at every commit time the
// log holds and around them.
func TestIngestedSince(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	if n, err := s.IngestedSince(time.Time{}); err != nil || n != 0 {
		t.Fatalf("empty log: %d, %v", n, err)
	}
	for i := range 5 {
		if _, err := s.Commit("c1", carrier("c1", uint64(i), i*3, 3)); err != nil {
			t.Fatal(err)
		}
	}
	es, _, err := s.Read(0, 100, Filter{})
	if err != nil || len(es) != 15 {
		t.Fatalf("read: %d, %v", len(es), err)
	}
	want := func(at time.Time) uint64 {
		n := uint64(0)
		for _, e := range es {
			if !e.IngestedAt.Before(at) {
				n++
			}
		}
		return n
	}
	for _, e := range es {
		for _, at := range []time.Time{e.IngestedAt, e.IngestedAt.Add(time.Microsecond), e.IngestedAt.Add(-time.Microsecond)} {
			if n, err := s.IngestedSince(at); err != nil || n != want(at) {
				t.Fatalf("since %v: %d, %v; want %d", at, n, err, want(at))
			}
		}
	}
	if n, _ := s.IngestedSince(es[0].IngestedAt.Add(-time.Hour)); n != 15 {
		t.Errorf("since before the first: %d, want 15", n)
	}
	if n, _ := s.IngestedSince(es[14].IngestedAt.Add(time.Hour)); n != 0 {
		t.Errorf("since after the last: %d, want 0", n)
	}
}

// The sink lists its open streams with their cursors — HTTP NDJSON and
// SSE, and libp2p (TestSubscribeOverLibp2p's path) — and forgets them when
// they end; past the bound it counts them only.
func TestReadersAreListed(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	srv := httptest.NewServer(Handler(s, nil, nil))
	defer srv.Close()
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitReaders := func(n int) []ReaderInfo {
		t.Helper()
		for {
			rs, _ := s.Readers()
			if len(rs) == n {
				return rs
			}
			select {
			case <-ctx.Done():
				t.Fatalf("%d readers listed, want %d: %+v", len(rs), n, rs)
			case <-time.After(10 * time.Millisecond):
			}
		}
	}

	fctx, fcancel := context.WithCancel(ctx)
	resp := get(t, fctx, srv.URL+"/v1/records?follow=true&after=1&host=h1.example")
	sc := bufio.NewScanner(resp.Body)
	got := readStream(t, sc, 2) // p1, p4: the records of h1 after 1
	rs := waitReaders(1)
	r := rs[0]
	if len(got) != 2 || r.Kind != "ndjson" || !r.Follow || r.From != 1 || r.Cursor != 5 || r.Sent != 2 || r.LastSent == nil ||
		r.Filter != "host=h1.example" || !strings.HasPrefix(r.Remote, "127.0.0.1:") {
		t.Fatalf("the follower, after %d records: %+v", len(got), r)
	}
	// a second stream, by SSE, past the bound of 2: listed; a third: counted
	s.readers.mu.Lock()
	s.readers.max = 2
	s.readers.mu.Unlock()
	sctx, scancel := context.WithCancel(ctx)
	sresp := get(t, sctx, srv.URL+"/v1/events?after=4")
	ssc := bufio.NewScanner(sresp.Body)
	for ssc.Scan() && !strings.HasPrefix(ssc.Text(), "data: ") {
	}
	rs = waitReaders(2)
	if rs[1].Kind != "sse" || rs[1].ID <= rs[0].ID || rs[1].From != 4 {
		t.Fatalf("the SSE reader: %+v", rs[1])
	}
	tctx, tcancel := context.WithCancel(ctx)
	tresp := get(t, tctx, srv.URL+"/v1/records?follow=true&after=5")
	for {
		if _, unlisted := s.Readers(); unlisted == 1 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the third stream was not counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
	// the JSON: /v1/readers and the console's sink page
	var ri ReadersInfo
	if err := json.NewDecoder(get(t, ctx, srv.URL+"/v1/readers").Body).Decode(&ri); err != nil || len(ri.Readers) != 2 || ri.Unlisted != 1 {
		t.Fatalf("/v1/readers: %+v, %v", ri, err)
	}
	var v ConsoleSink
	if err := json.NewDecoder(get(t, ctx, srv.URL+"/console/sink.json").Body).Decode(&v); err != nil {
		t.Fatal(err)
	}
	if v.Head != 5 || v.Counts.Records != 5 || len(v.Crawlers) != 1 || len(v.Readers) != 2 || v.ReadersUnlisted != 1 ||
		v.Search || v.IndexBacklog != nil || len(v.Ingest) != len(ingestWindows) || v.Ingest[len(v.Ingest)-1].Records != 5 {
		t.Fatalf("/console/sink.json: %+v", v)
	}
	// a new record moves the follower's cursor
	if _, err := s.Commit("c1", carrier("c1", 1, 5, 3)); err != nil { // p5 (h2), p6 (h0), p7 (h1)
		t.Fatal(err)
	}
	if got := readStream(t, sc, 1); len(got) != 1 || got[0].Seq != 8 {
		t.Fatalf("followed: %+v", got)
	}
	if r := waitReaders(2)[0]; r.Cursor != 8 || r.Sent != 3 {
		t.Fatalf("the follower after seq 8: %+v", r)
	}
	// ended streams are forgotten
	fcancel()
	resp.Body.Close()
	scancel()
	sresp.Body.Close()
	tcancel()
	tresp.Body.Close()
	waitReaders(0)
	for {
		if _, unlisted := s.Readers(); unlisted == 0 {
			break
		}
		if ctx.Err() != nil {
			t.Fatal("the unlisted stream is still counted")
		}
		time.Sleep(10 * time.Millisecond)
	}
}
