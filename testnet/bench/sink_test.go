package bench

import (
	"context"
	"testing"
)

// A tiny run measures every figure it reports: the sink's ingest, both
// Badger references (log entries alone, and with each page's state) and
// the catch-up, each from the records it really moved.
func TestRunSinkSmall(t *testing.T) {
	r, err := RunSink(context.Background(), SinkOptions{Crawlers: 2, Carriers: 3, PerCarrier: 20, NoSync: true, Dir: t.TempDir()})
	if err != nil {
		t.Fatal(err)
	}
	if r.Records != 2*3*20 || r.Carriers != 6 {
		t.Fatalf("records %d, carriers %d", r.Records, r.Carriers)
	}
	for name, v := range map[string]float64{"ingest": r.IngestPerSec, "badger": r.BadgerPerSec, "badger with state": r.BadgerStatePerSec,
		"share": r.IngestShare, "share with state": r.IngestShareState, "catch-up": r.CatchUpPerSec} {
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
