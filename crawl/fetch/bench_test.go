package fetch

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
)

// The fetcher's cost over a bare net/http client on the same loopback
// server and 10 KiB page: compare ns/op of the two benchmarks (same run).
// The difference is politeness bookkeeping, robots matching, guard, tracing,
// our own decoding and the UTF-8 check.

var benchPage = "<html><head><title>bench</title></head><body>" + strings.Repeat("<p>lorem ipsum dolor sit amet</p>", 300) + "</body></html>"

func newBenchSrv() *httptest.Server {
	return httptest.NewServer(noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, benchPage)
	}))
}

func discardLogger() *slog.Logger { return slog.New(slog.NewTextHandler(io.Discard, nil)) }

func BenchmarkFetchMicra(b *testing.B) {
	srv := newBenchSrv()
	defer srv.Close()
	f, err := New(Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: discardLogger()})
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	ctx := context.Background()
	b.SetBytes(int64(len(benchPage)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := f.Fetch(ctx, Request{URL: srv.URL + "/page"})
		if err != nil || len(resp.Body) != len(benchPage) {
			b.Fatal(err)
		}
	}
}

func BenchmarkFetchNetHTTP(b *testing.B) {
	srv := newBenchSrv()
	defer srv.Close()
	c := &http.Client{Transport: &http.Transport{}}
	defer c.CloseIdleConnections()
	b.SetBytes(int64(len(benchPage)))
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		resp, err := c.Get(srv.URL + "/page")
		if err != nil {
			b.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if len(body) != len(benchPage) {
			b.Fatal("short body")
		}
	}
}
