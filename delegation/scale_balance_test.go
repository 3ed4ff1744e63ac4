package delegation

import (
	"context"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"
)

// roomProber probes w and counts probes sent to crawlers that are full
// (no room for even one page) at the moment of the probe.
type roomProber struct {
	w     *synthWorld
	loads *MemLoadBook
	caps  map[CrawlerID]int
	full  int
}

func (p *roomProber) Probe(ctx context.Context, ip netip.Addr, cs []CrawlerID) []ProbeResult {
	for _, c := range cs {
		if p.loads.Load(c) >= p.caps[c] {
			p.full++
		}
	}
	return p.w.Probe(ctx, ip, cs)
}

// runRoom delegates every host of a 60-crawler synthetic world whose
// crawlers have little room (1.2 × hosts/crawlers on average, unequal) and
// returns the probes sent to full crawlers and the most pages any crawler
// holds above its capacity.
func runRoom(t *testing.T, mode BalanceMode) (fullProbes, over int) {
	t.Helper()
	w := newSynthWorld(t, 3, 60, 1500)
	rng := rand.New(rand.NewPCG(3, 7))
	caps := map[CrawlerID]int{}
	for i := range w.crawlers {
		w.crawlers[i].Capacity = 10 + rng.IntN(40) // mean ≈ 30 = 1.2 × 1500/60
		caps[w.crawlers[i].ID] = w.crawlers[i].Capacity
	}
	members := NewMemMembership(w.crawlers...)
	loads := NewMemLoadBook()
	pr := &roomProber{w: w, loads: loads, caps: caps}
	deps := Deps{Tree: w.tree, Dir: NewMemDirectory(w.tree, members), Prober: pr, Members: members,
		Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(3, 1)), Loads: loads}
	p := NewMicra(deps, Config{Balance: mode})
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	pr.full = 0 // placement probes nobody, but count decisions only
	for _, h := range w.hosts {
		if _, err := p.Delegate(ctx, h); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range w.crawlers {
		over = max(over, loads.Load(c.ID)-c.Capacity)
	}
	return pr.full, over
}

// TestMicraSecondBestSkipsFullCrawlers: with second-best balancing micra
// does not spend probes on crawlers without room (their neighbours with room
// stand in), and no crawler ends above its capacity. The release option
// still asks full crawlers (the best one keeps the subnet and moves others):
// the count is not zero by construction of the world.
func TestMicraSecondBestSkipsFullCrawlers(t *testing.T) {
	full, over := runRoom(t, BalanceSecondBest)
	if full != 0 {
		t.Errorf("second best: %d probes went to full crawlers", full)
	}
	if over > 0 {
		t.Errorf("second best: a crawler holds %d pages above its capacity", over)
	}
	if fullRelease, _ := runRoom(t, BalanceRelease); fullRelease == 0 {
		t.Errorf("release: no probe went to a full crawler; the world does not fill crawlers, so the check above proves nothing")
	}
}

// TestMicraMargin: a candidate must beat the best answer by more than
// Margin to count. A margin longer than any answer stops every decision
// after its first probe; without it, decisions probe more.
func TestMicraMargin(t *testing.T) {
	w := newSynthWorld(t, 1, 12, 400)
	maxProbes := func(cfg Config) (most, total int) {
		members := NewMemMembership(w.crawlers...)
		deps := Deps{Tree: w.tree, Dir: NewMemDirectory(w.tree, members), Prober: w, Members: members,
			Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(1, 1))}
		p := NewMicra(deps, cfg)
		ctx := context.Background()
		for _, c := range w.crawlers {
			if _, err := p.Join(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		for _, h := range w.hosts {
			d, err := p.Delegate(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			most, total = max(most, d.Probes), total+d.Probes
		}
		return most, total
	}
	most, total := maxProbes(Config{Micra: MicraConfig{Margin: 10 * time.Second}})
	if most > 1 {
		t.Errorf("margin 10 s: a decision probed %d times, want at most 1", most)
	}
	most0, total0 := maxProbes(Config{})
	if most0 < 2 || total0 <= total {
		t.Errorf("no margin: at most %d probes, %d in all (margin: %d); want more probes without the margin", most0, total0, total)
	}
}

// TestRoomByIndexMatchesHasRoom: the chooser's room answers by crawler
// index (locate's capacities, the book's counters) are hasRoom's, for
// every crawler and several page counts, and its pick for probeRoom is
// the filter by id and roomOrder's first, as loads grow over a run with
// unequal capacities, one crawler unlimited and one departed.
func TestRoomByIndexMatchesHasRoom(t *testing.T) {
	w := newSynthWorld(t, 5, 40, 800)
	rng := rand.New(rand.NewPCG(5, 9))
	for i := range w.crawlers {
		w.crawlers[i].Capacity = 5 + rng.IntN(40)
	}
	w.crawlers[0].Capacity = 0 // no limit
	members := NewMemMembership(w.crawlers...)
	loads := NewMemLoadBook()
	deps := Deps{Tree: w.tree, Dir: NewMemDirectory(w.tree, members), Prober: w, Members: members,
		Clock: &FixedClock{}, Rand: rand.New(rand.NewPCG(5, 1)), Loads: loads}
	p := NewMicra(deps, Config{Balance: BalanceSecondBest})
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	e := p.(learningEngine).engine
	m := e.ch.(*micraChooser)
	gone := w.crawlers[len(w.crawlers)-1].ID
	checked, full, picks := 0, 0, 0
	for i, h := range w.hosts {
		if i == len(w.hosts)/2 {
			members.Remove(gone)
		}
		if _, err := p.Delegate(ctx, h); err != nil {
			t.Fatal(err)
		}
		if i%50 != 0 {
			continue
		}
		m.locate(e)
		ver, _ := membershipVersion(e.d.Members)
		if !m.locValid || ver != m.locVer {
			t.Fatal("locate's view is not the membership's: roomFilter would not read by index")
		}
		m.loadBook = loads
		// probeRoom's pick by index is its pick by id and roomOrder
		for _, pages := range []int{1, 10, 30} {
			for _, n := range []int{3, 12, 100} {
				s := w.tree.SmallestNonUnary(w.hosts[(i*7)%len(w.hosts)])
				skip := w.crawlers[i%len(w.crawlers)].ID
				skipped := func(c CrawlerID) bool { return c == skip }
				var want []CrawlerID
				for _, c := range e.liveIDs() {
					if e.hasRoom(c, pages) && !skipped(c) {
						want = append(want, c)
					}
				}
				if len(want) > n {
					m.roomOrder(e, s, want)
					want = want[:n]
				}
				got, ok := m.roomPick(e, s, pages, skipped, n)
				if !ok || !slices.Equal(got, want) {
					t.Fatalf("host %d, %d pages, n=%d: roomPick %v (%v), want %v", i, pages, n, got, ok, want)
				}
				if len(want) == n {
					picks++
				}
			}
		}
		for _, c := range w.crawlers {
			ci := m.crawler.id(c.ID)
			for _, pages := range []int{1, 3, 10} {
				want := e.hasRoom(c.ID, pages)
				if got := m.roomByIndex(ci, pages); got != want {
					t.Fatalf("host %d, %s (capacity %d, load %d), %d pages: by index %v, hasRoom %v",
						i, c.ID, c.Capacity, loads.Load(c.ID), pages, got, want)
				}
				checked++
				if !want {
					full++
				}
			}
		}
	}
	if picks == 0 {
		t.Fatal("roomPick never chose among more crawlers than asked")
	}
	if full == 0 || full == checked {
		t.Fatalf("%d of %d answers full: the run never told room from none", full, checked)
	}
}
