package main

import (
	"bytes"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/testnet/bench"
)

// The text report prints the first network's figures once and every
// policy's delegation rows, overlay beside simulator.
func TestWriteBenchOverlay(t *testing.T) {
	row := func(name string) bench.PolicyRow {
		return bench.PolicyRow{Policy: name, Subnets: 7, Overlay: bench.QualityRow{OptimalPct: 97.5, Reasons: map[string]int{"b": 2, "a": 1}},
			Simulator: bench.QualityRow{OptimalPct: 98.3, Reasons: map[string]int{"confident": 3}}}
	}
	rep := &bench.OverlayReport{Peers: 4, Hosts: 30, Train: 19, Seed: 2, Policy: "ipmicra,micra", ThresholdMs: 50, Transport: "T",
		HeartbeatMs: 1000, Flood: true, UncachedSamples: 5, CalibrationRounds: 2, FailureDetectedBy: 3,
		Policies: []bench.PolicyRow{row("ipmicra"), row("micra")}}
	var out bytes.Buffer
	if err := writeBenchOverlay(&out, rep); err != nil {
		t.Fatal(err)
	}
	s := out.String()
	for _, want := range []string{"micra bench overlay — 4 peers in one process (T)\n",
		"world seed 2: 30 hosts (19 train), policy ipmicra,micra, threshold 50 ms; heartbeat 1000 ms, flood publish true",
		"— network of policy ipmicra", "cached owner lookup", "uncached DHT lookup p95", "calibration event to all 4 peers",
		"killed peer declared dead by all", "by 3 of 3", "hand-off messages per crawled page",
		"— policy ipmicra (own fresh network", "— policy micra (own fresh network", "0 (of 7 subnets)",
		"97.5 %", "simulator 98.3 %", "same loop, one engine per crawler", "one engine per crawler, records shared",
		"the same, crawlers named by this run's peer IDs", "decisions by reason", "a=1 b=2", "simulator confident=3"} {
		if !strings.Contains(s, want) {
			t.Errorf("report lacks %q:\n%s", want, s)
		}
	}
	if n := strings.Count(s, "cached owner lookup"); n != 1 {
		t.Errorf("network figures printed %d times", n)
	}
}
