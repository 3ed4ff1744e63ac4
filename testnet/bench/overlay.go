package bench

// The overlay experiment: in-process libp2p peers on 127.0.0.1 placed as the
// crawlers of the simulator's world (same seed), each answering probes with
// the world model's latency from its position, so no probe traffic leaves
// the process. The simulator's host stream is delegated over the real
// overlay (host i decided by peer i mod N) and scored beside the
// simulator's own figures and their reseeded noise bands.

import (
	"context"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"net/netip"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	libp2pmetrics "github.com/libp2p/go-libp2p/core/metrics"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

// OverlayOptions configures RunOverlay.
type OverlayOptions struct {
	Peers int // overlay peers, also the simulator's crawlers: 2 to 100
	Hosts int // web hosts delegated (the simulator's host stream)
	// Train is how many hosts train before evaluation (negative: 65 %).
	Train int
	Seed  uint64 // world seed, shared with the simulator
	// Policies are the delegation policies (testnet/sim names); each runs
	// on its own fresh overlay beside the simulator, and the first one's
	// network is also measured for lookups, gossip, hand-offs and failure
	// detection.
	Policies  []string
	Threshold time.Duration // probing threshold
	Replicas  int           // simulator runs with other probe/policy seeds, for the noise bands

	CalibrationRounds int // calibration events timed
	Lookups           int // uncached DHT lookups timed
	PagesPerPeer      int // pages each peer "crawls" for the hand-off figure
	LinksPerPage      int // links per page for the hand-off figure

	// Heartbeat and FailureTimeout configure membership; zero picks 1 s and
	// 5 s, slower past 20 peers (membershipDefaults).
	Heartbeat, FailureTimeout time.Duration
	// Membership is the peers' membership protocol (overlay.Config's:
	// "" heartbeats, "swim").
	Membership string
	// Transport is the peers' libp2p transport on 127.0.0.1: "" or "tcp",
	// or "quic" (one UDP socket per peer: hundreds of peers in one process
	// without two file descriptors per connection).
	Transport string
	// CPUProfile, when set, receives a CPU profile of the overlay phases.
	CPUProfile io.Writer

	// Wave, when > 0, opens the peers Wave at a time: each wave joins the
	// network formed by the ones before and every peer opened so far must
	// know all of them before the next wave opens (a bench setting: a
	// real network forms one volunteer at a time; opened all at once, 200
	// peers' handshakes and DHT refreshes starve each other's membership
	// on a small machine). 0 opens them all, then waits.
	Wave int
	// bandwidth[i], when set, counts peer i's streams (RunOverlayCost).
	bandwidth []*libp2pmetrics.BandwidthCounter
	// configure, when set, adjusts peer i's config; measurer, when set,
	// gives peer i's prober from its world-model one (RunLiar).
	configure func(i int, cfg *overlay.Config)
	measurer  func(i int, wm *worldMeasurer) overlay.Measurer
}

// QualityRow is one policy's delegation quality over the simulator's host
// stream.
type QualityRow struct {
	// Reasons counts decisions by why they stopped (delegation.Reason).
	Reasons          map[string]int `json:"reasons"`
	OptimalPct       float64        `json:"optimal_pct"`
	OptimalPctAll    float64        `json:"optimal_pct_all"`
	ProbesPerURL     float64        `json:"probes_per_url"`
	ProbesPerURLEval float64        `json:"probes_per_url_eval"`
}

// PolicyRow is one policy's delegation over the overlay beside the
// simulator's figures for the same world and seed.
type PolicyRow struct {
	Policy        string  `json:"policy"`
	SetupS        float64 `json:"setup_s"`
	Subnets       int     `json:"subnets"`
	Disagreements int     `json:"disagreements"`

	DelegateP50Ms float64    `json:"delegate_p50_ms"`
	DelegateP95Ms float64    `json:"delegate_p95_ms"`
	Overlay       QualityRow `json:"overlay"`
	Simulator     QualityRow `json:"simulator"`
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
	// renamed to this run's overlay peer IDs: the like-for-like reference
	// for the overlay's figure, since a policy may break ties by crawler ID.
	PeerIDSpread sim.Spread `json:"peer_id_spread"`
}

// OverlayReport is the outcome of RunOverlay.
type OverlayReport struct {
	Peers       int     `json:"peers"`
	Hosts       int     `json:"hosts"`
	Train       int     `json:"train"`
	Seed        uint64  `json:"seed"`
	Policy      string  `json:"policy"`
	Membership  string  `json:"membership"` // swim or heartbeat
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

	// FailureTimeoutMs is what detection is compared to: heartbeats' timeout
	// of silence, or SWIM's bound for its first declaration (DeadWithin).
	FailureTimeoutMs     float64 `json:"failure_timeout_ms"`
	FailureDetectFirstMs float64 `json:"failure_detect_first_ms"`
	FailureDetectAllMs   float64 `json:"failure_detect_all_ms"`
	FailureDetectedBy    int     `json:"failure_detected_by"`

	// Delegation quality, one row per policy, each on its own fresh overlay.
	Policies []PolicyRow `json:"policies"`

	HandoffPages      int     `json:"handoff_pages"`
	HandoffMessages   uint64  `json:"handoff_messages"`
	HandoffURLs       uint64  `json:"handoff_urls"`
	HandoffMsgPerPage float64 `json:"handoff_messages_per_page"`
}

// membershipDefaults fills in a zero Heartbeat or FailureTimeout. Every
// in-process peer verifies every heartbeat: the gossip load grows with N² on
// one machine (in a deployment each peer has its own), so past 20 peers
// heartbeats slow down with N.
func (o *OverlayOptions) membershipDefaults() {
	if o.Heartbeat == 0 {
		o.Heartbeat = time.Second
		if o.Peers > 20 && o.Membership != overlay.MembershipSWIM {
			o.Heartbeat = time.Duration(o.Peers) * time.Second / 20
		}
	}
	if o.FailureTimeout == 0 {
		o.FailureTimeout = 5 * time.Second
		if o.Peers > 20 {
			o.FailureTimeout = min(10*time.Second, max(5*time.Second, 3*o.Heartbeat))
		}
	}
}

// RunOverlay builds the simulator's world and figures for o, then for each
// policy a fresh overlay of o.Peers peers that delegates the same host
// stream, and measures the first policy's network: owner lookups (cached
// and over the DHT), calibration gossip to every peer, hand-off messages per
// crawled page and how long a killed peer takes to be declared dead by all.
func RunOverlay(ctx context.Context, o OverlayOptions) (*OverlayReport, error) {
	if o.Peers < 2 || o.Peers > 100 {
		return nil, fmt.Errorf("bench: %d peers: want 2..100", o.Peers)
	}
	if o.Hosts < 1 || o.Replicas < 1 || o.PagesPerPeer < 1 || o.LinksPerPage < 1 {
		return nil, fmt.Errorf("bench: Hosts %d, Replicas %d, PagesPerPeer %d, LinksPerPage %d: want at least 1 each",
			o.Hosts, o.Replicas, o.PagesPerPeer, o.LinksPerPage)
	}
	var specs []sim.PolicySpec
	var names []string
	for _, name := range o.Policies {
		spec, ok := sim.LookupPolicy(name)
		if !ok {
			return nil, fmt.Errorf("bench: unknown policy %q", name)
		}
		if !slices.Contains(names, spec.Name) {
			specs, names = append(specs, spec), append(names, spec.Name)
		}
	}
	if len(specs) == 0 {
		return nil, fmt.Errorf("bench: no policy")
	}
	o.membershipDefaults()
	// Every in-process peer verifies every heartbeat (see
	// membershipDefaults); past 30 peers flood publishing is off too.
	flood := o.Peers <= 30

	// The simulator's world and its own figures, same seed.
	scfg, _ := sim.Preset("paper")
	scfg.Seed, scfg.Crawlers, scfg.Hosts, scfg.Threshold = o.Seed, o.Peers, o.Hosts, o.Threshold
	scfg.Train = o.Train
	if scfg.Train < 0 {
		scfg.Train = o.Hosts * 65 / 100
	}
	scfg.Policies = names
	w, err := sim.NewWorld(scfg)
	if err != nil {
		return nil, err
	}
	srep, _, err := sim.Run(ctx, scfg, w)
	if err != nil {
		return nil, err
	}
	membership := membershipName(o.Membership)
	rep := &OverlayReport{Peers: o.Peers, Hosts: o.Hosts, Train: scfg.Train, Seed: o.Seed, Policy: strings.Join(names, ","), Membership: membership,
		ThresholdMs: float64(o.Threshold.Microseconds()) / 1000, HeartbeatMs: millis(o.Heartbeat), Flood: flood, Transport: "TCP 127.0.0.1, Noise, yamux; DHT /micra; gossipsub"}
	for _, spec := range specs {
		row := PolicyRow{Policy: spec.Name}
		for _, r := range srep.Results {
			if r.Policy == spec.Name {
				row.Simulator = QualityRow{Reasons: r.Reasons, OptimalPct: r.OptimalPct, OptimalPctAll: r.OptimalPctAll,
					ProbesPerURL: r.ProbesPerURL, ProbesPerURLEval: r.ProbesPerURLEval}
			}
		}
		sc := sim.SpreadConfig{Threshold: o.Threshold, Train: scfg.Train, Replicas: o.Replicas, Seed: o.Seed}
		if row.SimulatorSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return nil, err
		}
		sc.PerCrawler = true
		if row.DistributedSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return nil, err
		}
		sc.ShareRecords = true
		if row.SharedSpread, err = w.Spread(ctx, spec, sc); err != nil {
			return nil, err
		}
		rep.Policies = append(rep.Policies, row)
	}

	// The overlay: one peer per simulated crawler.
	if o.CPUProfile != nil {
		if err := pprof.StartCPUProfile(o.CPUProfile); err != nil {
			return nil, err
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
		net, err := startNetwork(ctx, w, spec, o, flood, hostIdx, modelGuard, &rep.Policies[k])
		if k == 0 {
			peers = net
		}
		if err == nil {
			err = measureQuality(ctx, w, net, scfg.Train, &rep.Policies[k])
		}
		if err == nil {
			rep.Policies[k].PeerIDSpread, err = peerIDSpread(ctx, w, net, spec, sim.SpreadConfig{Threshold: o.Threshold, Train: scfg.Train,
				Replicas: o.Replicas, Seed: o.Seed, PerCrawler: true, ShareRecords: true})
		}
		if k > 0 {
			for _, p := range net {
				p.Close()
			}
		}
		if err != nil {
			return nil, fmt.Errorf("policy %s: %w", spec.Name, err)
		}
	}
	rep.SetupS = rep.Policies[0].SetupS

	var subnets []hierarchy.NodeID
	for _, r := range peers[0].Directory().Records() {
		subnets = append(subnets, r.Subnet)
	}
	if len(subnets) == 0 {
		return nil, fmt.Errorf("no subnet was delegated")
	}
	if err := measureLookups(ctx, peers, subnets, o, rep); err != nil {
		return nil, err
	}
	measureCalibration(ctx, peers, subnets, o, rep)
	if err := measureHandoffs(ctx, w, peers, o, rep); err != nil {
		return nil, err
	}
	// The victim is closed there; the others are left for the deferred close.
	peers = measureFailureDetection(peers, o, rep)
	return rep, nil
}

// peerIDSpread is the shared per-crawler spread over w with its crawlers
// named as the peers of net.
func peerIDSpread(ctx context.Context, w *sim.World, net []*overlay.Peer, spec sim.PolicySpec, sc sim.SpreadConfig) (sim.Spread, error) {
	ids := make([]delegation.CrawlerID, len(net))
	for i, p := range net {
		ids[i] = p.CrawlerID()
	}
	named, err := w.WithCrawlerIDs(ids)
	if err != nil {
		return sim.Spread{}, err
	}
	return named.Spread(ctx, spec, sc)
}

// measureLookups times owner lookups on the first peer's cache and through
// its Directory, and uncached lookups over the DHT from random peers.
func measureLookups(ctx context.Context, peers []*overlay.Peer, subnets []hierarchy.NodeID, o OverlayOptions, rep *OverlayReport) error {
	// Cached owner lookup: best of 3 runs of 1M lookups (the machine is
	// shared, the minimum is the cost of the code).
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
	lrng := rand.New(rand.NewPCG(o.Seed, 0x6c6f6f6b))
	var look []float64
	for range o.Lookups {
		p := peers[lrng.IntN(len(peers))]
		s := subnets[lrng.IntN(len(subnets))]
		start := time.Now()
		if _, found, err := p.Directory().LookupDHT(ctx, s); err != nil || !found {
			return fmt.Errorf("dht lookup of subnet %d: found=%v: %v", s, found, err)
		}
		look = append(look, millis(time.Since(start)))
	}
	rep.UncachedSamples = len(look)
	rep.UncachedP50Ms, rep.UncachedP95Ms = quantile(look, 0.5), quantile(look, 0.95)
	return nil
}

// measureCalibration times calibration events until every peer has them.
func measureCalibration(ctx context.Context, peers []*overlay.Peer, subnets []hierarchy.NodeID, o OverlayOptions, rep *OverlayReport) {
	rep.CalibrationRounds = o.CalibrationRounds
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
	for r := range o.CalibrationRounds {
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
		calAll = append(calAll, millis(last.Sub(sent)))
	}
	if len(calAll) > 0 {
		rep.CalibrationAllP50Ms, rep.CalibrationAllMaxMs = quantile(calAll, 0.5), slices.Max(calAll)
	}
}

// measureHandoffs counts the hand-off messages of pages whose links point at
// random hosts, every peer "crawling" o.PagesPerPeer of them.
func measureHandoffs(ctx context.Context, w *sim.World, peers []*overlay.Peer, o OverlayOptions, rep *OverlayReport) error {
	hrng := rand.New(rand.NewPCG(o.Seed, 0x68616e64))
	var before uint64
	for _, p := range peers {
		before += p.HandoffStats().Messages
	}
	for i, p := range peers {
		for pg := range o.PagesPerPeer {
			// A page's foreign links, handed off in one durable commit as
			// the crawler's router does.
			var items []overlay.HandoffItem
			for l := range o.LinksPerPage {
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
	rep.HandoffPages = o.Peers * o.PagesPerPeer
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
	return nil
}

// measureFailureDetection closes the last peer and times until the others
// declare it dead; it returns the peers still open.
func measureFailureDetection(peers []*overlay.Peer, o OverlayOptions, rep *OverlayReport) []*overlay.Peer {
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
	victim.Kill() // a crash: Close would announce the leave, and no failure would be detected
	wait := 3 * o.FailureTimeout
	if o.Membership == overlay.MembershipSWIM {
		// a suspicion lasts SWIM's multiple of log10(N) periods
		wait = max(wait, 120*o.Heartbeat)
	}
	for deadline := killed.Add(wait); time.Now().Before(deadline); time.Sleep(10 * time.Millisecond) {
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
	bound := o.FailureTimeout
	if o.Membership == overlay.MembershipSWIM {
		// SWIM has no timeout of silence: its bound for the first
		// observer's declaration (probe, helpers, the longest suspicion)
		bound = overlay.SWIMConfig(o.Heartbeat).DeadWithin(o.Peers)
	}
	rep.FailureTimeoutMs, rep.FailureDetectFirstMs, rep.FailureDetectAllMs = millis(bound), millis(first), millis(all)
	return others
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

func millis(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func percent(a, b int) float64 {
	if b == 0 {
		return 0
	}
	return 100 * float64(a) / float64(b)
}

func quantile(xs []float64, q float64) float64 {
	if len(xs) == 0 {
		return 0
	}
	s := append([]float64(nil), xs...)
	sort.Float64s(s)
	i := int(q*float64(len(s))+0.5) - 1
	return s[min(max(i, 0), len(s)-1)]
}

// startNetwork starts one overlay peer per simulated crawler, placed and
// positioned as the simulator states them (address, capacity, coarse
// position — micra's distance prior), running spec, and waits until every
// peer sees all members and has joined. It returns the peers started so
// far even on error (the caller closes them).
func startNetwork(ctx context.Context, w *sim.World, spec sim.PolicySpec, o OverlayOptions, flood bool,
	hostIdx map[netip.Addr]int, guard overlay.Guard, row *PolicyRow) ([]*overlay.Peer, error) {
	t0 := time.Now()
	peers := make([]*overlay.Peer, 0, o.Peers)
	var boot []string
	for i := range o.Peers {
		c := w.Crawlers[i]
		cfg := overlay.TestnetConfig()
		cfg.HeartbeatInterval, cfg.FailureTimeout, cfg.FloodPublish = o.Heartbeat, o.FailureTimeout, flood
		cfg.Membership = o.Membership
		if o.Transport == "quic" {
			cfg.ListenAddrs = []string{"/ip4/127.0.0.1/udp/0/quic-v1"}
		}
		cfg.CrawlerAddr = c.Addr
		if c.Capacity > 0 { // (0 in the simulator: no limit; on the overlay, no crawler)
			cfg.Capacity = c.Capacity
		}
		cfg.Lat, cfg.Lon, cfg.HasPos = c.Lat, c.Lon, c.HasPos
		cfg.ProbeGuard = guard
		cfg.Seed = o.Seed*1000 + uint64(i) + 1
		if i < len(o.bandwidth) {
			cfg.Bandwidth = o.bandwidth[i]
		}
		brng := rand.New(rand.NewPCG(o.Seed, uint64(i)))
		for _, j := range brng.Perm(len(boot))[:min(4, len(boot))] {
			cfg.Bootstrap = append(cfg.Bootstrap, boot[j])
		}
		if o.configure != nil {
			o.configure(i, &cfg)
		}
		wm := &worldMeasurer{w: w, hosts: hostIdx, self: i, rng: rand.New(rand.NewPCG(o.Seed, 0x70726f6265+uint64(i)))}
		var ms overlay.Measurer = wm
		if o.measurer != nil {
			ms = o.measurer(i, wm)
		}
		p, err := overlay.Open(ctx, w.Tree, cfg, overlay.Services{Sink: &sinkCounter{}, Measurer: ms})
		if err != nil {
			return peers, err
		}
		peers = append(peers, p)
		ec := delegation.Config{Self: p.CrawlerID(), Threshold: o.Threshold}
		if spec.Tweak != nil {
			spec.Tweak(&ec)
		}
		p.UsePolicy(spec.New(p.Deps(), ec))
		for _, a := range p.Host().Addrs() {
			boot = append(boot, a.String()+"/p2p/"+p.ID().String())
		}
		if o.Wave > 0 && (len(peers)%o.Wave == 0 || len(peers) == o.Peers) {
			if err := formWave(ctx, peers, o.Wave, t0); err != nil {
				return peers, err
			}
		}
	}
	if o.Wave <= 0 {
		for _, p := range peers {
			p.DHT().RefreshRoutingTable()
		}
	}
	wctx, wcancel := context.WithTimeout(ctx, 2*time.Minute)
	defer wcancel()
	for _, p := range peers {
		if err := p.WaitMembers(wctx, o.Peers); err != nil {
			return peers, err
		}
	}
	slog.Info("bench: membership formed", "peers", o.Peers, "after", time.Since(t0).Round(time.Millisecond))
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
			if n == o.Peers {
				break
			}
			if wctx.Err() != nil {
				return peers, fmt.Errorf("positions: %d of %d members known: %w", n, o.Peers, wctx.Err())
			}
			time.Sleep(10 * time.Millisecond)
		}
	}
	for _, p := range peers {
		// a DHT read may time out on a loaded machine: try again
		var err error
		for range 3 {
			if _, err = p.Join(ctx); err == nil || ctx.Err() != nil {
				break
			}
		}
		if err != nil {
			return peers, err
		}
	}
	row.SetupS = time.Since(t0).Seconds()
	slog.Info("bench: network set up", "peers", o.Peers, "after", time.Since(t0).Round(time.Millisecond))
	return peers, nil
}

// formWave refreshes the routing tables of the last wave of peers opened
// and waits (two minutes at most) until every peer opened so far knows all
// of them.
func formWave(ctx context.Context, peers []*overlay.Peer, wave int, t0 time.Time) error {
	from := (len(peers) - 1) / wave * wave
	for _, p := range peers[from:] {
		p.DHT().RefreshRoutingTable()
	}
	wctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
	defer cancel()
	for _, p := range peers {
		if err := p.WaitMembers(wctx, len(peers)); err != nil {
			return fmt.Errorf("wave of peers %d..%d: %w", from, len(peers)-1, err)
		}
	}
	slog.Info("bench: wave formed", "peers", len(peers), "after", time.Since(t0).Round(time.Millisecond))
	return nil
}

// measureQuality delegates the simulator's host stream across peers (host i
// decided by peer i mod N), scores it against the world's optimal owners,
// and checks that the peers agree on every owner afterwards.
func measureQuality(ctx context.Context, w *sim.World, peers []*overlay.Peer, train int, row *PolicyRow) error {
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
		delegMs = append(delegMs, millis(time.Since(start)))
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
	row.Overlay = QualityRow{
		Reasons:    reasons,
		OptimalPct: percent(hitEval, n-train), OptimalPctAll: percent(hitAll, n),
		ProbesPerURL: float64(probesAll) / float64(n), ProbesPerURLEval: float64(probesEval) / float64(max(1, n-train)),
	}
	row.DelegateP50Ms, row.DelegateP95Ms = quantile(delegMs, 0.5), quantile(delegMs, 0.95)
	row.Subnets, row.Disagreements = overlaySettle(peers, 10*time.Second)
	return nil
}

// membershipName is the report's name of an overlay.Config.Membership
// ("" is heartbeats).
func membershipName(m string) string {
	if m == overlay.MembershipSWIM {
		return "swim"
	}
	return "heartbeat"
}
