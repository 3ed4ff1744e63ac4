package crawl

import (
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/fetch"
	"github.com/micra-crawler/micra/crawl/pack"
)

// pageServer answers /pN with a page without links and counts the page
// requests by path; /p0 waits for release (a fetch in flight).
type pageServer struct {
	*httptest.Server
	mu      sync.Mutex
	hits    map[string]int
	entered chan struct{}
	release chan struct{}
}

func newPageServer(t *testing.T) *pageServer {
	s := &pageServer{hits: map[string]int{}, entered: make(chan struct{}), release: make(chan struct{})}
	s.Server = httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if !strings.HasPrefix(r.URL.Path, "/p") {
			http.NotFound(w, r)
			return
		}
		s.mu.Lock()
		s.hits[r.URL.Path]++
		s.mu.Unlock()
		if r.URL.Path == "/p0" {
			close(s.entered)
			<-s.release
		}
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprintf(w, "<html><head><title>page %s</title></head><body>words about %s</body></html>", r.URL.Path, r.URL.Path)
	}))
	t.Cleanup(s.Close)
	return s
}

func (s *pageServer) requests() map[string]int {
	s.mu.Lock()
	defer s.mu.Unlock()
	out := map[string]int{}
	for k, v := range s.hits {
		out[k] = v
	}
	return out
}

// A paused crawl lets the fetch in flight finish, starts no other — not
// the rest of the host's queue, not a host that arrives while paused —
// and keeps every URL queued; resumed, it fetches each of them once.
// "Starts no other" is read from the engine's state, not from time: once
// every worker waits at the pause gate, none can fetch.
func TestPauseStopsNewFetches(t *testing.T) {
	a, b := newPageServer(t), newPageServer(t)
	close(b.release) // (b's /p0 is never asked for)
	const workers = 2
	eng, err := New(Config{StateDir: t.TempDir(), Concurrency: workers,
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var urls []string
	for i := range 10 {
		urls = append(urls, fmt.Sprintf("%s/p%d", a.URL, i))
	}
	if err := eng.Accept(ctx, urls); err != nil {
		t.Fatal(err)
	}
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	select {
	case <-a.entered: // /p0 in flight
	case err := <-done:
		t.Fatalf("Run ended before the first fetch: %v", err)
	}
	if !eng.Pause() || eng.Pause() {
		t.Fatal("Pause: want true once, then false (already paused)")
	}
	if st := eng.Paused(); !st.Paused || st.Since.IsZero() {
		t.Fatalf("paused state %+v", st)
	}
	close(a.release) // the fetch in flight finishes
	// a host that arrives while paused is queued, not fetched
	if err := eng.Accept(ctx, []string{b.URL + "/p1", b.URL + "/p2"}); err != nil {
		t.Fatal(err)
	}
	for eng.Paused().Held < workers {
		select {
		case <-ctx.Done():
			t.Fatalf("workers at the pause gate: %d of %d", eng.Paused().Held, workers)
		case <-time.After(5 * time.Millisecond):
		}
	}
	// every worker waits: nothing more can be fetched until Resume
	st := eng.Stats()
	if got := a.requests(); len(got) != 1 || got["/p0"] != 1 {
		t.Errorf("host a's pages requested while paused: %v, want /p0 (in flight at the pause) only", got)
	}
	if got := b.requests(); len(got) != 0 {
		t.Errorf("host b's pages requested while paused: %v, want none", got)
	}
	if st.Fetched != 1 || st.Queued != 11 {
		t.Errorf("paused: %d fetched, %d queued; want the page in flight fetched and the 9 + 2 others queued", st.Fetched, st.Queued)
	}
	if !eng.Resume() || eng.Resume() {
		t.Fatal("Resume: want true once, then false (not paused)")
	}
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if st := eng.Stats(); st.Fetched != 12 || st.Queued != 0 {
		t.Errorf("resumed: %d fetched, %d queued; want all 12 fetched", st.Fetched, st.Queued)
	}
	for _, s := range []*pageServer{a, b} {
		for p, n := range s.requests() {
			if n != 1 {
				t.Errorf("%s%s requested %d times", s.URL, p, n)
			}
		}
	}
	if st := eng.Paused(); st.Paused || st.Held != 0 {
		t.Errorf("after Resume: %+v", st)
	}
}

// Paused before Run, the engine fetches nothing, and Run still ends with
// its context (no worker stuck at the gate).
func TestPausedRunEndsWithItsContext(t *testing.T) {
	a := newPageServer(t)
	eng, err := New(Config{StateDir: t.TempDir(), Seeds: []string{a.URL + "/p1"}, Concurrency: 3,
		Fetch:    fetch.Config{AllowPrivate: true, NoDelay: true, DelayFactor: -1, Logger: quiet},
		Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	eng.Pause()
	ctx, cancel := context.WithCancel(context.Background())
	done := make(chan error, 1)
	go func() { done <- eng.Run(ctx) }()
	deadline := time.Now().Add(20 * time.Second)
	for eng.Paused().Held < 3 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	if h := eng.Paused().Held; h != 3 {
		t.Fatalf("%d workers at the gate, want 3", h)
	}
	cancel()
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	if got := a.requests(); len(got) != 0 {
		t.Errorf("requested while paused: %v", got)
	}
	if st := eng.Stats(); st.Queued != 1 {
		t.Errorf("%d queued, want the seed kept", st.Queued)
	}
}
