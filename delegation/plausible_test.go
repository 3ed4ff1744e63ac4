package delegation

import (
	"net/netip"
	"testing"
	"time"
)

func TestImpossibleRTT(t *testing.T) {
	ms := time.Millisecond
	for _, c := range []struct {
		claimed, toTarget, toClaimant time.Duration
		want                          bool
	}{
		{1 * ms, 80 * ms, 10 * ms, true},   // 4 × 11 + 2 = 46 < 80
		{10 * ms, 80 * ms, 10 * ms, false}, // 4 × 20 + 2 = 82: a detour explains it
		{1 * ms, 80 * ms, 79 * ms, false},  // the claimant is as far from the checker as the target
		{1 * ms, 5 * ms, 0, false},         // within the slack
		{1 * ms, 0, 0, false},              // the checker measured nothing
		{-1, 80 * ms, 0, false},
	} {
		if got := ImpossibleRTT(c.claimed, c.toTarget, c.toClaimant); got != c.want {
			t.Errorf("ImpossibleRTT(%v, %v, %v) = %v, want %v", c.claimed, c.toTarget, c.toClaimant, got, c.want)
		}
	}
	if m := ImpossibleMargin(80*ms, 10*ms); m != 38*ms {
		t.Errorf("margin %v, want 38ms", m)
	}
}

// A world whose round trips are distances on a line plus a constant, each
// direct path up to MaxDetour times longer than the geometric one, never
// makes an honest claim impossible, whatever the checker's jitter.
func TestImpossibleRTTNeverAccusesADetouringWorld(t *testing.T) {
	rtt := func(a, b int, detour float64) time.Duration {
		d := a - b
		if d < 0 {
			d = -d
		}
		return time.Duration((7*float64(d)*detour + 1) * float64(time.Millisecond))
	}
	for d := range 30 {
		for c := range 30 {
			for tg := range 30 {
				detour := 1 + float64((d*7+c*3+tg)%30)/10 // up to 3.9 on the checker's own path
				jitter := time.Duration((d+c+tg)%1000) * time.Microsecond
				if ImpossibleRTT(rtt(c, tg, 1), rtt(d, tg, detour)+jitter, rtt(d, c, 1)) {
					t.Fatalf("honest claim c=%d t=%d judged impossible by d=%d", c, tg, d)
				}
			}
		}
	}
}

func TestEvidenceMustCarryItsProof(t *testing.T) {
	at := time.Unix(1_700_000_000, 0)
	tg := netip.MustParseAddr("192.0.2.1")
	good := Evidence{Kind: FalseRTT, Accused: "liar", Witness: "w", At: at, Target: tg, Claimed: time.Millisecond, ToTarget: 80 * time.Millisecond, ToClaimant: 5 * time.Millisecond}
	if !good.Valid() {
		t.Fatal("impossible claim with its measurements refused")
	}
	for name, e := range map[string]Evidence{
		"claim possible": func() Evidence { e := good; e.Claimed = 20 * time.Millisecond; return e }(),
		"no target":      func() Evidence { e := good; e.Target = netip.Addr{}; return e }(),
		"self accusing":  func() Evidence { e := good; e.Witness = "liar"; return e }(),
		"no time":        func() Evidence { e := good; e.At = time.Time{}; return e }(),
		"stall no start": {Kind: Stalled, Accused: "o", Witness: "w", At: at, Subnet: 3},
		"unknown kind":   {Kind: 9, Accused: "o", Witness: "w", At: at},
	} {
		if e.Valid() {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSuspicionsNeedTwoTargetsOfFalseRTTs(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewSuspicions(SuspectConfig{Window: 10 * time.Minute, Self: "w1"})
	ev := func(w CrawlerID, target string, at time.Time) Evidence {
		return Evidence{Kind: FalseRTT, Accused: "liar", Witness: w, At: at, Target: netip.MustParseAddr(target),
			Claimed: time.Millisecond, ToTarget: 90 * time.Millisecond, ToClaimant: 10 * time.Millisecond}
	}
	if !s.Add(ev("w1", "192.0.2.1", now)) {
		t.Fatal("first evidence refused")
	}
	if s.Add(ev("w1", "192.0.2.1", now.Add(time.Second))) {
		t.Fatal("a repeat of the same witness and target counted again")
	}
	if s.Suspect("liar", now) {
		t.Fatal("one impossible answer made a suspect")
	}
	s.Add(ev("w1", "192.0.2.2", now.Add(time.Minute)))
	if !s.Suspect("liar", now.Add(time.Minute)) {
		t.Fatal("two targets answered impossibly: not a suspect")
	}
	if s.Suspect("w1", now) || s.Suspect("honest", now) {
		t.Fatal("a member without evidence is a suspect")
	}
	// the window forgets
	later := now.Add(10*time.Minute + 30*time.Second)
	if s.Suspect("liar", later) {
		t.Fatal("evidence past the window still counts")
	}
	if got := s.Suspects(later.Add(time.Minute)); len(got) != 0 || len(s.Evidence("liar")) != 0 {
		t.Fatalf("suspects %v, evidence %d after the window", got, len(s.Evidence("liar")))
	}
}

func TestSuspicionsWitnessQuorum(t *testing.T) {
	now := time.Unix(1_700_000_000, 0)
	s := NewSuspicions(SuspectConfig{Self: "me"})
	e := Evidence{Kind: FalseRTT, Accused: "x", Witness: "liar", At: now, Target: netip.MustParseAddr("192.0.2.1"),
		Claimed: time.Millisecond, ToTarget: 90 * time.Millisecond, ToClaimant: 10 * time.Millisecond}
	s.Add(e)
	e.Target = netip.MustParseAddr("192.0.2.2")
	s.Add(e)
	if s.Suspect("x", now) {
		t.Fatal("one accuser was enough")
	}
	if s.Add(Evidence{Kind: FalseRTT, Accused: "x", Witness: "w2", At: now, Target: e.Target, Claimed: time.Millisecond,
		ToTarget: 50 * time.Millisecond, ToClaimant: 49 * time.Millisecond}) {
		t.Fatal("an accusation whose measurements allow the claim was taken")
	}
	e.Witness = "w2"
	s.Add(e)
	if got := s.Suspects(now); len(got) != 1 || got[0] != "x" {
		t.Fatalf("two witnesses: suspects %v", got)
	}
}

func TestStalledSubnetMakesASuspect(t *testing.T) {
	since := time.Unix(1_700_000_000, 0)
	cfg := StallConfig{Grace: 5 * time.Minute}
	a := HandoffAudit{Subnet: 7, Owner: "o", Epoch: 3, Since: since}
	if cfg.Due(a, since.Add(4*time.Minute)) || !cfg.Due(a, since.Add(5*time.Minute)) {
		t.Fatal("grace period not kept")
	}
	if a.Progressed(since.Add(-time.Hour)) || !a.Progressed(since.Add(time.Minute)) || a.Progressed(time.Time{}) {
		t.Fatal("progress misjudged")
	}
	s := NewSuspicions(SuspectConfig{})
	at := since.Add(5 * time.Minute)
	if !s.Add(Evidence{Kind: Stalled, Accused: "o", Witness: "w", At: at, Subnet: 7, Handoff: since}) {
		t.Fatal("stall refused")
	}
	if !s.Suspect("o", at) {
		t.Fatal("a stalled subnet did not make a suspect")
	}
}
