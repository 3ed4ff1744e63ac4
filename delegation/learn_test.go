package delegation

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"testing"
	"time"
)

// meanProber answers the synthetic world's RTT without jitter, so two
// policies asked the same question get the same answer.
type meanProber struct{ w *synthWorld }

func (p meanProber) Probe(_ context.Context, target netip.Addr, cs []CrawlerID) []ProbeResult {
	out := make([]ProbeResult, len(cs))
	for i, id := range cs {
		m := p.w.meanRTT(p.w.crawler(id), target)
		out[i] = ProbeResult{Crawler: id, RTT: time.Duration(m * float64(time.Millisecond)), OK: true}
	}
	return out
}

// micraStats is what a micra policy has learned: everything its decisions
// read, none of its scratch space.
type micraStats struct {
	Ctx       map[scopeKey]*scopeStats
	GlobalSum float64
	GlobalN   int
	Pooled    [scopeKinds]struct{ m2, dof float64 }
	Geo       geoSums
	Pairs     *pairModel
	Crawlers  []CrawlerID
}

func statsOf(t *testing.T, p Policy) micraStats {
	t.Helper()
	le, ok := p.(learningEngine)
	if !ok {
		t.Fatalf("%T is not a learning engine", p)
	}
	m := le.ch.(*micraChooser)
	// what was learned, not when it was last read (a decider reads its
	// contexts more often than a peer that only learns its records)
	ctx := make(map[scopeKey]*scopeStats, len(m.scopes))
	for k, c := range m.scopes {
		cc := *c
		cc.used = 0
		ctx[k] = &cc
	}
	return micraStats{ctx, m.globalSum, m.globalN, m.pooled, m.geo, m.pairs, m.crawler.ids}
}

func synthDeps(w *synthWorld, dir Directory, members *MemMembership, seed uint64) Deps {
	return Deps{Tree: w.tree, Dir: dir, Prober: meanProber{w}, Members: members, Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(seed, 1))}
}

// TestLearnFromOthers: a policy fed another's records (its placements and
// decisions) ends with the same statistics as the policy that made them,
// then decides every further host the same way; feeding the records again
// changes nothing; records of another snapshot are refused.
func TestLearnFromOthers(t *testing.T) {
	ctx := context.Background()
	w := newSynthWorld(t, 5, 12, 240)
	members := NewMemMembership(w.crawlers...)
	refDir, folDir := NewMemDirectory(w.tree, members), NewMemDirectory(w.tree, members)
	ref := NewMicra(synthDeps(w, refDir, members, 1), Config{Self: "ref"})
	fol := NewMicra(synthDeps(w, folDir, members, 2), Config{Self: "fol"})

	var recs []Record
	for _, c := range w.crawlers {
		d, err := ref.Join(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		recs = append(recs, d.Record)
	}
	train := len(w.hosts) / 2
	for _, h := range w.hosts[:train] {
		d, err := ref.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Cached && d.Record.Owner != "" {
			recs = append(recs, d.Record)
		}
	}
	if len(recs) < len(w.crawlers)+50 {
		t.Fatalf("only %d records to learn from", len(recs))
	}
	learner, ok := fol.(Learner)
	if !ok {
		t.Fatal("NewMicra does not implement Learner")
	}
	for round := range 2 {
		for _, r := range recs {
			if _, err := folDir.Publish(ctx, r); err != nil {
				t.Fatal(err)
			}
			if got := learner.Learn(r); got != (round == 0) {
				t.Fatalf("round %d: Learn(%d/%d by %s) = %v", round, r.Subnet, r.Epoch, r.DecidedBy, got)
			}
		}
		if !reflect.DeepEqual(statsOf(t, ref), statsOf(t, fol)) {
			t.Fatalf("round %d: statistics learned from records differ from the decider's own", round)
		}
	}
	// the decider's own records are already learned
	if ref.(Learner).Learn(recs[len(recs)-1]) {
		t.Fatal("the decider learned its own record twice")
	}
	foreign := recs[len(recs)-1]
	foreign.Snapshot[0] ^= 1
	foreign.Epoch += 7
	if learner.Learn(foreign) {
		t.Fatal("learned a record of another snapshot")
	}

	// same statistics, same directory, same random stream → same decisions
	ref.(learningEngine).d.Rand = rand.New(rand.NewPCG(9, 9))
	fol.(learningEngine).d.Rand = rand.New(rand.NewPCG(9, 9))
	same := 0
	for _, h := range w.hosts[train:] {
		a, err := ref.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		b, err := fol.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if a.Owner != b.Owner || a.Probes != b.Probes || a.Reason != b.Reason || a.Cached != b.Cached {
			t.Fatalf("host %v: decider %v, follower %v", h, a, b)
		}
		same++
	}
	t.Logf("%d records learned; %d further decisions identical", len(recs), same)
}

// TestLearnersConverge: three engines over one directory, each deciding a
// third of the hosts and hearing every other's records, end with identical
// statistics, and match one engine deciding everything in accuracy.
func TestLearnersConverge(t *testing.T) {
	ctx := context.Background()
	w := newSynthWorld(t, 6, 12, 300)
	members := NewMemMembership(w.crawlers...)
	dir := NewMemDirectory(w.tree, members)
	var pols []Policy
	for i := range 3 {
		pols = append(pols, NewMicra(synthDeps(w, dir, members, uint64(i)), Config{Self: CrawlerID(rune('a' + i))}))
	}
	broadcast := func(from int, r Record) {
		for j, p := range pols {
			if j != from {
				p.(Learner).Learn(r)
			}
		}
	}
	for i, c := range w.crawlers {
		d, err := pols[i%3].Join(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		broadcast(i%3, d.Record)
	}
	for i, h := range w.hosts {
		d, err := pols[i%3].Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !d.Cached && d.Record.Owner != "" {
			broadcast(i%3, d.Record)
		}
	}
	for i := 1; i < 3; i++ {
		if !reflect.DeepEqual(statsOf(t, pols[0]), statsOf(t, pols[i])) {
			t.Fatalf("engine %d learned differently from engine 0", i)
		}
	}
}

// TestLearnOnlyKnownCrawlers: a record decided elsewhere that names
// crawlers this peer's membership never listed teaches nothing about them
// (each would cost state in every context, for good: records of made-up
// crawlers grew a learner without bound); the answers of known crawlers in
// the same record are learned.
func TestLearnOnlyKnownCrawlers(t *testing.T) {
	w := newSynthWorld(t, 5, 12, 240)
	members := NewMemMembership(w.crawlers...)
	p := NewMicra(synthDeps(w, NewMemDirectory(w.tree, members), members, 1), Config{Self: "me"})
	for _, c := range w.crawlers {
		p.Join(context.Background(), c)
	}
	m := p.(learningEngine).ch.(*micraChooser)
	host := w.hosts[0]
	s := w.tree.SmallestNonUnary(host)
	rec := Record{Subnet: s, Snapshot: w.tree.ID(), Owner: w.crawlers[0].ID, OwnerRTT: 20 * time.Millisecond, Epoch: 1, DecidedBy: "someone-else",
		Probes: []ProbeResult{{Crawler: w.crawlers[0].ID, RTT: 20 * time.Millisecond, OK: true}}}
	for i := range 63 {
		rec.Probes = append(rec.Probes, ProbeResult{Crawler: CrawlerID(fmt.Sprintf("made-up-%02d", i)), RTT: time.Duration(30+i) * time.Millisecond, OK: true})
	}
	probes := slices.Clone(rec.Probes)
	if !p.(Learner).Learn(rec) {
		t.Fatal("record not learned")
	}
	if got := len(m.crawler.ids); got != len(w.crawlers) {
		t.Fatalf("after a record of 63 made-up crawlers the crawler index holds %d, want the %d members", got, len(w.crawlers))
	}
	if !slices.Equal(rec.Probes, probes) {
		t.Fatal("Learn changed the caller's record")
	}
	ci := m.crawler.idx[w.crawlers[0].ID]
	info := m.scopes[mkScope(scopeNode, uint32(s))]
	if info == nil || info.stat(ci) == nil || info.stat(ci).n != 1 {
		t.Fatalf("the known crawler's answer was not learned in the subnet's context: %+v", info)
	}
}
