package crawl

import (
	"context"
	"sync"
	"time"
)

// Pausing: a volunteer stops their crawler's fetching for a while without
// stopping the node (the console's Pause button, `micra pause`). A paused
// engine starts no new fetch: every worker stops at the gate the time
// windows already use (waitWindow, before each URL of a host) or before it
// takes another host; fetches in flight finish, and their records, links
// and hand-offs are processed as usual. Everything queued stays queued,
// and what arrives meanwhile (seeds, hand-offs from other crawlers, due
// revisits) is queued too; the outbox keeps delivering. Resume lets the
// workers go on from where they stopped.

// pauseGate holds the workers while the crawl is paused.
type pauseGate struct {
	mu      sync.Mutex
	paused  bool
	since   time.Time
	resumed chan struct{} // closed by Resume
	held    int           // workers waiting at the gate
}

// PauseState says whether the crawl is paused, since when, and how many
// workers wait at the gate (all of Concurrency once the fetches in
// flight at the pause finished and the workers reached it).
type PauseState struct {
	Paused bool
	Since  time.Time // zero unless paused
	Held   int
}

// Pause stops new fetches (those in flight finish); it reports whether
// the crawl was running. Safe before Run, and across Runs until Resume.
func (e *Engine) Pause() bool {
	g := &e.pause
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.paused {
		return false
	}
	g.paused, g.since, g.resumed = true, time.Now(), make(chan struct{})
	e.log.Info("crawl paused: no new fetches until resumed")
	return true
}

// Resume lets a paused crawl go on; it reports whether it was paused.
func (e *Engine) Resume() bool {
	g := &e.pause
	g.mu.Lock()
	defer g.mu.Unlock()
	if !g.paused {
		return false
	}
	g.paused, g.since = false, time.Time{}
	close(g.resumed)
	e.log.Info("crawl resumed", "held_workers", g.held)
	return true
}

// Paused reports the pause's state.
func (e *Engine) Paused() PauseState {
	g := &e.pause
	g.mu.Lock()
	defer g.mu.Unlock()
	return PauseState{Paused: g.paused, Since: g.since, Held: g.held}
}

// waitResumed blocks while the crawl is paused; it reports false when ctx
// ended first.
func (e *Engine) waitResumed(ctx context.Context) bool {
	g := &e.pause
	g.mu.Lock()
	if !g.paused {
		g.mu.Unlock()
		return true
	}
	ch := g.resumed
	g.held++
	g.mu.Unlock()
	defer func() {
		g.mu.Lock()
		g.held--
		g.mu.Unlock()
	}()
	select {
	case <-ctx.Done():
		return false
	case <-ch:
		return true
	}
}
