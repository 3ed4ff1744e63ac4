package bench

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Two small idle networks: every peer receives the others' heartbeats,
// gossip bytes are counted by topic and by protocol, a killed peer is
// declared dead by all the others, and the growth fit has two sizes to
// work on.
func TestRunOverlayCostSmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts two overlays")
	}
	rep, err := RunOverlayCost(context.Background(), OverlayCostOptions{PeerCounts: []int{3, 6}, Window: 2 * time.Second,
		Heartbeat: 200 * time.Millisecond, FailureTimeout: time.Second, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Rows) != 2 {
		t.Fatalf("%d rows", len(rep.Rows))
	}
	for _, r := range rep.Rows {
		m := r.ByTopic["micra/membership/1"]
		if m.MsgsIn <= 0 || m.BytesIn < 100*m.MsgsIn {
			t.Errorf("%d peers: membership %+v: want heartbeats received, each over 100 bytes", r.Peers, m)
		}
		if r.ByProtocol["gossipsub"] < m.BytesIn {
			t.Errorf("%d peers: gossipsub streams carried %.0f B/s, less than the membership messages in them (%.0f)", r.Peers, r.ByProtocol["gossipsub"], m.BytesIn)
		}
		if r.FailureDetectedBy != r.Peers-1 {
			t.Errorf("%d peers: the killed peer declared dead by %d", r.Peers, r.FailureDetectedBy)
		}
	}
	if math.IsNaN(float64(rep.Exponent)) || math.IsNaN(float64(rep.PerAddedPeer)) {
		t.Errorf("growth not fitted: %v, %v", rep.Exponent, rep.PerAddedPeer)
	}
	if _, err := RunOverlayCost(context.Background(), OverlayCostOptions{PeerCounts: []int{2}}); err == nil {
		t.Error("a 2-peer network accepted")
	}
}

func TestFitGrowth(t *testing.T) {
	rows := []OverlayCostRow{{Peers: 10, InBps: 100}, {Peers: 20, InBps: 200}, {Peers: 40, InBps: 400}}
	b, slope := fitGrowth(rows)
	if math.Abs(b-1) > 1e-9 || math.Abs(slope-10) > 1e-9 {
		t.Errorf("linear costs: exponent %v, slope %v; want 1 and 10", b, slope)
	}
	b, _ = fitGrowth(rows[:1])
	js, err := json.Marshal(OverlayCostReport{Exponent: Fit(b), PerAddedPeer: Fit(b), MembershipExponent: 1.5})
	if err != nil || !strings.Contains(string(js), `"growth_exponent":null`) || !strings.Contains(string(js), `"membership_growth_exponent":1.5`) {
		t.Errorf("one size's report in JSON: %s, %v", js, err)
	}
	rows = []OverlayCostRow{{Peers: 10, InBps: 50}, {Peers: 100, InBps: 50}}
	if b, _ := fitGrowth(rows); math.Abs(b) > 1e-9 {
		t.Errorf("constant costs: exponent %v", b)
	}
}

// The same on SWIM over QUIC: no heartbeat on gossip, SWIM messages
// counted, the killed peer declared dead by all, and the simulation sized by
// the real peers' record and framing.
func TestRunOverlayCostSWIM(t *testing.T) {
	if testing.Short() {
		t.Skip("starts an overlay")
	}
	dir := t.TempDir()
	rep, err := RunOverlayCost(context.Background(), OverlayCostOptions{PeerCounts: []int{5}, Window: 3 * time.Second,
		Heartbeat: 300 * time.Millisecond, FailureTimeout: time.Second, Seed: 1, Membership: "swim", Transport: "quic",
		SimPeerCounts: []int{60}, SimLoss: 0.01, SimWindow: 20 * time.Second, Wave: 2, ProfileDir: dir})
	if err != nil {
		t.Fatal(err)
	}
	r := rep.Rows[0]
	// opened in waves of 2 (2, 4, 5): every peer still connected to the others
	if r.FormCPUS <= 0 || r.CPUPerPeer <= 0 || r.HeapPerPeerMiB <= 0 || r.GoroutinesPerPeer < 1 || r.ConnsPerPeer < 2 {
		t.Errorf("what the peers cost the process not measured: %.2f CPU-s forming, %.4f CPU-s/s, %.1f MiB, %.0f goroutines, %.1f connections per peer",
			r.FormCPUS, r.CPUPerPeer, r.HeapPerPeerMiB, r.GoroutinesPerPeer, r.ConnsPerPeer)
	}
	for _, name := range []string{"cpu-5-forming.pprof", "cpu-5-settled.pprof", "heap-5.pprof"} {
		if fi, err := os.Stat(filepath.Join(dir, name)); err != nil || fi.Size() == 0 {
			t.Errorf("profile %s not written: %v", name, err)
		}
	}
	if c := r.ConnsByTransport; c["quic-v1"] == 0 || c["tcp"] != 0 {
		t.Errorf("connections by transport %v: want QUIC only", c)
	}
	if m := r.ByTopic["micra/membership/1"]; m.MsgsIn != 0 {
		t.Errorf("heartbeats on gossip under SWIM: %+v", m)
	}
	if r.SWIMMsgsIn < 1 || r.ByProtocol["swim"] <= 0 || r.SWIMRecordBytes < 100 {
		t.Errorf("SWIM traffic not measured: %.2f msgs/s in, %.0f B/s, record %d B", r.SWIMMsgsIn, r.ByProtocol["swim"], r.SWIMRecordBytes)
	}
	if r.FailureDetectedBy != r.Peers-1 {
		t.Errorf("the killed peer declared dead by %d of %d", r.FailureDetectedBy, r.Peers-1)
	}
	if len(rep.Sim) != 1 || rep.Sim[0].DetectedBy != 59 || rep.SimRecordBytes != r.SWIMRecordBytes {
		t.Errorf("simulation %+v (record %d B)", rep.Sim, rep.SimRecordBytes)
	}
	if _, err := RunOverlayCost(context.Background(), OverlayCostOptions{PeerCounts: []int{3}, SimPeerCounts: []int{100}}); err == nil {
		t.Error("a simulation without real SWIM peers to size it accepted")
	}
}
