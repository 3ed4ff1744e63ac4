package delegation

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// reviewWorld is a hand-built world for the Reviewer tests:
//
//	30.0.0.0/8 T (DE)
//	  30.1.0.0/16 S     the reviewed subnet: its first host 30.1.0.1, later
//	                    hosts 30.1.N.1 (N ≥ 1) with other latencies
//	  30.2.0.0/16 U     never delegated
//	40.0.0.0/8 K (DE)   where the crawlers sit
//	  40.1.0.0/16 a, 40.2.0.0/16 b, 40.3.0.0/16 c
type reviewWorld struct {
	tree    *hierarchy.Tree
	members *MemMembership
	dir     *MemDirectory
	loads   *MemLoadBook
	prober  *tableProber
	pol     Policy
	rv      Reviewer
	first   map[CrawlerID]time.Duration // RTTs to S's first host (and to U)
	later   map[CrawlerID]time.Duration // RTTs to S's later hosts
}

var reviewCrawlers = []Crawler{
	{ID: "a", Addr: netip.MustParseAddr("40.1.0.5")},
	{ID: "b", Addr: netip.MustParseAddr("40.2.0.5")},
	{ID: "c", Addr: netip.MustParseAddr("40.3.0.5")},
}

// newReviewWorld builds the world, a micra policy over it (cfg) and joins
// every crawler. dirMembers false gives a directory that takes every owner
// as live (so only the policy's own liveness check sees a dead owner).
// Block delegations are off unless cfg sets BlockMargin: S's later hosts
// sit in other /24s than its first, and these tests are about the tally
// (blocks_test.go tests blocks).
func newReviewWorld(t testing.TB, cfg Config, later map[CrawlerID]time.Duration, dirMembers bool) *reviewWorld {
	t.Helper()
	if cfg.Micra.BlockMargin == 0 {
		cfg.Micra.BlockMargin = -1
	}
	tr := mustBuild(t,
		pfx(t, "30.0.0.0/8", "T", "DE"), pfx(t, "30.1.0.0/16", "S", "DE"), pfx(t, "30.2.0.0/16", "U", "DE"),
		pfx(t, "40.0.0.0/8", "K", "DE"), pfx(t, "40.1.0.0/16", "KA", "DE"), pfx(t, "40.2.0.0/16", "KB", "DE"), pfx(t, "40.3.0.0/16", "KC", "DE"),
	)
	w := &reviewWorld{tree: tr, members: NewMemMembership(), loads: NewMemLoadBook(), later: later,
		first: map[CrawlerID]time.Duration{"a": 5 * time.Millisecond, "b": 20 * time.Millisecond, "c": 150 * time.Millisecond}}
	if dirMembers {
		w.dir = NewMemDirectory(tr, w.members)
	} else {
		w.dir = NewMemDirectory(tr, nil)
	}
	w.prober = &tableProber{rtt: func(c CrawlerID, a netip.Addr) (time.Duration, bool) {
		b := a.As4()
		if b[0] == 30 && b[1] == 1 && b[2] > 0 {
			d, ok := w.later[c]
			return d, ok
		}
		d, ok := w.first[c]
		return d, ok
	}}
	deps := Deps{Tree: tr, Dir: w.dir, Prober: w.prober, Members: w.members, Loads: w.loads,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(5, 7))}
	w.pol = NewMicra(deps, cfg)
	rv, ok := w.pol.(Reviewer)
	if !ok {
		t.Fatal("NewMicra does not implement Reviewer")
	}
	w.rv = rv
	ctx := context.Background()
	for _, c := range reviewCrawlers {
		w.members.Add(c)
		if _, err := w.pol.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	return w
}

// subnetS is the reviewed subnet's node.
func (w *reviewWorld) subnetS(t testing.TB) hierarchy.NodeID {
	t.Helper()
	s := w.tree.SmallestNonUnary(ip("30.1.0.1"))
	if s == hierarchy.None || s == hierarchy.Root || s == w.tree.SmallestNonUnary(ip("30.2.0.1")) {
		t.Fatalf("30.1.0.1 is under node %d: the test tree is not what it says", s)
	}
	return s
}

// delegateFirst delegates S on its first host and checks it went to want.
func (w *reviewWorld) delegateFirst(t testing.TB, want CrawlerID) Decision {
	t.Helper()
	d, err := w.pol.Delegate(context.Background(), ip("30.1.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != want || d.Cached || d.Record.Owner != want {
		t.Fatalf("first host of S: want a fresh delegation to %s, got %v", want, d)
	}
	return d
}

// review calls Review and checks that the decision's probe count is the
// prober's.
func (w *reviewWorld) review(t testing.TB, host netip.Addr, owner CrawlerID, took time.Duration) Decision {
	t.Helper()
	before := w.prober.count
	d, err := w.rv.Review(context.Background(), host, owner, took)
	if err != nil {
		t.Fatal(err)
	}
	if got := w.prober.count - before; got != d.Probes {
		t.Fatalf("review of %v: decision says %d probes, the prober saw %d: %v", host, d.Probes, got, d)
	}
	return d
}

func laterHost(n int) netip.Addr { return netip.AddrFrom4([4]byte{30, 1, byte(n), 1}) }

// TestReviewerHandsOverToMajority: S's first host is nearest a, its later
// hosts nearest b. The first review keeps a (b's tally 1 does not exceed
// a's 1: the host that decided S counts for a); the second hands S to b
// with the next epoch and b's answer in the record, everywhere.
func TestReviewerHandsOverToMajority(t *testing.T) {
	w := newReviewWorld(t, Config{}, map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}, true)
	ctx := context.Background()
	s := w.subnetS(t)
	first := w.delegateFirst(t, "a")
	epoch := first.Record.Epoch

	d1 := w.review(t, laterHost(1), "a", w.later["a"])
	t.Logf("review 1: %v", d1)
	if d1.Reason != ReasonKept || d1.Owner != "a" || !d1.Cached || d1.Subnet != s {
		t.Fatalf("first review: b nearest for 1 host, a for 1: want a kept, got %v", d1)
	}
	if d1.Probes == 0 || !probed(d1, "b") {
		t.Fatalf("first review: a timed the host at 90 ms, b was 6 ms for the first host: b should be probed: %v", d1)
	}
	if rec, _ := w.dir.Get(s); rec.Owner != "a" || rec.Epoch != epoch {
		t.Fatalf("after a kept review the directory holds %+v", rec)
	}

	d2 := w.review(t, laterHost(2), "a", w.later["a"])
	t.Logf("review 2: %v", d2)
	if d2.Reason != ReasonHandedOver || d2.Owner != "b" || d2.Subnet != s {
		t.Fatalf("second review: b nearest for 2 hosts, a for 1: want S handed to b, got %v", d2)
	}
	r := d2.Record
	if r.Owner != "b" || r.Epoch != epoch+1 || r.Subnet != s || r.Snapshot != w.tree.ID() || r.OwnerRTT != w.later["b"] || r.At.IsZero() {
		t.Fatalf("hand-over record %+v: want owner b at %v, epoch %d", r, w.later["b"], epoch+1)
	}
	if !slices.Contains(r.Probes, ProbeResult{Crawler: "b", RTT: w.later["b"], OK: true}) ||
		!slices.Contains(r.Probes, ProbeResult{Crawler: "a", RTT: w.later["a"], OK: true}) {
		t.Fatalf("hand-over record should carry b's answer and a's timing: %+v", r.Probes)
	}
	for _, p := range r.Probes {
		if !p.OK {
			t.Fatalf("hand-over record carries a failed answer: %+v", r.Probes)
		}
	}
	if rec, ok, err := w.dir.Lookup(ctx, s); err != nil || !ok || !reflect.DeepEqual(rec, r) {
		t.Fatalf("directory holds %+v (%v, %v), want the hand-over record %+v", rec, ok, err, r)
	}
	if o, ok := w.loads.Owner(s); !ok || o != "b" {
		t.Fatalf("load book: S owned by %q (%v), want b", o, ok)
	}
	if l, ok := w.pol.(Learner); !ok || l.Learn(r) {
		t.Fatal("the hand-over record should already have been learned")
	}

	// the subnet now answers b, without probes
	before := w.prober.count
	d3, err := w.pol.Delegate(ctx, laterHost(3))
	if err != nil {
		t.Fatal(err)
	}
	if d3.Owner != "b" || d3.Reason != ReasonCached || !d3.Cached || d3.Record.Epoch != epoch+1 || w.prober.count != before {
		t.Fatalf("after the hand-over: want b cached, got %v", d3)
	}
	// and a, no longer its owner, cannot review it
	if d := w.review(t, laterHost(4), "a", w.later["a"]); d.Reason != ReasonCached || d.Owner != "b" || d.Probes != 0 {
		t.Fatalf("a reviewing b's subnet: %v", d)
	}
	// b, nearest, keeps it
	if d := w.review(t, laterHost(5), "b", w.later["b"]); d.Reason != ReasonKept || d.Owner != "b" || d.Record.Epoch != epoch+1 {
		t.Fatalf("b reviewing its own subnet: %v", d)
	}
}

func probed(d Decision, c CrawlerID) bool {
	for _, st := range d.Steps {
		for _, p := range st.Probes {
			if p.Crawler == c {
				return true
			}
		}
	}
	return false
}

// TestReviewerKeepsNearestOwner: when the owner stays the nearest for S's
// later hosts, reviews keep it, whatever they probe: same record, same
// epoch, no publication.
func TestReviewerKeepsNearestOwner(t *testing.T) {
	for _, tc := range []struct {
		name  string
		later map[CrawlerID]time.Duration
	}{
		{"owner fast", map[CrawlerID]time.Duration{"a": 6 * time.Millisecond, "b": 25 * time.Millisecond, "c": 150 * time.Millisecond}},
		// a's timings are far above its first answer (so b is worth a
		// probe), but b is slower still
		{"owner slow, others slower", map[CrawlerID]time.Duration{"a": 60 * time.Millisecond, "b": 140 * time.Millisecond, "c": 150 * time.Millisecond}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			w := newReviewWorld(t, Config{}, tc.later, true)
			s := w.subnetS(t)
			first := w.delegateFirst(t, "a")
			probes := 0
			for n := 1; n <= 6; n++ {
				d := w.review(t, laterHost(n), "a", tc.later["a"])
				probes += d.Probes
				if d.Reason != ReasonKept || d.Owner != "a" || !d.Cached || !reflect.DeepEqual(d.Record, first.Record) {
					t.Fatalf("review %d: a is nearest: want kept with the first record, got %v", n, d)
				}
				if rec, _ := w.dir.Get(s); !reflect.DeepEqual(rec, first.Record) {
					t.Fatalf("review %d changed the directory: %+v", n, rec)
				}
			}
			t.Logf("%s: %d review probes over 6 hosts", tc.name, probes)
			if o, _ := w.loads.Owner(s); o != "a" {
				t.Fatalf("load book: S owned by %q", o)
			}
		})
	}
}

// TestReviewerNoOps: Review changes nothing and probes nobody when the host
// is outside the hierarchy, its subnet is not delegated, the caller is not
// the owner, the owner is dead or the timing is not positive. Each case
// would otherwise probe (a's 90 ms timing invites a probe of b).
func TestReviewerNoOps(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	for _, tc := range []struct {
		name   string
		host   netip.Addr
		owner  CrawlerID
		took   time.Duration
		kill   CrawlerID // removed from the membership before the review
		cached bool      // the decision reports S's record
	}{
		{name: "zero timing", host: laterHost(1), owner: "a", took: 0, cached: true},
		{name: "negative timing", host: laterHost(1), owner: "a", took: -time.Millisecond, cached: true},
		{name: "not the owner", host: laterHost(1), owner: "b", took: 90 * time.Millisecond, cached: true},
		{name: "unknown caller", host: laterHost(1), owner: "zz", took: 90 * time.Millisecond, cached: true},
		{name: "dead owner", host: laterHost(1), owner: "a", took: 90 * time.Millisecond, kill: "a", cached: true},
		{name: "undelegated subnet", host: ip("30.2.0.1"), owner: "a", took: 90 * time.Millisecond},
		{name: "outside the hierarchy", host: ip("50.0.0.1"), owner: "a", took: 90 * time.Millisecond},
	} {
		t.Run(tc.name, func(t *testing.T) {
			// the directory takes every owner as live: the dead owner is
			// the policy's own check
			w := newReviewWorld(t, Config{}, later, false)
			s := w.subnetS(t)
			first := w.delegateFirst(t, "a")
			if tc.kill != "" {
				w.members.Remove(tc.kill)
			}
			recs := w.dir.Records()
			for rep := range 3 { // repeated: a tally must not build up either
				d := w.review(t, tc.host, tc.owner, tc.took)
				if d.Probes != 0 || len(d.Moved) != 0 {
					t.Fatalf("review %d probed or moved: %v", rep, d)
				}
				if d.Reason == ReasonKept || d.Reason == ReasonHandedOver {
					t.Fatalf("review %d: no review should have run: %v", rep, d)
				}
				if tc.cached {
					if d.Reason != ReasonCached || !d.Cached || d.Owner != "a" || d.Subnet != s || !reflect.DeepEqual(d.Record, first.Record) {
						t.Fatalf("review %d: want S's current record, cached: %v", rep, d)
					}
				} else if d.Cached || d.Record.Owner != "" {
					t.Fatalf("review %d: nothing is delegated there: %v", rep, d)
				}
				if tc.name == "undelegated subnet" && (d.Reason != ReasonCached || d.Subnet == hierarchy.None || d.Subnet == s) {
					t.Fatalf("review %d: want the undelegated subnet, reason cached: %v", rep, d)
				}
				if tc.name == "outside the hierarchy" && (d.Subnet != hierarchy.None || d.Reason != ReasonOutsideHierarchy || d.Owner == "") {
					t.Fatalf("review %d: want no subnet and the hashed owner, as Delegate answers: %v", rep, d)
				}
				if tc.name == "outside the hierarchy" {
					dd, err := w.pol.Delegate(context.Background(), tc.host)
					if err != nil || dd.Owner != d.Owner {
						t.Fatalf("review %d: owner %s, Delegate says %v (%v)", rep, d.Owner, dd, err)
					}
				}
			}
			if got := w.dir.Records(); !reflect.DeepEqual(got, recs) {
				t.Fatalf("the directory changed:\nbefore %+v\nafter  %+v", recs, got)
			}
			if o, _ := w.loads.Owner(s); o != "a" {
				t.Fatalf("load book: S owned by %q", o)
			}
			if tc.kill != "" {
				return
			}
			// the no-ops left no tally behind: a real review now keeps a
			// first (b 1, a 1), as on a fresh subnet
			if d := w.review(t, laterHost(2), "a", 90*time.Millisecond); d.Reason != ReasonKept {
				t.Fatalf("first real review after the no-ops: %v", d)
			}
		})
	}
}

// TestReviewerNegativeMissNeverProbes: with ReviewMiss negative a review
// only tallies the owner's own timing: no probe, never a hand-over, even
// where default reviews hand the subnet over.
func TestReviewerNegativeMissNeverProbes(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	w := newReviewWorld(t, Config{Micra: MicraConfig{ReviewMiss: -1}}, later, true)
	s := w.subnetS(t)
	first := w.delegateFirst(t, "a")
	before := w.prober.count
	for n := 1; n <= 8; n++ {
		d := w.review(t, laterHost(n), "a", later["a"])
		if d.Probes != 0 || d.Reason != ReasonKept || d.Owner != "a" || !reflect.DeepEqual(d.Record, first.Record) {
			t.Fatalf("review %d with ReviewMiss < 0: %v", n, d)
		}
	}
	if w.prober.count != before {
		t.Fatalf("reviews probed %d times", w.prober.count-before)
	}
	if rec, _ := w.dir.Get(s); !reflect.DeepEqual(rec, first.Record) {
		t.Fatalf("the directory changed: %+v", rec)
	}
	// the same world with default reviews hands S over: the test above
	// is not vacuous
	w = newReviewWorld(t, Config{}, later, true)
	w.delegateFirst(t, "a")
	handed := false
	for n := 1; n <= 8 && !handed; n++ {
		handed = w.review(t, laterHost(n), "a", later["a"]).Reason == ReasonHandedOver
	}
	if !handed {
		t.Fatal("default reviews never handed S over")
	}
}

// TestReviewerDeterministic: the same world, stream and seed give the same
// decisions, Delegate and Review mixed, hand-overs included.
func TestReviewerDeterministic(t *testing.T) {
	run := func() (out []string, kept, handed, blocked, reviewProbes int) {
		w := newSynthWorld(t, 4, 12, 500)
		// every host and two more of its /24 (same subnet, same place,
		// another stretch), in a seeded order: subnets repeat
		var stream []netip.Addr
		for _, h := range w.hosts {
			stream = append(stream, h)
			for _, flip := range []byte{0x80, 0x40} {
				b := h.As4()
				b[3] ^= flip
				sib := netip.AddrFrom4(b)
				if _, ok := w.access[sib]; !ok {
					w.access[sib] = w.access[h] + 1
				}
				stream = append(stream, sib)
			}
		}
		order := rand.New(rand.NewPCG(4, 3))
		order.Shuffle(len(stream), func(i, j int) { stream[i], stream[j] = stream[j], stream[i] })

		members := NewMemMembership(w.crawlers...)
		dir := NewMemDirectory(w.tree, members)
		deps := Deps{Tree: w.tree, Dir: dir, Prober: w, Members: members, Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}, Rand: rand.New(rand.NewPCG(4, 1))}
		p := NewMicra(deps, Config{})
		rv := p.(Reviewer)
		ctx := context.Background()
		for _, c := range w.crawlers {
			if _, err := p.Join(ctx, c); err != nil {
				t.Fatal(err)
			}
		}
		timing := rand.New(rand.NewPCG(4, 9)) // the owners' crawl timings
		line := func(kind string, d Decision) string {
			return fmt.Sprintf("%s %v subnet=%d owner=%s rtt=%v epoch=%d probes=%d %v reason=%s", kind, d.IP, d.Subnet, d.Owner, d.OwnerRTT, d.Record.Epoch, d.Probes, d.Record.Probes, d.Reason)
		}
		for _, h := range stream {
			d, err := p.Delegate(ctx, h)
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, line("delegate", d))
			if d.Reason != ReasonCached {
				continue
			}
			ms := w.meanRTT(w.crawler(d.Owner), h) * (1 + w.jitter*timing.ExpFloat64())
			before := w.probes
			if d, err = rv.Review(ctx, h, d.Owner, time.Duration(ms*float64(time.Millisecond))); err != nil {
				t.Fatal(err)
			}
			if w.probes-before != d.Probes {
				t.Fatalf("review of %v: decision says %d probes, the prober saw %d", h, d.Probes, w.probes-before)
			}
			out = append(out, line("review", d))
			reviewProbes += d.Probes
			switch d.Reason {
			case ReasonKept:
				kept++
			case ReasonHandedOver:
				handed++
				if rec, _ := dir.Get(d.Subnet); !reflect.DeepEqual(rec, d.Record) || d.Owner != rec.Owner {
					t.Fatalf("handed over to %s, the directory holds %+v", d.Owner, rec)
				}
			case ReasonBlockDelegated:
				blocked++
				if rec, _ := dir.Get(d.Subnet); !reflect.DeepEqual(rec, d.Record) || d.Owner != rec.OwnerOf(h, nil) || d.Owner == rec.Owner {
					t.Fatalf("block of %v delegated to %s, the directory holds %+v", h, d.Owner, rec)
				}
			case ReasonCached:
				// only a crawler's own subnet (placement) and the hosts of
				// a delegated block are not reviewed
				if _, inBlock := d.Record.BlockOwner(h); !inBlock && !w.tree.Contains(d.Subnet, w.crawler(d.Owner).Addr) {
					t.Fatalf("review did nothing outside a placement: %v", d)
				}
			default:
				t.Fatalf("review: %v", d)
			}
		}
		return out, kept, handed, blocked, reviewProbes
	}
	a, kept, handed, blocked, probes := run()
	b, _, _, _, _ := run()
	t.Logf("%d decisions: %d reviews kept, %d handed over, %d blocks delegated, %d review probes", len(a), kept, handed, blocked, probes)
	if kept == 0 || handed == 0 || blocked == 0 || probes == 0 {
		t.Fatalf("the stream should exercise kept and handed-over reviews and block delegations with probes: %d kept, %d handed over, %d blocks, %d probes", kept, handed, blocked, probes)
	}
	if len(a) != len(b) {
		t.Fatalf("%d decisions, then %d", len(a), len(b))
	}
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d differs:\n%s\n%s", i, a[i], b[i])
		}
	}
}

// TestReviewerTallyRestartsWithForeignRecord: the tally belongs to a record.
// S goes to b by review (tally a 1, b 2); b dies and a decision gives S back
// to a; b returns. One review where b is nearest must not hand S over at
// once on the old record's counts: under the new record a has the host that
// decided it, so b needs two.
func TestReviewerTallyRestartsWithForeignRecord(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	w := newReviewWorld(t, Config{}, later, true)
	ctx := context.Background()
	s := w.subnetS(t)
	w.delegateFirst(t, "a")
	w.review(t, laterHost(1), "a", later["a"])
	if d := w.review(t, laterHost(2), "a", later["a"]); d.Reason != ReasonHandedOver || d.Owner != "b" {
		t.Fatalf("setup: want S handed to b, got %v", d)
	}
	w.members.Remove("b")
	d, err := w.pol.Delegate(ctx, ip("30.1.0.1"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Cached || d.Owner != "a" {
		t.Fatalf("b dead: want S decided again, for a: %v", d)
	}
	epoch := d.Record.Epoch
	w.members.Add(reviewCrawlers[1])
	d1 := w.review(t, laterHost(3), "a", later["a"])
	if d1.Reason != ReasonKept || d1.Owner != "a" {
		t.Fatalf("first review under a's new record: b nearest for 1 host, a for 1 (its deciding host): want kept, got %v", d1)
	}
	if rec, _ := w.dir.Get(s); rec.Owner != "a" || rec.Epoch != epoch {
		t.Fatalf("directory: %+v", rec)
	}
	d2 := w.review(t, laterHost(4), "a", later["a"])
	if d2.Reason != ReasonHandedOver || d2.Owner != "b" || d2.Record.Epoch != epoch+1 {
		t.Fatalf("second review: b nearest for 2 hosts under this record: want S handed to b, got %v", d2)
	}
	// the hand-over record starts a tally too (b 1): a needs two hosts to
	// win S back, as b needed two
	w.later = map[CrawlerID]time.Duration{"a": 5 * time.Millisecond, "b": 60 * time.Millisecond, "c": 150 * time.Millisecond}
	if d := w.review(t, laterHost(5), "b", w.later["b"]); d.Reason != ReasonKept || d.Owner != "b" {
		t.Fatalf("a nearest for 1 host, b for its deciding host: want b kept, got %v", d)
	}
	if d := w.review(t, laterHost(6), "b", w.later["b"]); d.Reason != ReasonHandedOver || d.Owner != "a" || d.Record.Epoch != epoch+2 {
		t.Fatalf("a nearest for 2 hosts against b's 1: want S handed back to a, got %v", d)
	}
}

// TestReviewerCancelledCountsNothing: a review whose context is cancelled
// while it probes (the overlay's prober then answers "no answer" at once)
// returns the context's error and tallies nothing — not a host "won" by the
// owner because nobody else could answer. b is nearest for S's later hosts:
// after the cancelled review, two real ones hand S to b, as on a fresh
// tally (a 1 for its deciding host, b 2).
func TestReviewerCancelledCountsNothing(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	w := newReviewWorld(t, Config{}, later, true)
	s := w.subnetS(t)
	first := w.delegateFirst(t, "a")
	ctx, cancel := context.WithCancel(context.Background())
	answer := w.prober.rtt
	w.prober.rtt = func(CrawlerID, netip.Addr) (time.Duration, bool) {
		cancel() // the caller gave up while the probe was out
		return 0, false
	}
	d, err := w.rv.Review(ctx, laterHost(1), "a", later["a"])
	if !errors.Is(err, context.Canceled) {
		t.Fatalf("cancelled review: want context.Canceled, got %v (%v)", err, d)
	}
	if rec, _ := w.dir.Get(s); !reflect.DeepEqual(rec, first.Record) {
		t.Fatalf("a cancelled review changed the directory: %+v", rec)
	}
	w.prober.rtt = answer
	if d := w.review(t, laterHost(2), "a", later["a"]); d.Reason != ReasonKept {
		t.Fatalf("first real review (b 1, a 1): want kept, got %v", d)
	}
	if d := w.review(t, laterHost(3), "a", later["a"]); d.Reason != ReasonHandedOver || d.Owner != "b" {
		t.Fatalf("second real review (b 2, a 1): want S handed to b — the cancelled review must not count for a: got %v", d)
	}
}

// TestReviewerKeepsPlacement: a crawler owns the subnet it sits in
// (placement); reviews of that subnet's hosts never probe or hand it over,
// however slow the owner's timings.
func TestReviewerKeepsPlacement(t *testing.T) {
	w := newReviewWorld(t, Config{}, map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}, true)
	home := w.tree.SmallestNonUnary(reviewCrawlers[0].Addr) // a's own subnet
	rec, ok := w.dir.Get(home)
	if !ok || rec.Owner != "a" {
		t.Fatalf("a's own subnet %d: %+v %v", home, rec, ok)
	}
	for n := 1; n <= 4; n++ {
		d := w.review(t, netip.AddrFrom4([4]byte{40, 1, byte(n), 9}), "a", 300*time.Millisecond)
		if d.Probes != 0 || d.Reason != ReasonCached || d.Owner != "a" || d.Subnet != home {
			t.Fatalf("review %d of a's own subnet: %v", n, d)
		}
	}
	if got, _ := w.dir.Get(home); !reflect.DeepEqual(got, rec) {
		t.Fatalf("a's own subnet changed: %+v", got)
	}
}

// TestReviewerThinsOutSettledSubnets: past ReviewEvery hosts under one
// record only the 2^k-th host is reviewed (and votes). With ReviewEvery 2,
// S's 3rd host is skipped — no probe, no vote — so b, nearest for the later
// hosts, takes S at the 4th; reviewing every host, it takes S at the 3rd.
func TestReviewerThinsOutSettledSubnets(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	for _, tc := range []struct {
		every    int
		handedAt int // host number (the deciding host is 1)
	}{{2, 4}, {-1, 3}} {
		w := newReviewWorld(t, Config{Micra: MicraConfig{ReviewEvery: tc.every}}, later, true)
		w.delegateFirst(t, "a")
		for host := 2; host <= tc.handedAt; host++ {
			d := w.review(t, laterHost(host), "a", later["a"])
			switch {
			case host == tc.handedAt:
				if d.Reason != ReasonHandedOver || d.Owner != "b" {
					t.Fatalf("every %d, host %d: want S handed to b, got %v", tc.every, host, d)
				}
			case tc.every == 2 && host == 3:
				if d.Reason != ReasonKept || d.Probes != 0 || d.Owner != "a" {
					t.Fatalf("every 2, host 3: want the review skipped, got %v", d)
				}
			default:
				if d.Reason != ReasonKept || d.Probes == 0 || d.Owner != "a" {
					t.Fatalf("every %d, host %d: want a probed, kept review, got %v", tc.every, host, d)
				}
			}
		}
	}
}

// TestReviewerProbesEarlyHosts: reviews of a subnet's 2nd, 4th, … host up
// to ReviewProbeUpTo probe at least one other crawler, even where the owner
// is so fast that the statistics call no other likely (which is when a
// crawler the first decision ruled out would stay ruled out); the other
// hosts' reviews do not, and ReviewProbeUpTo < 0 turns it off.
func TestReviewerProbesEarlyHosts(t *testing.T) {
	fast := map[CrawlerID]time.Duration{"a": 5 * time.Millisecond, "b": 20 * time.Millisecond, "c": 150 * time.Millisecond}
	for _, tc := range []struct {
		upTo   int
		forced []int // host numbers (the deciding host is 1) whose review must probe
	}{{0, []int{2}}, {2, []int{2}}, {8, []int{2, 4, 8}}, {-1, nil}} {
		t.Run(fmt.Sprint("upTo=", tc.upTo), func(t *testing.T) {
			w := newReviewWorld(t, Config{Micra: MicraConfig{ReviewProbeUpTo: tc.upTo}}, fast, true)
			first := w.delegateFirst(t, "a")
			for host := 2; host <= 10; host++ {
				d := w.review(t, laterHost(host), "a", fast["a"])
				if d.Reason != ReasonKept || d.Owner != "a" || !reflect.DeepEqual(d.Record, first.Record) {
					t.Fatalf("host %d: a is nearest: want kept with the first record, got %v", host, d)
				}
				note := false
				for _, st := range d.Steps {
					note = note || strings.Contains(st.Note, "at least one probe")
				}
				if slices.Contains(tc.forced, host) {
					// one probe, to the likeliest: b (20 ms for the first
					// host), not c (150 ms)
					if d.Probes != 1 || !probed(d, "b") || !note {
						t.Fatalf("host %d: want exactly one probe, to b, and the note: %v", host, d)
					}
				} else if d.Probes != 0 || note {
					t.Fatalf("host %d: a at 5 ms leaves no doubt: want no probe, got %v", host, d)
				}
			}
		})
	}
}

// TestReviewerPoolsVotesAgainstTheOwner: S's later hosts each find a
// different crawler faster than the owner a (b for one, c for the next),
// so under the plurality tally neither outvotes a's deciding host after
// two reviews; with ReviewPool the two clear votes against a hand S over
// at the second review. A faster answer inside the margin is no vote.
func TestReviewerPoolsVotesAgainstTheOwner(t *testing.T) {
	votes := []map[CrawlerID]time.Duration{
		{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 9 * time.Millisecond},
		{"a": 90 * time.Millisecond, "b": 9 * time.Millisecond, "c": 6 * time.Millisecond},
	}
	for _, pool := range []float64{0, 0.2} {
		t.Run(fmt.Sprintf("pool=%v", pool), func(t *testing.T) {
			cfg := Config{}
			cfg.Micra.ReviewPool = pool
			cfg.Micra.ReviewMiss = 1e-9 // probe on while any crawler might beat the best
			w := newReviewWorld(t, cfg, votes[0], true)
			w.delegateFirst(t, "a")
			var last Decision
			for i, v := range votes {
				w.later = v
				last = w.review(t, laterHost(i+1), "a", v["a"])
				t.Logf("review %d: %v", i+1, last)
				if i == 0 && last.Reason != ReasonKept {
					t.Fatalf("first review: one vote against a's one: want kept, got %v", last)
				}
			}
			want := ReasonKept
			if pool > 0 {
				want = ReasonHandedOver
			}
			wantOwner := CrawlerID("a")
			if pool > 0 {
				wantOwner = "c" // the faster answer of the second review
			}
			if last.Reason != want || last.Owner != wantOwner {
				t.Fatalf("second review: b and c each faster once: want %v, got %v", want, last)
			}
		})
	}
	// inside the margin: 80 ms against the owner's 90 is no clear vote
	cfg := Config{}
	cfg.Micra.ReviewPool, cfg.Micra.ReviewMiss = 0.2, 1e-9
	near := []map[CrawlerID]time.Duration{
		{"a": 90 * time.Millisecond, "b": 80 * time.Millisecond, "c": 85 * time.Millisecond},
		{"a": 90 * time.Millisecond, "b": 85 * time.Millisecond, "c": 80 * time.Millisecond},
	}
	w := newReviewWorld(t, cfg, near[0], true)
	w.delegateFirst(t, "a")
	for i, v := range near {
		w.later = v
		if d := w.review(t, laterHost(i+1), "a", v["a"]); d.Reason != ReasonKept {
			t.Fatalf("review %d inside the margin: want kept, got %v", i+1, d)
		}
	}
}
