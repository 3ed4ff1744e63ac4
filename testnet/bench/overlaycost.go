package bench

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"net/netip"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	ma "github.com/multiformats/go-multiaddr"

	libp2pmetrics "github.com/libp2p/go-libp2p/core/metrics"

	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/swim"
	"github.com/micra-crawler/micra/testnet/sim"
)

// OverlayCostOptions configures RunOverlayCost.
type OverlayCostOptions struct {
	// PeerCounts are the network sizes measured, each on a fresh overlay.
	PeerCounts []int
	// Window is how long each network is measured once formed.
	Window time.Duration
	// Heartbeat and FailureTimeout configure membership (the product's
	// defaults: 1 s and 5 s).
	Heartbeat, FailureTimeout time.Duration
	Seed                      uint64
	// Membership is the peers' membership protocol ("" heartbeats, "swim").
	Membership string
	// Transport is the peers' transport: "" or "tcp", or "quic" (one UDP
	// socket per peer, so the largest sizes fit a process's descriptors).
	Transport string
	// SimPeerCounts, if set, are network sizes the SWIM protocol is also
	// simulated at (swim.Simulate: the real state machine and message
	// encoding, a member's record as large as the real peers' and each
	// message's framing as measured on them), with SimLoss of the messages
	// lost, measured over SimWindow.
	SimPeerCounts []int
	SimLoss       float64
	SimWindow     time.Duration
	// Each, if set, is called after each network size.
	Each func(OverlayCostRow)
	// EachSim, if set, is called after each simulated size.
	EachSim func(swim.SimResult)
	// Wave, when > 0, opens each network's peers Wave at a time, each wave
	// formed before the next opens (OverlayOptions.Wave).
	Wave int
	// ProfileDir, if set, receives pprof profiles of each size: CPU while
	// the network forms (cpu-N-forming.pprof) and while it is measured
	// (cpu-N-settled.pprof), and the heap at the window's end
	// (heap-N.pprof).
	ProfileDir string
}

// OverlayCostRow is one network size: what an idle member costs each peer,
// per second, measured over the window (bytes of every libp2p stream by
// protocol, from the bandwidth reporter; gossip messages and bytes by
// topic, from the pubsub tracer), and the failure detector's behaviour.
type OverlayCostRow struct {
	Peers   int     `json:"peers"`
	WindowS float64 `json:"window_s"`
	// InBps and OutBps are the mean per peer over every protocol.
	InBps  float64 `json:"in_bytes_per_s"`
	OutBps float64 `json:"out_bytes_per_s"`
	// ByProtocol is bytes per second in+out per peer, by libp2p protocol.
	ByProtocol map[string]float64 `json:"by_protocol_bytes_per_s"`
	// ByTopic is gossip per peer per second, by topic ("control":
	// IHAVE/IWANT/GRAFT/PRUNE of every topic).
	ByTopic map[string]TopicCost `json:"by_topic"`
	// MembershipBps is what membership and calibration cost a peer, in+out
	// bytes per second: the gossipsub streams (heartbeats, calibration
	// events, their control messages) and SWIM's streams.
	MembershipBps float64 `json:"membership_calibration_bytes_per_s"`
	// SWIM (Membership "swim"): messages per peer per second each way,
	// their mean payload, and suspicions raised during the window.
	SWIMMsgsOut        float64 `json:"swim_msgs_out_per_s,omitempty"`
	SWIMMsgsIn         float64 `json:"swim_msgs_in_per_s,omitempty"`
	SWIMPayloadBytes   float64 `json:"swim_payload_bytes_per_msg,omitempty"`
	SWIMSuspicionsSeen int     `json:"swim_suspicions,omitempty"`
	SWIMRecordBytes    int     `json:"swim_record_bytes,omitempty"`
	// FalseSuspicions counts live peers declared dead during the window.
	FalseSuspicions int `json:"false_suspicions"`
	// ConnsByTransport counts the peers' open connections at the window's
	// end by transport ("tcp", "quic-v1"), each end counted.
	ConnsByTransport map[string]int `json:"conns_by_transport"`
	// FailureDetectFirstMs / AllMs: a killed peer declared dead by the
	// first / the last of the others.
	FailureDetectFirstMs float64 `json:"failure_detect_first_ms"`
	FailureDetectAllMs   float64 `json:"failure_detect_all_ms"`
	FailureDetectedBy    int     `json:"failure_detected_by"`
	SetupS               float64 `json:"setup_s"`
	// What the peers cost this process (every peer of a size runs in it):
	// CPU seconds while the network formed (setup and settling), CPU
	// seconds per peer per second of the window, Go heap in use per peer
	// and goroutines per peer at the window's end, and the machine's
	// 1-minute load average then (other work shares the CPUs).
	FormCPUS          float64 `json:"form_cpu_s"`
	CPUPerPeer        float64 `json:"cpu_s_per_peer_per_s"`
	HeapPerPeerMiB    float64 `json:"heap_per_peer_mib"`
	GoroutinesPerPeer float64 `json:"goroutines_per_peer"`
	ConnsPerPeer      float64 `json:"conns_per_peer"`
	LoadAvg           float64 `json:"load_avg"`
	// QuietS: how long after forming (and settling) the network was until
	// no SWIM peer had a join's change left to piggyback.
	QuietS float64 `json:"quiet_s,omitempty"`
}

// TopicCost is one topic's gossip per peer per second.
type TopicCost struct {
	MsgsIn   float64 `json:"msgs_in"`
	MsgsOut  float64 `json:"msgs_out"`
	BytesIn  float64 `json:"bytes_in"`
	BytesOut float64 `json:"bytes_out"`
}

// OverlayCostReport is every size and the fitted growth.
type OverlayCostReport struct {
	HeartbeatMs float64          `json:"heartbeat_ms"`
	Rows        []OverlayCostRow `json:"rows"`
	// Exponent is b in in+out bytes/s per peer ≈ a·N^b (least squares on
	// logs): 1 is linear growth per peer, 0 constant.
	Exponent Fit `json:"growth_exponent"`
	// PerAddedPeer is the slope of in+out bytes/s per peer against N: what
	// each peer pays for one more member.
	PerAddedPeer Fit    `json:"bytes_per_s_per_added_peer"`
	Transport    string `json:"transport"`
	Membership   string `json:"membership"`
	// MembershipExponent is the growth of MembershipBps (as Exponent).
	MembershipExponent Fit `json:"membership_growth_exponent"`
	// Sim is SWIM simulated at SimPeerCounts, with the record size and the
	// per-message framing measured on the real peers of this run.
	Sim              []swim.SimResult `json:"sim,omitempty"`
	SimRecordBytes   int              `json:"sim_record_bytes,omitempty"`
	SimOverheadBytes float64          `json:"sim_msg_overhead_bytes,omitempty"`
}

// Fit is a fitted figure; NaN (fewer than two sizes to fit) is null in
// JSON, which has no NaN.
type Fit float64

// MarshalJSON writes null for NaN.
func (f Fit) MarshalJSON() ([]byte, error) {
	if math.IsNaN(float64(f)) {
		return []byte("null"), nil
	}
	return json.Marshal(float64(f))
}

// RunOverlayCost starts, for each size in o.PeerCounts, a fresh overlay of
// that many idle crawlers (in this process, on 127.0.0.1), waits until
// every peer sees every other, and measures what membership, gossip and the
// DHT's upkeep cost each peer over o.Window; then kills one peer and times
// its detection. Nothing is crawled or delegated during the window beyond
// each peer's own subnet (Join): this is the floor every member pays.
func RunOverlayCost(ctx context.Context, o OverlayCostOptions) (*OverlayCostReport, error) {
	if len(o.PeerCounts) == 0 {
		return nil, fmt.Errorf("bench: no network size")
	}
	for _, n := range o.PeerCounts {
		if n < 3 || n > 300 {
			return nil, fmt.Errorf("bench: %d peers: want 3..300", n)
		}
	}
	if o.Window <= 0 {
		o.Window = 20 * time.Second
	}
	if o.Heartbeat <= 0 {
		o.Heartbeat = time.Second
	}
	if o.FailureTimeout <= 0 {
		o.FailureTimeout = 5 * time.Second
	}
	spec, ok := sim.LookupPolicy("micra")
	if !ok {
		return nil, fmt.Errorf("bench: no micra policy")
	}
	membership := membershipName(o.Membership)
	if len(o.SimPeerCounts) > 0 && o.Membership != overlay.MembershipSWIM {
		return nil, fmt.Errorf("bench: the SWIM simulation takes its record size and framing from real SWIM peers: set Membership swim")
	}
	transport := "TCP 127.0.0.1, Noise, yamux; DHT /micra; gossipsub"
	if o.Transport == "quic" {
		transport = "QUIC 127.0.0.1; DHT /micra; gossipsub"
	}
	rep := &OverlayCostReport{HeartbeatMs: millis(o.Heartbeat), Transport: transport, Membership: membership}
	for _, n := range o.PeerCounts {
		row, err := overlayCost(ctx, n, spec, o)
		if err != nil {
			return rep, fmt.Errorf("bench: %d peers: %w", n, err)
		}
		rep.Rows = append(rep.Rows, row)
		rep.SimRecordBytes = max(rep.SimRecordBytes, row.SWIMRecordBytes)
		if o.Each != nil {
			o.Each(row)
		}
	}
	b, slope := fitGrowth(rep.Rows)
	rep.Exponent, rep.PerAddedPeer = Fit(b), Fit(slope)
	mrows := make([]OverlayCostRow, len(rep.Rows))
	for i, r := range rep.Rows {
		mrows[i] = OverlayCostRow{Peers: r.Peers, InBps: r.MembershipBps}
	}
	mb, _ := fitGrowth(mrows)
	rep.MembershipExponent = Fit(mb)
	if len(o.SimPeerCounts) == 0 {
		return rep, nil
	}
	if err := simulateSWIM(rep, o); err != nil {
		return rep, err
	}
	return rep, nil
}

// simulateSWIM runs swim.Simulate at each simulated size with the record
// size and the per-message framing of this run's largest real network.
func simulateSWIM(rep *OverlayCostReport, o OverlayCostOptions) error {
	var last *OverlayCostRow
	for i := range rep.Rows {
		if rep.Rows[i].SWIMMsgsOut > 0 {
			last = &rep.Rows[i]
		}
	}
	if last == nil || rep.SimRecordBytes == 0 {
		return fmt.Errorf("bench: no real SWIM traffic measured to size the simulation by")
	}
	// framing: SWIM stream bytes per message beyond the payload; a
	// stream's protocol negotiation is counted under no protocol (""), and
	// idle, SWIM's one-message streams open nearly all of them
	perMsg := (last.ByProtocol["swim"] + last.ByProtocol[""]) / (last.SWIMMsgsOut + last.SWIMMsgsIn)
	rep.SimOverheadBytes = max(0, perMsg-last.SWIMPayloadBytes)
	window := o.SimWindow
	if window <= 0 {
		window = time.Minute
	}
	for _, n := range o.SimPeerCounts {
		res, err := swim.Simulate(swim.SimConfig{N: n, Node: overlay.SWIMConfig(o.Heartbeat), RecordBytes: rep.SimRecordBytes,
			MsgOverhead: int(math.Round(rep.SimOverheadBytes)), Loss: o.SimLoss, Latency: 30 * time.Millisecond,
			Warm: 20 * o.Heartbeat, Window: window, Detect: 3 * time.Minute, Seed: o.Seed})
		if err != nil {
			return fmt.Errorf("bench: simulate %d: %w", n, err)
		}
		rep.Sim = append(rep.Sim, res)
		if o.EachSim != nil {
			o.EachSim(res)
		}
	}
	return nil
}

func overlayCost(ctx context.Context, n int, spec sim.PolicySpec, o OverlayCostOptions) (OverlayCostRow, error) {
	row := OverlayCostRow{Peers: n, WindowS: o.Window.Seconds()}
	scfg, _ := sim.Preset("paper")
	scfg.Seed, scfg.Crawlers, scfg.Hosts, scfg.Train = o.Seed, n, 10, 0
	w, err := sim.NewWorld(scfg)
	if err != nil {
		return row, err
	}
	hostIdx := make(map[netip.Addr]int, len(w.Hosts))
	for i, h := range w.Hosts {
		hostIdx[h.Addr] = i
	}
	oo := OverlayOptions{Peers: n, Seed: o.Seed, Heartbeat: o.Heartbeat, FailureTimeout: o.FailureTimeout, Threshold: 50 * time.Millisecond, Membership: o.Membership, Transport: o.Transport, Wave: o.Wave}
	oo.bandwidth = make([]*libp2pmetrics.BandwidthCounter, n)
	for i := range oo.bandwidth {
		oo.bandwidth[i] = libp2pmetrics.NewBandwidthCounter()
	}
	var prow PolicyRow
	cpu0 := cpuTime()
	stopProf, err := startCPUProfile(o.ProfileDir, fmt.Sprintf("cpu-%d-forming.pprof", n))
	if err != nil {
		return row, err
	}
	defer func() { stopProf() }()
	// flood publishing off, as on a network past a few dozen peers
	peers, err := startNetwork(ctx, w, spec, oo, false, hostIdx, func(netip.Addr) error { return nil }, &prow)
	defer func() {
		// killed, not closed: each leave would wait for neighbours that
		// left before it (LeaveTimeout each, minutes at 200 peers); and one
		// by one: hosts closed concurrently in one process deadlock in
		// libp2p's event bus (an identify push from a closing neighbour
		// blocks on a subscription whose owner is closing it)
		for _, p := range peers {
			p.Kill()
		}
	}()
	if err != nil {
		return row, err
	}
	row.SetupS = prow.SetupS
	// let the joins' records and provider records settle, then measure
	settle := 3 * o.Heartbeat
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(settle):
	}
	// SWIM: the joins' records are still piggybacked for a while after the
	// membership formed (a join's cost, not an idle member's): wait until
	// no peer has any left to send (at most two minutes; the row says how long)
	q0 := time.Now()
	for quiet := false; !quiet && time.Since(q0) < 2*time.Minute; {
		quiet = true
		for _, p := range peers {
			quiet = quiet && p.SWIMPending() == 0
		}
		if !quiet {
			select {
			case <-ctx.Done():
				return row, ctx.Err()
			case <-time.After(o.Heartbeat):
			}
		}
	}
	row.QuietS = time.Since(q0).Seconds()
	stopProf()
	row.FormCPUS = (cpuTime() - cpu0).Seconds()
	if stopProf, err = startCPUProfile(o.ProfileDir, fmt.Sprintf("cpu-%d-settled.pprof", n)); err != nil {
		return row, err
	}
	var mu sync.Mutex
	suspicions := 0
	measuring := true
	for _, p := range peers {
		p.Members().OnChange(func(ev overlay.MemberEvent) {
			mu.Lock()
			if measuring && ev.Dead {
				suspicions++
			}
			mu.Unlock()
		})
	}
	type snap struct {
		proto map[string]libp2pmetrics.Stats
		topic map[string]overlay.GossipTraffic
		swim  swim.Stats
	}
	take := func() []snap {
		out := make([]snap, n)
		for i, p := range peers {
			out[i].proto = map[string]libp2pmetrics.Stats{}
			for pid, st := range oo.bandwidth[i].GetBandwidthByProtocol() {
				out[i].proto[string(pid)] = st
			}
			out[i].topic = p.GossipTraffic()
			out[i].swim = p.SWIMStats()
		}
		return out
	}
	before := take()
	t0, cpuW := time.Now(), cpuTime()
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(o.Window):
	}
	after := take()
	secs := time.Since(t0).Seconds()
	row.CPUPerPeer = (cpuTime() - cpuW).Seconds() / secs / float64(n)
	stopProf()
	var ms runtime.MemStats
	runtime.ReadMemStats(&ms)
	row.HeapPerPeerMiB = float64(ms.HeapInuse) / float64(1<<20) / float64(n)
	row.GoroutinesPerPeer = float64(runtime.NumGoroutine()) / float64(n)
	row.LoadAvg = loadAvg()
	if err := writeHeapProfile(o.ProfileDir, fmt.Sprintf("heap-%d.pprof", n)); err != nil {
		return row, err
	}
	row.ConnsByTransport = connsByTransport(peers)
	for _, c := range row.ConnsByTransport {
		row.ConnsPerPeer += float64(c) / float64(n)
	}
	mu.Lock()
	measuring = false
	row.FalseSuspicions = suspicions
	mu.Unlock()

	row.ByProtocol, row.ByTopic = map[string]float64{}, map[string]TopicCost{}
	per := secs * float64(n)
	var payload, msgs float64
	for i := range peers {
		a, b := after[i].swim, before[i].swim
		row.SWIMMsgsOut += float64(a.Sent-b.Sent) / per
		row.SWIMMsgsIn += float64(a.Received-b.Received) / per
		row.SWIMSuspicionsSeen += int(a.Suspicions - b.Suspicions)
		payload += float64(a.BytesSent - b.BytesSent + a.BytesReceived - b.BytesReceived)
		msgs += float64(a.Sent - b.Sent + a.Received - b.Received)
	}
	if msgs > 0 {
		row.SWIMPayloadBytes = payload / msgs
	}
	for i := range peers {
		for pid, st := range after[i].proto {
			b := before[i].proto[pid]
			in, out := float64(st.TotalIn-b.TotalIn), float64(st.TotalOut-b.TotalOut)
			row.InBps += in / per
			row.OutBps += out / per
			row.ByProtocol[protocolName(pid)] += (in + out) / per
		}
		for topic, t := range after[i].topic {
			b := before[i].topic[topic]
			c := row.ByTopic[topic]
			c.MsgsIn += float64(t.MsgsIn-b.MsgsIn) / per
			c.MsgsOut += float64(t.MsgsOut-b.MsgsOut) / per
			c.BytesIn += float64(t.BytesIn-b.BytesIn) / per
			c.BytesOut += float64(t.BytesOut-b.BytesOut) / per
			row.ByTopic[topic] = c
		}
	}
	row.MembershipBps = row.ByProtocol["gossipsub"] + row.ByProtocol["swim"] + row.ByProtocol["swim-sync"]
	row.SWIMRecordBytes = peers[0].SealedRecordSize()
	var fd OverlayReport
	others := measureFailureDetection(peers, oo, &fd)
	row.FailureDetectFirstMs, row.FailureDetectAllMs, row.FailureDetectedBy = fd.FailureDetectFirstMs, fd.FailureDetectAllMs, fd.FailureDetectedBy
	peers = others
	return row, nil
}

// startCPUProfile profiles the process's CPU into dir/name until the
// returned stop is called (again: nothing); no dir, no profile.
func startCPUProfile(dir, name string) (stop func(), err error) {
	if dir == "" {
		return func() {}, nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return nil, fmt.Errorf("bench: profile: %w", err)
	}
	if err := pprof.StartCPUProfile(f); err != nil {
		f.Close()
		return nil, fmt.Errorf("bench: profile %s: %w", f.Name(), err)
	}
	var once sync.Once
	return func() {
		once.Do(func() {
			pprof.StopCPUProfile()
			f.Close()
		})
	}, nil
}

// writeHeapProfile writes the heap's live objects to dir/name; no dir,
// nothing.
func writeHeapProfile(dir, name string) error {
	if dir == "" {
		return nil
	}
	f, err := os.Create(filepath.Join(dir, name))
	if err != nil {
		return fmt.Errorf("bench: profile: %w", err)
	}
	runtime.GC()
	err = pprof.WriteHeapProfile(f)
	if cerr := f.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return fmt.Errorf("bench: profile %s: %w", f.Name(), err)
	}
	return nil
}

// protocolName shortens a libp2p protocol id for the table: the DHT's
// query protocol and gossipsub's versions keep their family's name.
func protocolName(pid string) string {
	switch {
	case strings.Contains(pid, "/kad/"):
		return "dht"
	case strings.HasPrefix(pid, "/meshsub/"):
		return "gossipsub"
	case strings.HasPrefix(pid, "/ipfs/id/"):
		return "identify"
	case strings.HasPrefix(pid, "/ipfs/ping/"):
		return "ping"
	case pid == string(overlay.ProtoSWIM):
		return "swim"
	case pid == string(overlay.ProtoSWIMSync):
		return "swim-sync"
	}
	return pid
}

// fitGrowth fits in+out bytes/s per peer ≈ a·N^b and the linear slope.
func fitGrowth(rows []OverlayCostRow) (exponent, slope float64) {
	if len(rows) < 2 {
		return math.NaN(), math.NaN()
	}
	var sx, sy, sxx, sxy, lx, ly, lxx, lxy float64
	k := 0.0
	for _, r := range rows {
		x, y := float64(r.Peers), r.InBps+r.OutBps
		if y <= 0 {
			continue
		}
		k++
		sx, sy, sxx, sxy = sx+x, sy+y, sxx+x*x, sxy+x*y
		lx, ly = lx+math.Log(x), ly+math.Log(y)
		lxx, lxy = lxx+math.Log(x)*math.Log(x), lxy+math.Log(x)*math.Log(y)
	}
	if k < 2 {
		return math.NaN(), math.NaN()
	}
	return (k*lxy - lx*ly) / (k*lxx - lx*lx), (k*sxy - sx*sy) / (k*sxx - sx*sx)
}

// TopProtocols lists a row's protocols by cost, highest first.
func (r OverlayCostRow) TopProtocols() []string {
	ps := make([]string, 0, len(r.ByProtocol))
	for p := range r.ByProtocol {
		ps = append(ps, p)
	}
	sort.Slice(ps, func(i, j int) bool { return r.ByProtocol[ps[i]] > r.ByProtocol[ps[j]] })
	return slices.Clip(ps)
}

// connsByTransport counts peers' open connections by their transport.
func connsByTransport(peers []*overlay.Peer) map[string]int {
	out := map[string]int{}
	for _, p := range peers {
		for _, c := range p.Host().Network().Conns() {
			t := "other"
			ma.ForEach(c.RemoteMultiaddr(), func(comp ma.Component) bool {
				switch comp.Protocol().Code {
				case ma.P_TCP:
					t = "tcp"
				case ma.P_QUIC_V1:
					t = "quic-v1"
				}
				return true
			})
			out[t]++
		}
	}
	return out
}
