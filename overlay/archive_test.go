package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// rangeArchive is a PageArchive over pages placed at known addresses: it
// answers a range with the pages placed in it, as the sink's address index
// does, and notes the ranges asked.
type rangeArchive struct {
	mu     sync.Mutex
	pages  []PageState
	ranges [][2]netip.Addr
}

func (a *rangeArchive) Pages(_ context.Context, first, last netip.Addr, emit func([]PageState) error) error {
	a.mu.Lock()
	a.ranges = append(a.ranges, [2]netip.Addr{first, last})
	var out []PageState
	for _, p := range a.pages {
		if !p.Addr.Less(first) && !last.Less(p.Addr) {
			out = append(out, p)
		}
	}
	a.mu.Unlock()
	return emit(out)
}

func (a *rangeArchive) asked() [][2]netip.Addr {
	a.mu.Lock()
	defer a.mu.Unlock()
	return append([][2]netip.Addr(nil), a.ranges...)
}

// A subnet's new owner asks the archive for the subnet's page history
// when the previous owner keeps none it will send (it answers NOT_FOUND),
// or is killed (its host closed, no leave: held dead, it is tried briefly
// and does not answer). It asks for the subnet's range and imports
// only the pages of the subnet itself, not of the smaller subnets inside
// its range; meanwhile the subnet's hosts are arriving.
func TestRecoveryFallsBackToTheArchive(t *testing.T) {
	archive := &rangeArchive{}
	fresh := &memPages{}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		// each crawler in a /16 outside its /24s: its subnet holds smaller
		// subnets in its range
		c.CrawlerAddr = netip.AddrFrom4([4]byte{127, byte(i), 200, 1})
		switch i {
		case 0: // keeps no page history: answers recovery NOT_FOUND
		case 1:
			s.Pages, s.Archive = fresh, archive
		default:
			s.Pages = &memPages{}
		}
	})
	a, b, k := tn.peers[0], tn.peers[1], tn.peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	type owned struct {
		s   hierarchy.NodeID
		rec delegation.Record
	}
	// join: from crawls its own subnet, whose pages the archive holds
	join := func(from *Peer) owned {
		t.Helper()
		d, err := from.Join(ctx)
		if err != nil {
			t.Fatal(err)
		}
		tn.settle(t, tn.peers, 5*time.Second)
		s := d.Subnet
		n := b.tree.Node(s)
		in := from.cfg.CrawlerAddr // an address of s itself
		pages := []PageState{{URL: fmt.Sprintf("http://%v/a", in), HTTPStatus: 200, Addr: in},
			{URL: fmt.Sprintf("http://%v/b", n.End), HTTPStatus: 200, Addr: n.End}}
		kids := b.tree.Children(s)
		if len(kids) == 0 {
			t.Fatalf("subnet %d has no smaller subnet inside its range: the test needs one", s)
		}
		c := b.tree.Node(kids[0]).Start // inside s's range, another subnet's
		pages = append(pages, PageState{URL: fmt.Sprintf("http://%v/c", c), HTTPStatus: 200, Addr: c})
		archive.mu.Lock()
		archive.pages = append(archive.pages, pages...)
		archive.mu.Unlock()
		rec, ok := b.CachedRecord(s)
		if !ok || rec.Owner != from.CrawlerID() {
			t.Fatalf("b's cached record of subnet %d: %+v %v", s, rec, ok)
		}
		return owned{s, rec}
	}
	// takeOver: b publishes itself as the subnet's owner
	takeOver := func(o owned) {
		t.Helper()
		rec := o.rec
		rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT, rec.Blocks = b.CrawlerID(), b.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond, nil
		if got, err := b.Directory().Publish(ctx, rec); err != nil || got.Owner != b.CrawlerID() {
			t.Fatalf("take-over: %v %v", got, err)
		}
	}
	check := func(s hierarchy.NodeID, asks int) {
		t.Helper()
		waitFor(t, 10*time.Second, func() bool { return len(archive.asked()) == asks && !b.Arriving(b.tree.Node(s).End) })
		n := b.tree.Node(s)
		if r := archive.asked()[asks-1]; r[0] != n.Start || r[1] != n.End {
			t.Fatalf("asked the archive for %v…%v, want subnet %d's range %v…%v", r[0], r[1], s, n.Start, n.End)
		}
		fresh.mu.Lock()
		got := append([]PageState(nil), fresh.imported[s]...)
		fresh.mu.Unlock()
		if len(got) != 2 {
			t.Fatalf("imported %v into subnet %d, want its own two pages", got, s)
		}
		for _, p := range got {
			if b.tree.SmallestNonUnary(p.Addr) != s {
				t.Fatalf("imported %s, a page of subnet %d", p.URL, b.tree.SmallestNonUnary(p.Addr))
			}
		}
	}

	// a live owner that sends no history
	o := join(a)
	takeOver(o)
	check(o.s, 1)

	// a killed owner: held dead, it does not answer
	o = join(k)
	if err := k.Kill(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return !b.Members().IsLive(k.CrawlerID()) })
	opened := b.Host().Network().ConnsToPeer(k.ID())
	takeOver(o)
	check(o.s, 2)
	if len(opened) != 0 || len(b.Host().Network().ConnsToPeer(k.ID())) != 0 {
		t.Errorf("b connected to the dead owner (%d connections)", len(b.Host().Network().ConnsToPeer(k.ID())))
	}
}

// mergingPages is memPages whose imports join its history, as a crawler's.
type mergingPages struct{ memPages }

func (m *mergingPages) Import(_ context.Context, s hierarchy.NodeID, ps []PageState) error {
	m.mu.Lock()
	defer m.mu.Unlock()
	if m.pages == nil {
		m.pages = map[hierarchy.NodeID][]PageState{}
	}
	m.pages[s] = append(m.pages[s], ps...)
	return nil
}

// gatedArchive is a rangeArchive that answers only once released.
type gatedArchive struct {
	rangeArchive
	asked   chan struct{}
	release chan struct{}
}

func (g *gatedArchive) Pages(ctx context.Context, first, last netip.Addr, emit func([]PageState) error) error {
	g.asked <- struct{}{}
	select {
	case <-g.release:
	case <-ctx.Done():
		return ctx.Err()
	}
	return g.rangeArchive.Pages(ctx, first, last, emit)
}

// A subnet moves on while its owner is still receiving the subnet's
// history from the archive: the next owner's recovery request waits for
// that history, and gets it, instead of the empty history of the moment —
// also when it arrives later than the old owner's fence may take
// (fenceWait RequestTimeouts): the wait takes what the request's budget
// leaves.
func TestRecoveryWaitsForTheOwnersOwnRecovery(t *testing.T) {
	const rt = 2 * time.Second
	for _, tc := range []struct {
		name  string
		delay time.Duration // from c's request to the archive's answer at b
	}{
		{"soon", 200 * time.Millisecond},
		{"past the fence's wait", (fenceWait + 1) * rt},
	} {
		t.Run(tc.name, func(t *testing.T) { testRecoveryWaitsForTheOwnersOwnRecovery(t, rt, tc.delay) })
	}
}

func testRecoveryWaitsForTheOwnersOwnRecovery(t *testing.T, rt, delay time.Duration) {
	archive := &gatedArchive{asked: make(chan struct{}, 1), release: make(chan struct{})}
	middle, last := &mergingPages{}, &memPages{}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		c.RequestTimeout = rt
		switch i {
		case 0: // keeps no page history: answers recovery NOT_FOUND
		case 1:
			s.Pages, s.Archive = middle, archive
		default:
			s.Pages = last
		}
	})
	a, b, c := tn.peers[0], tn.peers[1], tn.peers[2]
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn.settle(t, tn.peers, 5*time.Second)
	s, host := d.Subnet, a.cfg.CrawlerAddr
	archive.pages = []PageState{{URL: fmt.Sprintf("http://%v/a", host), HTTPStatus: 200, Addr: host}}
	move := func(from *Peer, to *Peer) {
		t.Helper()
		rec, ok := to.CachedRecord(s)
		if !ok || rec.Owner != from.CrawlerID() {
			t.Fatalf("the new owner's cached record of subnet %d: %+v %v, want %s's", s, rec, ok, from.CrawlerID())
		}
		rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT, rec.Blocks = to.CrawlerID(), to.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond, nil
		if got, err := to.Directory().Publish(ctx, rec); err != nil || got.Owner != to.CrawlerID() {
			t.Fatalf("move to %s: %v %v", to.CrawlerID(), got, err)
		}
	}
	move(a, b)
	<-archive.asked // b is receiving the history from the archive
	waitFor(t, 10*time.Second, func() bool {
		rec, ok := c.CachedRecord(s)
		return ok && rec.Owner == b.CrawlerID()
	})
	move(b, c)
	waitFor(t, 10*time.Second, func() bool { return c.Arriving(host) })
	time.Sleep(delay) // (c's request on its way to b, and b waiting)
	close(archive.release)
	waitFor(t, recoverBudget*rt, func() bool { return !c.Arriving(host) })
	last.mu.Lock()
	defer last.mu.Unlock()
	if got := last.imported[s]; len(got) != 1 || got[0].URL != archive.pages[0].URL {
		t.Fatalf("the last owner imported %v, want the page b received from the archive", got)
	}
}
