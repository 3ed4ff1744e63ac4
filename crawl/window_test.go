package crawl

import (
	"testing"
	"time"
)

// Windows are wall-clock spans: on the days clocks change, 10:30 is still
// inside "10:00-11:00" (measuring from midnight in elapsed time was an hour
// off after the change).
func TestWindowsAcrossDaylightSaving(t *testing.T) {
	loc, err := time.LoadLocation("Europe/Nicosia")
	if err != nil {
		t.Skip("no time zone data:", err)
	}
	w, err := ParseWindow("10:00-11:00")
	if err != nil {
		t.Fatal(err)
	}
	ws := Windows{Spans: []Window{w}, Loc: loc}
	for _, day := range []string{"2026-03-29", "2026-10-25", "2026-06-01"} { // spring forward, fall back, ordinary
		d, _ := time.ParseInLocation("2006-01-02", day, loc)
		for clock, want := range map[string]bool{"10:30": true, "09:30": false, "11:30": false} {
			c, _ := time.Parse("15:04", clock)
			at := time.Date(d.Year(), d.Month(), d.Day(), c.Hour(), c.Minute(), 0, 0, loc)
			if got := ws.Open(at); got != want {
				t.Errorf("%s %s local: open=%v, want %v", day, clock, got, want)
			}
		}
	}
}
