package node

import (
	"encoding/json"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// The tally counts a page once however many records it has (revisits, a
// second crawler's), gives a host to the crawler that fetched most of its
// pages, counts the sink's overlap flags and skips failed fetches; the
// curve follows the records' decision times against the hosts' first
// fetches and ends on every probe and host.
func TestCrawlTallyAndProbeCurve(t *testing.T) {
	t0 := time.Date(2026, 11, 1, 12, 0, 0, 0, time.UTC)
	tl := &crawlTally{hosts: map[string]*hostTally{}, pages: map[uint64]struct{}{}, crawler: map[string]int{}}
	recs := []streamRecord{
		{URL: "http://a.test/1", Status: 200, Crawler: "A", FetchedAt: t0},
		{URL: "http://a.test/2", Status: 200, Crawler: "A", FetchedAt: t0.Add(time.Second)},
		{URL: "http://a.test/2", Status: 200, Crawler: "B", FetchedAt: t0.Add(2 * time.Second), Overlap: true},
		{URL: "http://A.test/3", Status: 200, Crawler: "B", FetchedAt: t0.Add(3 * time.Second)},
		{URL: "http://b.test/1", Status: 200, Crawler: "B", FetchedAt: t0.Add(4 * time.Second)},
		{URL: "http://b.test/2", Status: 404, Crawler: "B", FetchedAt: t0.Add(9 * time.Second)},
		{URL: "http://c.test/1", Status: 200, Crawler: "C", FetchedAt: t0.Add(5 * time.Second)},
	}
	for i, r := range recs {
		b, _ := json.Marshal(r)
		if err := tl.add(uint64(i+1), b); err != nil {
			t.Fatal(err)
		}
	}
	if tl.cursor != 7 || tl.records != 7 || len(tl.pages) != 5 || tl.overlap != 1 || len(tl.hosts) != 3 {
		t.Fatalf("cursor %d, records %d, pages %d, overlap %d, hosts %d; want 7, 7, 5, 1, 3", tl.cursor, tl.records, len(tl.pages), tl.overlap, len(tl.hosts))
	}
	if a := tl.hosts["a.test"]; a.pages != 3 || tl.owner(a) != "A" || len(a.by) != 2 || !a.first.Equal(t0) {
		t.Errorf("a.test: %d pages, owner %q, %d crawlers; want 3 pages by A (2) and B (1)", a.pages, tl.owner(a), len(a.by))
	}
	if !tl.last.Equal(t0.Add(5*time.Second)) || !tl.first.Equal(t0) {
		t.Errorf("fetches %v … %v, want the 200s' first and last", tl.first, tl.last)
	}
	if err := tl.add(8, []byte("{not json")); err == nil {
		t.Error("a record that is not JSON is counted")
	}

	hosts := []HostInfo{{Host: "a.test", First: t0}, {Host: "b.test", First: t0.Add(4 * time.Second)}, {Host: "c.test", First: t0.Add(5 * time.Second)}}
	probes := func(n int) []delegation.ProbeResult { return make([]delegation.ProbeResult, n) }
	records := []delegation.Record{
		{At: t0.Add(-time.Second), Probes: probes(3)}, // before the first fetch
		{At: t0.Add(4 * time.Second), Probes: probes(2)},
		{At: t0.Add(10 * time.Second), Probes: probes(1)}, // after the last host
	}
	f := NetworkFigures{Hosts: 3}
	c := probeCurve(records, hosts, &f)
	if f.Probes != 6 || f.ProbesPerURL == nil || *f.ProbesPerURL != 2 {
		t.Fatalf("probes %d, per URL %v; want 6 over 3 hosts", f.Probes, f.ProbesPerURL)
	}
	want := []CurvePoint{{At: t0, Hosts: 1, Probes: 3, PerURL: 3, Window: 3}, {At: t0.Add(4 * time.Second), Hosts: 2, Probes: 5, PerURL: 2.5, Window: 2},
		{At: t0.Add(5 * time.Second), Hosts: 3, Probes: 5, PerURL: 5.0 / 3, Window: 0}, {At: t0.Add(10 * time.Second), Hosts: 3, Probes: 6, PerURL: 2}}
	if len(c) != len(want) {
		t.Fatalf("curve %+v, want %+v", c, want)
	}
	for i := range want {
		if !c[i].At.Equal(want[i].At) || c[i].Hosts != want[i].Hosts || c[i].Probes != want[i].Probes || c[i].PerURL != want[i].PerURL || c[i].Window != want[i].Window {
			t.Errorf("curve point %d: %+v, want %+v", i, c[i], want[i])
		}
	}
	if c := probeCurve(nil, nil, &NetworkFigures{}); len(c) != 0 {
		t.Errorf("no host: curve %+v", c)
	}
}
