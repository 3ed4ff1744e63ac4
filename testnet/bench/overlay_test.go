package bench

import (
	"context"
	"testing"
	"time"
)

// TestRunOverlaySmall runs the experiment end to end on three peers: every
// host is delegated over the overlay, the peers agree on every owner, the
// lookups, calibration events and hand-offs are measured, and the killed
// peer is declared dead by both others within three failure timeouts.
func TestRunOverlaySmall(t *testing.T) {
	if testing.Short() {
		t.Skip("starts libp2p peers")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	rep, err := RunOverlay(ctx, OverlayOptions{Peers: 3, Hosts: 30, Train: -1, Seed: 2, Policies: []string{"ipmicra", "ipmicra"},
		Threshold: 50 * time.Millisecond, Replicas: 2, CalibrationRounds: 2, Lookups: 5, PagesPerPeer: 4, LinksPerPage: 3,
		Heartbeat: 200 * time.Millisecond, FailureTimeout: time.Second})
	if err != nil {
		t.Fatal(err)
	}
	if rep.Policy != "ipmicra" || len(rep.Policies) != 1 || rep.Train != 19 || !rep.Flood || rep.HeartbeatMs != 200 {
		t.Fatalf("report head: %+v", rep)
	}
	row := rep.Policies[0]
	decided := 0
	for _, n := range row.Overlay.Reasons {
		decided += n
	}
	if decided != 30 || row.Disagreements != 0 || row.Subnets == 0 {
		t.Fatalf("delegation: %d decisions, %d disagreements of %d subnets", decided, row.Disagreements, row.Subnets)
	}
	for name, sp := range map[string]int{"simulator": row.SimulatorSpread.Replicas, "distributed": row.DistributedSpread.Replicas,
		"shared": row.SharedSpread.Replicas, "peer id": row.PeerIDSpread.Replicas} {
		if sp != 2 {
			t.Errorf("%s spread of %d replicas, want 2", name, sp)
		}
	}
	if rep.UncachedSamples != 5 || rep.CachedLookupNs <= 0 || rep.CalibrationRounds != 2 || rep.HandoffPages != 12 {
		t.Fatalf("measurements: %+v", rep)
	}
	if rep.FailureDetectedBy != 2 || rep.FailureTimeoutMs != 1000 || rep.FailureDetectAllMs > 3000 {
		t.Fatalf("failure detection: by %d, all after %.0f ms (timeout %.0f ms)", rep.FailureDetectedBy, rep.FailureDetectAllMs, rep.FailureTimeoutMs)
	}
}

// Heartbeat and failure timeout left at zero are picked from the number of
// peers; options that cannot run are refused before any peer starts.
func TestRunOverlayOptions(t *testing.T) {
	ok := OverlayOptions{Peers: 2, Hosts: 10, Policies: []string{"hash"}, Replicas: 1, PagesPerPeer: 1, LinksPerPage: 1}
	for _, bad := range []func(*OverlayOptions){
		func(o *OverlayOptions) { o.Peers = 1 },
		func(o *OverlayOptions) { o.Peers = 101 },
		func(o *OverlayOptions) { o.Replicas = 0 },
		func(o *OverlayOptions) { o.Hosts = 0 },
		func(o *OverlayOptions) { o.Policies = []string{"nope"} },
		func(o *OverlayOptions) { o.Policies = nil },
	} {
		o := ok
		bad(&o)
		if _, err := RunOverlay(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
	for _, c := range []struct {
		peers                int
		heartbeat, failure   time.Duration
		wantHeartbeat, wantF time.Duration
	}{
		{20, 0, 0, time.Second, 5 * time.Second},
		{40, 0, 0, 2 * time.Second, 6 * time.Second},
		{100, 0, 0, 5 * time.Second, 10 * time.Second},
		{40, time.Second, 0, time.Second, 5 * time.Second},
		{40, 0, 7 * time.Second, 2 * time.Second, 7 * time.Second},
	} {
		o := OverlayOptions{Peers: c.peers, Heartbeat: c.heartbeat, FailureTimeout: c.failure}
		o.membershipDefaults()
		if o.Heartbeat != c.wantHeartbeat || o.FailureTimeout != c.wantF {
			t.Errorf("%d peers, set %v/%v: heartbeat %v, failure timeout %v; want %v, %v", c.peers, c.heartbeat, c.failure,
				o.Heartbeat, o.FailureTimeout, c.wantHeartbeat, c.wantF)
		}
	}
}
