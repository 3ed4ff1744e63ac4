package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/http/httptest"
	"path/filepath"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

// --retain reads ages and sizes as an operator writes them.
func TestParseRetention(t *testing.T) {
	for in, want := range map[string]sink.Retention{
		"":            {},
		"30d":         {Age: 30 * 24 * time.Hour},
		"72h":         {Age: 72 * time.Hour},
		"50GiB":       {Bytes: 50 << 30},
		"30d, 512MiB": {Age: 30 * 24 * time.Hour, Bytes: 512 << 20},
	} {
		if got, err := parseRetention(in); err != nil || got != want {
			t.Errorf("%q: %+v, %v; want %+v", in, got, err, want)
		}
	}
	for _, bad := range []string{"forever", "-3d", "0B", "12"} {
		if _, err := parseRetention(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}

// A follower whose cursor the retention passed stops with the message
// naming its cursor and the log's start, instead of reconnecting forever.
func TestSubscribeBehindTheLogsStart(t *testing.T) {
	s, err := sink.Open(sink.Options{Dir: filepath.Join(t.TempDir(), "log"), NoSync: true, Retain: sink.Retention{Age: time.Hour}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	var recs []pack.Record
	for i := range 5 {
		recs = append(recs, pack.Record{URL: fmt.Sprintf("http://a.example/%d", i), Status: 200, Change: pack.ChangeNew})
	}
	if _, err := s.Commit("c1", pack.EncodeCarrier("c1", 0, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
	if _, err := s.Trim(time.Now().Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(sink.Handler(s, nil, nil))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	err = runSubscribe(ctx, io.Discard, &subscribeOptions{sink: srv.URL, from: 2, follow: true})
	var bs *sink.BeforeStartError
	if !errors.As(err, &bs) || bs.Cursor != 2 || bs.Start != 6 || ctx.Err() != nil {
		t.Fatalf("%v (ctx %v); want cursor 2 before the log's start 6, at once", err, ctx.Err())
	}
}
