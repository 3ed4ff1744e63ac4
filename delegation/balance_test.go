package delegation

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

func TestBalanceSecondBest(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewOptimal(w.deps(1), Config{Balance: BalanceSecondBest})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = 1 // c1 has room for one page
	w.join(t, p, cs...)
	d, _ := p.Delegate(ctx, ip("10.1.2.1"))
	if d.Owner != "c1" {
		t.Fatalf("c1 has room for the first page: %v", d)
	}
	d, _ = p.Delegate(ctx, ip("10.1.0.1")) // 10.1.0.0/16: c1 best (5 ms) but full
	if d.Owner != "c2" || d.Steps[len(d.Steps)-1].Kind != StepBalance {
		t.Fatalf("full best must hand the subnet to the second best: %v", d)
	}
}

// TestBalanceLeastCost: c1, full, owns 10.1.2.0/24 (next best c2, 20 ms
// farther) and 10.2.2.0/24 (next best c2, 1 ms farther). When a page of the
// first arrives, second-best moves it (2 pages × 20 ms); least-cost moves
// the other (1 page × 1 ms) and c1 keeps the subnet taking the page.
func TestBalanceLeastCost(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []BalanceMode{BalanceSecondBest, BalanceLeastCost} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newSmallWorld(t)
			w.rtt["c1"]["10.2"], w.rtt["c2"]["10.2"] = 3*time.Millisecond, 4*time.Millisecond
			p := NewOptimal(w.deps(1), Config{Balance: mode})
			cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
			cs[0].Capacity = 2
			w.join(t, p, cs...)
			far, _ := p.Delegate(ctx, ip("10.1.2.1"))  // c1 5 ms, c2 25 ms
			near, _ := p.Delegate(ctx, ip("10.2.2.1")) // c1 3 ms, c2 4 ms
			if far.Owner != "c1" || near.Owner != "c1" || far.Subnet == near.Subnet {
				t.Fatalf("c1 has room for both first pages: %v, %v", far, near)
			}
			d, err := p.Delegate(ctx, ip("10.1.2.2")) // a page of the first: c1 full
			if err != nil {
				t.Fatal(err)
			}
			wantOwner, wantMoved := CrawlerID("c2"), far.Subnet
			if mode == BalanceLeastCost {
				wantOwner, wantMoved = "c1", near.Subnet
			}
			if d.Owner != wantOwner || len(d.Moved) != 1 || d.Moved[0].Subnet != wantMoved || d.Moved[0].Owner != "c2" {
				t.Fatalf("%v: %v moved=%v; want the page at %s and subnet %d moved to c2", mode, d, d.Moved, wantOwner, wantMoved)
			}
			if rec, _ := w.dir.Get(wantMoved); rec.Owner != "c2" {
				t.Fatalf("moved record: %+v", rec)
			}
		})
	}
}

// TestBalanceLeastCostAsks: c1, full, owns 10.1.2.0/24 (recorded: c2 20
// ms farther) and 10.2.2.0/24 (recorded: c2 10 ms farther); c4 joins later,
// 1 ms farther from 10.1.2.0/24 than c1, and no record holds its answer.
// When a page of the first arrives, the cheapest recorded move (the second
// subnet, 10 ms a page) goes ahead when MoveAsk allows that much (or is
// off); under a lower MoveAsk the crawlers with room are asked, and the
// first subnet moves to c4 at 1 ms a page.
func TestBalanceLeastCostAsks(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		ask       time.Duration
		wantOwner CrawlerID
		wantMoved string // the subnet moved: "first" or "second"
		wantTo    CrawlerID
	}{
		{0, "c1", "second", "c2"},
		{20 * time.Millisecond, "c1", "second", "c2"},
		{5 * time.Millisecond, "c4", "first", "c4"},
	} {
		t.Run(fmt.Sprint(tc.ask), func(t *testing.T) {
			p, _, first, second := fullOwnerWorld(t, tc.ask, 6*time.Millisecond)
			d, err := p.Delegate(ctx, ip("10.1.2.2"))
			if err != nil {
				t.Fatal(err)
			}
			moved := map[string]hierarchy.NodeID{"first": first.Subnet, "second": second.Subnet}[tc.wantMoved]
			if d.Owner != tc.wantOwner || len(d.Moved) != 1 || d.Moved[0].Subnet != moved || d.Moved[0].Owner != tc.wantTo {
				t.Fatalf("MoveAsk %v: %v moved=%v; want the page at %s, the %s subnet moved to %s", tc.ask, d, d.Moved, tc.wantOwner, tc.wantMoved, tc.wantTo)
			}
			asked := probed(d, "c4")
			if asked != (tc.ask == 5*time.Millisecond) {
				t.Fatalf("MoveAsk %v: c4 asked %v", tc.ask, asked)
			}
		})
	}
}

// TestBalanceLeastCostAskOutcomes: the setting of TestBalanceLeastCostAsks
// under a MoveAsk of 5 ms (both recorded moves cost more a page), when
// what the asked crawler c4 answers does not settle it: an answer farther
// than the cheapest recorded move loses to that move; no answer falls
// back on that move; and a subnet another call is deciding (ErrBusy), or
// whose move c4 refuses (ErrRefused), stays where it is, the decision
// going on without error.
func TestBalanceLeastCostAskOutcomes(t *testing.T) {
	ctx := context.Background()
	for _, tc := range []struct {
		name      string
		c4        time.Duration // c4's RTT to 10.1.0.0/16; 0: it does not answer
		busy      error         // the first subnet's publish fails so (ErrBusy, ErrRefused)
		wantMoved string        // the subnet moved to c2: "second", or "" for none
		wantNote  string
	}{
		{"recorded cheaper", 20 * time.Millisecond, nil, "second", "cheaper than"},
		{"no answer", 0, nil, "second", "nobody with room answered"},
		{"busy", 6 * time.Millisecond, ErrBusy, "", "being decided by another call"},
		{"refused", 6 * time.Millisecond, ErrRefused, "", "refused to sign it"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p, dir, first, second := fullOwnerWorld(t, 5*time.Millisecond, tc.c4)
			dir.busy[first.Subnet] = tc.busy
			d, err := p.Delegate(ctx, ip("10.1.2.2"))
			if err != nil {
				t.Fatal(err)
			}
			if !probed(d, "c4") {
				t.Fatalf("%s: no recorded move is within MoveAsk, yet c4 was not asked: %v", tc.name, d.Steps)
			}
			if d.Owner != "c1" {
				t.Fatalf("%s: the page went to %s, want it at c1 (the first subnet stays)", tc.name, d.Owner)
			}
			switch tc.wantMoved {
			case "second":
				if len(d.Moved) != 1 || d.Moved[0].Subnet != second.Subnet || d.Moved[0].Owner != "c2" {
					t.Fatalf("%s: moved %v; want the second subnet moved to c2", tc.name, d.Moved)
				}
			default:
				if len(d.Moved) != 0 {
					t.Fatalf("%s: moved %v; want nothing moved", tc.name, d.Moved)
				}
			}
			if rec, _ := dir.Directory.(*MemDirectory).Get(first.Subnet); rec.Owner != "c1" || rec.Epoch != first.Record.Epoch {
				t.Fatalf("%s: the first subnet's record changed: %+v", tc.name, rec)
			}
			if note := d.Steps[len(d.Steps)-1].Note; !strings.Contains(note, tc.wantNote) {
				t.Fatalf("%s: the balance step says %q, want it to say %q", tc.name, note, tc.wantNote)
			}
		})
	}
}

// fullOwnerWorld is the setting of the least-cost asking tests: c1, with
// room for two pages, owns 10.1.2.0/24 (recorded next best c2, 20 ms
// farther) and 10.2.2.0/24 (c2, 10 ms farther); then c4 joins, c4to101 from
// 10.1.0.0/16 (0: it does not answer) and recorded in no record. It returns
// the policy (least-cost, MoveAsk ask), its directory (busy marks) and the
// two subnets' first delegations.
func fullOwnerWorld(t *testing.T, ask, c4to101 time.Duration) (Policy, busyDirectory, Decision, Decision) {
	t.Helper()
	ctx := context.Background()
	w := newSmallWorld(t)
	w.rtt["c1"]["10.2"], w.rtt["c2"]["10.2"] = 3*time.Millisecond, 13*time.Millisecond
	w.rtt["c4"] = map[string]time.Duration{"10.2": 90 * time.Millisecond}
	if c4to101 > 0 {
		w.rtt["c4"]["10.1"] = c4to101
	}
	dir := busyDirectory{Directory: w.dir, busy: map[hierarchy.NodeID]error{}}
	deps := w.deps(1)
	deps.Dir = dir
	p := NewOptimal(deps, Config{Balance: BalanceLeastCost, MoveAsk: ask})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = 2
	w.join(t, p, cs...)
	first, _ := p.Delegate(ctx, ip("10.1.2.1"))
	second, _ := p.Delegate(ctx, ip("10.2.2.1"))
	if first.Owner != "c1" || second.Owner != "c1" {
		t.Fatalf("c1 has room for both first pages: %v, %v", first, second)
	}
	w.join(t, p, Crawler{ID: "c4", Addr: netip.MustParseAddr("20.2.0.9")})
	return p, dir, first, second
}

func TestBalanceRelease(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewOptimal(w.deps(1), Config{Balance: BalanceRelease})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = 1
	w.join(t, p, cs...)
	first, _ := p.Delegate(ctx, ip("10.1.2.1")) // c1 takes 10.1.2.0/24 (probes: 5, 25, 120 ms)
	if first.Owner != "c1" {
		t.Fatal(first)
	}
	d, _ := p.Delegate(ctx, ip("10.1.0.1"))
	if d.Owner != "c1" || len(d.Moved) != 1 || d.Moved[0].Subnet != first.Subnet || d.Moved[0].Owner != "c2" {
		t.Fatalf("c1 must keep the new subnet and release 10.1.2.0/24 to its next best c2: %v moved=%v", d, d.Moved)
	}
	if rec, _ := w.dir.Get(first.Subnet); rec.Owner != "c2" || rec.Epoch != first.Record.Epoch+1 {
		t.Fatalf("released record: %+v", rec)
	}
}

// TestBalanceHold: a delegation younger than BalanceHold is not moved by
// load balancing (the full owner's subnet stays, so a new subnet goes to
// the next best with room); once it is older, it is released as without
// a hold. Time is the injected clock's.
func TestBalanceHold(t *testing.T) {
	ctx := context.Background()
	for _, mode := range []BalanceMode{BalanceRelease, BalanceSecondBest, BalanceLeastCost} {
		t.Run(mode.String(), func(t *testing.T) {
			w := newSmallWorld(t)
			deps := w.deps(1)
			clock := deps.Clock.(*FixedClock)
			p := NewOptimal(deps, Config{Balance: mode, BalanceHold: time.Minute})
			cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
			cs[0].Capacity = 1
			w.join(t, p, cs...)
			first, _ := p.Delegate(ctx, ip("10.1.2.1")) // c1 takes 10.1.2.0/24
			if first.Owner != "c1" {
				t.Fatal(first)
			}
			clock.T = clock.T.Add(59 * time.Second)
			// a second page of the held subnet: c1 is full, but it stays
			d, _ := p.Delegate(ctx, ip("10.1.2.2"))
			if d.Owner != "c1" || len(d.Moved) != 0 {
				t.Fatalf("a delegation 59 s old moved under a 1 min hold: %v moved=%v", d, d.Moved)
			}
			d, _ = p.Delegate(ctx, ip("10.1.0.1")) // c1 best but full, its subnet held
			if d.Owner == "c1" || len(d.Moved) != 0 {
				t.Fatalf("new subnet with c1 full and its subnet held: %v moved=%v; want the next best, nothing moved", d, d.Moved)
			}
			clock.T = clock.T.Add(2 * time.Second)
			d, _ = p.Delegate(ctx, ip("10.1.2.3")) // the hold is over
			if len(d.Moved) != 1 || d.Moved[0].Subnet != first.Subnet || d.Moved[0].Owner == "c1" {
				t.Fatalf("after the hold: %v moved=%v; want 10.1.2.0/24 moved off the full c1", d, d.Moved)
			}
		})
	}
}

// busyDirectory fails to publish the records of the subnets in busy with
// their error: ErrBusy (another call is deciding them) or ErrRefused (the
// new owner will not sign).
type busyDirectory struct {
	Directory
	busy map[hierarchy.NodeID]error
}

func (d busyDirectory) Publish(ctx context.Context, rec Record) (Record, error) {
	if err := d.busy[rec.Subnet]; err != nil {
		return Record{}, fmt.Errorf("publish subnet %d: %w", rec.Subnet, err)
	}
	return d.Directory.Publish(ctx, rec)
}

// TestReleaseLeavesBusySubnets: a subnet whose record cannot be published
// because another call decides it (ErrBusy) or its new owner refuses it
// (ErrRefused) stays where it is; the decision goes on as if it had
// nothing to release.
func TestReleaseLeavesBusySubnets(t *testing.T) {
	for _, why := range []error{ErrBusy, ErrRefused} {
		t.Run(why.Error(), func(t *testing.T) { releaseLeavesBusySubnet(t, why) })
	}
}

func releaseLeavesBusySubnet(t *testing.T, why error) {
	ctx := context.Background()
	w := newSmallWorld(t)
	dir := busyDirectory{Directory: w.dir, busy: map[hierarchy.NodeID]error{}}
	deps := w.deps(1)
	deps.Dir = dir
	p := NewOptimal(deps, Config{Balance: BalanceRelease})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = 1
	w.join(t, p, cs...)
	first, _ := p.Delegate(ctx, ip("10.1.2.1"))
	if first.Owner != "c1" {
		t.Fatal(first)
	}
	dir.busy[first.Subnet] = why
	d, err := p.Delegate(ctx, ip("10.1.0.1"))
	if err != nil {
		t.Fatalf("a busy subnet to release failed the decision: %v", err)
	}
	if len(d.Moved) != 0 || d.Owner == "c1" {
		t.Fatalf("nothing released, so the full c1 must not take the new subnet: %v moved=%v", d, d.Moved)
	}
	if rec, _ := w.dir.Get(first.Subnet); rec.Owner != "c1" || rec.Epoch != first.Record.Epoch {
		t.Fatalf("busy subnet's record changed: %+v", rec)
	}
}

// TestBalanceAgainstMinCost compares both heuristics with the exact
// min-cost assignment on the global cost Σ download time, on the synthetic
// world with tight capacities.
func TestBalanceAgainstMinCost(t *testing.T) {
	w := newSynthWorld(t, 8, 6, 300)
	ctx := context.Background()
	capacity := 300/6 + 8
	costs := map[BalanceMode]float64{}
	var subnets []hierarchy.NodeID
	for _, mode := range []BalanceMode{BalanceOff, BalanceRelease, BalanceSecondBest, BalanceLeastCost} {
		members := NewMemMembership()
		dir := NewMemDirectory(w.tree, members)
		book := NewMemLoadBook()
		p := NewOptimal(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(1, 1)), Loads: book}, Config{Balance: mode})
		for _, c := range w.crawlers {
			c.Capacity = capacity
			members.Add(c)
			p.Join(ctx, c)
		}
		host := map[hierarchy.NodeID]netip.Addr{}
		for _, h := range w.hosts {
			d, err := p.Delegate(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			if _, ok := host[d.Subnet]; !ok {
				host[d.Subnet] = h
			}
		}
		if mode != BalanceOff {
			for _, c := range w.crawlers {
				if l := book.Load(c.ID); l > capacity {
					t.Errorf("%v: %s carries %d pages > capacity %d", mode, c.ID, l, capacity)
				}
			}
		}
		// global cost: every page of a subnet from its owner (mean RTT
		// stands for download time)
		var total float64
		subnets = subnets[:0]
		for s, h := range host {
			owner, _ := book.Owner(s)
			total += float64(book.Pages(s)) * w.meanRTT(w.crawler(owner), h)
			subnets = append(subnets, s)
		}
		costs[mode] = total
		if mode == BalanceOff {
			// exact reference on the same subnets
			pages := make([]int, len(subnets))
			cost := make([][]float64, len(subnets))
			caps := make([]int, len(w.crawlers))
			for j := range caps {
				caps[j] = capacity
			}
			for i, s := range subnets {
				pages[i] = book.Pages(s)
				cost[i] = make([]float64, len(w.crawlers))
				for j, c := range w.crawlers {
					cost[i][j] = w.meanRTT(c, host[s])
				}
			}
			a, err := MinCostAssign(pages, caps, cost)
			if err != nil {
				t.Fatal(err)
			}
			costs[255] = a.Cost
		}
	}
	ref := costs[255]
	t.Logf("global cost: unbalanced %.0f, release %.0f (%.3f× min-cost), second-best %.0f (%.3f×), least-cost %.0f (%.3f×), min-cost %.0f",
		costs[BalanceOff], costs[BalanceRelease], costs[BalanceRelease]/ref, costs[BalanceSecondBest], costs[BalanceSecondBest]/ref,
		costs[BalanceLeastCost], costs[BalanceLeastCost]/ref, ref)
	for _, m := range []BalanceMode{BalanceRelease, BalanceSecondBest, BalanceLeastCost} {
		if costs[m] < ref*(1-1e-9) {
			t.Errorf("%v beats the exact optimum: %.1f < %.1f", m, costs[m], ref)
		}
	}
}

func TestMinCostAssignExact(t *testing.T) {
	rng := rand.New(rand.NewPCG(11, 12))
	for trial := range 200 {
		n, m := 1+rng.IntN(6), 1+rng.IntN(3)
		pages := make([]int, n)
		cost := make([][]float64, n)
		for i := range n {
			pages[i] = 1 + rng.IntN(3)
			cost[i] = make([]float64, m)
			for j := range m {
				cost[i][j] = float64(rng.IntN(100))
			}
		}
		caps := make([]int, m)
		total := 0
		for _, p := range pages {
			total += p
		}
		for j := range caps {
			caps[j] = max(1, total/m+rng.IntN(4))
		}
		a, err := MinCostAssign(pages, caps, cost)
		bf := bruteAssign(pages, caps, cost)
		if err != nil {
			if !math.IsInf(bf, 1) && total <= sum(caps) {
				// feasible splittable instance must be solved
				t.Fatalf("trial %d: %v", trial, err)
			}
			continue
		}
		if a.Exact && math.Abs(a.Cost-bf) > 1e-6 {
			t.Fatalf("trial %d: exact min-cost %.1f, brute force %.1f", trial, a.Cost, bf)
		}
		if a.Cost > bf+1e-6 {
			t.Fatalf("trial %d: lower bound %.1f above brute force %.1f", trial, a.Cost, bf)
		}
		if a.Exact && math.Abs(AssignmentCost(pages, a.Owner, cost)-a.Cost) > 1e-6 {
			t.Fatalf("trial %d: reported cost differs from its assignment", trial)
		}
	}
}

func sum(xs []int) int {
	s := 0
	for _, x := range xs {
		s += x
	}
	return s
}

// bruteAssign enumerates every unsplittable assignment.
func bruteAssign(pages, caps []int, cost [][]float64) float64 {
	best := math.Inf(1)
	load := make([]int, len(caps))
	var rec func(i int, acc float64)
	rec = func(i int, acc float64) {
		if i == len(pages) {
			best = math.Min(best, acc)
			return
		}
		for j := range caps {
			if load[j]+pages[i] > caps[j] {
				continue
			}
			load[j] += pages[i]
			rec(i+1, acc+float64(pages[i])*cost[i][j])
			load[j] -= pages[i]
		}
	}
	rec(0, 0)
	return best
}

func TestCalibration(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	host := ip("10.1.2.7")
	d, _ := p.Delegate(ctx, host)
	if d.Owner != "c1" {
		t.Fatal(d)
	}
	cal := NewCalibrator(w.tree, Config{CalibrationFactor: 2, CalibrationStreak: 2})
	at := time.Unix(0, 0)
	before := w.prober.count
	// steady times (with noise): no event, and no probes at all
	for i := range 50 {
		if _, ev := cal.Observe("http://h/a", host, time.Duration(40+i%7)*time.Millisecond, at); ev {
			t.Fatal("event on steady timings")
		}
	}
	// one slow time is not enough ("more than once in a row")
	if _, ev := cal.Observe("http://h/a", host, 200*time.Millisecond, at); ev {
		t.Fatal("event after a single slow time")
	}
	if _, ev := cal.Observe("http://h/a", host, 41*time.Millisecond, at); ev {
		t.Fatal("event after the streak broke")
	}
	if w.prober.count != before {
		t.Fatal("calibration issued probes while nothing changed")
	}
	// the path from c1 degrades: two slow times in a row → event
	w.rtt["c1"]["10.1"] = 90 * time.Millisecond
	cal.Observe("http://h/a", host, 180*time.Millisecond, at)
	ev, ok := cal.Observe("http://h/a", host, 190*time.Millisecond, at)
	if !ok || ev.Subnet != d.Subnet || ev.Streak != 2 || ev.Baseline > 50*time.Millisecond {
		t.Fatalf("want an event for subnet %d, got %+v %v", d.Subnet, ev, ok)
	}
	r, err := p.Redelegate(ctx, ev.IP)
	if err != nil {
		t.Fatal(err)
	}
	if r.Owner != "c2" || r.Record.Epoch != d.Record.Epoch+1 {
		t.Fatalf("re-delegation should move the subnet to c2 with a new epoch: %v epoch=%d", r, r.Record.Epoch)
	}
	if got, _ := p.Delegate(ctx, host); got.Owner != "c2" || !got.Cached {
		t.Fatalf("after re-delegation: %v", got)
	}
}

func TestMigration(t *testing.T) {
	ctx := context.Background()
	old := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.1.1.0/24", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"))
	// the rebuild drops 10.1.1.0/24, adds 10.2.5.0/24 and a new /8
	nw := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.2.0.0/16", "D", "FR"), pfx(t, "10.2.5.0/24", "Q", "FR"), pfx(t, "30.0.0.0/8", "N", "US"))
	members := NewMemMembership(smallCrawlers...)
	dir := NewMemDirectory(old, members)
	pub := func(pref string, owner CrawlerID, epoch uint64) {
		dir.Publish(ctx, Record{Subnet: old.SmallestNonUnary(netip.MustParsePrefix(pref).Addr()), Snapshot: old.ID(), Owner: owner, Epoch: epoch})
	}
	pub("10.1.1.0/24", "c1", 1)
	pub("10.1.0.0/16", "c2", 1)
	pub("10.2.0.0/16", "c3", 4)
	ndir := NewMemDirectory(nw, members)
	n, err := MigrateDirectory(ctx, old, nw, dir.Records(), ndir)
	if err != nil || n != 2 {
		t.Fatalf("migrated %d records, err %v", n, err)
	}
	// the /24 is gone: its old /16 parent's own record (identical range) wins
	if r, ok := ndir.Get(nw.SmallestNonUnary(ip("10.1.1.9"))); !ok || r.Owner != "c2" || r.Snapshot != nw.ID() {
		t.Fatalf("10.1.1.9: %+v %v", r, ok)
	}
	if r, ok := ndir.Get(nw.SmallestNonUnary(ip("10.2.0.1"))); !ok || r.Owner != "c3" || r.Epoch != 4 {
		t.Fatalf("10.2.0.1: %+v", r)
	}
	// the new /24 is not delegated: it will be, lazily
	if _, ok := ndir.Get(nw.SmallestNonUnary(ip("10.2.5.1"))); ok {
		t.Fatal("a new subnet must not inherit a record")
	}
	// and a policy on the new tree uses the migrated records without probes
	w := newSmallWorld(t)
	p := NewIPMicra(Deps{Tree: nw, Dir: ndir, Prober: w.prober, Members: members}, Config{})
	if d, _ := p.Delegate(ctx, ip("10.1.1.9")); !d.Cached || d.Owner != "c2" || d.Probes != 0 {
		t.Fatalf("after migration: %v", d)
	}
}

// TestCalibrationMinDelta: times that triple but stay within a few
// milliseconds (loopback, a LAN, a loaded machine) are jitter, not a path
// change; the same ratio at network scale is an event.
func TestCalibrationMinDelta(t *testing.T) {
	host := ip("10.1.2.7")
	at := time.Unix(0, 0)
	for _, tc := range []struct {
		name       string
		cfg        Config
		base, slow time.Duration
		want       bool
	}{
		{"sub-millisecond jitter", Config{}, 300 * time.Microsecond, 900 * time.Microsecond, false},
		{"tripled but only 8 ms more", Config{}, 4 * time.Millisecond, 12 * time.Millisecond, false},
		{"tripled, 20 ms more", Config{}, 10 * time.Millisecond, 30 * time.Millisecond, true},
		{"floor off", Config{CalibrationMinDelta: -1}, 300 * time.Microsecond, 900 * time.Microsecond, true},
		{"floor raised", Config{CalibrationMinDelta: 50 * time.Millisecond}, 10 * time.Millisecond, 30 * time.Millisecond, false},
	} {
		cal := NewCalibrator(nil, tc.cfg)
		for range 5 {
			cal.Observe("http://h/a", host, tc.base, at)
		}
		cal.Observe("http://h/a", host, tc.slow, at)
		_, got := cal.Observe("http://h/a", host, tc.slow, at)
		if got != tc.want {
			t.Errorf("%s: %v → %v twice: event %v, want %v", tc.name, tc.base, tc.slow, got, tc.want)
		}
	}
}

// TestBalanceProbedForRoomInRecord: when no ranked crawler has room, the
// engine probes the crawlers that have; the new owner's answer belongs in
// the record, or learners never see why it owns the subnet.
func TestBalanceProbedForRoomInRecord(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{Balance: BalanceSecondBest})
	cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
	cs[0].Capacity = 1
	w.join(t, p, cs...)
	if d, _ := p.Delegate(ctx, ip("10.1.1.9")); d.Owner != "c1" || !d.Cached {
		t.Fatalf("c1's own subnet, one page: %v", d)
	}
	// same organisation: c1 answers 5 ms, under the threshold, and is the
	// only ranked answer; it is full, so c2 and c3 are probed for room
	d, err := p.Delegate(ctx, ip("10.1.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != "c2" || d.Probes != 3 {
		t.Fatalf("c2 (25 ms) is the nearest with room, after 3 probes: %v", d)
	}
	got := map[CrawlerID]time.Duration{}
	for _, r := range d.Record.Probes {
		got[r.Crawler] = r.RTT
	}
	want := map[CrawlerID]time.Duration{"c1": 5 * time.Millisecond, "c2": 25 * time.Millisecond}
	if len(got) != len(want) || got["c1"] != want["c1"] || got["c2"] != want["c2"] {
		t.Fatalf("record probes %v, want the ranked answer and the owner's %v", d.Record.Probes, want)
	}
	for i := 1; i < len(d.Record.Probes); i++ {
		if d.Record.Probes[i].RTT < d.Record.Probes[i-1].RTT {
			t.Fatalf("record probes not lowest first: %v", d.Record.Probes)
		}
	}
}

// TestBalanceRoomProbesBounded: when no ranked crawler has room, the
// crawlers probed for room are at most Config.RoomProbes, whatever the
// number of crawlers (before the cap, every crawler with room was probed:
// 144 probes/URL at 1000 crawlers in the simulator), and the lowest of
// them takes the subnet. (micra with second-best balancing does not probe
// full crawlers in the first place, and so hardly ever needs the last
// resort: TestMicraSecondBestSkipsFullCrawlers; with the release option it
// does.)
func TestBalanceRoomProbesBounded(t *testing.T) {
	w := newSynthWorld(t, 3, 60, 600)
	ctx := context.Background()
	for _, mk := range []struct {
		name string
		new  func(Deps, Config) Policy
		mode BalanceMode
	}{{"ipmicra", NewIPMicra, BalanceSecondBest}, {"micra", NewMicra, BalanceRelease}} {
		t.Run(mk.name, func(t *testing.T) {
			members := NewMemMembership()
			dir := NewMemDirectory(w.tree, members)
			p := mk.new(Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Rand: rand.New(rand.NewPCG(1, 1)), Loads: NewMemLoadBook()},
				Config{Balance: mk.mode, RoomProbes: 5})
			for _, c := range w.crawlers {
				c.Capacity = 600/60 + 2
				members.Add(c)
				if _, err := p.Join(ctx, c); err != nil {
					t.Fatal(err)
				}
			}
			roomRounds := 0
			for _, h := range w.hosts {
				d, err := p.Delegate(ctx, h)
				if err != nil {
					t.Fatal(err)
				}
				for _, st := range d.Steps {
					if st.Kind != StepBalance || len(st.Probes) == 0 {
						continue
					}
					roomRounds++
					if len(st.Probes) > 5 {
						t.Fatalf("%d crawlers probed for room, cap 5: %v", len(st.Probes), d)
					}
					var low ProbeResult
					for _, r := range st.Probes {
						if r.OK && (!low.OK || r.RTT < low.RTT) {
							low = r
						}
					}
					if low.OK && d.Owner != low.Crawler {
						t.Fatalf("owner %s, but %s answered lowest among those with room: %v", d.Owner, low.Crawler, d)
					}
				}
			}
			if roomRounds < 10 {
				t.Fatalf("only %d decisions probed for room: the test does not exercise the cap", roomRounds)
			}
			t.Logf("%d decisions probed for room", roomRounds)
		})
	}
}

// TestRoomCandidatesNearestFirst: within RoomProbes, load balancing's last
// resort asks the crawlers nearest the host — for IPMicra-like policies the
// holders under the subnet's nearest ancestors (never ones elsewhere in the
// tree before them), for micra the crawlers it predicts nearest.
func TestRoomCandidatesNearestFirst(t *testing.T) {
	ctx := context.Background()
	t.Run("hierarchy", func(t *testing.T) {
		w := newSmallWorld(t)
		e := newEngine("ipmicra", w.deps(1), Config{}, ipmicraChooser{})
		cs := []Crawler{smallCrawlers[0], smallCrawlers[1], smallCrawlers[2]}
		for i := range 5 { // more holders far away, in 20.2.0.0/16
			cs = append(cs, Crawler{ID: CrawlerID(fmt.Sprintf("far%d", i)), Addr: netip.MustParseAddr(fmt.Sprintf("20.2.0.%d", 10+i))})
		}
		w.join(t, e, cs...)
		s := w.tree.SmallestNonUnary(ip("10.1.2.1")) // 10.1.2.0/24: parent 10.1.0.0/16 (c1 holds 10.1.1.0/24), then 10.0.0.0/8 (c2)
		all := func(CrawlerID) bool { return true }
		for n, want := range map[int][]CrawlerID{1: {"c1"}, 2: {"c1", "c2"}, 5: {"c1", "c2"}} {
			got, err := e.nearHolders(ctx, s, n, all)
			if err != nil {
				t.Fatal(err)
			}
			if !slices.Equal(got, want) {
				t.Errorf("nearHolders(n=%d) = %v, want %v (the holders under the nearest ancestors, the root's excluded)", n, got, want)
			}
		}
	})
	t.Run("micra", func(t *testing.T) {
		w := newSmallWorld(t)
		p := NewMicra(w.deps(1), Config{})
		w.join(t, p, smallCrawlers...)
		for _, h := range []string{"10.1.0.1", "10.1.2.1", "10.2.0.1", "10.2.2.1", "20.1.0.9", "20.2.0.1"} {
			if _, err := p.Delegate(ctx, ip(h)); err != nil {
				t.Fatal(err)
			}
		}
		e := p.(learningEngine).engine
		for host, first := range map[string]CrawlerID{"10.1.0.1": "c1", "10.2.0.1": "c2", "20.1.0.9": "c3"} {
			room := []CrawlerID{"c3", "c2", "c1"}
			e.ch.(*micraChooser).roomOrder(e, w.tree.SmallestNonUnary(ip(host)), room)
			if room[0] != first {
				t.Errorf("room order for %s: %v, want %s (lowest RTT there) first", host, room, first)
			}
		}
	})
}

// TestUnprobedWinnerAddsNoProbe: a record's probes are answers; a winner
// nobody probed (random delegation, micra's blind decision) adds none.
func TestUnprobedWinnerAddsNoProbe(t *testing.T) {
	w := newSmallWorld(t)
	p := NewRandom(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	d, err := p.Delegate(context.Background(), ip("10.1.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if len(d.Record.Probes) != 0 {
		t.Fatalf("random delegation's record claims probes: %v", d.Record.Probes)
	}
	// micra's blind decisions: every probe of every record is an answer
	ws := newSynthWorld(t, 1, 30, 1000) // (a world with blind decisions: 23 of them)
	members := NewMemMembership()
	dir := NewMemDirectory(ws.tree, members)
	mp := NewMicra(Deps{Tree: ws.tree, Dir: dir, Prober: ws, Members: members, Rand: rand.New(rand.NewPCG(1, 1))}, Config{})
	for _, c := range ws.crawlers {
		members.Add(c)
		mp.Join(context.Background(), c)
	}
	blind := 0
	for _, h := range ws.hosts {
		d, err := mp.Delegate(context.Background(), h)
		if err != nil {
			t.Fatal(err)
		}
		if d.Reason == ReasonPredicted {
			blind++
			// a prediction is not a measurement: the owner endorses only
			// RTTs it answered, and refused the record when it carried one
			if d.Record.OwnerRTT != 0 || d.OwnerRTT != 0 {
				t.Fatalf("blind decision %v claims owner rtt %v", d, d.Record.OwnerRTT)
			}
		}
		for _, r := range d.Record.Probes {
			if !r.OK {
				t.Fatalf("record of %v holds a probe that got no answer: %v", d, d.Record.Probes)
			}
		}
	}
	if blind == 0 {
		t.Fatal("no blind decision: the test does not exercise them")
	}
	t.Logf("%d blind decisions", blind)
}

// TestMemDirectoryRecordsInAndOutOfTree: records of the tree's subnets
// (kept by node) and of subnets beyond it (another tree's, kept by key)
// are found, counted, listed in subnet order, replaced by the Select rule
// and deleted alike.
func TestMemDirectoryRecordsInAndOutOfTree(t *testing.T) {
	tr := newSmallWorld(t).tree
	dir := NewMemDirectory(tr, nil)
	ctx := context.Background()
	far := hierarchy.NodeID(tr.Len() + 1000)
	subnets := []hierarchy.NodeID{far, 1, hierarchy.NodeID(tr.Len() - 1), hierarchy.NodeID(tr.Len())}
	for k, s := range subnets {
		if _, err := dir.Publish(ctx, Record{Subnet: s, Owner: CrawlerID(fmt.Sprint("c", k)), Epoch: 1}); err != nil {
			t.Fatal(err)
		}
	}
	if dir.Len() != len(subnets) {
		t.Fatalf("Len %d, want %d", dir.Len(), len(subnets))
	}
	var got []hierarchy.NodeID
	for _, r := range dir.Records() {
		got = append(got, r.Subnet)
	}
	if want := slices.Sorted(slices.Values(subnets)); !slices.Equal(got, want) {
		t.Fatalf("Records lists %v, want %v", got, want)
	}
	for k, s := range subnets {
		if r, ok, err := dir.Lookup(ctx, s); err != nil || !ok || r.Owner != CrawlerID(fmt.Sprint("c", k)) {
			t.Fatalf("Lookup(%d) = %v, %v, %v", s, r, ok, err)
		}
		// a newer epoch replaces it, an older one does not
		if _, err := dir.Publish(ctx, Record{Subnet: s, Owner: "newer", Epoch: 2}); err != nil {
			t.Fatal(err)
		}
		if r, _ := dir.Publish(ctx, Record{Subnet: s, Owner: "older", Epoch: 0}); r.Owner != "newer" {
			t.Fatalf("subnet %d: the older record replaced the newer: %v", s, r)
		}
	}
	for _, s := range subnets[:2] {
		dir.Delete(s)
		if _, ok := dir.Get(s); ok {
			t.Fatalf("subnet %d deleted, still found", s)
		}
	}
	if dir.Len() != 2 {
		t.Fatalf("Len %d after two deletes of four, want 2", dir.Len())
	}
	// a deleted record's slot is reused, and the records stay apart
	if _, err := dir.Publish(ctx, Record{Subnet: 2, Owner: "again", Epoch: 1}); err != nil {
		t.Fatal(err)
	}
	for s, want := range map[hierarchy.NodeID]CrawlerID{2: "again", subnets[2]: "newer", subnets[3]: "newer"} {
		if r, ok := dir.Get(s); !ok || r.Owner != want {
			t.Fatalf("subnet %d: %v, %v; want owner %s", s, r, ok, want)
		}
	}
}
