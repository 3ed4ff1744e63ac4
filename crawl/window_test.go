package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
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

// Outside its windows a crawler sends nothing at all — no page, no
// robots.txt — and the URL stays queued.
func TestClosedWindowSendsNothing(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.NotFound(w, r)
	}))
	defer srv.Close()
	start := time.Now().UTC().Add(2 * time.Hour)
	win, err := ParseWindow(fmt.Sprintf("%02d:%02d-%02d:%02d", start.Hour(), start.Minute(), start.Add(time.Minute).Hour(), start.Add(time.Minute).Minute()))
	if err != nil {
		t.Fatal(err)
	}
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"},
		Fetch:   fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Windows: Windows{Spans: []Window{win}}, Receiver: pack.FileSink{Dir: t.TempDir()},
		StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	eng.Run(ctx)
	if n := hits.Load(); n != 0 {
		t.Errorf("%d requests outside the window", n)
	}
	if st := eng.Stats(); st.Queued != 1 || st.Requests != 0 {
		t.Errorf("queued %d, requests %d; want the seed kept and nothing sent", st.Queued, st.Requests)
	}
}

// A window prints as ParseWindow reads it, and NextClose finds the end of
// the open span (the minute the crawler stops), across midnight too.
func TestWindowStringAndNextClose(t *testing.T) {
	for _, in := range []string{"22:00-06:00", "Mon,Tue,Wed,Thu,Fri 09:30-17:00", "Sun,Sat 00:00-24:00"} {
		w, err := ParseWindow(in)
		if err != nil {
			t.Fatal(err)
		}
		if w.String() != in {
			t.Errorf("ParseWindow(%q).String() = %q", in, w.String())
		}
		back, err := ParseWindow(w.String())
		if err != nil || back != w {
			t.Errorf("%q does not read back: %+v, %v", w.String(), back, err)
		}
	}
	night, _ := ParseWindow("22:00-06:00")
	ws := Windows{Spans: []Window{night}}
	at := time.Date(2026, 6, 1, 23, 10, 30, 0, time.UTC)
	if c, ok := ws.NextClose(at); !ok || !c.Equal(time.Date(2026, 6, 2, 6, 0, 0, 0, time.UTC)) {
		t.Errorf("NextClose(%v) = %v, %v; want 06:00 the next morning", at, c, ok)
	}
	noon := time.Date(2026, 6, 1, 12, 0, 0, 0, time.UTC)
	if c, ok := ws.NextClose(noon); !ok || !c.Equal(noon) {
		t.Errorf("closed at noon: NextClose = %v, %v; want noon itself", c, ok)
	}
	if _, ok := (Windows{}).NextClose(noon); ok {
		t.Error("no windows (always open) closes")
	}
	all, _ := ParseWindow("00:00-24:00")
	if _, ok := (Windows{Spans: []Window{all}}).NextClose(noon); ok {
		t.Error("a window over the whole day closes")
	}
}
