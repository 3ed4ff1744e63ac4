package overlay

import (
	"crypto/rand"
	"log/slog"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// A burst of joins — a sybil announcing thousands of identities in an open
// network — changes the version at each join but sorts the live lists
// once, when they are next read, not once per join (the whole table each
// time: quadratic in the burst). What is read is what it was: every live
// member, sorted, the crawlers among them.
func TestMembersJoinBurstBuildsOnce(t *testing.T) {
	self := newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	m := newMembers(sid, delegation.Crawler{ID: self.id, Capacity: 10}, 5*time.Second, slog.Default())
	now := time.Now()
	if got := m.Live(); len(got) != 1 || got[0].ID != self.id {
		t.Fatalf("live %v: want this peer alone", got)
	}
	builds, version := m.builds, m.Version()
	const n = 1000
	ids := make([]delegation.CrawlerID, 0, n+1)
	ids = append(ids, self.id)
	for i := range n {
		_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
		if err != nil {
			t.Fatal(err)
		}
		id, _ := peer.IDFromPublicKey(pub)
		capacity := uint32(100)
		if i%10 == 0 {
			capacity = 0 // a light member: no crawler
		}
		m.observe(id, &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: now.UnixNano(), StartUnixNano: now.UnixNano(),
			IntervalMs: 60_000, Snapshot: make([]byte, 32), Capacity: capacity}, now)
		ids = append(ids, delegation.CrawlerID(id.String()))
		if m.Version() == version {
			t.Fatalf("join %d left the version at %d", i, version)
		}
		version = m.Version()
	}
	if m.builds != builds {
		t.Fatalf("%d joins built the live lists %d times: want none before a read", n, m.builds-builds)
	}
	live := m.Live()
	slices.Sort(ids)
	got := make([]delegation.CrawlerID, len(live))
	for i, c := range live {
		got[i] = c.ID
	}
	if !slices.Equal(got, ids) {
		t.Fatalf("live: %d members, want %d sorted by id", len(got), len(ids))
	}
	if c := m.Crawlers().Live(); len(c) != n+1-n/10 {
		t.Fatalf("%d crawlers live, want %d", len(c), n+1-n/10)
	}
	m.Live()
	if m.Count() != n+1 || m.builds != builds+1 {
		t.Fatalf("count %d, built %d times after the burst: want %d, once", m.Count(), m.builds-builds, n+1)
	}
}
