package overlay

import (
	"context"
	"slices"
	"sync"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protowire"
)

func swimNet(t *testing.T, n int) *testNet {
	return newTestNet(t, n, func(i int, c *Config, _ *Services) {
		c.Membership = MembershipSWIM
		c.HeartbeatInterval = 500 * time.Millisecond
		c.Lat, c.Lon, c.HasPos = float64(i), float64(-i), true
	})
}

// On SWIM every peer learns every member's record (its position too), a
// killed peer is declared dead by every other (reason failed) and nobody
// else is, and a peer that closes is declared gone at once (reason left).
func TestSWIMMembershipOnTheWire(t *testing.T) {
	tn := swimNet(t, 6)
	for i, p := range tn.peers {
		if p.subMem != nil {
			t.Fatalf("peer %d subscribed to the heartbeat topic", i)
		}
		waitFor(t, slowdown*20*time.Second, func() bool {
			n := 0
			for _, c := range p.Members().Live() {
				if c.HasPos {
					n++
				}
			}
			return n == len(tn.peers)
		})
	}
	var mu sync.Mutex
	deaths := map[peer.ID][]MemberEvent{}
	for _, p := range tn.peers {
		p.Members().OnChange(func(ev MemberEvent) {
			if ev.Dead {
				mu.Lock()
				deaths[ev.Peer] = append(deaths[ev.Peer], ev)
				mu.Unlock()
			}
		})
	}
	victim, leaver := tn.peers[4], tn.peers[2]
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	killed := time.Now()
	waitFor(t, slowdown*30*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deaths[victim.ID()]) == len(tn.peers)-1
	})
	t.Logf("killed peer declared dead by all %d after %v", len(tn.peers)-1, time.Since(killed).Round(time.Millisecond))
	closed := time.Now()
	if err := leaver.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*10*time.Second, func() bool {
		mu.Lock()
		defer mu.Unlock()
		return len(deaths[leaver.ID()]) == len(tn.peers)-2
	})
	t.Logf("closed peer gone at all %d after %v", len(tn.peers)-2, time.Since(closed).Round(time.Millisecond))
	mu.Lock()
	defer mu.Unlock()
	for id, evs := range deaths {
		for _, ev := range evs {
			switch {
			case id == victim.ID() && ev.Reason != ReasonFailed:
				t.Errorf("killed peer declared dead for %q", ev.Reason)
			case id == leaver.ID() && ev.Reason != ReasonLeft:
				t.Errorf("closed peer declared dead for %q", ev.Reason)
			case id != victim.ID() && id != leaver.ID():
				t.Errorf("live peer %s declared dead (%s)", shortID(id), ev.Reason)
			}
		}
	}
	for i, p := range tn.peers {
		if p == victim || p == leaver {
			continue
		}
		if p.Members().IsPeerLive(victim.ID()) || p.Members().IsPeerLive(leaver.ID()) {
			t.Errorf("peer %d lists a gone peer as live", i)
		}
	}
}

// A record is its member's: one whose heartbeat was changed, or that
// names another member than the key that signed it, is refused.
func TestSWIMRecordsAreSigned(t *testing.T) {
	tn := swimNet(t, 2)
	a, b := tn.peers[0], tn.peers[1]
	rec, err := a.swim.seal(0, false)
	if err != nil {
		t.Fatal(err)
	}
	if _, _, err := b.swim.open(rec); err != nil {
		t.Fatalf("a's record refused: %v", err)
	}
	bad := slices.Clone(rec)
	bad[len(bad)-80] ^= 1 // in the heartbeat or the signature
	if _, _, err := b.swim.open(bad); err == nil {
		t.Error("a changed record accepted")
	}
	// b's id over a's heartbeat and signature
	_, hb, _ := b.swim.open(rec)
	if hb == nil {
		t.Fatal("no heartbeat")
	}
	var fields [][]byte
	for r := rec; len(r) > 0; {
		_, _, n := protowire.ConsumeTag(r)
		v, m := protowire.ConsumeBytes(r[n:])
		fields = append(fields, v)
		r = r[n+m:]
	}
	forged := protowire.AppendTag(nil, 1, protowire.BytesType)
	forged = protowire.AppendBytes(forged, []byte(b.ID()))
	forged = protowire.AppendTag(forged, 2, protowire.BytesType)
	forged = protowire.AppendBytes(forged, fields[1])
	forged = protowire.AppendTag(forged, 3, protowire.BytesType)
	forged = protowire.AppendBytes(forged, fields[2])
	if _, _, err := a.swim.open(forged); err == nil {
		t.Error("a's statement accepted as b's")
	}
	if err := a.swim.leave(context.Background()); err != nil {
		t.Logf("leave: %v", err)
	}
	if data, err := a.swim.seal(0, false); data != nil || err != nil {
		t.Errorf("a member that left sealed a new record (%d bytes, %v)", len(data), err)
	}
}

// Every member keeps its connections to its ring neighbours (the
// connection manager does not trim them), and lets go of a neighbour that
// died.
func TestSWIMNeighboursKept(t *testing.T) {
	tn := swimNet(t, 6)
	for _, p := range tn.peers {
		waitFor(t, slowdown*20*time.Second, func() bool { return p.Members().Count() == len(tn.peers) })
	}
	neighbours := func(p *Peer) []peer.ID {
		p.swim.mu.Lock()
		defer p.swim.mu.Unlock()
		var out []peer.ID
		for _, id := range p.swim.node.Neighbours() {
			out = append(out, peer.ID(id))
		}
		return out
	}
	for i, p := range tn.peers {
		nb := neighbours(p)
		if len(nb) == 0 {
			t.Fatalf("peer %d has no ring neighbours", i)
		}
		waitFor(t, slowdown*5*time.Second, func() bool {
			for _, id := range nb {
				if !p.h.ConnManager().IsProtected(id, swimKeepTag) {
					return false
				}
			}
			return true
		})
	}
	victim := tn.peers[3]
	var watchers []*Peer
	for _, p := range tn.peers {
		if p != victim && p.h.ConnManager().IsProtected(victim.ID(), swimKeepTag) {
			watchers = append(watchers, p)
		}
	}
	if len(watchers) == 0 {
		t.Fatal("nobody keeps a connection to peer 3")
	}
	if err := victim.Kill(); err != nil {
		t.Fatal(err)
	}
	for _, p := range watchers {
		waitFor(t, slowdown*30*time.Second, func() bool { return !p.h.ConnManager().IsProtected(victim.ID(), swimKeepTag) })
		if slices.Contains(neighbours(p), victim.ID()) {
			t.Errorf("%s still lists the dead peer as a ring neighbour", shortID(p.ID()))
		}
	}
}
