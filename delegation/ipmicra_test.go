package delegation

import (
	"context"
	"log/slog"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

func TestPlacementOwnsOwnSubnet(t *testing.T) {
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	for _, c := range smallCrawlers {
		d, err := p.Delegate(context.Background(), c.Addr)
		if err != nil {
			t.Fatal(err)
		}
		if d.Owner != c.ID || !d.Cached || d.Probes != 0 {
			t.Errorf("%s: crawler's own address went to %s (cached=%v probes=%d): %v", c.ID, d.Owner, d.Cached, d.Probes, d)
		}
	}
}

func TestIPMicraExplanations(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{Threshold: 50 * time.Millisecond})
	w.join(t, p, smallCrawlers...)

	// 10.1.2.7: org C holds nothing; walking up, 10.1.0.0/16 has c1 (its
	// own 10.1.1.0/24) under it, and c1 answers 5 ms < 50 ms.
	d, err := p.Delegate(ctx, ip("10.1.2.7"))
	if err != nil {
		t.Fatal(err)
	}
	if d.Owner != "c1" || d.Reason != ReasonUnderThreshold || d.Probes != 1 {
		t.Fatalf("want c1 under threshold after 1 probe, got %v", d)
	}
	if len(d.Steps) != 2 || d.Steps[1].Kind != StepLevel || w.tree.Node(d.Steps[1].Node).String() != "10.1.0.0/16" {
		t.Fatalf("want lookup then level@10.1.0.0/16, got %v", d)
	}
	// Asking again is cached: no probes.
	d, _ = p.Delegate(ctx, ip("10.1.2.99"))
	if !d.Cached || d.Probes != 0 || d.Owner != "c1" || d.Reason != ReasonCached {
		t.Fatalf("second URL of the subnet must be cached: %v", d)
	}

	// 10.2.0.9 sits in 10.2.0.0/16 (org D); c2 holds 10.2.1.0/24 of org D:
	// the same-organisation rule asks c2 first.
	d, _ = p.Delegate(ctx, ip("10.2.0.9"))
	if d.Owner != "c2" || d.Reason != ReasonSameOrg || d.Steps[1].Kind != StepSameOrg || d.Probes != 1 {
		t.Fatalf("want c2 by the same-org rule, got %v", d)
	}

	// 20.2.0.1 (org F): nobody of F; under 20.0.0.0/8 only c3 (70 ms, over
	// the threshold); at the root c1 and c2 (130, 115 ms). Lowest wins: c3.
	d, _ = p.Delegate(ctx, ip("20.2.0.1"))
	if d.Owner != "c3" || d.Reason != ReasonLowestProbe || d.Probes != 3 || d.OwnerRTT != 70*time.Millisecond {
		t.Fatalf("want c3 by lowest probe after 3 probes, got %v", d)
	}
	var kinds []string
	for _, s := range d.Steps {
		kinds = append(kinds, s.Kind.String()+"@"+w.tree.Node(s.Node).String())
	}
	if got := strings.Join(kinds, " "); got != "lookup@20.2.0.0/16 level@20.0.0.0/8 level@root" {
		t.Fatalf("walk = %s", got)
	}
	if !strings.Contains(d.String(), "reason=lowest-probe") {
		t.Fatalf("String() lacks the reason: %s", d)
	}
}

func TestIPMicraParallelLevels(t *testing.T) {
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{ParallelLevels: true})
	w.join(t, p, smallCrawlers...)
	// at the root c1 (30 ms) and c3 (115 ms) are asked together for 10.2.2.1
	// after c2... c2 holds 10.2.1.0/24 under 10.2.0.0/16: asked first, 4 ms.
	d, _ := p.Delegate(context.Background(), ip("10.2.2.1"))
	if d.Owner != "c2" || d.Probes != 1 {
		t.Fatalf("got %v", d)
	}
	w.rtt["c2"]["10.1"] = 60 * time.Millisecond
	w.rtt["c1"]["10.1"] = 45 * time.Millisecond
	// 10.1.2.1: level 10.1/16 asks c1 (45 ms < 50): c1 wins with one probe.
	d, _ = p.Delegate(context.Background(), ip("10.1.2.1"))
	if d.Owner != "c1" || d.Probes != 1 || d.Reason != ReasonUnderThreshold {
		t.Fatalf("got %v", d)
	}
}

func TestLowerDelegationsWin(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	s16 := w.tree.SmallestNonUnary(ip("10.1.0.1"))
	s24 := w.tree.SmallestNonUnary(ip("10.1.1.1"))
	if !w.tree.IsAncestor(s16, s24) {
		t.Fatal("test tree: /16 must contain /24")
	}
	// the ancestor goes to c3 with a high epoch; the /24 stays with c1
	if _, err := w.dir.Publish(ctx, Record{Subnet: s16, Owner: "c3", Epoch: 9}); err != nil {
		t.Fatal(err)
	}
	if d, _ := p.Delegate(ctx, ip("10.1.1.200")); d.Owner != "c1" || d.Subnet != s24 {
		t.Fatalf("the lower delegation must win: %v", d)
	}
	if d, _ := p.Delegate(ctx, ip("10.1.77.1")); d.Owner != "c3" || d.Subnet != s16 {
		t.Fatalf("outside the /24 the ancestor's delegation applies: %v", d)
	}
}

func TestUnaryFollowsParent(t *testing.T) {
	w := newSmallWorld(t)
	tr := mustBuild(t, pfx(t, "10.0.0.0/8", "A", "DE"), pfx(t, "10.1.0.0/16", "B", "DE"), pfx(t, "10.1.0.7/32", "Z", "DE"))
	w.tree = tr
	w.dir = NewMemDirectory(tr, w.members)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	d, _ := p.Delegate(context.Background(), ip("10.1.0.7"))
	if got := tr.Node(d.Subnet).String(); got != "10.1.0.0/16" {
		t.Fatalf("a single-address range must follow its parent, got subnet %s", got)
	}
}

func TestOutsideHierarchyAndNoAnswerAreHashed(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	d, err := p.Delegate(ctx, ip("99.1.2.3"))
	if err != nil || d.Reason != ReasonOutsideHierarchy || d.Subnet != hierarchy.None || d.Owner == "" || d.Probes != 0 {
		t.Fatalf("outside: %v %v", d, err)
	}
	ring := NewRing(w.members.Live(), RingConfig{Replicas: 200, Probes: 21})
	if want, _ := ring.OwnerOf(ip("99.1.2.3")); want != d.Owner {
		t.Fatalf("fallback owner %s, ring says %s", d.Owner, want)
	}
	w.prober.rtt = func(CrawlerID, netip.Addr) (time.Duration, bool) { return 0, false }
	d, _ = p.Delegate(ctx, ip("20.2.3.4"))
	if d.Reason != ReasonNoAnswer || d.Probes != 3 || d.Owner == "" {
		t.Fatalf("no answer: %v", d)
	}
	if _, ok, _ := w.dir.Lookup(ctx, d.Subnet); ok {
		t.Fatal("a hashed fallback must not be published")
	}
}

func TestDeadOwnerIsRedelegated(t *testing.T) {
	ctx := context.Background()
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	first, _ := p.Delegate(ctx, ip("10.1.2.7"))
	if first.Owner != "c1" {
		t.Fatal(first)
	}
	w.members.Remove("c1")
	d, _ := p.Delegate(ctx, ip("10.1.2.7"))
	if d.Owner != "c2" || d.Cached || d.Record.Epoch != first.Record.Epoch+1 {
		t.Fatalf("dead owner must be replaced with a bumped epoch: %v (epoch %d)", d, d.Record.Epoch)
	}
}

func TestDecisionLogs(t *testing.T) {
	w := newSmallWorld(t)
	p := NewIPMicra(w.deps(1), Config{})
	w.join(t, p, smallCrawlers...)
	d, _ := p.Delegate(context.Background(), ip("20.2.0.1"))
	var buf strings.Builder
	slog.New(slog.NewTextHandler(&buf, nil)).Info("delegated", "decision", d)
	for _, want := range []string{"decision.owner=c3", "decision.probes=3", "decision.reason=lowest-probe", "level@"} {
		if !strings.Contains(buf.String(), want) {
			t.Errorf("log line lacks %q: %s", want, buf.String())
		}
	}
}

// forgetfulDir hides a dead owner's record entirely (epoch included), as a
// DHT directory that drops such records might.
type forgetfulDir struct{ *MemDirectory }

func (f forgetfulDir) Lookup(ctx context.Context, s hierarchy.NodeID) (Record, bool, error) {
	r, ok, err := f.MemDirectory.Lookup(ctx, s)
	if !ok {
		return Record{}, false, err
	}
	return r, ok, err
}

// TestDeadOwnerOutbidWhenEpochUnknown: a decision, and a crawler joining
// the subnet (placement), outbid a dead owner's record whose epoch the
// directory hid.
func TestDeadOwnerOutbidWhenEpochUnknown(t *testing.T) {
	for _, join := range []bool{false, true} {
		ctx := context.Background()
		w := newSmallWorld(t)
		deps := w.deps(1)
		deps.Dir = forgetfulDir{w.dir}
		p := NewIPMicra(deps, Config{})
		w.join(t, p, smallCrawlers...)
		s := w.tree.SmallestNonUnary(ip("10.1.2.7"))
		// an epoch past the clock's (NextEpoch would not outbid it by time)
		dead := NextEpoch(0, deps.Clock.Now()) + 7
		w.dir.Publish(ctx, Record{Subnet: s, Owner: "c1", Epoch: dead})
		w.members.Remove("c1")
		var d Decision
		var err error
		if join {
			c4 := Crawler{ID: "c4", Addr: ip("10.1.2.9")}
			w.members.Add(c4)
			d, err = p.Join(ctx, c4)
		} else {
			d, err = p.Delegate(ctx, ip("10.1.2.7"))
		}
		if err != nil || !w.members.IsLive(d.Owner) || d.Record.Epoch != dead+1 {
			t.Fatalf("join=%v: must outbid the dead owner's epoch %d: %v (epoch %d) %v", join, dead, d, d.Record.Epoch, err)
		}
	}
}
