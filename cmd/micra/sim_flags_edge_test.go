package main

import (
	"math"
	"runtime/debug"
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
		"locate=0",        // → default 2
		"locate=9",        // withDefaults caps at 8
		"locate=1.5",      // int(1.5) = 1, silently
	} {
		if _, err := parseMicraOptions(s); err == nil {
			t.Errorf("--micra %s accepted (silently replaced by the default or truncated)", s)
		}
	}
}

// TestMicraLocateOption: --micra locate=N sets MicraConfig.Locate, a
// negative number turning it off.
func TestMicraLocateOption(t *testing.T) {
	for s, want := range map[string]int{"locate=4": 4, "locate=-1": -1, "locate=8": 8} {
		m, err := parseMicraOptions(s)
		if err != nil || m.Locate != want {
			t.Errorf("--micra %s: Locate %d, %v; want %d", s, m.Locate, err, want)
		}
	}
}

// TestMemoryLimit: --memory-limit sets the Go runtime's soft memory limit
// in MiB (0: none) and refuses a negative number, naming the flag.
func TestMemoryLimit(t *testing.T) {
	defer debug.SetMemoryLimit(debug.SetMemoryLimit(-1))
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--memory-limit", "-5"); err == nil || !strings.Contains(err.Error(), "--memory-limit") {
		t.Fatalf("--memory-limit -5: %v, want an error naming the flag", err)
	}
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--memory-limit", "3000"); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != 3000<<20 {
		t.Fatalf("--memory-limit 3000: runtime limit %d, want %d", got, 3000<<20)
	}
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--memory-limit", "0"); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetMemoryLimit(-1); got != math.MaxInt64 {
		t.Fatalf("--memory-limit 0: runtime limit %d, want none", got)
	}
}

// TestGCPercent: --gc-percent sets the collector's heap growth and
// refuses 0, naming the flag; the scale preset takes 50 unless GOGC or the
// flag says otherwise.
func TestGCPercent(t *testing.T) {
	defer debug.SetGCPercent(debug.SetGCPercent(100))
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--gc-percent", "0"); err == nil || !strings.Contains(err.Error(), "--gc-percent") {
		t.Fatalf("--gc-percent 0: %v, want an error naming the flag", err)
	}
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--gc-percent", "70"); err != nil {
		t.Fatal(err)
	}
	if got := debug.SetGCPercent(100); got != 70 {
		t.Fatalf("--gc-percent 70: runtime %d %%", got)
	}
	for _, c := range []struct {
		preset  string
		flag    int
		changed bool
		gogc    string
		want    int
		set     bool
	}{
		{"scale", 100, false, "", scaleGCPercent, true},
		{"scale", 100, false, "200", 0, false},
		{"scale", 80, true, "200", 80, true},
		{"paper", 100, false, "", 0, false},
		{"paper", 30, true, "", 30, true},
	} {
		if got, set := simGCPercent(c.preset, c.flag, c.changed, c.gogc); got != c.want || set != c.set {
			t.Errorf("preset %s, flag %d (given %v), GOGC %q: %d, %v; want %d, %v", c.preset, c.flag, c.changed, c.gogc, got, set, c.want, c.set)
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
