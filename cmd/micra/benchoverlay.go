package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"math/rand/v2"
	"net/netip"
	"os"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"text/tabwriter"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

type benchOverlayOptions struct {
	peers, hosts, train, calRounds, lookups, replicas, pagesPerPeer, linksPerPage int
	seed                                                                          uint64
	policy                                                                        string
	threshold, heartbeat, failTimeout, timeout                                    time.Duration
	asJSON, heartbeatSet, failTimeoutSet                                          bool
	cpuProfile                                                                    string
}

func init() {
	o := &benchOverlayOptions{}
	cmd := &cobra.Command{
		Use:   "overlay",
		Short: "build an in-process overlay on 127.0.0.1 and measure lookups, gossip, failure detection and delegation quality beside the simulator",
		Long: `overlay starts --peers libp2p peers on 127.0.0.1 (TCP, Noise, yamux, Kademlia DHT
under /micra, gossipsub) and places them as the crawlers of the simulator's world
(same seed): each peer answers /micra/probe/1 with the world model's latency from its
position, so no probe traffic leaves the process. It then delegates the simulator's
host stream over the real overlay (host i decided by peer i mod N) and prints, beside
their targets and the simulator's own figures for the same world and seed:
cached and uncached (DHT) owner lookups, time for a calibration event to reach every
peer, time for a killed peer to be declared dead by all, owner disagreements after
settling, hand-off messages per crawled page, and % optimal / probes per URL.`,
		Example: `  micra bench overlay
  micra bench overlay --peers 50 --hosts 500 --json`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			o.heartbeatSet, o.failTimeoutSet = cmd.Flags().Changed("heartbeat"), cmd.Flags().Changed("failure-timeout")
			return runBenchOverlay(cmd.Context(), cmd.OutOrStdout(), o)
		},
	}
	f := cmd.Flags()
	f.IntVar(&o.peers, "peers", 20, "overlay peers (crawlers), 2–100")
	f.IntVar(&o.hosts, "hosts", 300, "web hosts delegated (the simulator's host stream)")
	f.IntVar(&o.train, "train", -1, "hosts that train before evaluation (default 65%)")
	f.Uint64Var(&o.seed, "seed", 1, "world seed (shared with the simulator)")
	f.StringVar(&o.policy, "policy", "ipmicra,micra", "delegation policies, comma-separated (ipmicra, ipmicra-parallel, micra, optimal, hash, random); each runs on its own fresh overlay beside the simulator, the first one's network is also measured for lookups, gossip, hand-offs and failure detection")
	f.DurationVar(&o.threshold, "threshold", 50*time.Millisecond, "probing threshold")
	f.IntVar(&o.replicas, "replicas", 10, "simulator replicas (other probe/policy seeds) for the noise band")
	f.IntVar(&o.calRounds, "calibration-rounds", 10, "calibration events timed")
	f.IntVar(&o.lookups, "lookups", 200, "uncached DHT lookups timed")
	f.IntVar(&o.pagesPerPeer, "pages", 100, "pages each peer 'crawls' for the hand-off figure")
	f.IntVar(&o.linksPerPage, "links", 10, "links per page for the hand-off figure")
	f.DurationVar(&o.heartbeat, "heartbeat", time.Second, "membership heartbeat interval")
	f.DurationVar(&o.failTimeout, "failure-timeout", 5*time.Second, "silence after which a peer is declared dead")
	f.DurationVar(&o.timeout, "timeout", 15*time.Minute, "give up after this long")
	f.BoolVar(&o.asJSON, "json", false, "print JSON")
	f.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the overlay phases to this file")
	benchParentCmd().AddCommand(cmd)
}

type qualityRow struct {
	// Reasons counts decisions by why they stopped (delegation.Reason).
	Reasons          map[string]int `json:"reasons"`
	OptimalPct       float64        `json:"optimal_pct"`
	OptimalPctAll    float64        `json:"optimal_pct_all"`
	ProbesPerURL     float64        `json:"probes_per_url"`
	ProbesPerURLEval float64        `json:"probes_per_url_eval"`
}

// policyRow is one policy's delegation over the overlay beside the
// simulator's figures for the same world and seed.
type policyRow struct {
	Policy        string  `json:"policy"`
	SetupS        float64 `json:"setup_s"`
	Subnets       int     `json:"subnets"`
	Disagreements int     `json:"disagreements"`

	DelegateP50Ms float64    `json:"delegate_p50_ms"`
	DelegateP95Ms float64    `json:"delegate_p95_ms"`
	Overlay       qualityRow `json:"overlay"`
	Simulator     qualityRow `json:"simulator"`
	// SimulatorSpread is the simulator's policy loop over the same world
	// with Replicas different probe-jitter/policy seeds: the noise band the
	// overlay's figures should fall in.
	SimulatorSpread sim.Spread `json:"simulator_spread"`
	// DistributedSpread is the same loop with one engine per crawler (host
	// i decided by engine i mod N) and one jitter stream per crawler: the
	// overlay's structure without the network — each engine learning only
	// from its own decisions (the overlay before peers shared records).
	DistributedSpread sim.Spread `json:"distributed_spread"`
	// SharedSpread is the same per-crawler loop where every engine also
	// learns every other engine's records, as overlay peers do: the band
	// the overlay's figures should fall in.
	SharedSpread sim.Spread `json:"shared_spread"`
	// PeerIDSpread is SharedSpread over the same world with the crawlers
	// renamed to this run's overlay peer IDs. micra breaks prediction ties
	// by crawler ID, and the simulator's IDs (c00, c01, …) sort in placement
	// order — k-means++ order, the most spread-out crawlers first — which is
	// worth up to ~10 points on some seeds; overlay peer IDs are random, so
	// this band is the like-for-like reference for the overlay's figure.
	PeerIDSpread sim.Spread `json:"peer_id_spread"`
}

type benchOverlayReport struct {
	Peers       int     `json:"peers"`
	Hosts       int     `json:"hosts"`
	Train       int     `json:"train"`
	Seed        uint64  `json:"seed"`
	Policy      string  `json:"policy"`
	ThresholdMs float64 `json:"threshold_ms"`
	Transport   string  `json:"transport"`
	HeartbeatMs float64 `json:"heartbeat_ms"`
	Flood       bool    `json:"flood_publish"`
	SetupS      float64 `json:"setup_s"`

	CachedLookupNs    float64 `json:"cached_lookup_ns"`
	DirectoryLookupNs float64 `json:"directory_lookup_ns"`
	UncachedP50Ms     float64 `json:"uncached_dht_lookup_p50_ms"`
	UncachedP95Ms     float64 `json:"uncached_dht_lookup_p95_ms"`
	UncachedSamples   int     `json:"uncached_samples"`

	CalibrationAllP50Ms float64 `json:"calibration_to_all_p50_ms"`
	CalibrationAllMaxMs float64 `json:"calibration_to_all_max_ms"`
	CalibrationRounds   int     `json:"calibration_rounds"`
	CalibrationMissed   int     `json:"calibration_missed"`

	FailureTimeoutMs     float64 `json:"failure_timeout_ms"`
	FailureDetectFirstMs float64 `json:"failure_detect_first_ms"`
	FailureDetectAllMs   float64 `json:"failure_detect_all_ms"`
	FailureDetectedBy    int     `json:"failure_detected_by"`

	// Delegation quality, one row per policy, each on its own fresh overlay.
	Policies []policyRow `json:"policies"`

	HandoffPages      int     `json:"handoff_pages"`
	HandoffMessages   uint64  `json:"handoff_messages"`
	HandoffURLs       uint64  `json:"handoff_urls"`
	HandoffMsgPerPage float64 `json:"handoff_messages_per_page"`
}

// worldMeasurer answers probes with the world model's latency from one
// crawler's position: the overlay carries the request, the model stands in
// for the Internet.
type worldMeasurer struct {
	w     *sim.World
	hosts map[netip.Addr]int
	self  int
	mu    sync.Mutex
	rng   *rand.Rand
}

func (m *worldMeasurer) Measure(_ context.Context, t overlay.ProbeTarget) (time.Duration, error) {
	var ep world.Endpoint
	if i, ok := m.hosts[t.Addr]; ok {
		ep = m.w.Hosts[i]
	} else if e, ok := m.w.Model.Endpoint(t.Addr, ""); ok {
		ep = e
	} else {
		return 0, fmt.Errorf("world model cannot place %v", t.Addr)
	}
	m.mu.Lock()
	ms := m.w.Model.SampleRTT(&m.w.CrawlerE[m.self], &ep, m.rng)
	m.mu.Unlock()
	return world.Duration(ms), nil
}

// sinkCounter is a hand-off sink that counts what it accepted.
type sinkCounter struct {
	mu sync.Mutex
	n  int
}

func (s *sinkCounter) Accept(_ context.Context, urls []string) error {
	s.mu.Lock()
	s.n += len(urls)
	s.mu.Unlock()
	return nil
}

func runBenchOverlay(ctx context.Context, out io.Writer, o *benchOverlayOptions) error {
	if ctx == nil {
		ctx = context.Background()
	}
	if o.peers < 2 || o.peers > 100 {
		return fmt.Errorf("--peers %d: want 2..100", o.peers)
	}
	for _, f := range []struct {
		name string
		v    int
	}{{"--hosts", o.hosts}, {"--replicas", o.replicas}, {"--pages", o.pagesPerPeer}, {"--links", o.linksPerPage}} {
		if f.v < 1 {
			return fmt.Errorf("%s %d: want at least 1", f.name, f.v)
		}
	}
	var specs []sim.PolicySpec
	var names []string
	for _, name := range strings.Split(o.policy, ",") {
		name = strings.TrimSpace(name)
		spec, ok := sim.LookupPolicy(name)
		if !ok {
			return fmt.Errorf("--policy: unknown policy %q", name)
		}
		if slices.Contains(names, spec.Name) {
			continue
		}
		specs, names = append(specs, spec), append(names, spec.Name)
	}
	ctx, cancel := context.WithTimeout(ctx, o.timeout)
	defer cancel()
	// Every in-process peer verifies every heartbeat: the gossip load grows
	// with N² on one machine (in a deployment each peer has its own). Past
	// 20 peers, unless set explicitly, heartbeats slow down with N and flood
	// publishing is off.
	flood := o.peers <= 30
	if o.peers > 20 {
		if !o.heartbeatSet {
			o.heartbeat = time.Duration(o.peers) * time.Second / 20
		}
		if !o.failTimeoutSet {
			o.failTimeout = min(10*time.Second, max(5*time.Second, 3*o.heartbeat))
		}
	}

	// The simulator's world and its own figures, same seed.
	scfg, _ := sim.Preset("paper")
	scfg.Seed, scfg.Crawlers, scfg.Hosts, scfg.Threshold = o.seed, o.peers, o.hosts, o.threshold
	scfg.Train = o.train
	if scfg.Train < 0 {
		scfg.Train = o.hosts * 65 / 100
	}
	scfg.Policies = names
	w, err := sim.NewWorld(scfg)
	if err != nil {
		return err
	}
	srep, _, err := sim.Run(ctx, scfg, w)
	if err != nil {
		return err
	}
	rep := &benchOverlayReport{Peers: o.peers, Hosts: o.hosts, Train: scfg.Train, Seed: o.seed, Policy: strings.Join(names, ","),
		ThresholdMs: float64(o.threshold.Microseconds()) / 1000, HeartbeatMs: ovMs(o.heartbeat), Flood: flood, Transport: "TCP 127.0.0.1, Noise, yamux; DHT /micra; gossipsub"}
	for _, spec := range specs {
		row := policyRow{Policy: spec.Name}
		for _, r := range srep.Results {
			if r.Policy == spec.Name {
				row.Simulator = qualityRow{Reasons: r.Reasons, OptimalPct: r.OptimalPct, OptimalPctAll: r.OptimalPctAll,
					ProbesPerURL: r.ProbesPerURL, ProbesPerURLEval: r.ProbesPerURLEval}
			}
		}
		sc := sim.SpreadConfig{Threshold: o.threshold, Train: scfg.Train, Replicas: o.replicas, Seed: o.seed}
		if row.SimulatorSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return err
		}
		sc.PerCrawler = true
		if row.DistributedSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return err
		}
		sc.ShareRecords = true
		if row.SharedSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return err
		}
		rep.Policies = append(rep.Policies, row)
	}

	// The overlay: one peer per simulated crawler.
	if o.cpuProfile != "" {
		f, err := os.Create(o.cpuProfile)
		if err != nil {
			return err
		}
		defer f.Close()
		if err := pprof.StartCPUProfile(f); err != nil {
			return err
		}
		defer pprof.StopCPUProfile()
	}
	hostIdx := make(map[netip.Addr]int, len(w.Hosts))
	for i, h := range w.Hosts {
		hostIdx[h.Addr] = i
	}
	modelGuard := func(a netip.Addr) error {
		// The world measurer sends nothing; it only needs a placeable address.
		if _, ok := hostIdx[a]; ok {
			return nil
		}
		if _, ok := w.Model.Endpoint(a, ""); ok {
			return nil
		}
		return fmt.Errorf("%w: %v not in the world model", overlay.ErrGuard, a)
	}
	// Each policy gets a fresh network (a delegated subnet stays delegated);
	// the first one's is measured for everything else afterwards.
	var peers []*overlay.Peer
	defer func() {
		for _, p := range peers {
			p.Close()
		}
	}()
	for k, spec := range specs {
		net, err := startBenchNet(ctx, w, spec, o, flood, hostIdx, modelGuard, &rep.Policies[k])
		if k == 0 {
			peers = net
		}
		if err == nil {
			err = benchQuality(ctx, w, net, scfg.Train, &rep.Policies[k])
		}
		if err == nil {
			ids := make([]delegation.CrawlerID, len(net))
			for i, p := range net {
				ids[i] = p.CrawlerID()
			}
			var named *sim.World
			if named, err = w.WithCrawlerIDs(ids); err == nil {
				rep.Policies[k].PeerIDSpread, err = named.Spread(ctx, spec, sim.SpreadConfig{Threshold: o.threshold, Train: scfg.Train,
					Replicas: o.replicas, Seed: o.seed, PerCrawler: true, ShareRecords: true})
			}
		}
		if k > 0 {
			for _, p := range net {
				p.Close()
			}
		}
		if err != nil {
			return fmt.Errorf("policy %s: %w", spec.Name, err)
		}
	}
	rep.SetupS = rep.Policies[0].SetupS

	var subnets []hierarchy.NodeID
	for _, r := range peers[0].Directory().Records() {
		subnets = append(subnets, r.Subnet)
	}
	if len(subnets) == 0 {
		return fmt.Errorf("no subnet was delegated")
	}

	// Cached owner lookup.
	// (best of 3 runs of 1M lookups: the machine is shared, the minimum is
	// the cost of the code.)
	const iters = 1_000_000
	dir := peers[0].Directory()
	var ddir delegation.Directory = dir
	rep.CachedLookupNs, rep.DirectoryLookupNs = 1e18, 1e18
	for range 3 {
		start := time.Now()
		for k := range iters {
			dir.Cached(subnets[k%len(subnets)])
		}
		rep.CachedLookupNs = min(rep.CachedLookupNs, float64(time.Since(start).Nanoseconds())/iters)
		start = time.Now()
		for k := range iters {
			ddir.Lookup(ctx, subnets[k%len(subnets)])
		}
		rep.DirectoryLookupNs = min(rep.DirectoryLookupNs, float64(time.Since(start).Nanoseconds())/iters)
	}

	// Uncached DHT lookups.
	lrng := rand.New(rand.NewPCG(o.seed, 0x6c6f6f6b))
	var look []float64
	for range o.lookups {
		p := peers[lrng.IntN(len(peers))]
		s := subnets[lrng.IntN(len(subnets))]
		start := time.Now()
		if _, found, err := p.Directory().LookupDHT(ctx, s); err != nil || !found {
			return fmt.Errorf("dht lookup of subnet %d: found=%v: %v", s, found, err)
		}
		look = append(look, ovMs(time.Since(start)))
	}
	rep.UncachedSamples = len(look)
	rep.UncachedP50Ms, rep.UncachedP95Ms = ovQuantile(look, 0.5), ovQuantile(look, 0.95)

	// Calibration events to every peer.
	rep.CalibrationRounds = o.calRounds
	var calAll []float64
	var calMu sync.Mutex
	recv := map[string]map[int]time.Time{}
	for i, p := range peers {
		p.OnCalibration(func(nt overlay.CalibrationNotice) {
			calMu.Lock()
			if m, ok := recv[nt.Event.Url]; ok {
				if _, dup := m[i]; !dup {
					m[i] = nt.Received
				}
			}
			calMu.Unlock()
		})
	}
	for r := range o.calRounds {
		url := fmt.Sprintf("bench://calibration/%d", r)
		calMu.Lock()
		recv[url] = map[int]time.Time{}
		calMu.Unlock()
		pub := peers[r%len(peers)]
		sent := time.Now()
		pub.Announce(ctx, &pb.CalibrationEvent{Kind: pb.CalibrationKind_SLOW_PAGE, Subnet: uint32(subnets[r%len(subnets)]), Url: url,
			ObservedNs: int64(900 * time.Millisecond), ExpectedNs: int64(100 * time.Millisecond)})
		var last time.Time
		for deadline := sent.Add(3 * time.Second); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
			calMu.Lock()
			got := len(recv[url])
			if got == len(peers) {
				for _, t := range recv[url] {
					if t.After(last) {
						last = t
					}
				}
			}
			calMu.Unlock()
			if got == len(peers) {
				break
			}
		}
		if last.IsZero() {
			rep.CalibrationMissed++
			continue
		}
		calAll = append(calAll, ovMs(last.Sub(sent)))
	}
	if len(calAll) > 0 {
		rep.CalibrationAllP50Ms, rep.CalibrationAllMaxMs = ovQuantile(calAll, 0.5), slices.Max(calAll)
	}

	// Hand-offs: every peer "crawls" pages whose links point at random hosts.
	hrng := rand.New(rand.NewPCG(o.seed, 0x68616e64))
	var before uint64
	for _, p := range peers {
		before += p.HandoffStats().Messages
	}
	for i, p := range peers {
		for pg := range o.pagesPerPeer {
			// A page's foreign links, handed off in one durable commit as
			// the crawler's router does.
			var items []overlay.HandoffItem
			for l := range o.linksPerPage {
				h := w.Hosts[hrng.IntN(len(w.Hosts))]
				s := w.Tree.SmallestNonUnary(h.Addr)
				if s == hierarchy.None || s == hierarchy.Root {
					continue
				}
				if r, ok := p.Directory().Cached(s); ok && r.Owner == p.CrawlerID() {
					continue // own frontier
				}
				items = append(items, overlay.HandoffItem{Subnet: s, IP: h.Addr, URLs: []string{fmt.Sprintf("http://%v/p%d/%d/%d", h.Addr, i, pg, l)}})
			}
			if err := p.HandoffAll(ctx, items); err != nil {
				return err
			}
		}
	}
	rep.HandoffPages = o.peers * o.pagesPerPeer
	for deadline := time.Now().Add(30 * time.Second); time.Now().Before(deadline); time.Sleep(20 * time.Millisecond) {
		pending := 0
		for _, p := range peers {
			pending += p.HandoffStats().Pending
		}
		if pending == 0 {
			break
		}
	}
	for _, p := range peers {
		st := p.HandoffStats()
		rep.HandoffMessages += st.Messages
		rep.HandoffURLs += st.URLs
	}
	rep.HandoffMessages -= before
	rep.HandoffMsgPerPage = float64(rep.HandoffMessages) / float64(max(1, rep.HandoffPages))

	// Failure detection: kill the last peer, time its declaration by all.
	victim := peers[len(peers)-1]
	others := peers[:len(peers)-1]
	var fdMu sync.Mutex
	detected := map[int]time.Time{}
	for i, p := range others {
		p.Members().OnChange(func(ev overlay.MemberEvent) {
			if ev.Dead && ev.Peer == victim.ID() {
				fdMu.Lock()
				if _, ok := detected[i]; !ok {
					detected[i] = time.Now()
				}
				fdMu.Unlock()
			}
		})
	}
	killed := time.Now()
	victim.Close()
	peers = others
	for deadline := killed.Add(3 * o.failTimeout); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
		fdMu.Lock()
		n := len(detected)
		fdMu.Unlock()
		if n == len(others) {
			break
		}
	}
	fdMu.Lock()
	rep.FailureDetectedBy = len(detected)
	var first, all time.Duration
	for _, t := range detected {
		d := t.Sub(killed)
		if first == 0 || d < first {
			first = d
		}
		all = max(all, d)
	}
	fdMu.Unlock()
	rep.FailureTimeoutMs, rep.FailureDetectFirstMs, rep.FailureDetectAllMs = ovMs(o.failTimeout), ovMs(first), ovMs(all)

	if o.asJSON {
		enc := json.NewEncoder(out)
		enc.SetIndent("", "  ")
		return enc.Encode(rep)
	}
	return writeBenchOverlay(out, rep)
}

// overlaySettle waits until every peer's cache names the same owner for
// every subnet any of them knows (a peer missing a subnet counts as a
// disagreement); it returns the subnets and the disagreements left.
func overlaySettle(peers []*overlay.Peer, within time.Duration) (int, int) {
	deadline := time.Now().Add(within)
	for {
		views := make([]map[hierarchy.NodeID]delegation.CrawlerID, len(peers))
		all := map[hierarchy.NodeID]bool{}
		for i, p := range peers {
			views[i] = map[hierarchy.NodeID]delegation.CrawlerID{}
			for _, r := range p.Directory().Records() {
				views[i][r.Subnet] = r.Owner
				all[r.Subnet] = true
			}
		}
		bad := 0
		for s := range all {
			o, ok := views[0][s]
			for _, v := range views[1:] {
				if o2, ok2 := v[s]; !ok || !ok2 || o2 != o {
					bad++
					break
				}
			}
		}
		if bad == 0 || time.Now().After(deadline) {
			return len(all), bad
		}
		time.Sleep(50 * time.Millisecond)
	}
}

func ovMs(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func ovPct(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func ovQuantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

func writeBenchOverlay(out io.Writer, r *benchOverlayReport) error {
	fmt.Fprintf(out, "micra bench overlay — %d peers in one process (%s)\n", r.Peers, r.Transport)
	fmt.Fprintf(out, "world seed %d: %d hosts (%d train), policy %s, threshold %.0f ms; heartbeat %.0f ms, flood publish %v; setup %.1f s\n\n",
		r.Seed, r.Hosts, r.Train, r.Policy, r.ThresholdMs, r.HeartbeatMs, r.Flood, r.SetupS)
	tw := tabwriter.NewWriter(out, 2, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "figure\toverlay\ttarget / peer\t")
	fmt.Fprintf(tw, "— network of policy %s\t\t\t\n", r.Policies[0].Policy)
	fmt.Fprintf(tw, "cached owner lookup\t%.0f ns\t≤ 1000 ns (Directory.Lookup: %.0f ns)\t\n", r.CachedLookupNs, r.DirectoryLookupNs)
	fmt.Fprintf(tw, "uncached DHT lookup p95\t%.2f ms\t≤ 50 ms (p50 %.2f ms, %d lookups)\t\n", r.UncachedP95Ms, r.UncachedP50Ms, r.UncachedSamples)
	fmt.Fprintf(tw, "calibration event to all %d peers\t%.1f ms p50\t≤ 1000 ms (max %.1f ms, %d rounds, %d missed)\t\n",
		r.Peers, r.CalibrationAllP50Ms, r.CalibrationAllMaxMs, r.CalibrationRounds, r.CalibrationMissed)
	fmt.Fprintf(tw, "killed peer declared dead by all\t%.0f ms\tconfigured timeout %.0f ms (first %.0f ms, by %d of %d)\t\n",
		r.FailureDetectAllMs, r.FailureTimeoutMs, r.FailureDetectFirstMs, r.FailureDetectedBy, r.Peers-1)
	fmt.Fprintf(tw, "hand-off messages per crawled page\t%.3f\t< 1 (UbiCrawler); %d URLs in %d messages, %d pages\t\n",
		r.HandoffMsgPerPage, r.HandoffURLs, r.HandoffMessages, r.HandoffPages)
	for _, pr := range r.Policies {
		fmt.Fprintf(tw, "— policy %s (own fresh network, setup %.1f s)\t\t\t\n", pr.Policy, pr.SetupS)
		fmt.Fprintf(tw, "owner disagreements after settling\t%d\t0 (of %d subnets)\t\n", pr.Disagreements, pr.Subnets)
		fmt.Fprintf(tw, "delegation latency\t%.1f ms p50\tp95 %.1f ms\t\n", pr.DelegateP50Ms, pr.DelegateP95Ms)
		sp := pr.SimulatorSpread
		fmt.Fprintf(tw, "optimal %% (evaluation hosts)\t%.1f %%\tsimulator %.1f %%; %d reseeded runs %.1f ± %.1f (%.1f–%.1f)\t\n",
			pr.Overlay.OptimalPct, pr.Simulator.OptimalPct, sp.Replicas, sp.OptimalPctMean, sp.OptimalPctSD, sp.OptimalPctMin, sp.OptimalPctMax)
		dp := pr.DistributedSpread
		fmt.Fprintf(tw, "  same loop, one engine per crawler\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			dp.Replicas, dp.OptimalPctMean, dp.OptimalPctSD, dp.OptimalPctMin, dp.OptimalPctMax, dp.ProbesPerURLMean, dp.ProbesPerURLSD)
		hp := pr.SharedSpread
		fmt.Fprintf(tw, "  one engine per crawler, records shared\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			hp.Replicas, hp.OptimalPctMean, hp.OptimalPctSD, hp.OptimalPctMin, hp.OptimalPctMax, hp.ProbesPerURLMean, hp.ProbesPerURLSD)
		ip := pr.PeerIDSpread
		fmt.Fprintf(tw, "  the same, crawlers named by this run's peer IDs\t\t%d runs %.1f ± %.1f (%.1f–%.1f); probes/URL %.2f ± %.2f\t\n",
			ip.Replicas, ip.OptimalPctMean, ip.OptimalPctSD, ip.OptimalPctMin, ip.OptimalPctMax, ip.ProbesPerURLMean, ip.ProbesPerURLSD)
		fmt.Fprintf(tw, "optimal %% (all hosts)\t%.1f %%\tsimulator %.1f %%\t\n", pr.Overlay.OptimalPctAll, pr.Simulator.OptimalPctAll)
		fmt.Fprintf(tw, "probes per URL\t%.2f\tsimulator %.2f; reseeded %.2f ± %.2f (%.2f–%.2f)\t\n",
			pr.Overlay.ProbesPerURL, pr.Simulator.ProbesPerURL, sp.ProbesPerURLMean, sp.ProbesPerURLSD, sp.ProbesPerURLMin, sp.ProbesPerURLMax)
		fmt.Fprintf(tw, "probes per URL (evaluation)\t%.2f\tsimulator %.2f\t\n", pr.Overlay.ProbesPerURLEval, pr.Simulator.ProbesPerURLEval)
		fmt.Fprintf(tw, "decisions by reason\t%s\tsimulator %s\t\n", reasonLine(pr.Overlay.Reasons), reasonLine(pr.Simulator.Reasons))
	}
	return tw.Flush()
}

func reasonLine(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	var b []byte
	for i, k := range keys {
		if i > 0 {
			b = append(b, ' ')
		}
		b = fmt.Appendf(b, "%s=%d", k, m[k])
	}
	return string(b)
}

// startBenchNet starts one overlay peer per simulated crawler, placed and
// positioned as the simulator states them (address, capacity, coarse
// position — micra's distance prior), running spec, and waits until every
// peer sees all members and has joined. It returns the peers started so
// far even on error (the caller closes them).
func startBenchNet(ctx context.Context, w *sim.World, spec sim.PolicySpec, o *benchOverlayOptions, flood bool,
	hostIdx map[netip.Addr]int, guard overlay.Guard, row *policyRow) ([]*overlay.Peer, error) {
	t0 := time.Now()
	peers := make([]*overlay.Peer, 0, o.peers)
	var boot []string
	for i := range o.peers {
		c := w.Crawlers[i]
		cfg := overlay.TestnetConfig()
		cfg.HeartbeatInterval, cfg.FailureTimeout, cfg.FloodPublish = o.heartbeat, o.failTimeout, flood
		cfg.CrawlerAddr = c.Addr
		if c.Capacity > 0 { // (0 in the simulator: no limit; on the overlay, no crawler)
			cfg.Capacity = c.Capacity
		}
		cfg.Lat, cfg.Lon, cfg.HasPos = c.Lat, c.Lon, c.HasPos
		cfg.ProbeGuard = guard
		cfg.Seed = o.seed*1000 + uint64(i) + 1
		brng := rand.New(rand.NewPCG(o.seed, uint64(i)))
		for _, j := range brng.Perm(len(boot))[:min(4, len(boot))] {
			cfg.Bootstrap = append(cfg.Bootstrap, boot[j])
		}
		p, err := overlay.Open(ctx, w.Tree, cfg, overlay.Services{
			Sink:     &sinkCounter{},
			Measurer: &worldMeasurer{w: w, hosts: hostIdx, self: i, rng: rand.New(rand.NewPCG(o.seed, 0x70726f6265+uint64(i)))},
		})
		if err != nil {
			return peers, err
		}
		peers = append(peers, p)
		ec := delegation.Config{Self: p.CrawlerID(), Threshold: o.threshold}
		if spec.Tweak != nil {
			spec.Tweak(&ec)
		}
		p.UsePolicy(spec.New(p.Deps(), ec))
		for _, a := range p.Host().Addrs() {
			boot = append(boot, a.String()+"/p2p/"+p.ID().String())
		}
	}
	for _, p := range peers {
		p.DHT().RefreshRoutingTable()
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	for _, p := range peers {
		if err := p.WaitMembers(wctx, o.peers); err != nil {
			return peers, err
		}
	}
	// Positions arrive with the heartbeats: micra's prior needs every
	// member's before the first decision.
	for _, p := range peers {
		for {
			n := 0
			for _, m := range p.Members().Live() {
				if m.HasPos {
					n++
				}
			}
			if n == o.peers {
				break
			}
			if wctx.Err() != nil {
				return peers, fmt.Errorf("positions: %d of %d members known: %w", n, o.peers, wctx.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, p := range peers {
		if _, err := p.Join(ctx); err != nil {
			return peers, err
		}
	}
	row.SetupS = time.Since(t0).Seconds()
	return peers, nil
}

// benchQuality delegates the simulator's host stream across peers (host i
// decided by peer i mod N), scores it against the world's optimal owners,
// and checks that the peers agree on every owner afterwards.
func benchQuality(ctx context.Context, w *sim.World, peers []*overlay.Peer, train int, row *policyRow) error {
	idx := map[delegation.CrawlerID]int{}
	for i, p := range peers {
		idx[p.CrawlerID()] = i
	}
	var hitAll, hitEval int
	var probesAll, probesEval int
	var delegMs []float64
	reasons := map[string]int{}
	for i, h := range w.Hosts {
		p := peers[i%len(peers)]
		start := time.Now()
		d, err := p.Delegate(ctx, h.Addr)
		if err != nil {
			return fmt.Errorf("host %d (%v) at peer %d: %w", i, h.Addr, i%len(peers), err)
		}
		delegMs = append(delegMs, ovMs(time.Since(start)))
		ci, ok := idx[d.Owner]
		if !ok {
			return fmt.Errorf("host %v delegated to unknown crawler %s", h.Addr, d.Owner)
		}
		hit := int32(ci) == w.Optimal[i]
		reasons[d.Reason.String()]++
		probesAll += d.Probes
		if hit {
			hitAll++
		}
		if i >= train {
			probesEval += d.Probes
			if hit {
				hitEval++
			}
		}
		// Let the announcement reach the next decider (gossip on loopback
		// takes milliseconds), as the simulator's shared directory would.
		if !d.Cached && d.Subnet != hierarchy.None && d.Record.Owner != "" {
			next := peers[(i+1)%len(peers)]
			for deadline := time.Now().Add(500 * time.Millisecond); time.Now().Before(deadline); time.Sleep(time.Millisecond) {
				if r, ok := next.Directory().Cached(d.Subnet); ok && r.Epoch >= d.Record.Epoch {
					break
				}
			}
		}
	}
	n := len(w.Hosts)
	row.Overlay = qualityRow{
		Reasons:    reasons,
		OptimalPct: ovPct(hitEval, n-train), OptimalPctAll: ovPct(hitAll, n),
		ProbesPerURL: float64(probesAll) / float64(n), ProbesPerURLEval: float64(probesEval) / float64(max(1, n-train)),
	}
	row.DelegateP50Ms, row.DelegateP95Ms = ovQuantile(delegMs, 0.5), ovQuantile(delegMs, 0.95)
	row.Subnets, row.Disagreements = overlaySettle(peers, 10*time.Second)
	return nil
}
