package fetch

import (
	"context"
	"math"
	"net/netip"
	"sync"
	"time"
)

// politeness holds the per-host and per-IP state: one request in flight per
// host, PerIPLimit per address, the earliest time each host may be asked
// again, and 429/503 back-off. Entries are pruned once idle and rested, so the
// maps hold only hosts the crawler is working on.
type politeness struct {
	mu      sync.Mutex
	hosts   map[string]*hostState
	ips     map[netip.Addr]*ipState
	ops     int
	perIP   int
	nowFunc func() time.Time
}

type hostState struct {
	slot chan struct{} // capacity 1: the host's single in-flight request
	// Guarded by politeness.mu:
	refs         int       // goroutines waiting for or holding slot
	nextAt       time.Time // earliest start of the next request
	backoffUntil time.Time
	backoffCount int           // consecutive 429/503 answers
	crawlDelay   time.Duration // robots.txt Crawl-delay, already capped
}

type ipState struct {
	slots chan struct{}
	refs  int
}

func newPoliteness(perIP int, now func() time.Time) *politeness {
	return &politeness{
		hosts:   make(map[string]*hostState),
		ips:     make(map[netip.Addr]*ipState),
		perIP:   perIP,
		nowFunc: now,
	}
}

func (p *politeness) host(key string) *hostState {
	h := p.hosts[key]
	if h == nil {
		h = &hostState{slot: make(chan struct{}, 1)}
		p.hosts[key] = h
	}
	return h
}

// acquireHost waits for the host's slot and for its rest and back-off to
// pass. It returns the time spent waiting.
func (p *politeness) acquireHost(ctx context.Context, key string) (*hostState, time.Duration, error) {
	start := time.Now()
	p.mu.Lock()
	h := p.host(key)
	h.refs++
	p.mu.Unlock()
	select {
	case h.slot <- struct{}{}:
	case <-ctx.Done():
		p.unref(key, h)
		return nil, time.Since(start), ctx.Err()
	}
	for {
		p.mu.Lock()
		ready := h.nextAt
		if h.backoffUntil.After(ready) {
			ready = h.backoffUntil
		}
		p.mu.Unlock()
		wait := ready.Sub(p.nowFunc())
		if wait <= 0 {
			return h, time.Since(start), nil
		}
		t := time.NewTimer(wait)
		select {
		case <-t.C:
		case <-ctx.Done():
			t.Stop()
			<-h.slot
			p.unref(key, h)
			return nil, time.Since(start), ctx.Err()
		}
	}
}

// releaseHost frees the slot and sets the host's next start to now + rest.
func (p *politeness) releaseHost(key string, h *hostState, rest time.Duration) {
	p.mu.Lock()
	h.nextAt = p.nowFunc().Add(rest)
	p.mu.Unlock()
	<-h.slot
	p.unref(key, h)
}

func (p *politeness) unref(key string, h *hostState) {
	p.mu.Lock()
	h.refs--
	p.ops++
	if p.ops >= 4096 {
		p.ops = 0
		p.pruneLocked()
	}
	p.mu.Unlock()
}

// pruneLocked forgets hosts nobody waits for whose rest and back-off are
// over, and idle IP semaphores.
func (p *politeness) pruneLocked() {
	now := p.nowFunc()
	for k, h := range p.hosts {
		if h.refs == 0 && now.After(h.nextAt) && now.After(h.backoffUntil) {
			delete(p.hosts, k)
		}
	}
	for a, s := range p.ips {
		if s.refs == 0 {
			delete(p.ips, a)
		}
	}
}

func (p *politeness) acquireIP(ctx context.Context, a netip.Addr) (func(), error) {
	if p.perIP <= 0 {
		return func() {}, nil
	}
	p.mu.Lock()
	s := p.ips[a]
	if s == nil {
		s = &ipState{slots: make(chan struct{}, p.perIP)}
		p.ips[a] = s
	}
	s.refs++
	p.mu.Unlock()
	done := func() {
		p.mu.Lock()
		s.refs--
		p.mu.Unlock()
	}
	select {
	case s.slots <- struct{}{}:
		return func() { <-s.slots; done() }, nil
	case <-ctx.Done():
		done()
		return nil, ctx.Err()
	}
}

// setCrawlDelay records the (capped) robots.txt Crawl-delay of a host.
// justFetched means robots.txt was fetched a moment ago: that request counts
// too, so the host's next request waits the delay from now.
func (p *politeness) setCrawlDelay(key string, d time.Duration, justFetched bool) {
	p.mu.Lock()
	h := p.host(key)
	h.crawlDelay = d
	if justFetched {
		if next := p.nowFunc().Add(d); next.After(h.nextAt) {
			h.nextAt = next
		}
	}
	p.mu.Unlock()
}

func (p *politeness) crawlDelay(h *hostState) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return h.crawlDelay
}

// backoff pushes the host back after a 429/503. retryAfter < 0 means the
// server gave none: back off exponentially from base.
func (p *politeness) backoff(h *hostState, retryAfter, base, maxBackoff time.Duration) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	h.backoffCount++
	d := retryAfter
	if d < 0 {
		if base <= 0 {
			base = time.Second
		}
		d = time.Duration(float64(base) * math.Pow(2, float64(min(h.backoffCount-1, 30))))
	}
	d = min(d, maxBackoff)
	h.backoffUntil = p.nowFunc().Add(d)
	return d
}

func (p *politeness) clearBackoff(h *hostState) {
	p.mu.Lock()
	h.backoffCount = 0
	p.mu.Unlock()
}

// readyAt returns the earliest time a request to key could start (zero when
// the host is unknown, i.e. ready now). It does not account for a request in
// flight.
func (p *politeness) readyAt(key string) time.Time {
	p.mu.Lock()
	defer p.mu.Unlock()
	h := p.hosts[key]
	if h == nil {
		return time.Time{}
	}
	if h.backoffUntil.After(h.nextAt) {
		return h.backoffUntil
	}
	return h.nextAt
}
