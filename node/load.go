package node

import (
	"context"
	"time"
)

// A crawler's load is the pages it has taken on over the last day: URLs
// admitted to its frontier (its seeds, its own links, hand-offs from other
// peers), in the unit of its capacity (pages per day). Deciders account
// every page they delegate to an owner; only the owner sees them all, and
// its heartbeats carry this figure so that every decider sees it full
// (overlay.LoadBook takes the larger of the two).

// dayWindow counts what a cumulative counter gained over the trailing
// day, from one sample a minute (1,440 at most).
type dayWindow struct {
	samples []loadSample // oldest first, one per minute
}

type loadSample struct {
	at    time.Time
	total int64
}

const (
	loadWindow     = 24 * time.Hour
	loadSampleStep = time.Minute
)

// observe records the counter's total at now and returns its gain over
// the last day: total minus the newest sample at least a day old (the
// oldest one while the window is younger than a day).
func (w *dayWindow) observe(now time.Time, total int64) int64 {
	if n := len(w.samples); n == 0 || now.Sub(w.samples[n-1].at) >= loadSampleStep {
		w.samples = append(w.samples, loadSample{now, total})
	}
	// drop samples while the next one is still a day old: the first one
	// left is the newest sample at least a day old (or the oldest kept)
	i := 0
	for i+1 < len(w.samples) && now.Sub(w.samples[i+1].at) >= loadWindow {
		i++
	}
	if i > 0 {
		w.samples = append(w.samples[:0], w.samples[i:]...)
	}
	return max(total-w.samples[0].total, 0)
}

// reportLoad tells the overlay this crawler's load at every heartbeat
// until ctx ends: the URLs its frontier admitted over the last day.
func (n *Node) reportLoad(ctx context.Context) {
	// Seen counts the frontier's admissions since it opened plus the queue
	// it reloaded (a restarted crawler still holds that work): counted
	// from 0 at the start
	w := dayWindow{samples: []loadSample{{time.Now(), 0}}}
	tick := time.NewTicker(n.cfg.Overlay.HeartbeatInterval)
	defer tick.Stop()
	for {
		load := w.observe(time.Now(), n.eng.Stats().Seen)
		n.peer.SetLoad(int(min(load, int64(^uint32(0)>>1))))
		n.load.Set(float64(load))
		n.loadDay.Store(load)
		select {
		case <-ctx.Done():
			return
		case <-tick.C:
		}
	}
}
