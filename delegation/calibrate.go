package delegation

import (
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// CalibrationEvent says that a page's fetch times jumped above its history
// several times in a row, so its subnet's delegation may be stale (the owner's
// path to the host changed). It travels on micra/calibration/1 and ends in
// Policy.Redelegate(ev.IP).
type CalibrationEvent struct {
	Page     string
	IP       netip.Addr
	Subnet   hierarchy.NodeID
	Last     time.Duration // the latest slow time
	Baseline time.Duration // the history's median it was compared with
	Streak   int           // slow times in a row
	At       time.Time
}

// Calibrator keeps, per page, the history of its GET/HEAD times (the timings
// a crawler records anyway) and emits a CalibrationEvent when a time exceeds
// the history's median by Config.CalibrationFactor CalibrationStreak times in
// a row. It issues no probes: when nothing changes it costs nothing.
type Calibrator struct {
	tree     Tree
	factor   float64
	minDelta time.Duration
	streak   int
	keep     int
	maxPages int
	idle     time.Duration
	swept    time.Time // last sweep of idle histories
	pages    map[string]*pageHistory
}

type pageHistory struct {
	times []time.Duration // ring buffer of normal times
	next  int
	slow  int       // consecutive slow observations
	last  time.Time // the latest observation
}

// NewCalibrator returns a calibrator with c's calibration settings.
func NewCalibrator(tree Tree, c Config) *Calibrator {
	c = c.withDefaults()
	return &Calibrator{tree: tree, factor: c.CalibrationFactor, minDelta: c.CalibrationMinDelta, streak: c.CalibrationStreak, keep: c.CalibrationHistory,
		maxPages: c.CalibrationMaxPages, idle: c.CalibrationIdle, pages: make(map[string]*pageHistory)}
}

// Observe records one fetch time of page (hosted at ip) and returns an
// event when the slow streak is reached. Slow times do not enter the history
// (they would raise the baseline they are judged against); after an event
// the page's history starts afresh, because the new owner's times differ.
func (c *Calibrator) Observe(page string, ip netip.Addr, took time.Duration, at time.Time) (CalibrationEvent, bool) {
	if took <= 0 {
		// no measurement (a clock step, a broken timer): in the history
		// it would pull the median to zero and make every time slow
		return CalibrationEvent{}, false
	}
	h, ok := c.pages[page]
	if !ok {
		if len(c.pages) >= c.maxPages {
			if at.Sub(c.swept) >= c.idle/8 { // (an O(pages) sweep, so not per fetch)
				c.sweep(at)
			}
			if len(c.pages) >= c.maxPages {
				return CalibrationEvent{}, false // full: this page gets no history
			}
		}
		h = &pageHistory{times: make([]time.Duration, 0, c.keep)}
		c.pages[page] = h
	}
	h.last = at
	if len(h.times) == 0 {
		h.add(took, c.keep)
		return CalibrationEvent{}, false
	}
	base := h.median()
	if float64(took) <= c.factor*float64(base) || took-base <= c.minDelta {
		h.slow = 0
		h.add(took, c.keep)
		return CalibrationEvent{}, false
	}
	h.slow++
	if h.slow < c.streak {
		return CalibrationEvent{}, false
	}
	ev := CalibrationEvent{Page: page, IP: ip, Subnet: hierarchy.None, Last: took, Baseline: base, Streak: h.slow, At: at}
	if c.tree != nil {
		ev.Subnet = c.tree.SmallestNonUnary(ip)
	}
	h.times, h.next, h.slow = h.times[:0], 0, 0
	return ev, true
}

// sweep drops the histories idle for longer than c.idle at time now.
func (c *Calibrator) sweep(now time.Time) {
	c.swept = now
	for p, h := range c.pages {
		if now.Sub(h.last) > c.idle {
			delete(c.pages, p)
		}
	}
}

// Forget drops a page's history (page removed from the crawl).
func (c *Calibrator) Forget(page string) { delete(c.pages, page) }

// Pages is the number of pages with a history.
func (c *Calibrator) Pages() int { return len(c.pages) }

func (h *pageHistory) add(d time.Duration, keep int) {
	if len(h.times) < keep {
		h.times = append(h.times, d)
		return
	}
	h.times[h.next] = d
	h.next = (h.next + 1) % keep
}

func (h *pageHistory) median() time.Duration {
	s := slices.Clone(h.times)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}
