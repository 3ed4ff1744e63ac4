package sim

import (
	"testing"
)

// When no position of the country prior explains an answer (the
// host is nearer that crawler than every listed position — 12 of 1000 hosts
// of the paper world, seed 1, always at the host's optimal crawler), the
// posterior keeps the old position weights but gives the crawler a floor at
// its stretch-1 bound of each position, i.e. ABOVE its own answer, although
// jitter ≥ 0 means floor ≤ answer. The crawler that answered fastest is then
// ranked behind a crawler whose floor is provably higher.
func TestOracleUnexplainedAnswerFloorNotAboveAnswer(t *testing.T) {
	w, err := NewWorld(small(5))
	if err != nil {
		t.Fatal(err)
	}
	o := newOracleModel(w, oracleCells, oraclePost)
	n := len(w.Crawlers)
	d := [][]float64{make([]float64, n), make([]float64, n)}
	for c := range n {
		d[0][c], d[1][c] = 1e4, 1e4
	}
	// crawler 0: 1 ms of fibre at position 0, 20 ms at position 1, 1 ms access;
	// crawler 1: 1.2 ms at both, 2 ms access
	d[0][0], d[1][0] = 1, 20
	d[0][1], d[1][1] = 1.2, 1.2
	v := o.mixView(0, []float64{0.8, 0.2}, d, nil)
	for c := range n {
		v.base[c] = 2
	}
	v.base[0] = 1
	if p := o.priorChoice(&v); p.choice != 0 {
		t.Fatalf("setup: prior choice %d, want 0", p.choice)
	}
	// crawler 0 answers 1.8 ms (floor_0 ≤ 1.8, below its bound 2.0 at every
	// listed position); crawler 1 answers 3.3 ms (floor_1 ≥ 1.2 + 2 = 3.2)
	answers := map[int32]float64{0: 1.8, 1: 3.3}
	probe := func(c int32) (float64, bool) {
		if y, ok := answers[c]; ok {
			return y, true
		}
		return 1000, true
	}
	if p := o.posterior(d[0][0], v.base[0], 1.8); p.mean > 1.8 {
		t.Errorf("posterior mean floor %.3f ms above the answer 1.8 ms (floor ≤ answer always)", p.mean)
	}
	tr := o.trace(&v, probe, 1e-6, n)
	if got := tr.choice[len(tr.choice)-1]; got != 0 {
		t.Errorf("answers 0: 1.8 ms, 1: 3.3 ms (floor_1 ≥ 3.2 ms > floor_0): oracle chose crawler %d after probing %v", got, tr.order)
	}
}
