package main

import (
	"strings"
	"testing"
)

// TestMicraOptionsOutOfRangeRefused: --micra values that
// delegation.MicraConfig silently replaces by its default (or turns off)
// are accepted by parseMicraOptions, so the run is not the one asked for
// (e.g. `--micra shift=1.5,miss=0` prints exactly the default run's table).
// blocks= is validated; the other keys are not.
func TestMicraOptionsOutOfRangeRefused(t *testing.T) {
	for _, s := range []string{
		"miss=0",          // withDefaults: Miss <= 0 → 0.06
		"miss=-0.1",       // → 0.06
		"shift=1.5",       // documented 0..1; withDefaults → 0 (off)
		"maxprobes=2.5",   // int(2.5) = 2, silently
		"neighbours=-0.5", // int(-0.5) = 0 → default 2, while negative means none
		"maxprobes=0",     // → 12
		"reviewevery=0.5", // int → 0 → default 16
		"parallel=1e19",   // int overflow → ≤ 0 → default 1
	} {
		if _, err := parseMicraOptions(s); err == nil {
			t.Errorf("--micra %s accepted (silently replaced by the default or truncated)", s)
		}
	}
}

// TestDuplicatePoliciesRefused: --policies hash,hash runs hash twice
// and prints two identical rows (two JSON lines for one policy).
func TestDuplicatePoliciesRefused(t *testing.T) {
	out, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--policies", "hash,hash", "--json")
	if err == nil {
		if n := strings.Count(out, `"policy":"hash"`); n != 1 {
			t.Fatalf("--policies hash,hash accepted: %d rows for hash\n%s", n, out)
		}
	}
}
