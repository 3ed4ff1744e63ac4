package delegation

import (
	"context"
	"errors"
	"net/netip"
	"testing"
	"time"
)

// TestLearnKeepsTheNewestFourRecords: learnOnce remembers "the newest four (epoch,
// decider) pairs" of a subnet. A late record older than all four must not
// push one of the four out: here epoch 5 (one of the newest four, only 3
// newer decisions seen) is learned a second time after a stale epoch-1
// record arrived, and the two then alternate, each learned on every
// arrival (a republish loop double-counts both forever).
func TestLearnKeepsTheNewestFourRecords(t *testing.T) {
	w := newSmallWorld(t)
	p := NewMicra(w.deps(1), Config{Self: "me"})
	w.join(t, p, smallCrawlers...)
	l := p.(Learner)
	s := w.tree.SmallestNonUnary(ip("10.2.2.9"))
	rec := func(epoch uint64) Record {
		return Record{Subnet: s, Snapshot: w.tree.ID(), Owner: "c2", OwnerRTT: 4 * time.Millisecond, Epoch: epoch, DecidedBy: "c1",
			Probes: []ProbeResult{{Crawler: "c2", RTT: 4 * time.Millisecond, OK: true}, {Crawler: "c1", RTT: 30 * time.Millisecond, OK: true}}}
	}
	for _, e := range []uint64{5, 6, 7, 8} {
		if !l.Learn(rec(e)) {
			t.Fatalf("epoch %d: new record not learned", e)
		}
	}
	l.Learn(rec(1)) // a stale record, older than every remembered one
	if l.Learn(rec(5)) {
		t.Fatal("epoch 5 (one of the newest four learned) was learned a second time after a stale epoch-1 record")
	}
}

// racingDir is a MemDirectory where, on the first Publish for subnet s, a
// concurrent writer's record (race, at the same epoch, lower owner RTT, so
// it wins by the Select rule) lands first — what Publish returns on the
// overlay when another peer decided the subnet at the same time.
type racingDir struct {
	*MemDirectory
	race Record
	done bool
}

func (r *racingDir) Publish(ctx context.Context, rec Record) (Record, error) {
	if !r.done && rec.Subnet == r.race.Subnet {
		r.done = true
		race := r.race
		race.Epoch = rec.Epoch
		if _, err := r.MemDirectory.Publish(ctx, race); err != nil {
			return Record{}, err
		}
	}
	return r.MemDirectory.Publish(ctx, rec)
}

// TestForeignRecordKeptByDirectoryLearnedFiltered: Learn keeps only answers of
// crawlers this peer's membership has listed (knownOnly). A decision whose
// Publish returns another peer's record (Select) learns that record through
// learnOnce directly, without the filter: its made-up crawler enters the
// learner's crawler index (and Learn of the same record later returns false,
// so the filter never applies).
func TestForeignRecordKeptByDirectoryLearnedFiltered(t *testing.T) {
	w := newSmallWorld(t)
	host := ip("10.2.2.9")
	s := w.tree.SmallestNonUnary(host)
	rd := &racingDir{MemDirectory: w.dir, race: Record{Subnet: s, Snapshot: w.tree.ID(), Owner: "c2", OwnerRTT: time.Microsecond, DecidedBy: "c2",
		Probes: []ProbeResult{{Crawler: "c2", RTT: time.Microsecond, OK: true}, {Crawler: "ghost", RTT: 2 * time.Microsecond, OK: true}}}}
	deps := w.deps(1)
	deps.Dir = rd
	p := NewMicra(deps, Config{Self: "me"})
	w.join(t, p, smallCrawlers...)
	d, err := p.Delegate(context.Background(), host)
	if err != nil {
		t.Fatal(err)
	}
	if !rd.done || d.Record.DecidedBy != "c2" {
		t.Fatalf("setup: the racing record should have prevailed: %v %+v", d, d.Record)
	}
	m := p.(learningEngine).ch.(*micraChooser)
	if m.knows("ghost") {
		t.Fatalf("a crawler never listed by the membership (%q, named by another peer's record) was learned: crawler index %v", "ghost", m.crawler.ids)
	}
}

// TestDelegateCancelledPublishesNothing: a decision whose context is
// cancelled while it probes (the overlay's prober then answers "no answer"
// at once) must return the context's error and publish nothing, as Review
// does. decide publishes the best of the answers that came back before the
// cancellation, for every peer, with a nil error.
func TestDelegateCancelledPublishesNothing(t *testing.T) {
	w := newSmallWorld(t)
	p := NewMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	host := ip("10.2.2.9")
	s := w.tree.SmallestNonUnary(host)
	ctx, cancel := context.WithCancel(context.Background())
	answer := w.prober.rtt
	w.prober.rtt = func(c CrawlerID, a netip.Addr) (time.Duration, bool) {
		if ctx.Err() != nil {
			return 0, false // cut short
		}
		cancel() // the caller gave up while this first probe was out
		return answer(c, a)
	}
	d, err := p.Delegate(ctx, host)
	rec, published := w.dir.Get(s)
	if !errors.Is(err, context.Canceled) || published {
		t.Errorf("cancelled decision: want context.Canceled and no record; got err=%v, decision %v, published=%v %+v", err, d, published, rec)
	}
	// cancelled before any answer: the hash fallback answers with a nil
	// error, as if nobody could reach the host
	host2 := ip("10.1.2.9")
	ctx2, cancel2 := context.WithCancel(context.Background())
	w.prober.rtt = func(CrawlerID, netip.Addr) (time.Duration, bool) { cancel2(); return 0, false }
	d, err = p.Delegate(ctx2, host2)
	if !errors.Is(err, context.Canceled) {
		t.Errorf("decision cancelled before any answer: want context.Canceled, got err=%v, decision %v", err, d)
	}
}

// TestReviewHandOverOutbidsDeadOwner: Review's hand-over (and delegateBlock)
// publish with Dir.Publish, not e.publish, so when the directory keeps a
// competing record of the same epoch whose owner is dead (what e.publish
// republishes above), Review reports a hand-over to a dead crawler, moves
// the subnet's load to it and leaves the subnet with a dead owner.
func TestReviewHandOverOutbidsDeadOwner(t *testing.T) {
	later := map[CrawlerID]time.Duration{"a": 90 * time.Millisecond, "b": 6 * time.Millisecond, "c": 150 * time.Millisecond}
	w := newReviewWorld(t, Config{}, later, true)
	s := w.subnetS(t)
	rd := &racingDir{MemDirectory: w.dir, race: Record{Subnet: s, Snapshot: w.tree.ID(), Owner: "c", OwnerRTT: time.Microsecond, DecidedBy: "c",
		Probes: []ProbeResult{{Crawler: "c", RTT: time.Microsecond, OK: true}}}}
	rd.done = true // not for the first decision
	deps := Deps{Tree: w.tree, Dir: rd, Prober: w.prober, Members: w.members, Loads: w.loads,
		Clock: &FixedClock{T: time.Unix(1_700_000_000, 0)}}
	p := NewMicra(deps, Config{Micra: MicraConfig{BlockMargin: -1}})
	w.pol, w.rv = p, p.(Reviewer)
	for _, c := range reviewCrawlers {
		if _, err := p.Join(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	w.delegateFirst(t, "a")
	w.members.Remove("c")
	w.review(t, laterHost(1), "a", later["a"])
	rd.done = false // a concurrent record (owner c, now dead) lands with the hand-over
	d := w.review(t, laterHost(2), "a", later["a"])
	if d.Reason != ReasonHandedOver {
		t.Fatalf("setup: want a hand-over, got %v", d)
	}
	rec, _ := w.dir.Get(s)
	o, _ := w.loads.Owner(s)
	if !w.members.IsLive(d.Owner) || !w.members.IsLive(rec.Owner) || !w.members.IsLive(o) {
		t.Fatalf("hand-over: decision owner %s, directory owner %s (epoch %d), load book owner %s: all must be live", d.Owner, rec.Owner, rec.Epoch, o)
	}
}
