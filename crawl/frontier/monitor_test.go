package frontier

import (
	"fmt"
	"testing"
	"time"
)

// ScheduleUnscheduled dates every page fetched without a revisit date —
// across batches — and leaves pages gone off the schedule; a second call
// finds nothing to do.
func TestScheduleUnscheduled(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	const pages = scheduleBatch + 88
	var paths []string
	for i := range pages + 1 {
		paths = append(paths, fmt.Sprintf("/p%d", i))
	}
	if _, err := f.Add(items("h", paths...)); err != nil {
		t.Fatal(err)
	}
	host := take0(t, f)
	fetched := time.Now().Add(-time.Hour)
	for i, it := range nextAll(t, f, host) {
		h := &History{LastFetch: fetched, Fetches: 1, Changes: 1, ContentHash: [16]byte{1}, Status: 200}
		if i == pages { // the last one went away
			h.Status = 404
		}
		if err := f.Done(it, h); err != nil {
			t.Fatal(err)
		}
	}
	n, err := f.ScheduleUnscheduled(24 * time.Hour)
	if err != nil || n != pages || f.Stats().Scheduled != pages {
		t.Fatalf("scheduled %d (stats %d), %v; want %d", n, f.Stats().Scheduled, err, pages)
	}
	h, _, _ := f.History("http://h/p0")
	if !h.NextVisit.Equal(fetched.Add(24*time.Hour)) || h.Interval != 24*time.Hour {
		t.Fatalf("history %+v: want the first revisit a day after the last fetch", h)
	}
	if n, err := f.ScheduleUnscheduled(time.Hour); err != nil || n != 0 {
		t.Fatalf("second call scheduled %d, %v", n, err)
	}
	if on, _ := f.Monitoring(); on {
		t.Fatal("monitoring on before it was set")
	}
	if err := f.SetMonitoring(true); err != nil {
		t.Fatal(err)
	}
	if on, _ := f.Monitoring(); !on {
		t.Fatal("monitoring not recorded")
	}
}
