package delegation

import (
	"slices"

	"github.com/micra-crawler/micra/hierarchy"
)

// MemLoadBook is an in-memory LoadBook.
type MemLoadBook struct {
	subnet map[hierarchy.NodeID]subnetLoad
	load   map[CrawlerID]*int // a crawler's counter stays put: counter
	subs   map[CrawlerID]map[hierarchy.NodeID]struct{}
}

// subnetLoad is one subnet's pages and owner (one map entry: a decision
// reads and writes both).
type subnetLoad struct {
	pages int
	owner CrawlerID
	owned bool // owner is set
}

// NewMemLoadBook returns an empty book.
func NewMemLoadBook() *MemLoadBook {
	return &MemLoadBook{
		subnet: make(map[hierarchy.NodeID]subnetLoad),
		load:   make(map[CrawlerID]*int),
		subs:   make(map[CrawlerID]map[hierarchy.NodeID]struct{}),
	}
}

// Load implements LoadBook.
func (b *MemLoadBook) Load(c CrawlerID) int {
	if n := b.load[c]; n != nil {
		return *n
	}
	return 0
}

// counter is c's load counter (created at 0): a caller holding it reads
// the load without hashing c's id each time (micraChooser.roomFilter).
func (b *MemLoadBook) counter(c CrawlerID) *int {
	n := b.load[c]
	if n == nil {
		n = new(int)
		b.load[c] = n
	}
	return n
}

// Pages implements LoadBook.
func (b *MemLoadBook) Pages(s hierarchy.NodeID) int { return b.subnet[s].pages }

// Owner implements LoadBook.
func (b *MemLoadBook) Owner(s hierarchy.NodeID) (CrawlerID, bool) {
	sl := b.subnet[s]
	return sl.owner, sl.owned
}

// AddPages implements LoadBook. If s had another owner, it moves first.
func (b *MemLoadBook) AddPages(s hierarchy.NodeID, owner CrawlerID, n int) {
	sl := b.subnet[s]
	if !sl.owned || sl.owner != owner {
		sl = b.move(s, sl, owner)
	}
	sl.pages += n
	b.subnet[s] = sl
	*b.counter(owner) += n
}

// Move implements LoadBook.
func (b *MemLoadBook) Move(s hierarchy.NodeID, to CrawlerID) {
	sl := b.subnet[s]
	if sl.owned && sl.owner == to {
		return
	}
	b.subnet[s] = b.move(s, sl, to)
}

// move gives s (whose entry is sl) to another owner and returns its entry.
func (b *MemLoadBook) move(s hierarchy.NodeID, sl subnetLoad, to CrawlerID) subnetLoad {
	if sl.owned {
		*b.counter(sl.owner) -= sl.pages
		delete(b.subs[sl.owner], s)
	}
	sl.owner, sl.owned = to, true
	*b.counter(to) += sl.pages
	m, ok := b.subs[to]
	if !ok {
		m = make(map[hierarchy.NodeID]struct{})
		b.subs[to] = m
	}
	m[s] = struct{}{}
	return sl
}

// appendSubnets appends the subnets owned by c to buf, in no order
// (release sorts what it keeps: a full crawler's subnets are listed for
// every page it takes, and a sorted copy each time is wasted work).
func (b *MemLoadBook) appendSubnets(c CrawlerID, buf []hierarchy.NodeID) []hierarchy.NodeID {
	for s := range b.subs[c] {
		buf = append(buf, s)
	}
	return buf
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
