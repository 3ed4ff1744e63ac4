package delegation

// Review tests for the decision-path optimisations (612ec69..34c2704): the
// caches and reused buffers they introduced were verified on the simulator,
// where membership is static. These tests exercise what the overlay does and
// the simulator does not: crawlers joining late, dying, reviving and moving,
// more than 64 crawler indexes, records learned from other deciders, and
// callers keeping what a decision returned.

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"sort"
	"testing"

	"github.com/micra-crawler/micra/hierarchy"
)

// reusingProber returns every answer in one slice it overwrites on the next
// call, as the simulator's prober does: anything the engine keeps from it
// without copying changes under the caller.
type reusingProber struct {
	inner Prober
	out   []ProbeResult
}

func (p *reusingProber) Probe(ctx context.Context, target netip.Addr, cs []CrawlerID) []ProbeResult {
	res := p.inner.Probe(ctx, target, cs)
	p.out = append(p.out[:0], res...)
	return p.out
}

func cloneDecision(d Decision) Decision {
	c := d
	c.Steps = slices.Clone(d.Steps)
	for i := range c.Steps {
		c.Steps[i].Probes = slices.Clone(d.Steps[i].Probes)
	}
	c.Record.Probes = slices.Clone(d.Record.Probes)
	c.Moved = slices.Clone(d.Moved)
	for i := range c.Moved {
		c.Moved[i].Probes = slices.Clone(d.Moved[i].Probes)
	}
	return c
}

// TestReviewDecisionsImmutable: a decision's Steps, their Probes, its Record
// (and the Probes the directory holds) and Moved never change after the call
// returns, whatever later decisions do with the policy's reused buffers
// (rank's answer slice, note buffers, the prober's reused answers).
func TestReviewDecisionsImmutable(t *testing.T) {
	w := newSynthWorld(t, 11, 12, 400)
	ctx := context.Background()
	type variant struct {
		mk  func(Deps, Config) Policy
		bal BalanceMode
	}
	for _, v := range []variant{{NewMicra, BalanceOff}, {NewMicra, BalanceRelease}, {NewMicra, BalanceSecondBest}, {NewIPMicra, BalanceOff}, {NewOptimal, BalanceOff}} {
		members := NewMemMembership()
		dir := NewMemDirectory(w.tree, members)
		p := v.mk(Deps{Tree: w.tree, Dir: dir, Prober: &reusingProber{inner: w}, Members: members, Rand: rand.New(rand.NewPCG(3, 3))}, Config{Balance: v.bal, Self: "self"})
		for _, c := range w.crawlers {
			if v.bal != BalanceOff {
				c.Capacity = 25 // 12 × 25 < 400 hosts: balancing moves subnets
			}
			members.Add(c)
			if _, err := p.Join(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		var got, want []Decision
		for i, h := range w.hosts {
			var d Decision
			var err error
			if i%37 == 36 {
				d, err = p.Redelegate(ctx, h)
			} else {
				d, err = p.Delegate(ctx, h)
			}
			if err != nil {
				t.Fatal(err)
			}
			got, want = append(got, d), append(want, cloneDecision(d))
		}
		probed := 0
		for i := range got {
			if !reflect.DeepEqual(got[i], want[i]) {
				t.Fatalf("%s/%v: decision %d changed after later decisions:\nthen %v\nnow  %v", p.Name(), v.bal, i, want[i], got[i])
			}
			probed += got[i].Probes
		}
		// the directory holds the records the decisions returned, unchanged
		for _, r := range dir.Records() {
			for _, d := range want {
				if d.Record.Subnet == r.Subnet && d.Record.Epoch == r.Epoch && d.Record.DecidedBy == r.DecidedBy && d.Record.Owner == r.Owner {
					if !reflect.DeepEqual(r.Probes, d.Record.Probes) {
						t.Fatalf("%s: stored record of %d has probes %v, decided with %v", p.Name(), r.Subnet, r.Probes, d.Record.Probes)
					}
				}
			}
		}
		if probed == 0 {
			t.Fatalf("%s: no probes: the test exercises nothing", p.Name())
		}
	}
}

// checkMicraIndex checks the context records' invariants: statistics sorted
// by crawler index and unique, the 64-bit mask holding bit ci mod 64 of
// every crawler present, and stat finding exactly the crawlers present.
func checkMicraIndex(t *testing.T, m *micraChooser) {
	t.Helper()
	n := uint32(len(m.crawler.ids))
	for k, c := range m.scopes {
		var mask uint64
		present := map[uint32]bool{}
		for i, st := range c.st {
			if i > 0 && c.st[i-1].ci >= st.ci {
				t.Fatalf("context %x: statistics not sorted/unique at %d", k, i)
			}
			mask |= 1 << (st.ci & 63)
			present[st.ci] = true
			if got := c.stat(st.ci); got != &c.st[i] {
				t.Fatalf("context %x: stat(%d) = %p, want %p", k, st.ci, got, &c.st[i])
			}
		}
		if c.has != mask {
			t.Fatalf("context %x: mask %x, statistics give %x", k, c.has, mask)
		}
		for ci := range n + 3 {
			if !present[ci] && c.stat(ci) != nil {
				t.Fatalf("context %x: stat(%d) found a crawler never measured there", k, ci)
			}
		}
	}
}

// TestReviewManyCrawlersMasks: with 70 crawlers the indexes pass 64 (the
// context mask wraps, pairs leave the dense table): every statistic is still
// found, no absent one is, and crawlers beyond index 63 take part.
func TestReviewManyCrawlersMasks(t *testing.T) {
	w := newSynthWorld(t, 12, 70, 700)
	members := NewMemMembership(w.crawlers...)
	dir := NewMemDirectory(w.tree, members)
	p := NewMicra(Deps{Tree: w.tree, Dir: dir, Prober: &reusingProber{inner: w}, Members: members, Rand: rand.New(rand.NewPCG(4, 4))}, Config{})
	ctx := context.Background()
	for _, c := range w.crawlers {
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	m := p.(learningEngine).ch.(*micraChooser)
	highOwner, highProbed := 0, 0
	for i, h := range w.hosts {
		d, err := p.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if m.crawler.idx[d.Owner] >= 64 {
			highOwner++
		}
		for _, s := range d.Steps {
			for _, r := range s.Probes {
				if m.crawler.idx[r.Crawler] >= 64 {
					highProbed++
				}
			}
		}
		if i%100 == 99 {
			checkMicraIndex(t, m)
		}
	}
	checkMicraIndex(t, m)
	if len(m.crawler.ids) < 70 || highOwner == 0 || highProbed == 0 {
		t.Fatalf("%d crawler indexes; %d owners and %d probes beyond index 63: the test exercises nothing", len(m.crawler.ids), highOwner, highProbed)
	}
	// pairs beyond the dense table are kept and read like the others
	high := 0
	for a, row := range m.pairs.rows {
		for _, sl := range row.slots {
			if sl.b == 0 {
				continue
			}
			b := sl.b - 1
			if a < denseN && b < denseN {
				t.Fatalf("pair (%d,%d) in the rows, belongs to the dense table", a, b)
			}
			if got := m.pairs.slot(uint32(a), b); got == nil || *got != sl {
				t.Fatalf("pair (%d,%d) not found", a, b)
			}
			high++
		}
	}
	if high == 0 {
		t.Fatal("no pair beyond index 63 learned")
	}
	t.Logf("%d owners, %d probes beyond index 63; %d pairs in the map", highOwner, highProbed, high)
}

// checkLocated checks what locate derived from the membership: located
// (and sits, sorted) of every context lists exactly the live crawlers
// sitting there, and liveCi says exactly who is live.
func checkLocated(t *testing.T, m *micraChooser, tree Tree, members *MemMembership) {
	t.Helper()
	want := map[scopeKey][]uint32{}
	for _, c := range members.Live() {
		s := tree.SmallestNonUnary(c.Addr)
		if s == hierarchy.None || s == hierarchy.Root {
			continue
		}
		ci, ok := m.crawler.idx[c.ID]
		if !ok {
			t.Fatalf("live crawler %s has no index", c.ID)
		}
		ks, _, _ := scopesOf(tree, s, nil, nil)
		for _, k := range ks[:len(ks)-1] {
			want[k] = append(want[k], ci)
		}
	}
	for k, c := range m.scopes {
		got := slices.Clone(c.located)
		slices.Sort(got)
		exp := want[k]
		slices.Sort(exp)
		if !slices.Equal(got, exp) {
			t.Fatalf("context %x: located %v, live crawlers sitting there %v", k, got, exp)
		}
		if !slices.Equal(c.sits, exp) {
			t.Fatalf("context %x: sits %v, want %v", k, c.sits, exp)
		}
	}
	for k := range want {
		if m.scopes[k] == nil {
			t.Fatalf("context %x of a live crawler has no record", k)
		}
	}
	for ci, id := range m.crawler.ids {
		live := ci < len(m.liveCi) && m.liveCi[ci]
		if live != members.IsLive(id) {
			t.Fatalf("liveCi[%d] (%s) = %v, membership says %v", ci, id, live, members.IsLive(id))
		}
	}
}

// canonStats is what a micra policy has learned, keyed by crawler ID (two
// policies may number crawlers differently) and without empty contexts.
type canonStats struct {
	Ctx       map[scopeKey]canonCtx
	GlobalSum float64
	GlobalN   int
	Pooled    [scopeKinds]struct{ m2, dof float64 }
	Geo       geoSums
	Pairs     map[[2]CrawlerID][2][]float32
	Pos       map[CrawlerID]crawlerPos
}

type canonCtx struct {
	Kind     int
	St       map[CrawlerID]crawlerStat
	Top      []string
	WinTotal float64
	Located  []CrawlerID
}

func canonOf(t *testing.T, p Policy) canonStats {
	t.Helper()
	m := p.(learningEngine).ch.(*micraChooser)
	ids := m.crawler.ids
	out := canonStats{Ctx: map[scopeKey]canonCtx{}, GlobalSum: m.globalSum, GlobalN: m.globalN, Pooled: m.pooled, Geo: m.geo,
		Pairs: map[[2]CrawlerID][2][]float32{}, Pos: map[CrawlerID]crawlerPos{}}
	for k, c := range m.scopes {
		if len(c.st) == 0 && len(c.located) == 0 && c.winTotal == 0 {
			continue
		}
		cc := canonCtx{Kind: c.kind, St: map[CrawlerID]crawlerStat{}, WinTotal: c.winTotal}
		for _, st := range c.st {
			s := st
			s.ci = 0
			cc.St[ids[st.ci]] = s
		}
		for _, te := range c.top {
			cc.Top = append(cc.Top, fmt.Sprintf("%s=%v", ids[te.ci], te.mean))
		}
		for _, ci := range c.located {
			cc.Located = append(cc.Located, ids[ci])
		}
		slices.Sort(cc.Located)
		out.Ctx[k] = cc
	}
	add := func(a, b uint32, ss []pairSample) {
		if len(ss) > 0 {
			var xs, ys []float32
			for _, sm := range ss {
				xs, ys = append(xs, sm.x), append(ys, sm.y)
			}
			out.Pairs[[2]CrawlerID{ids[a], ids[b]}] = [2][]float32{xs, ys}
		}
	}
	eachPair(m.pairs, add)
	for ci, ps := range m.pos {
		if ps.ok {
			out.Pos[ids[ci]] = ps
		}
	}
	return out
}

// diffCanon names the first difference between two canonical statistics.
func diffCanon(a, b canonStats) string {
	if a.GlobalSum != b.GlobalSum || a.GlobalN != b.GlobalN {
		return fmt.Sprintf("global mean sum %v/%d vs %v/%d", a.GlobalSum, a.GlobalN, b.GlobalSum, b.GlobalN)
	}
	if a.Pooled != b.Pooled {
		return "pooled spreads differ"
	}
	if a.Geo != b.Geo {
		return fmt.Sprintf("distance prior sums %+v vs %+v", a.Geo, b.Geo)
	}
	if !reflect.DeepEqual(a.Pos, b.Pos) {
		return fmt.Sprintf("positions %v vs %v", a.Pos, b.Pos)
	}
	for k, ca := range a.Ctx {
		cb, ok := b.Ctx[k]
		if !ok {
			return fmt.Sprintf("context %x only in the first", k)
		}
		if !reflect.DeepEqual(ca, cb) {
			return fmt.Sprintf("context %x: %+v vs %+v", k, ca, cb)
		}
	}
	if len(a.Ctx) != len(b.Ctx) {
		return fmt.Sprintf("%d vs %d contexts", len(a.Ctx), len(b.Ctx))
	}
	if !reflect.DeepEqual(a.Pairs, b.Pairs) {
		return fmt.Sprintf("pair samples differ (%d vs %d pairs)", len(a.Pairs), len(b.Pairs))
	}
	return ""
}

// TestReviewChurnLearnerEquality: crawlers state positions, join late, die,
// revive and move while a decider works and a follower (same membership)
// learns every record it publishes. After every phase the derived
// membership structures (located, sits, liveCi) match the membership, no
// decision names or probes a dead crawler, and decider and follower hold the
// same statistics, distance prior included.
func TestReviewChurnLearnerEquality(t *testing.T) {
	w := newSynthWorld(t, 13, 18, 900)
	ctx := context.Background()
	crawlers := slices.Clone(w.crawlers)
	for i := range crawlers {
		l := w.addrLoc(crawlers[i].Addr)
		crawlers[i].Lat, crawlers[i].Lon, crawlers[i].HasPos = l[0], l[1], true
	}
	members := NewMemMembership()
	refDir, folDir := NewMemDirectory(w.tree, members), NewMemDirectory(w.tree, members)
	ref := NewMicra(synthDeps(w, refDir, members, 1), Config{Self: "ref", Micra: MicraConfig{GeoAfter: 10}})
	fol := NewMicra(synthDeps(w, folDir, members, 2), Config{Self: "fol", Micra: MicraConfig{GeoAfter: 10}})
	rm := ref.(learningEngine).ch.(*micraChooser)
	fm := fol.(learningEngine).ch.(*micraChooser)
	var last Record
	tell := func(d Decision) {
		if d.Record.Owner == "" {
			return
		}
		if _, err := folDir.Publish(ctx, d.Record); err != nil {
			t.Fatal(err)
		}
		fol.(Learner).Learn(d.Record)
		last = d.Record
	}
	join := func(c Crawler) {
		members.Add(c)
		d, err := ref.Join(ctx, c)
		if err != nil {
			t.Fatal(err)
		}
		tell(d)
	}
	next := 0
	decide := func(n int) {
		for range n {
			h := w.hosts[next%len(w.hosts)]
			next++
			var d Decision
			var err error
			if next%41 == 0 {
				d, err = ref.Redelegate(ctx, h)
			} else {
				d, err = ref.Delegate(ctx, h)
			}
			if err != nil {
				t.Fatal(err)
			}
			if !members.IsLive(d.Owner) {
				t.Fatalf("owner %s is dead: %v", d.Owner, d)
			}
			for _, s := range d.Steps {
				for _, r := range s.Probes {
					if !members.IsLive(r.Crawler) {
						t.Fatalf("probed dead %s: %v", r.Crawler, d)
					}
				}
			}
			if !d.Cached {
				tell(d)
			}
		}
	}
	check := func(phase string) {
		t.Helper()
		// a learned record again: both run locate, neither learns anything
		if ref.(Learner).Learn(last) || fol.(Learner).Learn(last) {
			t.Fatalf("%s: a record learned twice", phase)
		}
		checkLocated(t, rm, w.tree, members)
		checkLocated(t, fm, w.tree, members)
		checkMicraIndex(t, rm)
		if diff := diffCanon(canonOf(t, ref), canonOf(t, fol)); diff != "" {
			t.Fatalf("%s: follower's statistics differ from the decider's: %s", phase, diff)
		}
	}
	for _, c := range crawlers[:10] {
		join(c)
	}
	decide(250)
	check("start")
	if rm.geo.n < 10 {
		t.Fatalf("distance prior has %v observations: positions unused", rm.geo.n)
	}
	for _, c := range crawlers[10:] { // late joiners
		join(c)
	}
	decide(150)
	check("late joiners")
	dead := []CrawlerID{crawlers[2].ID, crawlers[11].ID, crawlers[15].ID}
	for _, id := range dead {
		members.Remove(id)
	}
	decide(150)
	check("deaths")
	members.Add(crawlers[2]) // revives without joining again
	members.Add(crawlers[11])
	decide(150)
	check("revivals")
	// two crawlers move (a volunteer restarts elsewhere, same identity)
	for _, i := range []int{0, 12} {
		c := crawlers[i]
		c.Lat, c.Lon = -c.Lat, math.Mod(c.Lon+180, 360)-180
		members.Add(c)
	}
	decide(200)
	check("moves")
	for _, i := range []int{0, 12} {
		ci := rm.crawler.idx[crawlers[i].ID]
		if p := rm.pos[ci]; p.lat != -crawlers[i].Lat {
			t.Fatalf("%s moved, position still %+v", crawlers[i].ID, p)
		}
	}
}

// TestReviewPositionChangeUpdatesDistance: the distance features cached per
// country follow a crawler's new stated position, for every country cached
// before the move, whether the move is noticed by a decision or by learning
// a record decided elsewhere.
func TestReviewPositionChangeUpdatesDistance(t *testing.T) {
	ctx := context.Background()
	for _, viaLearn := range []bool{false, true} {
		w := newSmallWorld(t)
		p := NewMicra(w.deps(1), Config{})
		cs := slices.Clone(smallCrawlers)
		for i := range cs {
			cs[i].Lat, cs[i].Lon, cs[i].HasPos = 50, 10, true // all in Germany
		}
		w.join(t, p, cs...)
		m := p.(learningEngine).ch.(*micraChooser)
		rec := Record{}
		for _, h := range []string{"10.1.2.7", "20.2.0.1"} { // locate, then cache DE and US rows
			d, err := p.Delegate(ctx, ip(h))
			if err != nil {
				t.Fatal(err)
			}
			rec = d.Record
		}
		c3 := m.crawler.idx["c3"]
		for _, cc := range []string{"DE", "US", "FR"} {
			if _, ok := m.geoX(cc, c3); !ok {
				t.Fatalf("no distance feature for %s", cc)
			}
		}
		moved := cs[2]
		moved.Lat, moved.Lon = 40.7, -74 // c3 restarts in New York
		w.members.Add(moved)
		if viaLearn {
			other := rec
			other.DecidedBy, other.Epoch = "someone-else", rec.Epoch+1
			if !p.(Learner).Learn(other) {
				t.Fatal("record not learned")
			}
		} else if _, err := p.Delegate(ctx, ip("10.2.2.9")); err != nil {
			t.Fatal(err)
		}
		for _, cc := range []string{"DE", "US", "FR"} {
			c := countryCentroids[cc]
			want := math.Log(greatCircleKm(c[0], c[1], moved.Lat, moved.Lon) + geoKm0)
			if got, ok := m.geoX(cc, c3); !ok || got != want {
				t.Fatalf("learn=%v: %s distance feature of moved c3 = %v (%v), want %v", viaLearn, cc, got, ok, want)
			}
		}
	}
}

// TestReviewMemDirectoryHolders: random publishes, owner changes and
// deletes (pending holder changes applied lazily) against a recomputation
// from the records: every holder query answers the current holders, Lookup
// and Get always see the latest record, and a slice handed out earlier never
// changes afterwards. The last round passes maxPending changes unqueried.
func TestReviewMemDirectoryHolders(t *testing.T) {
	tr := newSmallWorld(t).tree
	members := NewMemMembership()
	for i := range 6 {
		members.Add(Crawler{ID: CrawlerID(fmt.Sprintf("h%d", i))})
	}
	dir := NewMemDirectory(tr, members)
	ctx := context.Background()
	rng := rand.New(rand.NewPCG(7, 7))
	var subnets []hierarchy.NodeID
	for id := hierarchy.NodeID(1); int(id) < tr.Len(); id++ {
		subnets = append(subnets, id)
	}
	want := func() (map[hierarchy.NodeID][]CrawlerID, map[hierarchy.OrgID][]CrawlerID) {
		under, org := map[hierarchy.NodeID][]CrawlerID{}, map[hierarchy.OrgID][]CrawlerID{}
		for _, r := range dir.Records() {
			for a := r.Subnet; a != hierarchy.None; a = tr.Parent(a) {
				if !slices.Contains(under[a], r.Owner) {
					under[a] = append(under[a], r.Owner)
				}
			}
			if o := tr.Node(r.Subnet).Org; o != 0 && !slices.Contains(org[o], r.Owner) {
				org[o] = append(org[o], r.Owner)
			}
		}
		for _, v := range under {
			slices.Sort(v)
		}
		for _, v := range org {
			slices.Sort(v)
		}
		return under, org
	}
	type kept struct{ got, copy []CrawlerID }
	var handed []kept
	epoch := map[hierarchy.NodeID]uint64{}
	latest := map[hierarchy.NodeID]Record{}
	for round, ops := range []int{3000, maxPending + 500} {
		for i := range ops {
			s := subnets[rng.IntN(len(subnets))]
			if rng.IntN(8) == 0 {
				dir.Delete(s)
				delete(latest, s)
				continue
			}
			epoch[s]++
			r := Record{Subnet: s, Owner: CrawlerID(fmt.Sprintf("h%d", rng.IntN(6))), Epoch: epoch[s]}
			if _, err := dir.Publish(ctx, r); err != nil {
				t.Fatal(err)
			}
			latest[s] = r
			if got, ok, _ := dir.Lookup(ctx, s); !ok || got.Owner != r.Owner || got.Epoch != r.Epoch {
				t.Fatalf("lookup after publish: %v %v, want %v", got, ok, r)
			}
			if round == 1 || i%7 != 0 {
				continue
			}
			under, org := want()
			a := subnets[rng.IntN(len(subnets))]
			queryUnder := func() {
				got, _ := dir.HoldersUnder(ctx, a)
				if !slices.Equal(got, under[a]) {
					t.Fatalf("op %d: holders under %d = %v, records say %v", i, a, got, under[a])
				}
				handed = append(handed, kept{got, slices.Clone(got)})
			}
			queryOrg := func() {
				if o := tr.Node(a).Org; o != 0 {
					got, _ := dir.HoldersOfOrg(ctx, o)
					if !slices.Equal(got, org[o]) {
						t.Fatalf("op %d: holders of org %d = %v, records say %v", i, o, got, org[o])
					}
					handed = append(handed, kept{got, slices.Clone(got)})
				}
			}
			// either query may be the first after publishes (pending changes)
			if rng.IntN(2) == 0 {
				queryUnder()
				queryOrg()
			} else {
				queryOrg()
				queryUnder()
			}
		}
		if dir.Len() != len(latest) || len(dir.Records()) != len(latest) {
			t.Fatalf("round %d: %d records (Records: %d), want %d", round, dir.Len(), len(dir.Records()), len(latest))
		}
		under, org := want()
		for _, s := range subnets {
			got, _ := dir.HoldersUnder(ctx, s)
			if !slices.Equal(got, under[s]) {
				t.Fatalf("round %d: holders under %d = %v, records say %v", round, s, got, under[s])
			}
			if o := tr.Node(s).Org; o != 0 {
				got, _ := dir.HoldersOfOrg(ctx, o)
				if !slices.Equal(got, org[o]) {
					t.Fatalf("round %d: holders of org %d = %v, records say %v", round, o, got, org[o])
				}
			}
			r, ok := dir.Get(s)
			if l, had := latest[s]; ok != had || (ok && (r.Owner != l.Owner || r.Epoch != l.Epoch)) {
				t.Fatalf("round %d: Get(%d) = %v %v, want %v %v", round, s, r, ok, l, had)
			}
		}
	}
	for i, k := range handed {
		if !slices.Equal(k.got, k.copy) {
			t.Fatalf("holder slice %d changed after it was handed out: %v, was %v", i, k.got, k.copy)
		}
	}
	if len(handed) < 100 {
		t.Fatalf("only %d holder slices checked", len(handed))
	}
}

// TestReviewPairKernel: the bucketed lowerBound is sort.Search's lower
// bound, and beat's branch-free, taken-apart sums equal the plain kernel
// estimate (up to rounding).
func TestReviewPairKernel(t *testing.T) {
	rng := rand.New(rand.NewPCG(8, 8))
	for n := range 70 {
		xs := make([]float32, n)
		for i := range xs {
			xs[i] = float32(rng.IntN(12)) / 4 // duplicates
		}
		slices.Sort(xs)
		var ps pairSamples
		for _, x := range xs {
			ps.add(x, 0, 1000)
		}
		for _, v := range []float32{-1, 0, 0.25, 1, 1.1, 2.75, 3, 5} {
			want := sort.Search(len(xs), func(i int) bool { return xs[i] >= v })
			if got := ps.lowerBound(v); got != want {
				t.Fatalf("lowerBound(%v, %v) = %d, want %d", xs, v, got, want)
			}
		}
	}
	ci := newCrawlerIndex()
	pm := newPairModel(ci, 128, 0.3, 0.3)
	s := pm.samples(1, 2, true)
	for range 300 {
		s.add(float32(rng.NormFloat64()+3), float32(rng.NormFloat64()*0.5), pm.cap)
	}
	// a second pair whose samples sit on the window's lower edge as a
	// float32 rounds it: below xa − hw, where the plain kernel weighs
	// nothing
	edge := pm.samples(3, 4, true)
	edgeXa := 3.0000001
	lo := float32(edgeXa - 2*pm.bw)
	if float64(lo) >= edgeXa-2*pm.bw {
		t.Fatalf("test setup: float32(%v) = %v does not round below the edge", edgeXa-2*pm.bw, lo)
	}
	for i := range 40 {
		edge.add(lo, float32(i%2), pm.cap)
	}
	if got, w := pm.beat(3, 4, edgeXa, edgeXa+0.5, 0.5); got != 0.5 || w != 0 {
		t.Fatalf("samples below the window's edge count: beat = %v with weight %v, want the prior 0.5 with weight 0", got, w)
	}
	// and where the float32 rounds the edge up, samples on it are inside
	// (x ≥ xa − hw) and weigh a little
	up := pm.samples(5, 6, true)
	upXa := 0.0
	for f := 3.0; upXa == 0; f += 1e-7 {
		if float64(float32(f-2*pm.bw)) > f-2*pm.bw {
			upXa = f
		}
	}
	upLo := float32(upXa - 2*pm.bw)
	for i := range 40 {
		up.add(upLo, float32(i%2), pm.cap)
	}
	d := (float64(upLo) - upXa) / (2 * pm.bw)
	wantW := 40 * (1 - d*d)
	if _, w := pm.beat(5, 6, upXa, upXa+0.5, 0.5); !(wantW > 0) || math.Abs(w-wantW) > 1e-12 { // (n − Σd² cancels: an absolute error)
		t.Fatalf("samples on the window's edge (rounded up): weight %v, want %v", w, wantW)
	}
	for range 200 {
		xa, lnT, prior := rng.NormFloat64()+3, rng.NormFloat64()+3, rng.Float64()
		var hit, w float64
		hw := 2 * pm.bw
		for _, sm := range s.s {
			d := (float64(sm.x) - xa) * (1 / hw)
			if kw := 1 - d*d; kw > 0 {
				w += kw
				if sm.y < float32(lnT-xa) {
					hit += kw
				}
			}
		}
		want := (hit + pm.alpha*prior) / (w + pm.alpha)
		got, gw := pm.beat(1, 2, xa, lnT, prior)
		// beat sums n − Σd² instead of each weight: equal up to rounding
		if math.Abs(got-want) > 1e-12 || math.Abs(gw-w) > 1e-9*(1+w) {
			t.Fatalf("beat(%v, %v, %v) = %v (w %v), plain kernel %v (w %v)", xa, lnT, prior, got, gw, want, w)
		}
	}
}

// racyMembership removes a crawler right after Live() copied the list, as
// the overlay's gossip goroutines may between a policy's Live() and
// Version() reads.
type racyMembership struct {
	*MemMembership
	victim CrawlerID
	done   bool
}

func (m *racyMembership) Live() []Crawler {
	live := slices.Clone(m.MemMembership.Live())
	if !m.done {
		m.done = true
		m.Remove(m.victim)
	}
	return live
}

// TestMembershipChangeDuringLiveIsSeen: a change that lands between Live()
// and Version() must not leave the old live set cached under the new
// version — the next decision sees the crawler gone.
func TestMembershipChangeDuringLiveIsSeen(t *testing.T) {
	ctx := context.Background()
	for _, mk := range []func(Deps, Config) Policy{NewIPMicra, NewMicra} {
		w := newSmallWorld(t)
		for _, c := range smallCrawlers {
			w.members.Add(c)
		}
		rm := &racyMembership{MemMembership: w.members, victim: "c3"}
		deps := w.deps(1)
		deps.Members = rm
		p := mk(deps, Config{})
		// the first decision caches a live set that still holds c3
		if _, err := p.Delegate(ctx, ip("10.1.2.7")); err != nil {
			t.Fatal(err)
		}
		// c3 (6 ms) would be the nearest for 20.1.x; it is dead now
		d, err := p.Delegate(ctx, ip("20.1.3.3"))
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner == "c3" {
			t.Fatalf("%s: the dead c3 got a subnet (stale membership cache): %v", p.Name(), d)
		}
		for _, pr := range d.Record.Probes {
			if pr.Crawler == "c3" {
				t.Fatalf("%s: the dead c3 was probed: %v", p.Name(), d)
			}
		}
	}
}

// TestMicraForgetsWithdrawnPosition: a crawler that restarts without
// stating a position has no distance feature any more, and one whose
// address is outside the hierarchy still has its stated position used.
func TestMicraForgetsWithdrawnPosition(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewMicra(w.deps(1), Config{})
	cs := slices.Clone(smallCrawlers)
	for i := range cs {
		cs[i].Lat, cs[i].Lon, cs[i].HasPos = 50, 10, true
	}
	outside := Crawler{ID: "c4", Addr: netip.MustParseAddr("99.9.9.9"), Lat: 35.7, Lon: 139.7, HasPos: true}
	w.join(t, p, cs...)
	w.members.Add(outside)
	m := p.(learningEngine).ch.(*micraChooser)
	if _, err := p.Delegate(ctx, ip("10.1.2.7")); err != nil {
		t.Fatal(err)
	}
	if _, ok := m.geoX("DE", m.crawler.idx["c4"]); !ok {
		t.Fatal("c4 (address outside the hierarchy) stated a position, but micra has none for it")
	}
	silent := cs[2]
	silent.HasPos, silent.Lat, silent.Lon = false, 0, 0
	w.members.Add(silent) // c3 restarts without a position
	if _, err := p.Delegate(ctx, ip("10.2.2.9")); err != nil {
		t.Fatal(err)
	}
	if x, ok := m.geoX("DE", m.crawler.idx["c3"]); ok {
		t.Fatalf("c3 withdrew its position but still has a distance feature %v", x)
	}
}

// TestMicraNoLiveCrawlers: with nobody live, micra does not panic; the
// engine falls back as it does for every policy.
func TestMicraNoLiveCrawlers(t *testing.T) {
	w := newSmallWorld(t)
	p := NewMicra(w.deps(1), Config{})
	d, err := p.Delegate(context.Background(), ip("10.1.2.7"))
	if d.Owner != "" && err == nil {
		t.Fatalf("no crawler is live, yet %s owns the subnet: %v", d.Owner, d)
	}
}

// eachPair calls f with every pair of p that has samples.
func eachPair(p *pairModel, f func(a, b uint32, ss []pairSample)) {
	for i, s := range p.dense {
		if s != nil {
			f(uint32(i/denseN), uint32(i%denseN), s.s)
		}
	}
	for a, row := range p.rows {
		for _, sl := range row.slots {
			if sl.b != 0 {
				ss, _, _ := p.view(uint32(a), sl.b-1)
				f(uint32(a), sl.b-1, ss)
			}
		}
	}
}

// has tells whether pair (a, b) is known.
func (p *pairModel) has(a, b uint32) bool {
	_, _, ok := p.view(a, b)
	return ok
}
