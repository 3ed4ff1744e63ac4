package overlay

import (
	"math"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// Heartbeats (SWIM: records) carry a crawler's position and load:
// Members.Live has the positions, and every peer's load book sees the load
// an owner reports — at its next heartbeat, or under SWIM at its record's
// next sealing (at most every swimRefresh, so that the network's changes
// stay few) and the piggybacking after it.
func TestHeartbeatsCarryPositionAndLoad(t *testing.T) {
	forEachProtocol(t, testHeartbeatsCarryPositionAndLoad)
}

func testHeartbeatsCarryPositionAndLoad(t *testing.T, membership string) {
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		c.Membership = membership
		if i < 2 {
			c.Lat, c.Lon, c.HasPos = 52.37-float64(i)*10, 4.9+float64(i)*20, true
		}
	})
	tn.peers[1].SetLoad(777)
	loads := make([]delegation.LoadBook, len(tn.peers))
	for i, p := range tn.peers {
		loads[i] = p.Deps().Loads
	}
	within := 5 * time.Second
	if membership == MembershipSWIM {
		within = swimRefresh(len(tn.peers)) + detectionTime(tn.peers[0].cfg, len(tn.peers))
	}
	waitFor(t, slowdown*within, func() bool {
		return loads[0].Load(tn.peers[1].CrawlerID()) == 777 && loads[2].Load(tn.peers[1].CrawlerID()) == 777
	})
	if got := loads[1].Load(tn.peers[1].CrawlerID()); got != 777 {
		t.Fatalf("own reported load: %d", got)
	}
	// Pages this peer assigns count on top of a lower report.
	loads[0].AddPages(5, tn.peers[1].CrawlerID(), 1000)
	if got := loads[0].Load(tn.peers[1].CrawlerID()); got != 1000 {
		t.Fatalf("load after assigning 1000 pages to an owner reporting 777: %d", got)
	}
	for _, p := range tn.peers {
		byID := map[delegation.CrawlerID]delegation.Crawler{}
		for _, c := range p.Members().Live() {
			byID[c.ID] = c
		}
		for j, q := range tn.peers {
			c := byID[q.CrawlerID()]
			if j < 2 {
				if !c.HasPos || c.Lat != q.cfg.Lat || c.Lon != q.cfg.Lon {
					t.Fatalf("%s sees %s at %v,%v (has %v), want %v,%v", shortID(p.ID()), shortID(q.ID()), c.Lat, c.Lon, c.HasPos, q.cfg.Lat, q.cfg.Lon)
				}
			} else if c.HasPos {
				t.Fatalf("%s has a position it never stated", shortID(q.ID()))
			}
		}
	}
}

func TestHeartbeatPlausibility(t *testing.T) {
	ok := func() *pb.Heartbeat {
		return &pb.Heartbeat{Version: wireVersion, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
			Snapshot: make([]byte, 32), Capacity: 1000, Load: 10, HasPos: true, Lat: 48.1, Lon: 11.6}
	}
	enc := func(hb *pb.Heartbeat) []byte {
		b, err := proto.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		return b
	}
	if _, err := decodeHeartbeat(enc(ok())); err != nil {
		t.Fatal(err)
	}
	bad := map[string]func(*pb.Heartbeat){
		"latitude 91":         func(h *pb.Heartbeat) { h.Lat = 91 },
		"longitude -181":      func(h *pb.Heartbeat) { h.Lon = -181 },
		"NaN":                 func(h *pb.Heartbeat) { h.Lat = math.NaN() },
		"position w/o flag":   func(h *pb.Heartbeat) { h.HasPos = false },
		"load beyond bound":   func(h *pb.Heartbeat) { h.Load = maxCapacity + 1 },
		"capacity beyond one": func(h *pb.Heartbeat) { h.Capacity = maxCapacity + 1 },
	}
	for name, mut := range bad {
		hb := ok()
		mut(hb)
		if _, err := decodeHeartbeat(enc(hb)); err == nil {
			t.Errorf("%s accepted", name)
		}
	}
	cfg := TestnetConfig()
	cfg.Lat, cfg.HasPos = 120, true
	if cfg.Validate() == nil {
		t.Fatal("configured latitude 120 accepted")
	}
}
