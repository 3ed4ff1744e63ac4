package crawl

import (
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Window is a daily time span in which the crawler may work (fetch and
// probe), as UCYMicra's host administrators set them. End before Start
// wraps past midnight ("22:00-06:00"). Days limits it to some weekdays.
type Window struct {
	Days       [7]bool // by time.Weekday; all false means every day
	Start, End time.Duration
}

// Windows is a set of windows in one location; empty means always open.
type Windows struct {
	Spans []Window
	Loc   *time.Location // default UTC
}

var weekdays = map[string]time.Weekday{"sun": 0, "mon": 1, "tue": 2, "wed": 3, "thu": 4, "fri": 5, "sat": 6}

// ParseWindow parses "HH:MM-HH:MM" optionally preceded by days:
// "Mon-Fri 22:00-06:00", "Sat,Sun 00:00-24:00".
func ParseWindow(s string) (Window, error) {
	var w Window
	fields := strings.Fields(s)
	if len(fields) == 0 || len(fields) > 2 {
		return w, fmt.Errorf("window %q: want [DAYS] HH:MM-HH:MM", s)
	}
	if len(fields) == 2 {
		for _, part := range strings.Split(strings.ToLower(fields[0]), ",") {
			a, b, isRange := strings.Cut(part, "-")
			da, ok := weekdays[a]
			if !ok {
				return w, fmt.Errorf("window %q: unknown day %q", s, a)
			}
			db := da
			if isRange {
				if db, ok = weekdays[b]; !ok {
					return w, fmt.Errorf("window %q: unknown day %q", s, b)
				}
			}
			for d := da; ; d = (d + 1) % 7 {
				w.Days[d] = true
				if d == db {
					break
				}
			}
		}
	}
	a, b, ok := strings.Cut(fields[len(fields)-1], "-")
	if !ok {
		return w, fmt.Errorf("window %q: want HH:MM-HH:MM", s)
	}
	var err error
	if w.Start, err = parseClock(a); err != nil {
		return w, fmt.Errorf("window %q: %w", s, err)
	}
	if w.End, err = parseClock(b); err != nil {
		return w, fmt.Errorf("window %q: %w", s, err)
	}
	if w.Start == w.End {
		return w, fmt.Errorf("window %q: empty span", s)
	}
	return w, nil
}

func parseClock(s string) (time.Duration, error) {
	h, m, ok := strings.Cut(s, ":")
	hh, err1 := strconv.Atoi(h)
	mm, err2 := strconv.Atoi(m)
	if !ok || err1 != nil || err2 != nil || hh < 0 || hh > 24 || mm < 0 || mm > 59 || hh == 24 && mm != 0 {
		return 0, fmt.Errorf("bad time %q", s)
	}
	return time.Duration(hh)*time.Hour + time.Duration(mm)*time.Minute, nil
}

func (w Window) anyDay() bool { return w.Days == [7]bool{} }

// open reports whether t (in the windows' location) is inside w.
func (w Window) open(t time.Time) bool {
	// Wall-clock time of day: elapsed time since midnight is an hour off on
	// the days the clocks change.
	h, m, sec := t.Clock()
	tod := time.Duration(h)*time.Hour + time.Duration(m)*time.Minute + time.Duration(sec)*time.Second + time.Duration(t.Nanosecond())
	day := t.Weekday()
	if w.Start < w.End {
		return (w.anyDay() || w.Days[day]) && tod >= w.Start && tod < w.End
	}
	// Wraps midnight: the evening part belongs to day, the morning part to the day before.
	if tod >= w.Start {
		return w.anyDay() || w.Days[day]
	}
	if tod < w.End {
		return w.anyDay() || w.Days[(day+6)%7]
	}
	return false
}

// Open reports whether the crawler may work at t.
func (ws Windows) Open(t time.Time) bool {
	if len(ws.Spans) == 0 {
		return true
	}
	if ws.Loc != nil {
		t = t.In(ws.Loc)
	} else {
		t = t.UTC()
	}
	for _, w := range ws.Spans {
		if w.open(t) {
			return true
		}
	}
	return false
}

// String is the window as ParseWindow reads it: "Mon,Tue 22:00-06:00",
// or the span alone when it holds every day.
func (w Window) String() string {
	clock := func(d time.Duration) string {
		return fmt.Sprintf("%02d:%02d", int(d/time.Hour), int(d%time.Hour/time.Minute))
	}
	span := clock(w.Start) + "-" + clock(w.End)
	if w.anyDay() {
		return span
	}
	names := [7]string{"Sun", "Mon", "Tue", "Wed", "Thu", "Fri", "Sat"}
	var days []string
	for d, on := range w.Days {
		if on {
			days = append(days, names[d])
		}
	}
	return strings.Join(days, ",") + " " + span
}

// NextClose returns the first time after t (minute resolution) when no
// window is open, or t itself if none is open now; false when the windows
// never close (none, or spans that cover every minute of the week).
func (ws Windows) NextClose(t time.Time) (time.Time, bool) {
	if len(ws.Spans) == 0 {
		return time.Time{}, false
	}
	if !ws.Open(t) {
		return t, true
	}
	c := t.Truncate(time.Minute).Add(time.Minute)
	for range 8 * 24 * 60 {
		if !ws.Open(c) {
			return c, true
		}
		c = c.Add(time.Minute)
	}
	return time.Time{}, false
}

// NextOpen returns the first time at or after t when a window is open
// (minute resolution), or t itself if open now.
func (ws Windows) NextOpen(t time.Time) time.Time {
	if ws.Open(t) {
		return t
	}
	c := t.Truncate(time.Minute).Add(time.Minute)
	for range 8 * 24 * 60 {
		if ws.Open(c) {
			return c
		}
		c = c.Add(time.Minute)
	}
	return t.Add(7 * 24 * time.Hour) // unreachable with a valid window
}
