package bench

// `micra bench liar`: a member that answers every probe with 1 ms, on
// in-process overlay peers placed in the simulator's world, beside the
// same network with that member honest.

import (
	"context"
	"fmt"
	"io"
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

// LiarOptions configures RunLiar.
type LiarOptions struct {
	Peers     int           // crawlers, one in-process peer each (default 20)
	Hosts     int           // the simulator's host stream (default 300)
	Seed      uint64        // the world's seed
	Liar      int           // the lying crawler's index
	Threshold time.Duration // IPMicra's (default 50 ms)
	Samples   int           // samples over the stream (default 10)
	Log       io.Writer     // progress (nil: none)
}

// LiarSample is the state after a number of hosts of the stream.
type LiarSample struct {
	Hosts       int     `json:"hosts"`
	ElapsedS    float64 `json:"elapsed_s"`
	LiarSubnets int     `json:"liar_subnets"` // records naming the member owner, in the first honest peer's cache
	// Routed: the most subnets any honest peer would hand the member URLs
	// for (its records, at a peer that does not suspect it).
	Routed     int `json:"routed"`
	Suspecting int `json:"suspecting"` // honest peers that hold it a suspect
}

// LiarRun is one network's figures.
type LiarRun struct {
	Lying   bool         `json:"lying"`
	SetupS  float64      `json:"setup_s"`
	Samples []LiarSample `json:"samples"`
	// Detection: seconds from the stream's start until the first honest
	// peer, and until every honest peer, held the member a suspect (-1:
	// never).
	FirstSuspectS float64 `json:"first_suspect_s"`
	AllSuspectS   float64 `json:"all_suspect_s"`
	// The member's subnets (records naming it; those an honest peer would
	// route to it) at their peak during the stream and at the end (after
	// the honest peers routed every host once more), and the records
	// naming it at the end where it is the world's optimal crawler for no
	// host.
	LiarSubnetsPeak  int `json:"liar_subnets_peak"`
	LiarSubnetsEnd   int `json:"liar_subnets_end"`
	RoutedPeak       int `json:"routed_peak"`
	RoutedEnd        int `json:"routed_end"`
	LiarAmissEnd     int `json:"liar_amiss_end"`
	LiarOptimalHosts int `json:"liar_optimal_hosts"` // hosts whose optimal crawler it is
	// False accusations: evidence honest peers hold against honest
	// members, and honest members held suspects (peer, member pairs).
	FalseEvidence int `json:"false_evidence"`
	FalseSuspects int `json:"false_suspects"`
	// What the audit did: answers left out of decisions, evidence against
	// the member (taken by honest peers), probes sent in all.
	RefusedAnswers int     `json:"refused_answers"`
	LiarEvidence   int     `json:"liar_evidence"`
	RerouteErrors  int     `json:"reroute_errors"` // routes that failed in the pass after the stream
	OptimalPct     float64 `json:"optimal_pct"`    // hosts delegated to their optimal crawler, first pass
	ProbesPerURL   float64 `json:"probes_per_url"`
}

// LiarReport is RunLiar's result: the honest network, then the one with
// the lying member.
type LiarReport struct {
	Peers  int     `json:"peers"`
	Hosts  int     `json:"hosts"`
	Seed   uint64  `json:"seed"`
	Liar   int     `json:"liar"`
	Honest LiarRun `json:"honest"`
	Lying  LiarRun `json:"lying"`
}

// RunLiar runs the simulator's host stream over two fresh networks of
// in-process peers in the simulator's world — every member honest, then
// crawler Liar answering 1 ms to every probe (its own included) — and
// samples the member's subnets and who suspects it as the stream goes;
// then every honest peer routes every host once more (a suspect's records
// are re-decided when looked up).
func RunLiar(ctx context.Context, o LiarOptions) (*LiarReport, error) {
	if o.Peers == 0 {
		o.Peers = 20
	}
	if o.Hosts == 0 {
		o.Hosts = 300
	}
	if o.Threshold == 0 {
		o.Threshold = 50 * time.Millisecond
	}
	if o.Samples <= 0 {
		o.Samples = 10
	}
	if o.Peers < 3 || o.Peers > 100 {
		return nil, fmt.Errorf("bench: %d peers: want 3..100", o.Peers)
	}
	if o.Liar < 0 || o.Liar >= o.Peers {
		return nil, fmt.Errorf("bench: liar %d: want a crawler index in 0..%d", o.Liar, o.Peers-1)
	}
	scfg, _ := sim.Preset("paper")
	scfg.Seed, scfg.Crawlers, scfg.Hosts, scfg.Threshold = o.Seed, o.Peers, o.Hosts, o.Threshold
	w, err := sim.NewWorld(scfg)
	if err != nil {
		return nil, err
	}
	rep := &LiarReport{Peers: o.Peers, Hosts: o.Hosts, Seed: o.Seed, Liar: o.Liar}
	for _, lying := range []bool{false, true} {
		run, err := runLiarNetwork(ctx, w, o, lying)
		if err != nil {
			return nil, err
		}
		if lying {
			rep.Lying = *run
		} else {
			rep.Honest = *run
		}
	}
	return rep, nil
}

// auditedMeasurer answers probes from the world model at one crawler's
// place (or 1 ms to everything, lying) and the world's round trip to
// another peer by its listen address (overlay.PeerRTTs), so the audit
// judges answers in the world they were made in.
type auditedMeasurer struct {
	*worldMeasurer
	byAddr map[netip.Addr]int
	lying  bool
}

func (m *auditedMeasurer) Measure(ctx context.Context, t overlay.ProbeTarget) (time.Duration, error) {
	if m.lying {
		return time.Millisecond, nil
	}
	return m.worldMeasurer.Measure(ctx, t)
}

func (m *auditedMeasurer) PeerRTT(remote netip.Addr) (time.Duration, bool) {
	j, ok := m.byAddr[remote]
	if !ok {
		return 0, false
	}
	return world.Duration(m.w.Model.MeanRTT(&m.w.CrawlerE[m.self], &m.w.CrawlerE[j])), true
}

// peerLoopback is crawler i's listen address: its own, so that a peer's
// address names its place.
func peerLoopback(i int) netip.Addr { return netip.AddrFrom4([4]byte{127, 0, 2, byte(i + 1)}) }

func runLiarNetwork(ctx context.Context, w *sim.World, o LiarOptions, lying bool) (*LiarRun, error) {
	logf := func(format string, args ...any) {
		if o.Log != nil {
			fmt.Fprintf(o.Log, format+"\n", args...)
		}
	}
	run := &LiarRun{Lying: lying, FirstSuspectS: -1, AllSuspectS: -1}
	hostIdx := make(map[netip.Addr]int, len(w.Hosts))
	for i, h := range w.Hosts {
		hostIdx[h.Addr] = i
	}
	byAddr := map[netip.Addr]int{}
	for i := range o.Peers {
		byAddr[peerLoopback(i)] = i
	}
	guard := func(a netip.Addr) error {
		if _, ok := hostIdx[a]; ok {
			return nil
		}
		if _, ok := w.Model.Endpoint(a, ""); ok {
			return nil
		}
		return fmt.Errorf("%w: %v not in the world model", overlay.ErrGuard, a)
	}
	spec, ok := sim.LookupPolicy("ipmicra")
	if !ok {
		return nil, fmt.Errorf("bench: no ipmicra policy")
	}
	oo := OverlayOptions{Peers: o.Peers, Seed: o.Seed, Threshold: o.Threshold,
		// a shared machine running N peers in one process: deaths by a
		// starved heartbeat would re-decide subnets for reasons of their own
		Heartbeat: time.Second, FailureTimeout: 10 * time.Second,
		configure: func(i int, cfg *overlay.Config) {
			cfg.ListenAddrs = []string{fmt.Sprintf("/ip4/%s/tcp/0", peerLoopback(i))}
			cfg.RequestTimeout = 20 * time.Second
		},
		measurer: func(i int, wm *worldMeasurer) overlay.Measurer {
			return &auditedMeasurer{worldMeasurer: wm, byAddr: byAddr, lying: lying && i == o.Liar}
		}}
	var row PolicyRow
	peers, err := startNetwork(ctx, w, spec, oo, true, hostIdx, guard, &row)
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	if err != nil {
		return nil, err
	}
	run.SetupS = row.SetupS
	liar := peers[o.Liar].CrawlerID()
	var honest []*overlay.Peer
	for i, p := range peers {
		if i != o.Liar {
			honest = append(honest, p)
		}
	}
	own := w.Tree.SmallestNonUnary(w.Crawlers[o.Liar].Addr)
	optimalIn := map[hierarchy.NodeID]bool{} // subnets with a host whose optimal crawler is the liar
	for i, h := range w.Hosts {
		if int(w.Optimal[i]) == o.Liar {
			run.LiarOptimalHosts++
			optimalIn[w.Tree.SmallestNonUnary(h.Addr)] = true
		}
	}
	start := time.Now()
	sample := func(hosts int) LiarSample {
		s := LiarSample{Hosts: hosts, ElapsedS: time.Since(start).Seconds()}
		for _, r := range honest[0].Directory().Records() {
			if r.Owner == liar {
				s.LiarSubnets++
			}
		}
		for _, p := range honest {
			if slices.ContainsFunc(p.Suspects(), func(x overlay.Suspect) bool { return x.Crawler == liar }) {
				s.Suspecting++
				continue
			}
			n := 0
			for _, r := range p.Directory().Records() {
				if r.Owner == liar {
					n++
				}
			}
			s.Routed = max(s.Routed, n)
		}
		if s.Suspecting > 0 && run.FirstSuspectS < 0 {
			run.FirstSuspectS = s.ElapsedS
		}
		if s.Suspecting == len(honest) && run.AllSuspectS < 0 {
			run.AllSuspectS = s.ElapsedS
		}
		run.LiarSubnetsPeak = max(run.LiarSubnetsPeak, s.LiarSubnets)
		run.RoutedPeak = max(run.RoutedPeak, s.Routed)
		return s
	}
	every := max(1, len(w.Hosts)/o.Samples)
	hits, probes := 0, 0
	for i, h := range w.Hosts {
		d, err := peers[i%len(peers)].Delegate(ctx, h.Addr)
		if err != nil && ctx.Err() == nil {
			d, err = peers[i%len(peers)].Delegate(ctx, h.Addr) // once more, as for Join
		}
		if err != nil {
			return nil, fmt.Errorf("host %d (%v): %w", i, h.Addr, err)
		}
		probes += d.Probes
		if d.Owner == peers[w.Optimal[i]].CrawlerID() {
			hits++
		}
		if (i+1)%every == 0 || i == len(w.Hosts)-1 {
			s := sample(i + 1)
			run.Samples = append(run.Samples, s)
			logf("  %s: %d hosts, %.1f s: the member owns %d subnets, a suspect of %d of %d honest peers",
				map[bool]string{false: "honest", true: "lying"}[lying], s.Hosts, s.ElapsedS, s.LiarSubnets, s.Suspecting, len(honest))
		}
	}
	run.OptimalPct = percent(hits, len(w.Hosts))
	run.ProbesPerURL = float64(probes) / float64(len(w.Hosts))
	// every honest peer routes every host again: a suspect's records are
	// re-decided when looked up
	for _, p := range honest {
		for _, h := range w.Hosts {
			if _, err := p.Delegate(ctx, h.Addr); err != nil {
				if ctx.Err() != nil {
					return nil, err
				}
				run.RerouteErrors++ // a timed-out read on a loaded machine: the host keeps its owner
			}
		}
	}
	overlaySettle(peers, 10*time.Second)
	s := sample(len(w.Hosts))
	run.Samples = append(run.Samples, s)
	run.LiarSubnetsEnd, run.RoutedEnd = s.LiarSubnets, s.Routed
	for _, r := range honest[0].Directory().Records() {
		if r.Owner == liar && r.Subnet != own && !optimalIn[r.Subnet] {
			run.LiarAmissEnd++
		}
	}
	// in the honest network the member is honest too: evidence against
	// anyone is false
	isLiar := func(c delegation.CrawlerID) bool { return lying && c == liar }
	for _, p := range peers {
		if isLiar(p.CrawlerID()) {
			continue
		}
		run.RefusedAnswers += p.AuditStats().Refused
		for _, x := range p.Suspects() {
			if !isLiar(x.Crawler) {
				run.FalseSuspects++
			}
		}
		run.FalseEvidence += p.AuditEvidenceAgainst(func(c delegation.CrawlerID) bool { return !isLiar(c) })
		run.LiarEvidence += p.AuditEvidenceAgainst(isLiar)
	}
	return run, nil
}
