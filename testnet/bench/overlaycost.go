package bench

import (
	"context"
	"fmt"
	"math"
	"net/netip"
	"slices"
	"sort"
	"strings"
	"sync"
	"time"

	libp2pmetrics "github.com/libp2p/go-libp2p/core/metrics"

	"github.com/micra-crawler/micra/overlay"
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
	// Each, if set, is called after each network size.
	Each func(OverlayCostRow)
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
	// FalseSuspicions counts live peers declared dead during the window.
	FalseSuspicions int `json:"false_suspicions"`
	// FailureDetectFirstMs / AllMs: a killed peer declared dead by the
	// first / the last of the others.
	FailureDetectFirstMs float64 `json:"failure_detect_first_ms"`
	FailureDetectAllMs   float64 `json:"failure_detect_all_ms"`
	FailureDetectedBy    int     `json:"failure_detected_by"`
	SetupS               float64 `json:"setup_s"`
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
	Exponent float64 `json:"growth_exponent"`
	// PerAddedPeer is the slope of in+out bytes/s per peer against N: what
	// each peer pays for one more member.
	PerAddedPeer float64 `json:"bytes_per_s_per_added_peer"`
	Transport    string  `json:"transport"`
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
	rep := &OverlayCostReport{HeartbeatMs: millis(o.Heartbeat), Transport: "TCP 127.0.0.1, Noise, yamux; DHT /micra; gossipsub"}
	for _, n := range o.PeerCounts {
		row, err := overlayCost(ctx, n, spec, o)
		if err != nil {
			return rep, fmt.Errorf("bench: %d peers: %w", n, err)
		}
		rep.Rows = append(rep.Rows, row)
		if o.Each != nil {
			o.Each(row)
		}
	}
	rep.Exponent, rep.PerAddedPeer = fitGrowth(rep.Rows)
	return rep, nil
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
	oo := OverlayOptions{Peers: n, Seed: o.Seed, Heartbeat: o.Heartbeat, FailureTimeout: o.FailureTimeout, Threshold: 50 * time.Millisecond}
	oo.bandwidth = make([]*libp2pmetrics.BandwidthCounter, n)
	for i := range oo.bandwidth {
		oo.bandwidth[i] = libp2pmetrics.NewBandwidthCounter()
	}
	var prow PolicyRow
	// flood publishing off, as on a network past a few dozen peers
	peers, err := startNetwork(ctx, w, spec, oo, false, hostIdx, func(netip.Addr) error { return nil }, &prow)
	defer func() {
		for _, p := range peers {
			p.Close()
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
	}
	take := func() []snap {
		out := make([]snap, n)
		for i, p := range peers {
			out[i].proto = map[string]libp2pmetrics.Stats{}
			for pid, st := range oo.bandwidth[i].GetBandwidthByProtocol() {
				out[i].proto[string(pid)] = st
			}
			out[i].topic = p.GossipTraffic()
		}
		return out
	}
	before := take()
	t0 := time.Now()
	select {
	case <-ctx.Done():
		return row, ctx.Err()
	case <-time.After(o.Window):
	}
	after := take()
	secs := time.Since(t0).Seconds()
	mu.Lock()
	measuring = false
	row.FalseSuspicions = suspicions
	mu.Unlock()

	row.ByProtocol, row.ByTopic = map[string]float64{}, map[string]TopicCost{}
	per := secs * float64(n)
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
	var fd OverlayReport
	others := measureFailureDetection(peers, oo, &fd)
	row.FailureDetectFirstMs, row.FailureDetectAllMs, row.FailureDetectedBy = fd.FailureDetectFirstMs, fd.FailureDetectAllMs, fd.FailureDetectedBy
	peers = others
	return row, nil
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
