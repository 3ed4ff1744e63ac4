package delegation

import (
	"context"
	"fmt"
	"net/netip"

	"github.com/micra-crawler/micra/hierarchy"
)

// NewIPMicra returns IPMicra's delegation as published (Papapetrou & Samaras
// 2004/2005), for an undelegated subnet s (the smallest non-unary subnet of
// the URL's IP):
//
//  1. crawlers holding subnets of s's organisation probe the host; the first
//     under Config.Threshold wins;
//  2. else walk up from s's parent to the root; at each ancestor the crawlers
//     holding delegated subnets beneath it (the delegated siblings and their
//     children) that were not asked yet probe the host; the first under the
//     threshold wins;
//  3. else the lowest probe answer wins;
//  4. if nobody answered, consistent hashing decides (nothing published).
//
// Probes go one at a time in an order drawn from Deps.Rand, stopping at the
// first answer under the threshold; with Config.ParallelLevels a whole
// level is asked at once and the fastest answer under the threshold wins.
func NewIPMicra(d Deps, c Config) Policy { return newEngine("ipmicra", d, c, ipmicraChooser{}) }

type ipmicraChooser struct{}

func (ipmicraChooser) rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	asked := make(map[CrawlerID]struct{})
	var all []ProbeResult
	thr := e.c.Threshold

	// askLevel probes the not-yet-asked live crawlers among holders and
	// reports the winner under the threshold, if any.
	askLevel := func(kind StepKind, node hierarchy.NodeID, holders []CrawlerID) (ProbeResult, bool) {
		var cands []CrawlerID
		for _, c := range holders {
			if _, done := asked[c]; done || !e.live(c) {
				continue
			}
			asked[c] = struct{}{}
			cands = append(cands, c)
		}
		if len(cands) == 0 {
			return ProbeResult{}, false
		}
		step := Step{Kind: kind, Node: node}
		defer func() { d.Steps = append(d.Steps, step) }()
		if e.c.ParallelLevels {
			res := e.probe(ctx, ip, cands, &step, d)
			all = append(all, res...)
			var win ProbeResult
			for _, r := range res {
				if r.OK && r.RTT < thr && (!win.OK || r.RTT < win.RTT) {
					win = r
				}
			}
			if win.OK {
				step.Note = fmt.Sprintf("%s under %v", win.Crawler, thr)
				return win, true
			}
			step.Note = fmt.Sprintf("%d asked, none under %v", len(cands), thr)
			return ProbeResult{}, false
		}
		e.d.Rand.Shuffle(len(cands), func(i, j int) { cands[i], cands[j] = cands[j], cands[i] })
		for _, c := range cands {
			res := e.probe(ctx, ip, []CrawlerID{c}, &step, d)
			all = append(all, res...)
			if len(res) == 1 && res[0].OK && res[0].RTT < thr {
				step.Note = fmt.Sprintf("%s under %v", c, thr)
				return res[0], true
			}
		}
		step.Note = fmt.Sprintf("%d asked, none under %v", len(cands), thr)
		return ProbeResult{}, false
	}

	finish := func(why Reason) []ProbeResult {
		d.Reason = why
		sortRanked(all)
		return all
	}

	if org := e.d.Tree.Node(s).Org; org != 0 {
		holders, err := e.d.Dir.HoldersOfOrg(ctx, org)
		if err != nil {
			return nil, fmt.Errorf("delegation: holders of org %d: %w", org, err)
		}
		if _, ok := askLevel(StepSameOrg, s, holders); ok {
			return finish(ReasonSameOrg), nil
		}
	}
	for _, a := range e.d.Tree.Ancestors(s) {
		holders, err := e.d.Dir.HoldersUnder(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("delegation: holders under %d: %w", a, err)
		}
		if _, ok := askLevel(StepLevel, a, holders); ok {
			return finish(ReasonUnderThreshold), nil
		}
	}
	any := false
	for _, r := range all {
		any = any || r.OK
	}
	if !any {
		return nil, nil
	}
	return finish(ReasonLowestProbe), nil
}
