package overlay

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"reflect"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// blockingMeasurer never answers before its context ends (a SYN dropped by a
// firewall: the kernel retries for ~2 minutes).
type blockingMeasurer struct{}

func (blockingMeasurer) Measure(ctx context.Context, _ ProbeTarget) (time.Duration, error) {
	<-ctx.Done()
	return 0, ctx.Err()
}

// The self-probe (c == selfID) runs the measurer under the caller's context
// only: RequestTimeout, which bounds every remote probe, does not bound it.
// A decision whose candidates include this crawler waits for its own probe
// as long as the caller's context lasts (forever with no deadline).
func TestSelfProbeBoundedByRequestTimeout(t *testing.T) {
	cfg := DefaultConfig()
	cfg.RequestTimeout = 200 * time.Millisecond
	m, err := newMetrics(nil, "self")
	if err != nil {
		t.Fatal(err)
	}
	p := &Peer{cfg: cfg, measurer: blockingMeasurer{}, selfID: "self", metrics: m, log: slog.New(slog.DiscardHandler)}
	pr := &Prober{p: p}
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	start := time.Now()
	res := pr.Probe(ctx, netip.MustParseAddr("8.8.8.8"), []delegation.CrawlerID{"self"})
	took := time.Since(start)
	if res[0].OK {
		t.Errorf("self probe of a silent target reported OK (%v)", res[0].RTT)
	}
	if took > 1500*time.Millisecond {
		t.Errorf("self probe took %v, RequestTimeout is %v (it ran until the caller's deadline)", took.Round(time.Millisecond), cfg.RequestTimeout)
	}
}

// A remote crawler that accepts the probe stream and never answers holds
// Probe for the caller's whole deadline, not RequestTimeout: roundTrip
// replaces the timeout by the context's deadline when there is one, and the
// engine's context (a crawl, a Delegate call) is long-lived.
func TestRemoteProbeBoundedByRequestTimeout(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = 300 * time.Millisecond
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	staller := rawHost(t)
	done := make(chan struct{})
	staller.SetStreamHandler(ProtoProbe, func(s network.Stream) {
		select {
		case <-done:
		case <-time.After(10 * time.Second):
		}
		s.Reset()
	})
	t.Cleanup(func() { close(done) })
	p.h.Peerstore().AddAddrs(staller.ID(), staller.Addrs(), time.Minute)

	ctx, cancel := context.WithTimeout(context.Background(), 4*time.Second)
	defer cancel()
	start := time.Now()
	res := p.Prober().Probe(ctx, netip.MustParseAddr("127.0.0.1"), []delegation.CrawlerID{delegation.CrawlerID(staller.ID().String())})
	took := time.Since(start)
	if res[0].OK {
		t.Errorf("stalled crawler reported OK (%v)", res[0].RTT)
	}
	if took > 2*time.Second {
		t.Errorf("probe of a stalled crawler took %v, RequestTimeout is %v", took.Round(time.Millisecond), cfg.RequestTimeout)
	}
}

// The probe log keeps up to 256 entries per requester, but requesters are
// never forgotten: entries past probeLogAge (which consistent ignores) stay
// forever, and every new peer id (free to make; handleProbe does not ask
// for membership) adds a map entry. Memory grows without bound.
func TestProbeLogForgetsStaleRequesters(t *testing.T) {
	var l probeLog
	target := netip.MustParseAddr("8.8.8.8")
	const old = 2000
	for i := range old {
		l.add(peer.ID(fmt.Sprintf("old-%d", i)), target, time.Millisecond)
	}
	l.mu.Lock()
	for _, es := range l.by {
		for j := range es {
			es[j].at = time.Now().Add(-2 * probeLogAge)
		}
	}
	l.mu.Unlock()
	for i := range 2000 {
		l.add(peer.ID(fmt.Sprintf("new-%d", i)), target, time.Millisecond)
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	stale := 0
	for id := range l.by {
		if len(id) > 4 && id[:4] == "old-" {
			stale++
		}
	}
	if stale > 0 {
		t.Errorf("probe log still holds %d requesters whose every entry is older than %v (%d requesters in all)", stale, probeLogAge, len(l.by))
	}
}

// Calibration events carry no per-author replay state: duplicates are
// suppressed only by gossipsub's seen-message cache (content-hash ids,
// remembered for TimeCacheDuration, 2 min), while the validator accepts an
// event up to clockSkew (5 min) old or in the future. A verbatim replay of a
// signed event (any connected peer may forward it) 2–10 min after it was
// first seen is validated and delivered again: SLOW_PAGE/RELEASED
// invalidate again, hooks fire again, and a replayed DELEGATED of the
// cached bytes clears a stale mark (merge: same bytes → stale = false).
func TestSeenCacheOutlivesReplayWindow(t *testing.T) {
	p := openPeer(t, testTree(t), TestnetConfig(), Services{Measurer: modelMeasurer{}})
	ttl := time.Duration(reflect.ValueOf(p.ps).Elem().FieldByName("seenMsgTTL").Int())
	age := ttl + 30*time.Second
	ev := &pb.CalibrationEvent{Version: wireVersion, Snapshot: p.snap[:], AtUnixNano: time.Now().Add(-age).UnixNano(),
		Kind: pb.CalibrationKind_SLOW_PAGE, Subnet: 3, Url: "http://127.0.0.1/x", ObservedNs: int64(time.Second), ExpectedNs: int64(time.Millisecond)}
	data, err := proto.Marshal(ev)
	if err != nil {
		t.Fatal(err)
	}
	msg := &pubsub.Message{Message: &pubsubpb.Message{From: []byte(p.ID()), Data: data}}
	if r := p.validateCalibration(context.Background(), p.ID(), msg); r == pubsub.ValidationAccept {
		t.Errorf("calibration event %v old accepted, but gossipsub forgets message ids after %v: a replay is delivered twice", age, ttl)
	}
}

// Another snapshot is to be ignored, not penalised (docs/overlay.md), but
// the subnets-held bound (our tree's size) is checked before the snapshot:
// a peer on a larger snapshot is rejected (-100 score per heartbeat,
// graylisted after ~10).
func TestHeartbeatOtherSnapshotIgnoredNotRejected(t *testing.T) {
	tree := testTree(t)
	p := &Peer{tree: tree, snap: tree.ID(), log: slog.New(slog.DiscardHandler)}
	other := make([]byte, 32)
	for i := range other {
		other[i] = 0xAB
	}
	hb := &pb.Heartbeat{Version: wireVersion, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
		Snapshot: other, Capacity: 1, Subnets: uint32(tree.Len()) + 1}
	data, err := proto.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	id := peer.ID("someone")
	msg := &pubsub.Message{Message: &pubsubpb.Message{From: []byte(id), Data: data}}
	if r := p.validateHeartbeat(context.Background(), id, msg); r != pubsub.ValidationIgnore {
		t.Errorf("heartbeat of another snapshot: %v, want ValidationIgnore (%d)", r, pubsub.ValidationIgnore)
	}
}

// A recorded move republishes a probe answer another decider got: the
// new owner endorses it when it reported that RTT for the subnet to
// anyone lately, even if it reported other RTTs for the subnet to this
// decider. Before, the move was refused, and with it the decision of the
// subnet whose page needed the room: its links were dropped.
func TestProbeLogAcceptsAnotherDecidersAnswer(t *testing.T) {
	var l probeLog
	subnet := netip.MustParsePrefix("198.51.100.0/24")
	in := subnet.Contains
	other := func(a netip.Addr) bool { return netip.MustParsePrefix("203.0.113.0/24").Contains(a) }
	first, mover := peer.ID("first-decider"), peer.ID("mover")
	l.add(first, netip.MustParseAddr("198.51.100.7"), 82*time.Millisecond)
	l.add(mover, netip.MustParseAddr("198.51.100.9"), 90*time.Millisecond)
	l.add(mover, netip.MustParseAddr("203.0.113.5"), 91*time.Millisecond)
	for _, c := range []struct {
		name string
		in   func(netip.Addr) bool
		rtt  time.Duration
		want bool
	}{
		{"reported to the mover", in, 90 * time.Millisecond, true},
		{"reported to the first decider", in, 82 * time.Millisecond, true},
		{"never measured", in, 70 * time.Millisecond, false},
		{"measured for another subnet", other, 82 * time.Millisecond, false},
	} {
		if got := l.consistent(mover, c.in, c.rtt); got != c.want {
			t.Errorf("%s (%v): consistent %v, want %v", c.name, c.rtt, got, c.want)
		}
	}
	// past probeLogAge the first decider's answer no longer vouches
	l.mu.Lock()
	for i := range l.recent {
		if l.recent[i].rtt == 82*time.Millisecond {
			l.recent[i].at = time.Now().Add(-2 * probeLogAge)
		}
	}
	l.mu.Unlock()
	if l.consistent(mover, in, 82*time.Millisecond) {
		t.Error("an answer older than probeLogAge still vouches for the RTT")
	}
}
