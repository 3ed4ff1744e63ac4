package chaos

import (
	"strings"
	"testing"

	"github.com/micra-crawler/micra/testnet/cluster"
)

func TestParseKinds(t *testing.T) {
	ks, err := ParseKinds([]string{"kill", "partition"})
	if err != nil || len(ks) != 2 || ks[0] != Kill || ks[1] != Partition {
		t.Fatalf("%v, %v", ks, err)
	}
	if _, err := ParseKinds([]string{"kill", "reboot"}); err == nil || !strings.Contains(err.Error(), `"reboot"`) {
		t.Fatalf("an unknown fault: %v, want its name in the error", err)
	}
}

// The table says what held: each invariant fails on its own measure, and
// the run holds only when every one does.
func TestChecks(t *testing.T) {
	good := func() *run {
		r := &run{o: Options{}, rep: &Report{
			Result:        &cluster.Result{Pages: 1000, TotalPages: 1000, CoveragePct: 100, Complete: true, Overlap: 5, DuplicateFetches: 12},
			Delivery:      cluster.Delivery{Head: 1010, Followed: 1010},
			ConvergeS:     []float64{3, 12.5},
			LastConvergeS: 12.5,
		}}
		r.o.defaults()
		return r
	}
	r := good()
	r.checks()
	if !r.rep.Held {
		t.Fatalf("a good run: %+v", r.rep.Checks)
	}
	for name, spoil := range map[string]func(*Report){
		"coverage":                  func(p *Report) { p.Result.Pages, p.Result.CoveragePct = 999, 99.9 },
		"overlap at the sink":       func(p *Report) { p.Result.Overlap = 11 },
		"acknowledged records lost": func(p *Report) { p.Delivery.Lost = 1 },
		"ingested twice":            func(p *Report) { p.Delivery.IngestedTwice = 1 },
		"subscriber resumes":        func(p *Report) { p.Delivery.Gaps = 1 },
		// (the last fault is one of every fault)
		"owners agree after the last fault": func(p *Report) { p.LastConvergeS, p.ConvergeS[1] = -1, -1 },
		"owners agree after every fault":    func(p *Report) { p.ConvergeS[0] = 31 },
	} {
		r := good()
		spoil(r.rep)
		r.checks()
		if r.rep.Held {
			t.Errorf("%s spoiled, the run still held", name)
		}
		for _, c := range r.rep.Checks {
			want := c.Invariant != name && !(name == "owners agree after the last fault" && c.Invariant == "owners agree after every fault")
			if c.Held != want {
				t.Errorf("%s spoiled: %q held %v (%s)", name, c.Invariant, c.Held, c.Measured)
			}
		}
	}
}
