package upgrade

import (
	"testing"
	"time"

	"github.com/micra-crawler/micra/testnet/cluster"
)

func TestMostAtOnce(t *testing.T) {
	for _, c := range []struct {
		spans []span
		want  int
	}{
		{nil, 0},
		{[]span{{0, 5}, {5, 9}}, 1},            // one after the other
		{[]span{{0, 5}, {1, 2}, {4, 9}}, 2},    // two at a time, never three
		{[]span{{0, 10}, {1, 9}, {2, 3}}, 3},   // nested
		{[]span{{3, 4}, {0, 10}, {3.5, 6}}, 3}, // (order does not matter)
	} {
		if got := mostAtOnce(c.spans); got != c.want {
			t.Errorf("%v: %d at once, want %d", c.spans, got, c.want)
		}
	}
}

// The table says what held: each expectation fails on its own measure.
func TestChecks(t *testing.T) {
	crawl := func(rep *Report) {
		rep.Result = &cluster.Result{Pages: 100, TotalPages: 100, CoveragePct: 100, Complete: true}
		rep.Delivery = cluster.Delivery{Head: 100, Followed: 100}
	}
	upgraded := func() (*run, *watch) {
		r := &run{o: Options{Expect: ExpectUpgrade, Rollout: time.Minute, Grace: 30 * time.Second},
			rep: &Report{FromVersion: "v0.1.0", ToVersion: "v0.2.0", LastS: 80, MostDown: 1}}
		for i := range 3 {
			r.rep.Nodes = append(r.rep.Nodes, NodeRow{Index: i, Version: "v0.2.0", SwitchedS: float64(20 * i), ConfirmedS: float64(20*i + 10),
				RolledBackS: -1, HeldBackS: -1})
		}
		crawl(r.rep)
		return r, &watch{r: r, restarts: []span{{1, 2}, {20, 22}, {40, 41}}, reportedAll: -1}
	}
	r, w := upgraded()
	r.checks(w)
	if !r.rep.Held {
		t.Fatalf("a good upgrade: %+v", r.rep.Checks)
	}
	for name, spoil := range map[string]func(*Report){
		"every node on B":           func(p *Report) { p.Nodes[1].Version = "v0.1.0" },
		"within the rollout window": func(p *Report) { p.LastS = 91 },
		"waves, not all at once":    func(p *Report) { p.MostDown = 3 },
	} {
		r, w := upgraded()
		spoil(r.rep)
		if name == "waves, not all at once" {
			w.restarts = []span{{0, 10}, {1, 9}, {2, 3}}
		}
		r.checks(w)
		if r.rep.Held {
			t.Errorf("%s spoiled, the upgrade still held", name)
		}
		for _, c := range r.rep.Checks {
			if c.Held == (c.Invariant == name) {
				t.Errorf("%s spoiled: %q held %v (%s)", name, c.Invariant, c.Held, c.Measured)
			}
		}
	}

	rolledBack := func() (*run, *watch) {
		r := &run{o: Options{Expect: ExpectRollback, RollbackLimit: 2 * time.Minute},
			rep: &Report{FromVersion: "v0.1.0", ToVersion: "v0.3.0", LastS: 60, MostDown: 1}}
		r.rep.Nodes = []NodeRow{
			{Index: 0, Version: "v0.1.0", SwitchedS: -1, ConfirmedS: -1, RolledBackS: 10, HeldBackS: -1, Reported: 1},
			{Index: 1, Version: "v0.1.0", SwitchedS: -1, ConfirmedS: -1, RolledBackS: -1, HeldBackS: 30, Reported: 1},
		}
		crawl(r.rep)
		return r, &watch{r: r, restarts: []span{{5, 10}}, reportedAll: 31}
	}
	r, w = rolledBack()
	r.checks(w)
	if !r.rep.Held {
		t.Fatalf("a good rollback: %+v", r.rep.Checks)
	}
	for name, spoil := range map[string]func(*Report){
		"every node back on A":   func(p *Report) { p.Nodes[1].HeldBackS = -1 },
		"within the limit":       func(p *Report) { p.LastS = 121 },
		"the network reports it": func(p *Report) { p.Nodes[1].Reported = 0 },
	} {
		r, w := rolledBack()
		spoil(r.rep)
		r.checks(w)
		if r.rep.Held {
			t.Errorf("%s spoiled, the rollback still held", name)
		}
		for _, c := range r.rep.Checks {
			if c.Held == (c.Invariant == name) {
				t.Errorf("%s spoiled: %q held %v (%s)", name, c.Invariant, c.Held, c.Measured)
			}
		}
	}
}
