package hostile

import (
	"context"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p"
	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
)

// The hand-written heartbeats pass a real gossipsub's strict signature
// check: a peer running go-libp2p-pubsub with StrictSign (as micra's
// overlay does) delivers every identity's heartbeat as authored by that
// identity, with the snapshot the attacker was given.
func TestIdentitiesSignedAsPubsubChecks(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	ps, err := pubsub.NewGossipSub(ctx, h, pubsub.WithMessageSignaturePolicy(pubsub.StrictSign), pubsub.WithMessageIdFn(overlay.MessageID),
		// as the overlay sets it: the default (32) drops the end of an RPC of 40
		pubsub.WithValidateQueueSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	topic, err := ps.Join(overlay.TopicMembership)
	if err != nil {
		t.Fatal(err)
	}
	sub, err := topic.Subscribe(pubsub.WithBufferSize(1024))
	if err != nil {
		t.Fatal(err)
	}
	var snap hierarchy.SnapshotID
	copy(snap[:], "a snapshot of thirty-two bytes..")
	a, err := NewAttacker(ctx, peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}, snap)
	if err != nil {
		t.Fatal(err)
	}
	defer a.Close()
	const n = 40
	actx, stop := context.WithCancel(ctx)
	done := make(chan error, 1)
	go func() { done <- a.Identities(actx, n) }()
	authors := map[peer.ID]bool{}
	for len(authors) < n {
		msg, err := sub.Next(ctx)
		if err != nil {
			stop()
			t.Fatalf("%d identities heard: %v (counts %+v, Identities: %v)", len(authors), err, a.Counts(), <-done)
		}
		var hb pb.Heartbeat
		if err := proto.Unmarshal(msg.Data, &hb); err != nil {
			t.Fatal(err)
		}
		if string(hb.Snapshot) != string(snap[:]) || hb.IntervalMs != 60_000 || len(hb.Certificate) != 0 {
			t.Fatalf("heartbeat %+v", &hb)
		}
		authors[msg.GetFrom()] = true
	}
	stop()
	if err := <-done; err != nil {
		t.Fatalf("Identities: %v", err)
	}
	if !authors[a.ID()] {
		t.Error("the attacker's own identity announced nothing")
	}
	if c := a.Counts(); c.Heartbeats < n || c.HeartbeatRPCs == 0 || c.HeartbeatRPCs >= c.Heartbeats {
		t.Errorf("counts %+v: want at least %d heartbeats, several to an RPC", c, n)
	}
}

// The attacker talks to loopback only.
func TestAttackerRefusesNonLoopback(t *testing.T) {
	h, err := libp2p.New(libp2p.ListenAddrStrings("/ip4/127.0.0.1/tcp/0"))
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	info := peer.AddrInfo{ID: h.ID(), Addrs: h.Addrs()}
	bad, _ := peer.AddrInfoFromString("/ip4/192.0.2.1/tcp/4001/p2p/" + h.ID().String())
	info.Addrs = append(info.Addrs, bad.Addrs...)
	if _, err := NewAttacker(context.Background(), info, hierarchy.SnapshotID{}); err == nil || !strings.Contains(err.Error(), "not on loopback") {
		t.Fatalf("err %v", err)
	}
}

// A maximal hand-off is what the victim's limits allow at most: 4096 URLs
// of at most 8 KiB, 4 MiB in all.
func TestHandoffRequestMaximal(t *testing.T) {
	req := handoffRequest(hierarchy.SnapshotID{}, 9, 3, 7)
	urls := req.Batches[0].Urls
	if len(urls) != 4096 {
		t.Fatalf("%d URLs", len(urls))
	}
	seen := map[string]bool{}
	for _, u := range urls {
		if len(u) != handoffURLBytes || !strings.HasPrefix(u, "http://127.66.3.") || seen[u] {
			t.Fatalf("URL %.60q… of %d bytes (or twice)", u, len(u))
		}
		seen[u] = true
	}
	if size := proto.Size(req); size > 4<<20-64<<10 || size < 4<<20-128<<10 {
		t.Fatalf("request of %d bytes: want just under the receiver's 4 MiB less its margin", size)
	}
	if string(handoffRequest(hierarchy.SnapshotID{}, 9, 3, 8).Batches[0].Urls[0]) == urls[0] {
		t.Fatal("the next message repeats the URLs (the seen-set would drop them)")
	}
}

func TestParseMetrics(t *testing.T) {
	in := `# HELP micra_overlay_gossip_rejected_total x
# TYPE micra_overlay_gossip_rejected_total counter
micra_overlay_gossip_rejected_total{peer="12D",reason="validation ignored",topic="micra/membership/1"} 9430
micra_overlay_gossip_rejected_total{peer="12D",reason="validation queue full",topic="micra/membership/1"} 1668
micra_overlay_gossip_rejected_total{peer="12D",reason="validation failed",topic="micra/calibration/1"} 2
micra_overlay_handoffs_refused_total{peer="12D"} 47
go_goroutines 166
`
	ss, err := parseMetrics(strings.NewReader(in))
	if err != nil {
		t.Fatal(err)
	}
	if got := sum(ss, "micra_overlay_gossip_rejected_total", map[string]string{"topic": "micra/membership/1"}); got != 9430+1668 {
		t.Errorf("membership rejected %v", got)
	}
	if got := sum(ss, "micra_overlay_handoffs_refused_total", nil); got != 47 {
		t.Errorf("hand-offs refused %v", got)
	}
	if r := rejected(ss); len(r) != 3 || r[0].Reason != "validation ignored" || r[2].Topic != "micra/calibration/1" {
		t.Errorf("rejected %+v", r)
	}
	if _, err := parseMetrics(strings.NewReader("go_goroutines many\n")); err == nil || !strings.Contains(err.Error(), "line 1") {
		t.Errorf("bad value: %v", err)
	}
}
