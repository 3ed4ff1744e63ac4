package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// fencedPages is memPages whose Fence reports what the old owner's cache
// said when it was asked and blocks until release is closed.
type fencedPages struct {
	memPages
	self    func() *Peer
	release chan struct{}

	mu     sync.Mutex
	fences []string // "subnet:owner-in-cache" per Fence call
	order  []string // "fence" / "history", in call order
}

func (f *fencedPages) Fence(ctx context.Context, s hierarchy.NodeID, block netip.Prefix) error {
	rec, _ := f.self().CachedRecord(s)
	f.mu.Lock()
	f.fences = append(f.fences, fmt.Sprintf("%d:%s", s, rec.Owner))
	f.order = append(f.order, "fence")
	f.mu.Unlock()
	select {
	case <-f.release:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}

func (f *fencedPages) History(ctx context.Context, s hierarchy.NodeID, block netip.Prefix, emit func(PageState) error) error {
	f.mu.Lock()
	f.order = append(f.order, "history")
	f.mu.Unlock()
	return f.memPages.History(ctx, s, block, emit)
}

// TestRecoveryFencesTheOldOwner: a subnet moves to a live crawler. The new
// owner's recovery request carries the record of the move, so the old
// owner has it cached before its crawl is fenced, and the fence (its
// running fetches of the subnet ending) comes before the history it sends.
// Until the history is in, the new owner reports the subnet's hosts as
// arriving (its crawl holds them).
func TestRecoveryFencesTheOldOwner(t *testing.T) {
	old := &fencedPages{memPages: memPages{pages: map[hierarchy.NodeID][]PageState{}}, release: make(chan struct{})}
	fresh := &memPages{}
	tn := newTestNet(t, 2, func(i int, c *Config, s *Services) {
		if i == 0 {
			s.Pages = old
		} else {
			s.Pages = fresh
		}
	})
	a, b := tn.peers[0], tn.peers[1]
	old.self = func() *Peer { return a }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	old.mu.Lock()
	for i := range 10 {
		old.pages[d.Subnet] = append(old.pages[d.Subnet], PageState{URL: fmt.Sprintf("http://127.0.0.1/%d", i), HTTPStatus: 200})
	}
	old.mu.Unlock()
	tn.settle(t, tn.peers, 5*time.Second)
	host := a.cfg.CrawlerAddr // an address of the subnet
	if b.Arriving(host) {
		t.Fatal("arriving before any move")
	}

	rec := d.Record
	rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT = b.CrawlerID(), b.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond
	if got, err := b.Directory().Publish(ctx, rec); err != nil || got.Owner != b.CrawlerID() {
		t.Fatalf("take-over: %v %v", got, err)
	}
	waitFor(t, 10*time.Second, func() bool {
		old.mu.Lock()
		defer old.mu.Unlock()
		return len(old.fences) == 1
	})
	if !b.Arriving(host) {
		t.Error("the new owner does not hold the subnet's hosts while their history is on its way")
	}
	close(old.release)
	waitFor(t, 10*time.Second, func() bool {
		fresh.mu.Lock()
		defer fresh.mu.Unlock()
		return len(fresh.imported[d.Subnet]) == 10
	})
	waitFor(t, 5*time.Second, func() bool { return !b.Arriving(host) })
	old.mu.Lock()
	defer old.mu.Unlock()
	if want := fmt.Sprintf("%d:%s", d.Subnet, b.CrawlerID()); old.fences[0] != want {
		t.Errorf("fenced with %q in the old owner's cache, want %q (the move learnt from the request)", old.fences[0], want)
	}
	if len(old.order) != 2 || old.order[0] != "fence" || old.order[1] != "history" {
		t.Errorf("old owner's calls %v, want [fence history]", old.order)
	}
}

// TestRecoveryRefusesAnotherCrawlersRecord: a recovery request whose
// record does not make the requester the subnet's crawler is refused, and
// nothing is fenced or sent.
func TestRecoveryRefusesAnotherCrawlersRecord(t *testing.T) {
	old := &fencedPages{memPages: memPages{pages: map[hierarchy.NodeID][]PageState{}}, release: make(chan struct{})}
	close(old.release)
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		if i == 0 {
			s.Pages = old
		} else {
			s.Pages = &memPages{}
		}
	})
	a, b, c := tn.peers[0], tn.peers[1], tn.peers[2]
	old.self = func() *Peer { return a }
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn.settle(t, tn.peers, 5*time.Second)
	// c's record of the subnet, sent by b
	rec := d.Record
	rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT = c.CrawlerID(), c.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond
	m, err := toPB(rec)
	if err != nil {
		t.Fatal(err)
	}
	env, err := sealOwner(m, c.sk)
	if err != nil {
		t.Fatal(err)
	}
	raw, err := sealDecision(env, c.sk)
	if err != nil {
		t.Fatal(err)
	}
	_, err = b.recoverPagesWith(ctx, a.ID(), d.Subnet, netip.Addr{}, raw)
	if StatusOf(err) != pb.Status_BAD_REQUEST || !strings.Contains(err.Error(), "does not name the requester") {
		t.Fatalf("another crawler's record: got %v, want BAD_REQUEST: does not name the requester", err)
	}
	if got, _ := a.CachedRecord(d.Subnet); got.Owner != a.CrawlerID() {
		t.Errorf("the refused request moved the subnet in the old owner's cache to %s", got.Owner)
	}
	old.mu.Lock()
	defer old.mu.Unlock()
	if len(old.order) != 0 {
		t.Errorf("refused request reached %v", old.order)
	}
}
