package main

import (
	"bytes"
	"context"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/testnet/bench"
)

// A small `micra bench liar`: the honest network holds no evidence against
// anyone, the lying member is caught by its own answers, and no honest
// member is accused in either run. (Ten crawlers: of the world's first
// eight, none is near enough crawler 0 to see its lies, and it is never
// caught — docs/SECURITY.md, "What it does not catch".)
func TestBenchLiar(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two in-process networks")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
	defer cancel()
	r, err := bench.RunLiar(ctx, bench.LiarOptions{Peers: 10, Hosts: 100, Seed: 1, Liar: 0, Samples: 4})
	if err != nil {
		t.Fatal(err)
	}
	for _, run := range []bench.LiarRun{r.Honest, r.Lying} {
		if run.FalseEvidence != 0 || run.FalseSuspects != 0 {
			t.Errorf("lying=%v: %d false evidence, %d false suspects", run.Lying, run.FalseEvidence, run.FalseSuspects)
		}
	}
	if r.Honest.LiarEvidence != 0 || r.Honest.RefusedAnswers != 0 || r.Honest.FirstSuspectS >= 0 {
		t.Errorf("honest network: %+v", r.Honest)
	}
	if r.Lying.LiarEvidence == 0 || r.Lying.RefusedAnswers == 0 || r.Lying.AllSuspectS < 0 {
		t.Errorf("the member's 1 ms answers were not caught by every honest peer: %+v", r.Lying)
	}
	if r.Lying.RoutedEnd != 0 || r.Lying.LiarAmissEnd != 0 {
		t.Errorf("after the re-routing, %d subnets still routed to the member, %d records naming it where it is optimal for no host",
			r.Lying.RoutedEnd, r.Lying.LiarAmissEnd)
	}
	var out bytes.Buffer
	printLiar(&out, r)
	for _, want := range []string{"false evidence (against honest members)", "every honest peer suspects it", "+ re-routed"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("printout lacks %q:\n%s", want, out.String())
		}
	}
}
