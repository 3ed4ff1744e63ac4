package delegation

import (
	"slices"

	"github.com/micra-crawler/micra/hierarchy"
)

// MemLoadBook is an in-memory LoadBook.
type MemLoadBook struct {
	pages map[hierarchy.NodeID]int
	owner map[hierarchy.NodeID]CrawlerID
	load  map[CrawlerID]int
	subs  map[CrawlerID]map[hierarchy.NodeID]struct{}
}

// NewMemLoadBook returns an empty book.
func NewMemLoadBook() *MemLoadBook {
	return &MemLoadBook{
		pages: make(map[hierarchy.NodeID]int),
		owner: make(map[hierarchy.NodeID]CrawlerID),
		load:  make(map[CrawlerID]int),
		subs:  make(map[CrawlerID]map[hierarchy.NodeID]struct{}),
	}
}

// Load implements LoadBook.
func (b *MemLoadBook) Load(c CrawlerID) int { return b.load[c] }

// Pages implements LoadBook.
func (b *MemLoadBook) Pages(s hierarchy.NodeID) int { return b.pages[s] }

// Owner implements LoadBook.
func (b *MemLoadBook) Owner(s hierarchy.NodeID) (CrawlerID, bool) {
	c, ok := b.owner[s]
	return c, ok
}

// AddPages implements LoadBook. If s had another owner, it moves first.
func (b *MemLoadBook) AddPages(s hierarchy.NodeID, owner CrawlerID, n int) {
	if cur, ok := b.owner[s]; !ok || cur != owner {
		b.Move(s, owner)
	}
	b.pages[s] += n
	b.load[owner] += n
}

// Move implements LoadBook.
func (b *MemLoadBook) Move(s hierarchy.NodeID, to CrawlerID) {
	p := b.pages[s]
	if cur, ok := b.owner[s]; ok {
		if cur == to {
			return
		}
		b.load[cur] -= p
		delete(b.subs[cur], s)
	}
	b.owner[s] = to
	b.load[to] += p
	m, ok := b.subs[to]
	if !ok {
		m = make(map[hierarchy.NodeID]struct{})
		b.subs[to] = m
	}
	m[s] = struct{}{}
}

// Subnets implements LoadBook.
func (b *MemLoadBook) Subnets(c CrawlerID) []hierarchy.NodeID {
	out := make([]hierarchy.NodeID, 0, len(b.subs[c]))
	for s := range b.subs[c] {
		out = append(out, s)
	}
	slices.Sort(out)
	return out
}
