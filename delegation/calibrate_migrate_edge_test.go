package delegation

import (
	"context"
	"fmt"
	"math"
	"testing"
	"time"
)

// TestCalibratorIgnoresNonPositiveTimes: a zero or negative fetch
// time is no measurement (engine.probe drops negative RTTs for the same
// reason), but Observe takes it into the history as a normal time; the
// median then drops to ≤ 0 and the page's ordinary times become "slow":
// a calibration event (and a re-delegation with probes) while nothing
// changed.
func TestCalibratorIgnoresNonPositiveTimes(t *testing.T) {
	host := ip("10.1.2.7")
	at := time.Unix(0, 0)
	for _, tc := range []struct {
		name string
		seq  []time.Duration
	}{
		{"negative (clock step)", []time.Duration{40 * time.Millisecond, -50 * time.Millisecond, 40 * time.Millisecond, 40 * time.Millisecond}},
		{"zero first sample", []time.Duration{0, 15 * time.Millisecond, 15 * time.Millisecond}},
	} {
		cal := NewCalibrator(nil, Config{})
		for i, d := range tc.seq {
			if ev, ok := cal.Observe("http://h/a", host, d, at); ok {
				t.Errorf("%s: event at sample %d (%v) on steady times: %+v", tc.name, i, d, ev)
			}
		}
	}
}

// TestCalibrationFactorNaNMeansDefault: Config's zero value means "default", and
// withDefaults replaces a factor <= 1 by 2; a NaN factor passes that check
// (NaN <= 1 is false) and makes every comparison with the history false, so
// any time more than CalibrationMinDelta above the median counts as slow,
// whatever the factor: 40 ms → 55 ms (×1.4) raises an event.
func TestCalibrationFactorNaNMeansDefault(t *testing.T) {
	host := ip("10.1.2.7")
	at := time.Unix(0, 0)
	cal := NewCalibrator(nil, Config{CalibrationFactor: math.NaN()})
	for range 5 {
		cal.Observe("http://h/a", host, 40*time.Millisecond, at)
	}
	cal.Observe("http://h/a", host, 55*time.Millisecond, at)
	if ev, ok := cal.Observe("http://h/a", host, 55*time.Millisecond, at); ok {
		t.Fatalf("NaN factor: 40 ms → 55 ms twice raised %+v (factor %v)", ev, cal.factor)
	}
}

// TestRedelegateKeepsOwnerWithRoom: with load balancing on, a
// calibration event's Redelegate that finds the current owner still nearest
// judges its room with Load(owner) + Pages(s) + 1, but the owner's load
// already holds s's pages. An owner with room for the one more page loses
// the subnet to a farther crawler. (Delegate's cached path checks
// hasRoom(owner, 1): the same owner keeps the same subnet there.)
func TestRedelegateKeepsOwnerWithRoom(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []BalanceMode{BalanceSecondBest, BalanceRelease} {
		w := newSmallWorld(t)
		p := NewIPMicra(w.deps(1), Config{Balance: mode})
		cs := append([]Crawler(nil), smallCrawlers...)
		cs[0].Capacity, cs[1].Capacity, cs[2].Capacity = 10, 100, 100
		w.join(t, p, cs...)
		host := ip("10.1.2.7")
		var d Decision
		for range 6 {
			var err error
			if d, err = p.Delegate(ctx, host); err != nil || d.Owner != "c1" {
				t.Fatalf("%v: setup: %v (%v)", mode, d, err)
			}
		}
		// c1 holds 6 pages of capacity 10 and is still the nearest (5 ms)
		r, err := p.Redelegate(ctx, host)
		if err != nil {
			t.Fatal(err)
		}
		if r.Owner != "c1" {
			t.Errorf("%v: c1 (6/10 pages, still nearest) lost its subnet on re-delegation: %v", mode, r)
		}
	}
}

// TestMigrateRecordsOnlyFromOldSnapshot: MigrateRecords reads r.Subnet as a node
// of old whatever r.Snapshot says. A record already on the new snapshot
// (or on any other) is remapped through old's node ids: it lands on an
// unrelated subnet, and its owner takes over hosts it was never decided
// for. (Learn, the overlay's directory and the validator all check
// Snapshot.)
func TestMigrateRecordsOnlyFromOldSnapshot(t *testing.T) {
	old := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.1.1.0/24", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"))
	nw := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"), pfx(t, "10.2.5.0/24", "Q", "FR"), pfx(t, "30.0.0.0/8", "N", "US"))
	s := nw.SmallestNonUnary(ip("10.2.0.1")) // 10.2.0.0/16 in the new tree
	rec := Record{Subnet: s, Snapshot: nw.ID(), Owner: "c3", Epoch: 2}
	for _, r := range MigrateRecords(old, nw, []Record{rec}) {
		if r.Subnet != s {
			n := nw.Node(r.Subnet)
			t.Errorf("record of new subnet %d (10.2.0.0/16, snapshot new) moved to subnet %d (%v–%v), owner %s", s, r.Subnet, n.Start, n.End, r.Owner)
		}
	}
}

// TestMigrateDirectoryKeepsNewTreeDecisions: epochs of the old tree
// and of the new one are compared as one sequence. A subnet decided on the
// new tree (probed for its own hosts, epoch 1) is replaced by the migrated
// record of a vanished old /24 (epoch 3), i.e. a guess made for another
// range supersedes a fresh measurement.
func TestMigrateDirectoryKeepsNewTreeDecisions(t *testing.T) {
	ctx := context.Background()
	old := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.1.1.0/24", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"))
	nw := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"))
	members := NewMemMembership(smallCrawlers...)
	ns := nw.SmallestNonUnary(ip("10.1.7.7"))
	ndir := NewMemDirectory(nw, members)
	fresh := Record{Subnet: ns, Snapshot: nw.ID(), Owner: "c1", OwnerRTT: 5 * time.Millisecond, Epoch: 1, DecidedBy: "c1",
		Probes: []ProbeResult{{Crawler: "c1", RTT: 5 * time.Millisecond, OK: true}}}
	if _, err := ndir.Publish(ctx, fresh); err != nil {
		t.Fatal(err)
	}
	stale := Record{Subnet: old.SmallestNonUnary(ip("10.1.1.9")), Snapshot: old.ID(), Owner: "c2", OwnerRTT: 25 * time.Millisecond, Epoch: 3, DecidedBy: "c2"}
	if _, err := MigrateDirectory(ctx, old, nw, []Record{stale}, ndir); err != nil {
		t.Fatal(err)
	}
	if got, _ := ndir.Get(ns); got.Owner != "c1" {
		t.Fatalf("new-tree decision for 10.1.0.0/16 (c1, epoch 1) replaced by the old /24's record: %+v", got)
	}
}

// A crawl revisits its pages in a cycle. With more pages than
// CalibrationMaxPages, the histories kept must still see their pages come
// back (the node once threw every history away when the bound was reached,
// so a cycle longer than it never raised an event), and histories idle
// past CalibrationIdle make room for new pages.
func TestCalibratorBoundKeepsHistoriesOverLongCycles(t *testing.T) {
	const bound = 1000
	cal := NewCalibrator(nil, Config{CalibrationMaxPages: bound, CalibrationIdle: time.Hour})
	host := ip("10.1.2.7")
	at := time.Unix(0, 0)
	n := bound + bound/8
	events := 0
	for _, d := range []time.Duration{40 * time.Millisecond, 40 * time.Millisecond, 200 * time.Millisecond, 200 * time.Millisecond} {
		for i := range n {
			at = at.Add(time.Millisecond)
			if _, ok := cal.Observe(fmt.Sprintf("http://h/p%d", i), host, d, at); ok {
				events++
			}
		}
	}
	if cal.Pages() != bound {
		t.Fatalf("%d pages with a history, bound %d", cal.Pages(), bound)
	}
	if events != bound {
		t.Fatalf("%d pages in a cycle, each 5x slower twice: %d events, want one per page with a history (%d)", n, events, bound)
	}
	// an hour later the old histories are idle: new pages get theirs
	at = at.Add(2 * time.Hour)
	cal.Observe("http://h/new", host, 40*time.Millisecond, at)
	if cal.Pages() != 1 {
		t.Fatalf("after the idle time, %d histories left, want only the new page's", cal.Pages())
	}
}
