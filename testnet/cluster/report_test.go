package cluster

import (
	"bytes"
	"encoding/json"
	"encoding/xml"
	"fmt"
	"html/template"
	"image/color"
	"io"
	"math"
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
		if pol == "micra" { // a crawler that delivered nothing is not in the map
			r.PagesPerCrawler = map[string]int{"a": 140, "b": 60}
		}
		ex.Rows = append(ex.Rows, Row{Result: r, MakespanVsRandom: r.MakespanS / 60, DownloadVsRandom: r.DownloadS / 400, SimCostVsRandom: 1 - 0.2*float64(i)})
	}
	return ex
}

// bars reads the bars of one colour off a gonum/plot SVG: the heights of
// the filled rectangles, in the order drawn (the bars left to right, then
// the legend's swatch).
func bars(t *testing.T, svg []byte, fill string) []float64 {
	t.Helper()
	var hs []float64
	d := xml.NewDecoder(bytes.NewReader(svg))
	for {
		tok, err := d.Token()
		if err == io.EOF {
			return hs
		}
		if err != nil {
			t.Fatalf("not well-formed SVG: %v", err)
		}
		el, ok := tok.(xml.StartElement)
		if !ok || el.Name.Local != "path" {
			continue
		}
		var path, style string
		for _, a := range el.Attr {
			switch a.Name.Local {
			case "d":
				path = a.Value
			case "style":
				style = a.Value
			}
		}
		if !strings.Contains(style, "fill:"+fill) {
			continue
		}
		// M x,y0 L x,y1 L x',y1 L x',y0 Z
		var x0, y0, x1, y1, x2, y2, x3, y3 float64
		if _, err := fmt.Sscanf(path, "M%g,%gL%g,%gL%g,%gL%g,%gZ", &x0, &y0, &x1, &y1, &x2, &y2, &x3, &y3); err != nil {
			t.Fatalf("bar %q: %v", path, err)
		}
		hs = append(hs, y1-y0)
	}
}

// The report holds every figure as well-formed SVG naming every policy,
// the bar charts draw one bar per policy and series, as tall as its value;
// the page shows the run's parameters, the command, a table of the figures
// with the papers' equivalents, every figure with its caption, and the
// table's figures.
func TestWriteReport(t *testing.T) {
	dir := t.TempDir()
	ex := sampleExperiment()
	cmd := ShellQuote([]string{"micra", "testnet", "run", "--experiment", "paper", "-n", "3", "--dir", "/tmp/a b"})
	figs, err := WriteReport(dir, ex, cmd)
	if err != nil {
		t.Fatal(err)
	}
	if len(figs) != 5 {
		t.Fatalf("%d figures, want nearest, probes, time, sink, load", len(figs))
	}
	b, err := os.ReadFile(filepath.Join(dir, "index.html"))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	col := func(f func(Row) float64) []float64 {
		var v []float64
		for _, r := range ex.Rows {
			v = append(v, f(r))
		}
		return v
	}
	// each bar chart's series, in the palette's order
	series := map[string][][]float64{
		"nearest.svg": {col(func(r Row) float64 { return r.OptimalPct }), col(func(r Row) float64 { return r.SimOptimalPct })},
		"probes.svg":  {col(func(r Row) float64 { return r.ProbesPerHost }), col(func(r Row) float64 { return r.SimProbesPerURL })},
		"time.svg": {col(func(r Row) float64 { return r.MakespanVsRandom }), col(func(r Row) float64 { return r.DownloadVsRandom }),
			col(func(r Row) float64 { return r.SimCostVsRandom })},
		"sink.svg": {col(func(r Row) float64 { return 1.5 })},
	}
	for i, f := range figs {
		svg, err := os.ReadFile(filepath.Join(dir, f.File))
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range ex.Rows {
			if !bytes.Contains(svg, []byte(">"+r.Policy+"<")) {
				t.Errorf("%s does not name policy %s", f.File, r.Policy)
			}
		}
		for k, want := range series[f.File] {
			c := palette[k].(color.RGBA)
			hs := bars(t, svg, fmt.Sprintf("#%02X%02X%02X", c.R, c.G, c.B))
			swatch := 0
			if len(series[f.File]) > 1 {
				swatch = 1 // the legend's
			}
			if len(hs) != len(ex.Rows)+swatch {
				t.Errorf("%s, series %d: %d bars, want one per policy (%d) and %d in the legend", f.File, k, len(hs), len(ex.Rows), swatch)
				continue
			}
			// bars stand on 0: heights in proportion to the values
			for j := range ex.Rows {
				if got, w := hs[j]/hs[0], want[j]/want[0]; math.Abs(got-w) > 0.01*w {
					t.Errorf("%s, series %d, %s: bar %.3f × the first, want %.3f", f.File, k, ex.Rows[j].Policy, got, w)
				}
			}
		}
		if f.File == "load.svg" {
			// one line per policy, a point per crawler (those that
			// delivered nothing too)
			for k, r := range ex.Rows {
				c := palette[k].(color.RGBA)
				stroke := fmt.Sprintf("stroke:#%02X%02X%02X", c.R, c.G, c.B)
				var line string
				for _, l := range strings.Split(string(svg), "\n") {
					if strings.Contains(l, stroke) {
						line = l
						break
					}
				}
				if n := strings.Count(line, "L") + 1; n != r.Peers {
					t.Errorf("load.svg, %s: %d points, want one per crawler (%d): %s", r.Policy, n, r.Peers, line)
				}
			}
		}
		if f.Paper == "" || f.Caption == "" {
			t.Errorf("%s: no caption or paper figure", f.File)
		}
		n := fmt.Sprint(i + 1)
		for _, want := range []string{
			`<figure id="fig` + n + `"><img src="` + f.File + `"`,
			`<b>Figure ` + n + `.</b> ` + template.HTMLEscapeString(f.Caption),
			`<a href="#fig` + n + `">` + n + `. ` + template.HTMLEscapeString(f.Title) + `</a></td><td>` + template.HTMLEscapeString(f.Paper) + `</td>`,
		} {
			if !strings.Contains(page, want) {
				t.Errorf("index.html lacks %q", want)
			}
		}
	}
	for _, want := range []string{
		"<code>" + template.HTMLEscapeString(cmd) + "</code>",
		"<tr><th>crawler nodes</th><td>3</td></tr>", "<tr><th>hosts (pages)</th><td>20 (200)</td></tr>",
		"<tr><th>seed</th><td>1</td></tr>", "<tr><th>world: latency model</th><td>formula</td></tr>",
		"<td>random, hash, micra, optimal</td>",
		"<td>micra</td><td>60.0</td><td>62.0</td>", "<td>0.55</td><td>0.60</td><td>", // Σ download: × random, (sim), `href="experiment.json"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("index.html lacks %q", want)
		}
	}
	if strings.Contains(page, "<script") || strings.Contains(page, "http://") || strings.Contains(page, "https://") {
		t.Error("index.html loads something: it should open from the disk alone")
	}
	js, err := os.ReadFile(filepath.Join(dir, "experiment.json"))
	if err != nil {
		t.Fatal(err)
	}
	var back Experiment
	if err := json.Unmarshal(js, &back); err != nil || len(back.Rows) != len(ex.Rows) || back.Rows[2].OptimalPct != 60 {
		t.Errorf("experiment.json: %v, %d rows", err, len(back.Rows))
	}
	if _, err := WriteReport(t.TempDir(), &Experiment{}, ""); err == nil {
		t.Error("a report of no policy written")
	}
}
