package cluster

import (
	"context"
	"fmt"
	"path/filepath"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/emu"
	"github.com/micra-crawler/micra/testnet/sim"
)

// PaperPolicies are the delegations the paper's evaluation compares, and
// optimal: every crawler probed for every host (the reference for Σ
// download time).
var PaperPolicies = []string{"random", "hash", "ipmicra", "micra", "optimal"}

// Row is one policy of the experiment: the testnet's crawl beside the
// simulator's figures for the same world and seed.
type Row struct {
	*Result
	// MakespanVsRandom and DownloadVsRandom are the crawl's makespan and Σ
	// download time over random delegation's in the same run;
	// DownloadVsOptimal over the probe-everyone delegation's.
	MakespanVsRandom  float64 `json:"makespan_vs_random"`
	DownloadVsRandom  float64 `json:"download_vs_random"`
	DownloadVsOptimal float64 `json:"download_vs_optimal"`
	// SimCostVsRandom is the simulator's Σ download time over random's
	// (the crawl's SimOptimalPct and SimProbesPerURL are in Result).
	SimCostVsRandom float64 `json:"sim_cost_vs_random"`
	WallS           float64 `json:"wall_s"`
}

// Experiment is the paper's evaluation on real processes.
type Experiment struct {
	Peers    int    `json:"peers"`
	Hosts    int    `json:"hosts"`
	Pages    int    `json:"total_pages"`
	Seed     uint64 `json:"seed"`
	Latency  string `json:"latency"`
	HostDist string `json:"host_dist"`
	// WireScale is the round trips between peers over the world's.
	WireScale float64 `json:"wire_scale"`
	Rows      []Row   `json:"policies"`
}

// RunExperiment crawls the same synthetic web in the same world once per
// policy, each on a fresh testnet under DIR/<policy>, and runs the
// simulator on that world beside it. each is called after every crawl.
func RunExperiment(ctx context.Context, o Options, policies []string, timeout time.Duration, each func(Row, Progress)) (*Experiment, error) {
	o.defaults()
	if len(policies) == 0 {
		policies = PaperPolicies
	}
	ex := &Experiment{Peers: o.Peers, Seed: o.World.Seed, Latency: or(o.World.Latency, "formula"), HostDist: or(o.World.HostDist, "zipf"),
		WireScale: o.World.WireScale}
	base := o.Dir
	for _, pol := range policies {
		po := o
		po.Policy, po.Dir = pol, filepath.Join(base, pol)
		t0 := time.Now()
		t, err := Up(ctx, po)
		if err != nil {
			return ex, fmt.Errorf("%s: %w", pol, err)
		}
		cctx, cancel := context.WithTimeout(ctx, timeout)
		var last Progress
		r, err := t.Crawl(cctx, func(p Progress) {
			last = p
			if each != nil {
				each(Row{Result: &Result{Policy: pol}}, p)
			}
		})
		cancel()
		downErr := t.Down()
		if err != nil {
			return ex, fmt.Errorf("%s: %w", pol, err)
		}
		if downErr != nil {
			return ex, fmt.Errorf("%s: stopping: %w", pol, downErr)
		}
		row := Row{Result: r, WallS: time.Since(t0).Seconds()}
		ex.Hosts, ex.Pages = r.Hosts, r.TotalPages
		ex.Rows = append(ex.Rows, row)
		if each != nil {
			each(row, last)
		}
	}
	// ratios within the run
	var random, optimal *Result
	for _, r := range ex.Rows {
		switch r.Policy {
		case "random":
			random = r.Result
		case "optimal":
			optimal = r.Result
		}
	}
	for i := range ex.Rows {
		r := &ex.Rows[i]
		if random != nil && random.MakespanS > 0 {
			r.MakespanVsRandom = r.MakespanS / random.MakespanS
			r.DownloadVsRandom = r.DownloadS / random.DownloadS
		}
		if optimal != nil && optimal.DownloadS > 0 {
			r.DownloadVsOptimal = r.DownloadS / optimal.DownloadS
		}
	}
	return ex, simulate(ctx, o, ex)
}

// Simulate runs `micra sim` on the testnet's world (seed, crawlers, hosts,
// host distribution, latency model) for the policies, and returns each
// one's figures over every host (the crawl has no training split).
func Simulate(ctx context.Context, o Options, hosts int, policies []string) (map[string]sim.Result, error) {
	o.defaults()
	tree := o.Tree
	if tree == nil {
		var err error
		if tree, err = hierarchy.Default(); err != nil {
			return nil, err
		}
	}
	spec := o.World
	spec.Crawlers = o.Peers + o.Spare // the world Up places
	spec.Hosts = make([]emu.Host, hosts)
	cfg, err := spec.SimConfig(tree)
	if err != nil {
		return nil, err
	}
	cfg.Policies = policies
	// as the nodes decide (node.DefaultConfig): load balancing off
	cfg.Engine.Balance = delegation.BalanceOff
	w, err := sim.NewWorldContext(ctx, cfg)
	if err != nil {
		return nil, err
	}
	rep, _, err := sim.Run(ctx, cfg, w)
	if err != nil {
		return nil, err
	}
	out := map[string]sim.Result{}
	for _, r := range rep.Results {
		out[r.Policy] = r
	}
	return out, nil
}

// simulate fills each row's simulator figures.
func simulate(ctx context.Context, o Options, ex *Experiment) error {
	var names []string
	for _, r := range ex.Rows {
		names = append(names, r.Policy)
	}
	res, err := Simulate(ctx, o, ex.Hosts, names)
	if err != nil {
		return err
	}
	for i := range ex.Rows {
		s := res[ex.Rows[i].Policy]
		ex.Rows[i].setSim(s)
		ex.Rows[i].SimCostVsRandom = s.CostVsRandom
	}
	return nil
}
