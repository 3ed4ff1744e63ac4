package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func runSim(t *testing.T, args ...string) (string, error) {
	t.Helper()
	cmd := simCmd()
	var out bytes.Buffer
	cmd.SetOut(&out)
	cmd.SetErr(&out)
	cmd.SetArgs(args)
	err := cmd.Execute()
	return out.String(), err
}

func TestParseThresholds(t *testing.T) {
	got, err := parseThresholds("25, 50ms,0.5s")
	if err != nil || len(got) != 3 || got[0] != 25*time.Millisecond || got[1] != 50*time.Millisecond || got[2] != 500*time.Millisecond {
		t.Fatalf("got %v, %v", got, err)
	}
	// decimal milliseconds are rounded, not truncated: 33.3 × 1e6 is
	// 33299999.99… in binary, and was once refused as not whole µs
	if got, err := parseThresholds("33.3,1.005,0.001"); err != nil || got[0] != 33300*time.Microsecond || got[1] != 1005*time.Microsecond || got[2] != time.Microsecond {
		t.Fatalf("got %v, %v", got, err)
	}
	if got, _ := parseThresholds("paper"); len(got) != 5 {
		t.Fatalf("paper thresholds: %v", got)
	}
	for _, bad := range []string{"", "x", "-5", "0", "inf", "NaN", "1e300", "1e-9", "0.5us", "0.0005", "2h"} {
		if _, err := parseThresholds(bad); err == nil {
			t.Errorf("threshold %q accepted", bad)
		}
	}
}

func TestSimCLI(t *testing.T) {
	plot := filepath.Join(t.TempDir(), "curve.svg")
	out, err := runSim(t, "--crawlers", "6", "--hosts", "200", "--threshold", "25,50", "--json", "--plot", plot,
		"--sites", "../../testnet/world/testdata/sites.csv", "--rtt", "../../testnet/world/testdata/rtt.csv")
	if err != nil {
		t.Fatalf("%v\n%s", err, out)
	}
	lines := strings.Split(strings.TrimSpace(out), "\n")
	if len(lines) != 2*5 { // 5 default policies × 2 thresholds
		t.Fatalf("%d JSON lines:\n%s", len(lines), out)
	}
	for _, l := range lines {
		var o struct {
			Policy      string   `json:"policy"`
			OptimalPct  *float64 `json:"optimal_pct"`
			Probes      *float64 `json:"probes_per_url"`
			Last50      *float64 `json:"probes_per_url_last50"`
			ThresholdMs float64  `json:"threshold_ms"`
		}
		if err := json.Unmarshal([]byte(l), &o); err != nil || o.Policy == "" || o.OptimalPct == nil || o.Probes == nil || o.Last50 == nil {
			t.Fatalf("bad line %q: %v", l, err)
		}
	}
	// random always runs (the crawl-cost baseline), so it can be traced
	if out, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--policies", "micra", "--trace", "2", "--trace-policy", "random"); err != nil || !strings.Contains(out, "random #1 ") {
		t.Fatalf("tracing the random baseline: %v\n%s", err, out)
	}
	// a plot path that cannot be written fails before the run, not after
	if out, err := runSim(t, "--crawlers", "4", "--hosts", "100", "--plot", filepath.Join(t.TempDir(), "no", "such", "dir.svg")); err == nil || strings.Contains(out, "optimal %") {
		t.Fatalf("bad plot path: %v, output %q", err, out)
	}
	// a run that fails leaves no empty plot behind
	gone := filepath.Join(t.TempDir(), "never.svg")
	if _, err := runSim(t, "--crawlers", "4", "--hosts", "100", "--seeds", "0", "--plot", gone); err == nil {
		t.Fatal("--seeds 0 accepted")
	}
	if _, err := os.Stat(gone); !os.IsNotExist(err) {
		t.Fatalf("a failed run left its plot file: %v", err)
	}
	svg, err := os.ReadFile(plot)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("plot: %v", err)
	}

	text, err := runSim(t, "--crawlers", "4", "--hosts", "100", "--seeds", "2")
	if err != nil || !strings.Contains(text, "optimal %") || !strings.Contains(text, "ipmicra") || !strings.Contains(text, "mean over 2 seeds") {
		t.Fatalf("text: %v\n%s", err, text)
	}

	bad := filepath.Join(t.TempDir(), "rtt.csv")
	os.WriteFile(bad, []byte("src,dst,rtt_ms\nams,xxx,5\n"), 0o644)
	if _, err := runSim(t, "--sites", "../../testnet/world/testdata/sites.csv", "--rtt", bad); err == nil || !strings.Contains(err.Error(), bad+":2: unknown site \"xxx\"") {
		t.Fatalf("bad rtt file: %v", err)
	}
	if out, err := runSim(t, "--host-dist", "zipf", "--hosts", "300", "--train", "200", "--policies", "micra", "--micra", "blocks=0.2", "--json"); err != nil || !strings.Contains(out, `"review-block-delegated"`) {
		t.Fatalf("--micra blocks=0.2 on zipf hosts delegates no block: %v\n%s", err, out)
	}
	if out, err := runSim(t, "--host-dist", "zipf", "--hosts", "300", "--train", "200", "--policies", "micra", "--micra", "blocks=0", "--json"); err != nil || strings.Contains(out, `"review-block-delegated"`) {
		t.Fatalf("--micra blocks=0 should turn block delegations off: %v\n%s", err, out)
	}
	if out, err := runSim(t, "--crawlers", "6", "--hosts", "200", "--policies", "micra", "--frontier", "--json"); err != nil || !strings.Contains(out, `"frontier":"micra"`) || !strings.Contains(out, `"frontier":"ipmicra"`) || strings.Count(out, "\n") != 3 {
		t.Fatalf("--frontier --json: %v\n%s", err, out) // micra, then the two frontiers
	}
	if out, err := runSim(t, "--crawlers", "6", "--hosts", "200", "--policies", "micra", "--frontier"); err != nil || !strings.Contains(out, "MICRA FRONTIER") || !strings.Contains(out, "IPMICRA FRONTIER") || !strings.Contains(out, "for 95 % optimal:") {
		t.Fatalf("--frontier: %v\n%s", err, out)
	}
	fplot := filepath.Join(t.TempDir(), "frontier.svg")
	if out, err := runSim(t, "--crawlers", "6", "--hosts", "200", "--policies", "micra", "--frontier-plot", fplot); err != nil || !strings.Contains(out, "MICRA FRONTIER") {
		t.Fatalf("--frontier-plot implies --frontier: %v\n%s", err, out)
	}
	if svg, err := os.ReadFile(fplot); err != nil || !bytes.Contains(svg, []byte("ipmicra (1 seed(s))")) {
		t.Fatalf("frontier plot: %v\n%s", err, svg)
	}
	if out, err := runSim(t, "--crawlers", "4", "--hosts", "100", "--frontier-plot", filepath.Join(t.TempDir(), "no", "such", "dir.svg")); err == nil || strings.Contains(out, "policy  optimal %") {
		t.Fatalf("bad frontier plot path: %v, output %q", err, out)
	}
	// --trace traces the policies' runs, not the frontier's sweep
	if out, err := runSim(t, "--crawlers", "4", "--hosts", "60", "--policies", "micra", "--trace", "1", "--trace-policy", "micra", "--frontier"); err != nil || strings.Count(out, "micra #0 ") != 1 {
		t.Fatalf("--trace with --frontier: %v, %d traces of decision 0\n%s", err, strings.Count(out, "micra #0 "), out)
	}
	if out, err := runSim(t, "--world-stats", "--hosts", "300"); err != nil || !strings.Contains(out, "implied stretch") {
		t.Fatalf("world stats: %v\n%s", err, out)
	}
	if out, err := runSim(t, "--latency", "hubs", "--crawlers", "6", "--hosts", "200", "--policies", "micra"); err != nil || !strings.Contains(out, "synthetic hub-routed matrix (90 sites") {
		t.Fatalf("--latency hubs: %v\n%s", err, out)
	}
	for _, args := range [][]string{{"--sites", "x.csv"}, {"--preset", "nope"}, {"--latency", "nope"},
		{"--latency", "hubs", "--sites", "../../testnet/world/testdata/sites.csv", "--rtt", "../../testnet/world/testdata/rtt.csv"}, {"--policies", "nope"}, {"--train", "5000"}, {"--balance", "sideways"}, {"--host-dist", "lumpy", "--hosts", "10"},
		{"--capacity-factor", "NaN"}, {"--capacity-factor", "-1"}, {"--capacity-factor", "1e30"}, {"--capacity-factor", "0"},
		{"--capacity-sigma", "-0.1"}, {"--capacity-sigma", "NaN"}, {"--capacity-sigma", "4"},
		{"--micra", "margin=-1"}, {"--micra", "margin=0.0001"}, {"--micra", "walk=0"}, {"--micra", "walk=1.5"},
		{"--ipv6", "NaN"}, {"--trace", "3", "--trace-policy", "micra", "--policies", "ipmicra"},
		{"--micra", "blocks=1"}, {"--micra", "blocks=-0.1"}, {"--micra", "blocks=NaN"}, {"--micra", "missfirst=Inf"}, {"--micra", "miss=NaN"},
		{"--trace", "3", "--trace-policy", "ipmicra-parallel"}} { // not a default policy: nothing traced
		if _, err := runSim(t, args...); err == nil {
			t.Errorf("%v accepted", args)
		}
	}
}

// TestSimScalePresetSmall: the scale preset's settings at a small size
// print the capacity line and table, and flags override the preset.
func TestSimScalePresetSmall(t *testing.T) {
	out, err := runSim(t, "--preset", "scale", "--crawlers", "8", "--hosts", "200", "--policies", "micra,hash")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"capacity: log-normal σ 0.5, mean ", "pages (1.5 × hosts/crawlers)", "balance least-cost", "room excess mean ms", "util max/mean"} {
		if !strings.Contains(out, want) {
			t.Errorf("missing %q in\n%s", want, out)
		}
	}
	out, err = runSim(t, "--preset", "scale", "--crawlers", "8", "--hosts", "200", "--policies", "micra", "--balance", "off", "--capacity-sigma", "0", "--capacity-factor", "2")
	if err != nil || !strings.Contains(out, "capacity: equal, mean 50 pages (2 × hosts/crawlers)") || !strings.Contains(out, "balance off") {
		t.Errorf("flags over the preset: %v\n%s", err, out)
	}
}
