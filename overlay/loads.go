package overlay

import (
	"math"
	"sync"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// LoadBook is the delegation.LoadBook of an overlay peer (Peer.Deps
// installs it). Pages per subnet and subnet owners are this peer's own
// accounting: they follow the decisions its policy makes and sees, and
// nobody else can attribute a page to a subnet for it. A crawler's load is
// where the network knows better: every decider adds pages to an owner, but
// only the owner sees them all, and it reports its total in its heartbeats.
// Load therefore takes the larger of the owner's reported load and what
// this peer assigned to it since — the report bounds from below what other
// deciders assigned, the local book what this peer assigned after the last
// report — so a popular owner is seen full by every decider, not only by
// the ones that filled it.
type LoadBook struct {
	p     *Peer
	mu    sync.Mutex // the policy writes under Peer.polMu; heartbeats read concurrently
	local *delegation.MemLoadBook
}

func newLoadBook(p *Peer) *LoadBook {
	return &LoadBook{p: p, local: delegation.NewMemLoadBook()}
}

// Load implements delegation.LoadBook.
func (b *LoadBook) Load(c delegation.CrawlerID) int {
	b.mu.Lock()
	l := b.local.Load(c)
	b.mu.Unlock()
	if c == b.p.selfID {
		if r, ok := b.p.reportedLoad(); ok {
			return max(l, r)
		}
		return l
	}
	if r, ok := b.p.members.loadOfCrawler(c); ok {
		return max(l, int(r))
	}
	return l
}

// Pages implements delegation.LoadBook.
func (b *LoadBook) Pages(s hierarchy.NodeID) int {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.Pages(s)
}

// AddPages implements delegation.LoadBook.
func (b *LoadBook) AddPages(s hierarchy.NodeID, owner delegation.CrawlerID, n int) {
	b.mu.Lock()
	b.local.AddPages(s, owner, n)
	b.mu.Unlock()
}

// Move implements delegation.LoadBook.
func (b *LoadBook) Move(s hierarchy.NodeID, to delegation.CrawlerID) {
	b.mu.Lock()
	b.local.Move(s, to)
	b.mu.Unlock()
}

// Subnets implements delegation.LoadBook.
func (b *LoadBook) Subnets(c delegation.CrawlerID) []hierarchy.NodeID {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.Subnets(c)
}

// Owner implements delegation.LoadBook.
func (b *LoadBook) Owner(s hierarchy.NodeID) (delegation.CrawlerID, bool) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.local.Owner(s)
}

// SetLoad reports this crawler's current load (pages per day it has
// scheduled, from every subnet it holds); heartbeats carry it to the other
// peers' load books. Until the crawler reports, heartbeats carry the load
// this peer's own policy accounted to itself. Negative clears the report.
func (p *Peer) SetLoad(pagesPerDay int) {
	if pagesPerDay < 0 {
		p.members.load.Store(0)
		p.loadSet.Store(false)
		return
	}
	p.members.load.Store(uint32(min(pagesPerDay, maxCapacity)))
	p.loadSet.Store(true)
}

func (p *Peer) reportedLoad() (int, bool) {
	if !p.loadSet.Load() {
		return 0, false
	}
	return int(p.members.load.Load()), true
}

// advertisedLoad is the load a heartbeat carries.
func (p *Peer) advertisedLoad() uint32 {
	if r, ok := p.reportedLoad(); ok {
		return uint32(r)
	}
	if b := p.loads.Load(); b != nil {
		b.mu.Lock()
		l := b.local.Load(p.selfID)
		b.mu.Unlock()
		return uint32(min(max(l, 0), maxCapacity))
	}
	return 0
}

// selfCrawler is this peer as the delegation engine sees it.
func (p *Peer) selfCrawler() delegation.Crawler {
	c := delegation.Crawler{ID: p.selfID, Addr: p.cfg.CrawlerAddr, Capacity: p.cfg.Capacity}
	if p.cfg.HasPos {
		c.Lat, c.Lon, c.HasPos = p.cfg.Lat, p.cfg.Lon, true
	}
	return c
}

func plausiblePos(lat, lon float64) bool {
	return !math.IsNaN(lat) && !math.IsNaN(lon) && lat >= -90 && lat <= 90 && lon >= -180 && lon <= 180
}
