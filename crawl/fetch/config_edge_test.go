package fetch

import (
	"context"
	"io"
	"log/slog"
	"net/http"
	"testing"
	"time"
)

func reviewServer(t *testing.T, status int) string {
	t.Helper()
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		if status == http.StatusTooManyRequests {
			w.Header().Set("Retry-After", "120")
		}
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(status)
		io.WriteString(w, "ok")
	}))
	return srv.URL
}

// MinDelay is "the floor of the pause between two requests to one host"
// (`micra crawl --min-delay 60s`, node file "min_delay"). Above the default
// MaxDelay (30 s) it is silently lowered to MaxDelay.
func TestMinDelayAboveMaxDelayIsFloor(t *testing.T) {
	base := reviewServer(t, http.StatusOK)
	// robots.txt known already: the robots fetch would rest the host too
	rc := NewMemoryRobotsCache(10)
	rc.Put(base, RobotsEntry{Status: RobotsAllowAll, FetchedAt: time.Now(), Expires: time.Now().Add(time.Hour)})
	f, err := New(Config{AllowPrivate: true, MinDelay: time.Minute, RobotsCache: rc, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(f.Close)
	if _, err := f.Fetch(context.Background(), Request{URL: base + "/p"}); err != nil {
		t.Fatal(err)
	}
	rest := time.Until(f.HostReadyAt(base + "/p"))
	if rest < 59*time.Second {
		t.Errorf("host rests %v after a request with MinDelay 1m: the floor was cut to MaxDelay", rest.Round(time.Second))
	}
}

// A negative MaxBackoff passes validate and turns the 429/503 back-off off:
// the host that said "Retry-After: 120" is ready again at once.
func TestNegativeMaxBackoffRefused(t *testing.T) {
	base := reviewServer(t, http.StatusTooManyRequests)
	f, err := New(Config{AllowPrivate: true, NoDelay: true, MaxBackoff: -time.Second, MaxCrawlDelay: -time.Second,
		RobotsTTL: -time.Second, Logger: slog.New(slog.NewTextHandler(io.Discard, nil))})
	if err != nil {
		return // refused: fixed
	}
	t.Cleanup(f.Close)
	_, ferr := f.Fetch(context.Background(), Request{URL: base + "/p"})
	var ra time.Duration
	if e, ok := ferr.(*Error); ok {
		ra = e.RetryAfter
	}
	t.Errorf("New accepted MaxBackoff -1s; a 429 with Retry-After 120 gave RetryAfter %v, host ready in %v",
		ra, time.Until(f.HostReadyAt(base+"/p")).Round(time.Second))
}
