package delegation

import (
	"context"
	"math"
	"testing"
	"time"
)

// newBalanceWorld builds the small world with an explicit load book.
func newBalanceWorld(t *testing.T, mode BalanceMode, capC1 int) (*smallWorld, Policy, *MemLoadBook) {
	t.Helper()
	w := newSmallWorld(t)
	book := NewMemLoadBook()
	d := w.deps(1)
	d.Loads = book
	p := NewOptimal(d, Config{Balance: mode})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = capC1
	w.join(t, p, cs...)
	return w, p, book
}

// A calibration event (Redelegate) re-decides a subnet for a page that was
// already accounted by Delegate: it must not count that page again.
func TestRedelegateDoesNotCountItsPageAgain(t *testing.T) {
	ctx := context.Background()
	_, p, book := newBalanceWorld(t, BalanceSecondBest, 0)
	d, err := p.Delegate(ctx, ip("10.1.2.1"))
	if err != nil || d.Owner != "c1" {
		t.Fatal(d, err)
	}
	for range 3 {
		if _, err := p.Redelegate(ctx, ip("10.1.2.1")); err != nil {
			t.Fatal(err)
		}
	}
	if got := book.Pages(d.Subnet); got != 1 {
		t.Fatalf("one Delegate and three calibration events: subnet carries %d pages, want 1 (c1 load %d)", got, book.Load("c1"))
	}
}

// When re-deciding a subnet whose current owner ranks best again, the
// owner's load already contains the subnet's pages: keeping it adds nothing,
// yet balance() requires room for Pages(s)+1 on top of Load and moves it.
func TestRedelegateOwnerNeedsRoomOnlyForNewPages(t *testing.T) {
	ctx := context.Background()
	_, p, book := newBalanceWorld(t, BalanceSecondBest, 2)
	d, err := p.Delegate(ctx, ip("10.1.2.1")) // c1: 5 ms, load 1 of 2
	if err != nil || d.Owner != "c1" {
		t.Fatal(d, err)
	}
	r, err := p.Redelegate(ctx, ip("10.1.2.1"))
	if err != nil {
		t.Fatal(err)
	}
	if r.Owner != "c1" {
		t.Fatalf("c1 is best (5 ms) and carries 1 page of 2, yet re-delegation gave the subnet to %s (c1 load now %d): %v", r.Owner, book.Load("c1"), r)
	}
}

// Option (a) releases subnets and then, when that did not free enough room,
// gives the new subnet to the second best anyway: the released subnets moved
// to worse crawlers for nothing.
func TestReleaseMovesNothingUnlessItMakesRoom(t *testing.T) {
	ctx := context.Background()
	w, p, book := newBalanceWorld(t, BalanceRelease, 2)
	first, err := p.Delegate(ctx, ip("10.1.2.1")) // 10.1.2.0/24 → c1 (5 ms), load 1 of 2
	if err != nil || first.Owner != "c1" {
		t.Fatal(first, err)
	}
	// 10.1.0.0/16 was owned by c4 (5 pages per day), which has died.
	s16 := w.tree.SmallestNonUnary(ip("10.1.0.1"))
	if _, err := w.dir.Publish(ctx, Record{Subnet: s16, Snapshot: w.tree.ID(), Owner: "c4", Epoch: 1, DecidedBy: "c4",
		Probes: []ProbeResult{{Crawler: "c4", RTT: time.Millisecond, OK: true}}}); err != nil {
		t.Fatal(err)
	}
	book.AddPages(s16, "c4", 5)
	d, err := p.Delegate(ctx, ip("10.1.0.1")) // needs 6 pages of room: c1 (cap 2) can never take it
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner == "c1" {
		t.Fatalf("c1 over capacity: %v", d)
	}
	if rec, _ := w.dir.Get(first.Subnet); len(d.Moved) != 0 || rec.Owner != "c1" {
		t.Fatalf("the new subnet went to %s, yet %d subnet(s) were released (10.1.2.0/24 now with %s at 25 ms instead of c1 at 5 ms)",
			d.Owner, len(d.Moved), rec.Owner)
	}
}

// A capacity of math.MaxInt (a natural "no limit") overflows the total.
func TestMinCostAssignHugeCapacities(t *testing.T) {
	a, err := MinCostAssign([]int{1, 1}, []int{math.MaxInt, math.MaxInt}, [][]float64{{1, 2}, {2, 1}})
	if err != nil {
		t.Fatalf("two pages, two crawlers of capacity MaxInt: %v", err)
	}
	if a.Cost != 2 {
		t.Fatalf("cost %v, want 2", a.Cost)
	}
}
