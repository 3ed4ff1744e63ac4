package main

import (
	"context"
	"os"
	"strconv"
	"testing"
	"time"

	"github.com/micra-crawler/micra/testnet/hostile"
)

// A short `micra bench flood` against a real micra node process, in a
// network with admission and in an open one. With admission the sybils'
// heartbeats are ignored (no certificate): the victim's only member is
// itself, it refuses every hand-off and survives. Open, as many identities
// become members as one neighbour may introduce (identities_per_peer, 50
// here), the rest are ignored, and the victim survives too. The memory
// figures are the 60 s command's, not asserted here.
func TestBenchFlood(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a node process")
	}
	const perPeer = 50
	for _, open := range []bool{false, true} {
		name := map[bool]string{false: "admission", true: "open"}[open]
		t.Run(name, func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			r, err := hostile.RunFlood(ctx, hostile.Options{Binary: os.Args[0], VictimEnv: []string{mainEnv + "=1", "MICRA_IDENTITIES_PER_PEER=" + strconv.Itoa(perPeer)},
				Open: open, Duration: 3 * time.Second, Identities: 300, HandoffStreams: 1, StreamsPerProtocol: 4,
				Settle: time.Second, Idle: time.Second})
			if err != nil {
				t.Fatal(err)
			}
			a, v := r.Attack, r.Victim
			t.Logf("RSS idle %.1f MB, flood peak %.1f MB (%.2f×); attack %+v; victim %+v", r.Idle.MeanMB, r.Flood.PeakMB, r.PeakRatio, a, v)
			if !r.VictimAlive || r.Idle.Samples == 0 || r.Flood.Samples == 0 || r.PeakRatio <= 0 {
				t.Fatalf("alive %v, idle %+v, flood %+v", r.VictimAlive, r.Idle, r.Flood)
			}
			if a.Heartbeats == 0 || a.HandoffMsgs == 0 || a.StreamsOpened == 0 {
				t.Fatalf("the attack sent nothing of some kind: %+v", a)
			}
			if open {
				// the victim, the attacker's own identity, and the sybils it relayed up to the limit
				if v.MembersLive < 2 || v.MembersLive > 2+perPeer {
					t.Fatalf("open network: %d members live, want the victim, the attacker and at most %d sybils", v.MembersLive, perPeer)
				}
				if v.MembershipRejected == 0 {
					t.Fatalf("open network: no heartbeat ignored past the identity limit: %+v", v.GossipRejected)
				}
				return
			}
			if v.MembersLive != 1 || v.CrawlersLive != 1 {
				t.Fatalf("admission: %d members live (%d crawlers), want the victim alone", v.MembersLive, v.CrawlersLive)
			}
			if v.MembershipRejected == 0 {
				t.Fatalf("admission: no heartbeat ignored: %+v", v.GossipRejected)
			}
			if a.HandoffAccepted != 0 || a.HandoffRefused == 0 || v.HandoffsRefused == 0 || v.FrontierSeen != 0 {
				t.Fatalf("admission: hand-offs accepted %d, refused %d (victim counted %v), frontier saw %d URLs",
					a.HandoffAccepted, a.HandoffRefused, v.HandoffsRefused, v.FrontierSeen)
			}
		})
	}
}
