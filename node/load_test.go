package node

import (
	"testing"
	"time"
)

// The load is what the frontier admitted over the trailing day, at a
// minute's resolution, however long the node runs.
func TestDayWindowCountsTheLastDay(t *testing.T) {
	t0 := time.Date(2026, 11, 28, 0, 0, 0, 0, time.UTC)
	w := dayWindow{samples: []loadSample{{t0, 0}}}
	if got := w.observe(t0.Add(time.Second), 40); got != 40 {
		t.Fatalf("40 admitted in the first second: load %d", got)
	}
	// 10 pages a minute for two days
	var got int64
	for m := 1; m <= 48*60; m++ {
		got = w.observe(t0.Add(time.Duration(m)*time.Minute), 40+int64(10*m))
	}
	if want := int64(10 * 24 * 60); got != want {
		t.Errorf("after two days at 10 pages/min: load %d, want a day's %d", got, want)
	}
	if n := len(w.samples); n > 24*60+2 {
		t.Errorf("%d samples kept: the window should hold a day of minutes", n)
	}
	// idle for a day: nothing taken on, load 0
	if got := w.observe(t0.Add(73*time.Hour), 40+10*48*60); got != 0 {
		t.Errorf("after an idle day: load %d, want 0", got)
	}
	// samples more often than a minute add nothing to the window
	n := len(w.samples)
	for s := 1; s <= 30; s++ {
		w.observe(t0.Add(73*time.Hour+time.Duration(s)*time.Second), 40+10*48*60+int64(s))
	}
	if len(w.samples) != n {
		t.Errorf("30 observations within a minute kept %d samples", len(w.samples)-n)
	}
}
