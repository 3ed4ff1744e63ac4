package bench

import (
	"context"
	"testing"
	"time"
)

// A tiny run measures every figure it reports: the sink's ingest, the
// Badger reference and the catch-up, each from the records it really
// moved, and the CPU each took.
func TestRunSinkSmall(t *testing.T) {
	r, err := RunSink(context.Background(), SinkOptions{Crawlers: 2, Carriers: 3, PerCarrier: 20, NoSync: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 2*3*20 || r.Carriers != 6 {
		t.Fatalf("records %d, carriers %d", r.Records, r.Carriers)
	}
	for name, v := range map[string]float64{"ingest": r.IngestPerSec, "badger": r.BadgerPerSec, "share": r.IngestShare,
		"catch-up": r.CatchUpPerSec, "ingest CPU": r.IngestCPUPerRecordUs, "badger CPU": r.BadgerCPUPerRecordUs} {
		if !(v > 0) {
			t.Errorf("%s = %v: not measured", name, v)
		}
	}
}

// Paced, the pushers offer no more than the rate asked: the last carrier
// is not sent before its due time (a bound a slow machine only makes
// safer).
func TestRunSinkPaced(t *testing.T) {
	const rate = 2000.0
	r, err := RunSink(context.Background(), SinkOptions{Crawlers: 2, Carriers: 4, PerCarrier: 50, NoSync: true, Dir: t.TempDir(), Rate: rate})
	if err != nil {
		t.Fatal(err)
	}
	if limit := rate * 4 / 3; r.IngestPerSec > limit {
		t.Errorf("paced at %v records/s, ingested %.0f/s: above the %.0f the schedule allows", rate, r.IngestPerSec, limit)
	}
}

// A record's lag runs from the first reading whose head holds it to the
// first whose index does.
func TestRecordLags(t *testing.T) {
	t0 := time.Unix(0, 0)
	type r struct {
		ms            int
		head, indexed uint64
	}
	rs := []r{{0, 0, 0}, {2, 3, 0}, {4, 3, 2}, {6, 5, 3}, {8, 5, 5}}
	lags := recordLags(len(rs), func(i int) (time.Time, uint64, uint64) {
		return t0.Add(time.Duration(rs[i].ms) * time.Millisecond), rs[i].head, rs[i].indexed
	})
	want := []time.Duration{2, 2, 4, 2, 2} // ms: records 1-2 (2→4), 3 (2→6), 4-5 (6→8)
	if len(lags) != len(want) {
		t.Fatalf("%d lags, want %d", len(lags), len(want))
	}
	for i := range want {
		if lags[i] != want[i]*time.Millisecond {
			t.Errorf("record %d: lag %v, want %v", i+1, lags[i], want[i]*time.Millisecond)
		}
	}
}

// With the index: every record is indexed and lagged, and every kind of
// query is timed.
func TestRunSinkSearch(t *testing.T) {
	r, err := RunSink(context.Background(), SinkOptions{Crawlers: 2, Carriers: 3, PerCarrier: 50, NoSync: true, Dir: t.TempDir(),
		Search: true, SearchShards: 2})
	if err != nil {
		t.Fatal(err)
	}
	if r.SearchDocsIndexed != 300 || r.SearchShards != 2 {
		t.Fatalf("indexed %d in %d shards", r.SearchDocsIndexed, r.SearchShards)
	}
	if len(r.SearchQueries) != 6 {
		t.Fatalf("%d kinds of query", len(r.SearchQueries))
	}
	for _, k := range r.SearchQueries {
		if k.Queries != 50 || !(k.P95Ms > 0) {
			t.Errorf("%s: %d queries, p95 %v", k.Kind, k.Queries, k.P95Ms)
		}
	}
	if !(r.SearchLagMaxMs >= r.SearchLagP95Ms && r.SearchLagP95Ms >= r.SearchLagP50Ms) {
		t.Errorf("lags p50 %v, p95 %v, max %v", r.SearchLagP50Ms, r.SearchLagP95Ms, r.SearchLagMaxMs)
	}
}
