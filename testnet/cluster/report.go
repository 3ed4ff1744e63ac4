package cluster

import (
	"encoding/json"
	"fmt"
	"html/template"
	"image/color"
	"os"
	"path/filepath"
	"slices"
	"sort"

	"gonum.org/v1/plot"
	"gonum.org/v1/plot/plotter"
	"gonum.org/v1/plot/vg"
)

// The experiment's report: the paper's figures as SVG, drawn from the
// Experiment with gonum/plot, and one HTML page that shows them beside the
// table (no scripts, no network: it opens from the disk).

// ReportFigure is one plot of the report.
type ReportFigure struct {
	File    string // SVG file name in the report directory
	Title   string
	Caption string // what it shows, and the paper's figure it stands for
	Paper   string // the paper's figure or table it is the equivalent of
}

// WriteReport writes dir/experiment.json, one SVG per figure and
// dir/index.html. command is how the run was started (shown on the page).
func WriteReport(dir string, ex *Experiment, command string) ([]ReportFigure, error) {
	if len(ex.Rows) == 0 {
		return nil, fmt.Errorf("cluster: report: the experiment has no policy")
	}
	if err := os.MkdirAll(dir, 0o755); err != nil {
		return nil, err
	}
	js, err := json.MarshalIndent(ex, "", "  ")
	if err != nil {
		return nil, err
	}
	if err := os.WriteFile(filepath.Join(dir, "experiment.json"), append(js, '\n'), 0o644); err != nil {
		return nil, err
	}
	names := make([]string, len(ex.Rows))
	for i, r := range ex.Rows {
		names[i] = r.Policy
	}
	col := func(f func(Row) float64) plotter.Values {
		v := make(plotter.Values, len(ex.Rows))
		for i, r := range ex.Rows {
			v[i] = f(r)
		}
		return v
	}
	figs := []struct {
		ReportFigure
		y      string
		series []series
	}{
		{ReportFigure{File: "nearest.svg", Title: "Hosts crawled by their nearest crawler",
			Caption: "% of hosts whose pages were fetched by the crawler nearest to them in the world's latency model, per delegation policy: the testnet's crawl beside the simulator on the same world (the IPMicra papers' \"% optimal delegation\").",
			Paper:   "IPMicra: % optimal delegation"},
			"% of hosts", []series{{"testnet", col(func(r Row) float64 { return r.OptimalPct })}, {"simulator", col(func(r Row) float64 { return r.SimOptimalPct })}}},
		{ReportFigure{File: "probes.svg", Title: "Probes per host",
			Caption: "Latency probes per host delegated: the testnet's (summed from the nodes' metrics) beside the simulator's per URL (the papers' probes-per-URL cost of location awareness; random and hash probe nothing).",
			Paper:   "IPMicra: probes per URL"},
			"probes", []series{{"testnet", col(func(r Row) float64 { return r.ProbesPerHost })}, {"simulator", col(func(r Row) float64 { return r.SimProbesPerURL })}}},
		{ReportFigure{File: "time.svg", Title: "Crawl time relative to random delegation",
			Caption: "The crawl's makespan and Σ download time over random delegation's in the same run, and the simulator's Σ download time over random's (the papers' download time vs random: ≈ 1/10 on the real Internet). Lower is better.",
			Paper:   "IPMicra: crawl makespan and download time vs random"},
			"× random", []series{
				{"makespan", col(func(r Row) float64 { return r.MakespanVsRandom })},
				{"Σ download", col(func(r Row) float64 { return r.DownloadVsRandom })},
				{"Σ download (simulator)", col(func(r Row) float64 { return r.SimCostVsRandom })}}},
		{ReportFigure{File: "sink.svg", Title: "Bytes shipped to the sink",
			Caption: "Compressed carriers sent to the index sink as % of the bytes fetched from the web (UCYMicra's goal: at most 1/20, i.e. 5 %).",
			Paper:   "UCYMicra: data sent to the central index vs data downloaded"},
			"% of bytes fetched", []series{{"to the sink", col(func(r Row) float64 {
				return 100 * float64(r.BytesToSink) / float64(max(1, r.BytesFetched))
			})}}},
	}
	var out []ReportFigure
	for _, f := range figs {
		if err := barChart(filepath.Join(dir, f.File), f.Title, f.y, names, f.series); err != nil {
			return nil, fmt.Errorf("cluster: report %s: %w", f.File, err)
		}
		out = append(out, f.ReportFigure)
	}
	load := ReportFigure{File: "load.svg", Title: "Pages per crawler",
		Caption: "Pages each crawler fetched, busiest first, one line per policy (load balance: location-aware policies load the crawlers near the hosting subnets).",
		Paper:   "no figure of the papers: IPMicra's load balancing (no crawler above its capacity)"}
	if err := loadChart(filepath.Join(dir, load.File), load.Title, ex); err != nil {
		return nil, fmt.Errorf("cluster: report %s: %w", load.File, err)
	}
	out = append(out, load)
	if err := writeIndex(filepath.Join(dir, "index.html"), ex, out, command); err != nil {
		return nil, err
	}
	return out, nil
}

type series struct {
	name string
	v    plotter.Values
}

// palette: colour-blind-safe (Okabe–Ito).
var palette = []color.Color{
	color.RGBA{0, 114, 178, 255}, color.RGBA{230, 159, 0, 255}, color.RGBA{0, 158, 115, 255},
	color.RGBA{204, 121, 167, 255}, color.RGBA{86, 180, 233, 255}, color.RGBA{213, 94, 0, 255},
}

func barChart(file, title, ylabel string, names []string, ss []series) error {
	p := plot.New()
	p.Title.Text, p.Y.Label.Text = title, ylabel
	p.Y.Min = 0
	w := vg.Points(60 / float64(len(ss)))
	for i, s := range ss {
		b, err := plotter.NewBarChart(s.v, w)
		if err != nil {
			return err
		}
		b.Color, b.LineStyle.Width = palette[i%len(palette)], 0
		b.Offset = w * vg.Length(float64(i)-float64(len(ss)-1)/2)
		p.Add(b)
		if len(ss) > 1 {
			p.Legend.Add(s.name, b)
		}
	}
	// headroom above the tallest bar for the legend
	top := 0.0
	for _, s := range ss {
		for _, v := range s.v {
			top = max(top, v)
		}
	}
	p.Y.Max = 1.35 * max(top, 1e-9)
	p.Legend.Top = true
	p.NominalX(names...)
	return p.Save(6*vg.Inch, 3.6*vg.Inch, file)
}

func loadChart(file, title string, ex *Experiment) error {
	p := plot.New()
	p.Title.Text, p.X.Label.Text, p.Y.Label.Text = title, "crawlers, busiest first", "pages"
	p.Y.Min = 0
	for i, r := range ex.Rows {
		loads := make([]int, 0, max(r.Peers, len(r.PagesPerCrawler)))
		for _, n := range r.PagesPerCrawler {
			loads = append(loads, n)
		}
		// the crawlers that delivered nothing are not in the map
		for len(loads) < r.Peers {
			loads = append(loads, 0)
		}
		sort.Sort(sort.Reverse(sort.IntSlice(loads)))
		pts := make(plotter.XYs, len(loads))
		for j, n := range loads {
			pts[j].X, pts[j].Y = float64(j+1), float64(n)
		}
		l, err := plotter.NewLine(pts)
		if err != nil {
			return err
		}
		l.Color, l.Width = palette[i%len(palette)], vg.Points(1.5)
		p.Add(l)
		p.Legend.Add(r.Policy, l)
		if len(loads) > 0 {
			p.Y.Max = max(p.Y.Max, 1.35*float64(loads[0]))
		}
	}
	p.Legend.Top = true
	return p.Save(6*vg.Inch, 3.6*vg.Inch, file)
}

var indexTmpl = template.Must(template.New("index").Funcs(template.FuncMap{
	"pct": func(a, b int64) float64 { return 100 * float64(a) / float64(max(1, b)) },
	"inc": func(i int) int { return i + 1 },
}).Parse(`<!doctype html>
<html lang="en"><head><meta charset="utf-8">
<title>micra testnet: the paper's evaluation</title>
<style>
body{font:15px/1.45 system-ui,sans-serif;max-width:62rem;margin:2rem auto;padding:0 1rem;color:#222}
table{border-collapse:collapse;margin:1rem 0}td,th{padding:.25rem .6rem;border-bottom:1px solid #ddd;text-align:right}
th:first-child,td:first-child{text-align:left}#run th,#figures td,#figures th{text-align:left}figure{margin:2rem 0}img{max-width:100%}code{background:#f4f4f4;padding:.1rem .3rem}
figcaption{color:#555}
</style></head><body>
<h1>The paper's evaluation on real processes</h1>
<p>{{.Ex.Peers}} crawler nodes and an index sink on 127.0.0.1 in an emulated world crawl the same synthetic web once per
delegation policy, each on a fresh testnet; the simulator's figures are for the same world and seed.</p>
<table id="run"><tr><th>crawler nodes</th><td>{{.Ex.Peers}}</td></tr>
<tr><th>hosts (pages)</th><td>{{.Ex.Hosts}} ({{.Ex.Pages}})</td></tr>
<tr><th>seed</th><td>{{.Ex.Seed}}</td></tr>
<tr><th>world: latency model</th><td>{{.Ex.Latency}}</td></tr>
<tr><th>world: hosts' addresses</th><td>{{.Ex.HostDist}}</td></tr>
<tr><th>round trips between peers</th><td>{{printf "%g" .Ex.WireScale}} × the world's</td></tr>
<tr><th>policies</th><td>{{range $i, $r := .Ex.Rows}}{{if $i}}, {{end}}{{$r.Policy}}{{end}}</td></tr></table>
<p>Reproduce: <code>{{.Command}}</code> · the data: <a href="experiment.json">experiment.json</a> (what <code>--json</code> prints)</p>
<h2>The table</h2>
<table><tr><th>policy</th><th>at nearest %</th><th>(sim)</th><th>probes/host</th><th>(sim)</th><th>makespan s</th><th>× random</th><th>Σ download s</th><th>× random</th><th>(sim)</th><th>× optimal</th><th>coverage %</th><th>overlap</th><th>fetched twice</th><th>to sink %</th></tr>
{{range .Ex.Rows}}<tr><td>{{.Policy}}</td><td>{{printf "%.1f" .OptimalPct}}</td><td>{{printf "%.1f" .SimOptimalPct}}</td><td>{{printf "%.2f" .ProbesPerHost}}</td><td>{{printf "%.2f" .SimProbesPerURL}}</td><td>{{printf "%.1f" .MakespanS}}</td><td>{{printf "%.2f" .MakespanVsRandom}}</td><td>{{printf "%.1f" .DownloadS}}</td><td>{{printf "%.2f" .DownloadVsRandom}}</td><td>{{printf "%.2f" .SimCostVsRandom}}</td><td>{{printf "%.2f" .DownloadVsOptimal}}</td><td>{{printf "%.1f" .CoveragePct}}</td><td>{{.Overlap}}</td><td>{{.DuplicateFetches}}</td><td>{{printf "%.1f" (pct .BytesToSink .BytesFetched)}}</td></tr>
{{end}}</table>
<h2>Figures</h2>
<table id="figures"><tr><th>figure</th><th>the papers' equivalent</th><th>file</th></tr>
{{range $i, $f := .Figures}}<tr><td><a href="#fig{{inc $i}}">{{inc $i}}. {{$f.Title}}</a></td><td>{{$f.Paper}}</td><td><a href="{{$f.File}}">{{$f.File}}</a></td></tr>
{{end}}</table>
{{range $i, $f := .Figures}}<figure id="fig{{inc $i}}"><img src="{{$f.File}}" alt="{{$f.Title}}"><figcaption><b>Figure {{inc $i}}.</b> {{$f.Caption}}</figcaption></figure>
{{end}}</body></html>
`))

func writeIndex(file string, ex *Experiment, figs []ReportFigure, command string) error {
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	err = indexTmpl.Execute(f, struct {
		Ex      *Experiment
		Figures []ReportFigure
		Command string
	}{ex, slices.Clip(figs), command})
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	return err
}
