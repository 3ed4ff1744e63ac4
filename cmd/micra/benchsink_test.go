package main

import (
	"context"
	"os"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/testnet/bench"
)

// With --sink-process the sink is a micra sink process of its own: every
// record reaches its log and its index, its queries answer over HTTP, and
// the memory reported is that process's.
func TestBenchSinkProcess(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	r, err := bench.RunSink(context.Background(), bench.SinkOptions{Crawlers: 2, Carriers: 3, PerCarrier: 50, NoSync: true,
		Dir: t.TempDir(), SinkProcess: os.Args[0], SinkEnv: []string{mainEnv + "=1"}})
	if err != nil {
		t.Fatal(err)
	}
	if r.SearchDocsIndexed != 300 || len(r.SearchQueries) == 0 || !(r.CatchUpPerSec > 0) {
		t.Fatalf("indexed %d, %d kinds of query, catch-up %v", r.SearchDocsIndexed, len(r.SearchQueries), r.CatchUpPerSec)
	}
	if !strings.Contains(r.RSSOf, "micra sink process") || !(r.PeakRSSMB > 0) || !(r.PeakAnonMB > 0) {
		t.Fatalf("peak RSS %v MB (anonymous %v) of %q", r.PeakRSSMB, r.PeakAnonMB, r.RSSOf)
	}
}

// --memory-limit reads sizes as an operator writes them.
func TestParseBytes(t *testing.T) {
	for in, want := range map[string]int64{"384MiB": 384 << 20, "1GiB": 1 << 30, "512 MB": 512 << 20, "0": 0, "4096": 4096, "64KiB": 64 << 10} {
		if got, err := parseBytes(in); err != nil || got != want {
			t.Errorf("%q: %d, %v; want %d", in, got, err, want)
		}
	}
	for _, bad := range []string{"", "MiB", "-1MiB", "1.5GiB", "lots"} {
		if _, err := parseBytes(bad); err == nil {
			t.Errorf("%q: no error", bad)
		}
	}
}
