package cluster

import (
	"encoding/xml"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func sampleExperiment() *Experiment {
	ex := &Experiment{Peers: 3, Hosts: 20, Pages: 200, Seed: 1, Latency: "formula", HostDist: "zipf"}
	for i, pol := range []string{"random", "hash", "micra", "optimal"} {
		r := &Result{Policy: pol, Peers: 3, Hosts: 20, TotalPages: 200, Pages: 200, CoveragePct: 100,
			OptimalPct: float64(10 + 25*i), SimOptimalPct: float64(12 + 25*i), ProbesPerHost: float64(i), SimProbesPerURL: float64(i) * 0.8,
			MakespanS: 60 - float64(10*i), DownloadS: 400 - float64(90*i), BytesFetched: 1000000, BytesToSink: 15000,
			PagesPerCrawler: map[string]int{"a": 100 - 10*i, "b": 60, "c": 40 + 10*i}}
		ex.Rows = append(ex.Rows, Row{Result: r, MakespanVsRandom: r.MakespanS / 60, DownloadVsRandom: r.DownloadS / 400, SimCostVsRandom: 1 - 0.2*float64(i)})
	}
	return ex
}

// The report holds every figure as well-formed SVG naming every policy, the
// page shows each figure and the table's figures, and the data beside it.
func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	ex := sampleExperiment()
	figs, err := WriteReport(dir, ex, "micra testnet run --experiment paper -n 3")
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) < 5 {
		t.Fatalf("%d figures", len(figs))
	}
	page, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	for _, f := range figs {
		b, err := os.ReadFile(filepath.Join(dir, f.File))
		if err != nil {
			t.Fatal(err)
		}
		d := xml.NewDecoder(strings.NewReader(string(b)))
		for {
			if _, err := d.Token(); err == io.EOF {
				break
			} else if err != nil {
				t.Fatalf("%s: not well-formed SVG: %v", f.File, err)
			}
		}
		for _, r := range ex.Rows {
			if !strings.Contains(string(b), ">"+r.Policy+"<") {
				t.Errorf("%s does not name policy %s", f.File, r.Policy)
			}
		}
		if !strings.Contains(string(page), `src="`+f.File+`"`) {
			t.Errorf("index.html does not show %s", f.File)
		}
	}
	for _, want := range []string{"micra testnet run --experiment paper -n 3", "<td>micra</td><td>60.0</td><td>62.0</td>", "experiment.json"} {
		if !strings.Contains(string(page), want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "experiment.json")); err != nil {
		t.Error(err)
	}
	if _, err := WriteReport(t.TempDir(), &Experiment{}, ""); err == nil {
		t.Error("a report of no policy written")
	}
}
