package sim

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/delegation"
)

// TestCalibration: every evaluation host's first decision shows up as
// rounds; the rule stops only where the risk is under its threshold (Miss,
// or MissFirst after one probe); rounds the model calls near-certain misses
// (risk ≥ 1) miss far more often than those it stops on; and the counts of
// two seeds add up.
func TestCalibration(t *testing.T) {
	ctx := context.Background()
	var reps []*CalibrationReport
	for _, seed := range []uint64{3, 4} {
		cfg := small(seed)
		w, err := NewWorld(cfg)
		if err != nil {
			t.Fatal(err)
		}
		rep, err := w.Calibration(ctx, cfg)
		if err != nil {
			t.Fatal(err)
		}
		reps = append(reps, rep)
	}
	total := newCalibrationReport()
	for _, r := range reps {
		total.Add(r)
	}
	var stops, stopMissed, sure, sureMissed, rounds int
	for _, tab := range []*[calibrationRounds][]CalibrationBin{&total.Refined, &total.Bound} {
		for k := range calibrationRounds {
			for i, b := range tab[k] {
				rounds += b.Rounds
				if b.Missed > b.Rounds || b.Stops > b.Rounds {
					t.Fatalf("bin %d/%d counts %+v", k, i, b)
				}
				limit := 0.06 // Miss
				if k == 0 {
					limit = 0.1 // MissFirst
				}
				if lo := binLow(i); b.Stops > 0 && lo >= limit {
					t.Fatalf("%d stops after %d probe(s) in the bin from %g: the rule stops only under %g", b.Stops, k+1, lo, limit)
				}
				stops += b.Stops
				if b.Stops > 0 {
					stopMissed += b.Missed
				}
				if binLow(i) >= 1 {
					sure += b.Rounds
					sureMissed += b.Missed
				}
			}
		}
	}
	if total.Seeds != 2 || stops < 150 || sure == 0 {
		t.Fatalf("seeds %d, %d rounds, %d stops, %d rounds with risk ≥ 1: the table is nearly empty", total.Seeds, rounds, stops, sure)
	}
	if stopShare, sureShare := float64(stopMissed)/float64(stops), float64(sureMissed)/float64(sure); !(sureShare > 0.8 && stopShare < 0.2) {
		t.Fatalf("missed: %.2f of the rounds with risk ≥ 1, %.2f of the bins the rule stopped in; the risk does not rank the rounds", sureShare, stopShare)
	}
	var out bytes.Buffer
	if err := total.WriteText(&out); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(out.String(), "after 1 probe") || !strings.Contains(out.String(), "0.06–0.08") {
		t.Fatalf("table:\n%s", out.String())
	}
	// the hook sees the rounds without changing a decision
	cfg := small(3)
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	spec, _ := LookupPolicy("micra")
	plain, err := w.runPolicy(ctx, cfg.withDefaults(), spec)
	if err != nil {
		t.Fatal(err)
	}
	spec.Tweak = func(c *delegation.Config) { c.Micra.OnRound = func(delegation.RoundRisk) {} }
	hooked, err := w.runPolicy(ctx, cfg.withDefaults(), spec)
	if err != nil {
		t.Fatal(err)
	}
	for i := range plain.owner {
		if plain.owner[i] != hooked.owner[i] || plain.probes[i] != hooked.probes[i] {
			t.Fatalf("host %d: owner %d / %d, probes %d / %d with the hook", i, plain.owner[i], hooked.owner[i], plain.probes[i], hooked.probes[i])
		}
	}
}

func binLow(i int) float64 {
	if i == 0 {
		return 0
	}
	return CalibrationEdges[i-1]
}
