package delegation

// Corner cases of MicraConfig.MaxContexts found by review: each test
// failed before its fix.

import (
	"context"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// boundWorld is a hand-built tree for the bound's corner cases:
//
//	10.0.0.0/8 > 10.1.0.0/16 (org P) > 10.1.1.0/24 (org S: the subnet s)
//	                                  > 10.1.2.0/24 (org C: where crawler cC sits)
//	20.0.0.0/8 > 20.k.0.0/16 (org Fk) > 20.k.1.0/24 (org Gk)   fillers, k = 1..60
//	30.0.0.0/8 > 30.j.0.0/16 (org Hj) > 30.j.1.0/24, 30.j.2.0/24, 30.j.3.0/24   crawler homes
//	40.0.0.0/8 > 40.k.0.0/16 (org Qk) > 40.k.1.0/24 (org Rk)   fresh homes for late crawlers
type boundWorld struct {
	tree    *hierarchy.Tree
	members *MemMembership
	dir     *MemDirectory
	failS   bool // probes of 10.1.1.0/24 hosts fail (an unreachable host)
	p       Policy
	m       *micraChooser
	e       *engine
}

func newBoundWorld(t *testing.T, bound int, mc MicraConfig) *boundWorld {
	t.Helper()
	rs := []hierarchy.Range{
		pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "P", "DE"),
		pfx(t, "10.1.1.0/24", "S", "DE"), pfx(t, "10.1.2.0/24", "C", "DE"),
		pfx(t, "20.0.0.0/8", "B", "DE"), pfx(t, "30.0.0.0/8", "H", "DE"), pfx(t, "40.0.0.0/8", "Q", "DE"),
	}
	for k := 1; k <= 60; k++ {
		rs = append(rs, pfx(t, fmt.Sprintf("20.%d.0.0/16", k), fmt.Sprintf("F%d", k), "DE"),
			pfx(t, fmt.Sprintf("20.%d.1.0/24", k), fmt.Sprintf("G%d", k), "DE"),
			pfx(t, fmt.Sprintf("40.%d.0.0/16", k), fmt.Sprintf("Q%d", k), "DE"),
			pfx(t, fmt.Sprintf("40.%d.1.0/24", k), fmt.Sprintf("R%d", k), "DE"))
	}
	for j := 1; j <= 4; j++ {
		rs = append(rs, pfx(t, fmt.Sprintf("30.%d.0.0/16", j), fmt.Sprintf("H%d", j), "DE"))
		for q := 1; q <= 3; q++ {
			rs = append(rs, pfx(t, fmt.Sprintf("30.%d.%d.0/24", j, q), fmt.Sprintf("H%d-%d", j, q), "DE"))
		}
	}
	w := &boundWorld{tree: mustBuild(t, rs...), members: NewMemMembership()}
	w.dir = NewMemDirectory(w.tree, w.members)
	pr := &tableProber{rtt: func(c CrawlerID, a netip.Addr) (time.Duration, bool) {
		b := a.As4()
		if w.failS && b[0] == 10 && b[1] == 1 && b[2] == 1 {
			return 0, false
		}
		// a stable, crawler- and /16-dependent latency
		h := mix64(hashString(string(c)) ^ uint64(b[0])<<8 ^ uint64(b[1]))
		return time.Duration(5+h%80) * time.Millisecond, true
	}}
	deps := Deps{Tree: w.tree, Dir: w.dir, Prober: pr, Members: w.members,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(1, 7))}
	mc.MaxContexts = bound
	w.p = NewMicra(deps, Config{Micra: mc})
	w.e = w.p.(learningEngine).engine
	w.m = w.e.ch.(*micraChooser)
	return w
}

func (w *boundWorld) join(t *testing.T, id, addr string) {
	t.Helper()
	c := Crawler{ID: CrawlerID(id), Addr: ip(addr)}
	w.members.Add(c)
	if _, err := w.p.Join(context.Background(), c); err != nil {
		t.Fatal(err)
	}
}

func (w *boundWorld) delegate(t *testing.T, host string) Decision {
	t.Helper()
	d, err := w.p.Delegate(context.Background(), ip(host))
	if err != nil {
		t.Fatal(err)
	}
	return d
}

func (w *boundWorld) node(a string) hierarchy.NodeID { return w.tree.SmallestNonUnary(ip(a)) }

// cacheStale reports the first slot of subnetScopes' cache whose record
// is no longer the map's record of that key ("" when the cache is sound).
func cacheStale(m *micraChooser) string {
	if !m.scopeOK {
		return ""
	}
	for i, c := range m.scopeRecs {
		if c != nil && m.scopes[m.scopeKs[i]] != c {
			return fmt.Sprintf("slot %d (key %#x) holds a record now keyed %#x (in the map: %v)", i, m.scopeKs[i], c.key, m.scopes[c.key] == c)
		}
	}
	return ""
}

// A record subnetScopeStats(false) fills into the cache is not stamped with the
// current tick, so forget (run by locate from Learn, between two policy
// calls) may recycle it while subnetScopes' cache still holds it; the
// next call on the same subnet then reads and writes the statistics of
// another context.
func TestMaxContextsCachedContextNotRecycled(t *testing.T) {
	w := newBoundWorld(t, 1, MicraConfig{})
	w.join(t, "c1", "30.1.1.5")
	w.join(t, "c2", "30.2.1.5")
	s := w.node("10.1.1.10")
	aKey := mkScope(scopeNode, uint32(w.tree.Parent(s))) // 10.1.0.0/16

	// 1. s is decided and learned: its contexts exist
	w.delegate(t, "10.1.1.10")
	if w.m.scopes[aKey] == nil {
		t.Fatal("setup: 10.1/16 has no context after a decision under it")
	}
	// 2. fillers: s's contexts, idle, are forgotten (bound 1)
	var last Decision
	for k := 1; k <= 10; k++ {
		last = w.delegate(t, fmt.Sprintf("20.%d.1.10", k))
	}
	if w.m.scopes[aKey] != nil {
		t.Fatal("setup: 10.1/16's context not forgotten")
	}
	// 3. a decision on s that learns nothing (every probe fails): the
	// cache is s's, with no record for 10.1/16
	w.failS = true
	if d, err := w.p.Redelegate(context.Background(), ip("10.1.1.20")); err != nil || d.Reason != ReasonNoAnswer {
		t.Fatalf("setup: redelegation %v %v, want no answer", d.Reason, err)
	}
	// 4. crawler cC joins under 10.1/16; a record offered again (already
	// learned) makes locate create 10.1/16's context, outside the cache
	w.members.Add(Crawler{ID: "cC", Addr: ip("10.1.2.5")})
	if w.p.(Learner).Learn(last.Record) {
		t.Fatal("setup: the last record was learned twice")
	}
	if w.m.scopes[aKey] == nil {
		t.Fatal("setup: locate did not create 10.1/16's context")
	}
	// 5. another decision on s that learns nothing: subnetScopeStats(false)
	// puts 10.1/16's record into the cache with its old stamp
	if d, err := w.p.Redelegate(context.Background(), ip("10.1.1.21")); err != nil || d.Reason != ReasonNoAnswer {
		t.Fatalf("setup: redelegation %v %v, want no answer", d.Reason, err)
	}
	for i, c := range w.m.scopeRecs {
		if c != nil && c.used < w.m.tick {
			t.Logf("after a decision on s: cached context %#x carries stamp %d, tick %d (forget may take it)", w.m.scopeKs[i], c.used, w.m.tick)
		}
	}
	// 6. cC leaves, late crawlers join in fresh subnets: a record offered
	// again runs locate, whose new contexts make forget run
	w.members.Remove("cC")
	for k := 1; k <= 4; k++ {
		w.members.Add(Crawler{ID: CrawlerID(fmt.Sprintf("d%d", k)), Addr: ip(fmt.Sprintf("40.%d.1.5", k))})
	}
	w.p.(Learner).Learn(last.Record)
	if msg := cacheStale(w.m); msg != "" {
		t.Errorf("after Learn: subnetScopes' cache of s keeps a forgotten record: %s", msg)
	}
	// 7. s is decided again and learned: the statistics go wherever the
	// stale slot points
	w.failS = false
	if _, err := w.p.Redelegate(context.Background(), ip("10.1.1.22")); err != nil {
		t.Fatal(err)
	}
	if c := w.m.scopes[aKey]; c == nil || len(c.st) == 0 {
		t.Errorf("s decided and learned, but its ancestor 10.1/16 has no statistics (record %v)", c)
	}
	if msg := cacheStale(w.m); msg != "" {
		c := w.m.scopeRecs[slices.Index(w.m.scopeKs, aKey)]
		t.Errorf("after the decision: %s; that record now holds %d crawlers' statistics, %v wins", msg, len(c.st), c.winTotal)
	}
}

// locate clears every located list, then creates the contexts of new
// crawlers: forget, run by that creation, sees the contexts where
// still-live crawlers sit as unlocated and may forget them (they are then
// re-created empty), against "contexts where live crawlers sit are kept".
func TestMaxContextsLocateKeepsCrawlerHomes(t *testing.T) {
	w := newBoundWorld(t, 4, MicraConfig{})
	w.join(t, "c5", "30.1.1.5")
	w.join(t, "c6", "30.2.1.5")
	home := mkScope(scopeNode, uint32(w.tree.Parent(w.node("30.1.1.5")))) // 30.1/16, where c5 sits
	// decisions under 30.1/16 (not c5's own subnet) teach its context
	w.delegate(t, "30.1.2.10")
	w.delegate(t, "30.1.3.10")
	c := w.m.scopes[home]
	if c == nil || len(c.st) == 0 {
		t.Fatal("setup: c5's 30.1/16 context learned nothing")
	}
	var last Decision
	for k := 1; k <= 20; k++ {
		last = w.delegate(t, fmt.Sprintf("20.%d.1.10", k))
		if w.m.scopes[home] == nil || len(w.m.scopes[home].st) == 0 {
			t.Fatalf("filler %d: the context where c5 sits was forgotten by a decision", k)
		}
	}
	n := len(w.m.scopes[home].st)
	// a crawler whose name sorts before c5 joins in a fresh subnet
	w.members.Add(Crawler{ID: "a0", Addr: ip("40.1.1.5")})
	w.p.(Learner).Learn(last.Record) // (already learned: only locate runs)
	got := w.m.scopes[home]
	if got == nil || len(got.st) != n {
		l := -1
		if got != nil {
			l = len(got.st)
		}
		t.Errorf("c5 is live throughout, yet its 30.1/16 context lost its statistics when a0 joined: %d crawlers' statistics before, %d after (forgotten so far %d)", n, l, w.m.forgotten)
	}
}

// The engine forgets dedup sets by how recently a record of the subnet was
// offered; micra keeps contexts by how recently they were read. A subnet
// whose contexts stay in use (reviews) but whose records stop arriving for
// a while loses its dedup set only: the same record offered again (gossip,
// a DHT read) is folded a second time into contexts that still hold it.
func TestMaxContextsDedupFollowsContexts(t *testing.T) {
	const bound = 16
	w := newBoundWorld(t, bound, MicraConfig{ReviewEvery: -1}) // every host of s is reviewed
	w.join(t, "c1", "30.1.1.5")
	w.join(t, "c2", "30.2.1.5")
	w.join(t, "c3", "30.3.1.5")
	d := w.delegate(t, "10.1.1.10")
	rec := d.Record
	s := w.node("10.1.1.10")
	sKey := mkScope(scopeNode, uint32(s))
	owner := w.m.crawler.id(rec.Owner)
	// other peers' records of other subnets arrive; s's hosts keep coming
	// and are reviewed (its contexts are read every time)
	for k := 1; k <= 3*bound; k++ {
		r := Record{Subnet: w.node(fmt.Sprintf("40.%d.1.10", k)), Snapshot: w.tree.ID(), Owner: "c2", OwnerRTT: 20 * time.Millisecond,
			Probes: []ProbeResult{{Crawler: "c2", RTT: 20 * time.Millisecond, OK: true}, {Crawler: "c3", RTT: 30 * time.Millisecond, OK: true}},
			Epoch:  1, DecidedBy: "peer-x"}
		if !w.p.(Learner).Learn(r) {
			t.Fatalf("record %d not learned", k)
		}
		// (1 ms: the owner stays, no block moves)
		if _, err := w.p.(Reviewer).Review(context.Background(), ip(fmt.Sprintf("10.1.1.%d", 20+k)), rec.Owner, time.Millisecond); err != nil {
			t.Fatal(err)
		}
		if w.m.scopes[sKey] == nil {
			t.Fatalf("step %d: s's context forgotten although reviewed at every step", k)
		}
	}
	if got, _, _ := w.dir.Lookup(context.Background(), s); got.Epoch != rec.Epoch {
		t.Fatalf("setup: s's record changed (epoch %d)", got.Epoch)
	}
	// the very record that decided s is offered again
	n0 := w.m.scopes[sKey].stat(owner).n
	again := w.p.(Learner).Learn(rec)
	n1 := w.m.scopes[sKey].stat(owner).n
	if again || n1 != n0 {
		t.Errorf("a record already learned, of a subnet whose contexts are in use, was learned again: Learn=%v, owner's observations in s %v -> %v", again, n0, n1)
	}
}

// At the default bound, passing it forgets about a quarter of the
// contexts (the least recently read), and contexts read at the current tick
// are never forgotten, even when nothing else could be.
func TestMaxContextsForgetAtDefaultBound(t *testing.T) {
	if testing.Short() {
		t.Skip("builds the default bound's contexts")
	}
	m := &micraChooser{cfg: MicraConfig{}.withDefaults(), scopes: make(map[scopeKey]*scopeStats)}
	bound := m.cfg.MaxContexts
	for i := range bound {
		if i%2 == 0 {
			m.tick++
		}
		m.scopeOf(mkScope(scopeNode, uint32(i+1)), 8)
	}
	m.tick++
	m.scopeOf(mkScope(scopeNode, uint32(bound+1)), 8) // passes the bound: forget
	if m.forgotten < uint64(bound/5) || m.forgotten > uint64(bound/3) {
		t.Errorf("forgot %d of %d: want about a quarter", m.forgotten, bound)
	}
	if m.scopes[mkScope(scopeNode, 1)] != nil || m.scopes[mkScope(scopeNode, uint32(bound))] == nil {
		t.Error("forget did not take the least recently read contexts")
	}
	// every context read at the current tick: nothing may go
	for _, c := range m.scopes {
		c.used = m.tick
	}
	for i := 0; m.forgettable < bound; i++ {
		m.scopeOf(mkScope(scopeOrg, uint32(i+1)), kindOrg)
	}
	f0 := m.forgotten
	for i := range 50 {
		m.scopeOf(mkScope(scopeNode, uint32(2*bound+i)), 8)
	}
	if m.forgotten != f0 {
		t.Fatalf("forgot %d contexts read at the current tick", m.forgotten-f0)
	}
}
