package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// TestPeersLearnFromEachOther: with NewMicra, every peer learns every
// delegation record of the network — its own decisions and the others',
// delivered by gossip and DHT reads — exactly once.
func TestPeersLearnFromEachOther(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	for _, p := range tn.peers {
		p.NewPolicy(delegation.NewMicra, delegation.Config{})
	}
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	var recs []delegation.Record
	k := 0
	for i := 3; i < 8; i++ {
		for j := range 3 {
			p := tn.peers[k%len(tn.peers)]
			k++
			d, err := p.Delegate(ctx, netip.MustParseAddr(fmt.Sprintf("127.%d.%d.77", i, j)))
			if err != nil {
				t.Fatal(err)
			}
			if d.Cached || d.Record.Owner == "" || len(d.Record.Probes) == 0 {
				t.Fatalf("want a fresh probed decision: %v", d)
			}
			recs = append(recs, d.Record)
		}
	}
	// every announcement reaches every peer
	deadline := time.Now().Add(10 * time.Second)
	for _, r := range recs {
		for _, p := range tn.peers {
			for {
				c, ok := p.Directory().get(r.Subnet)
				if ok && c.Epoch >= r.Epoch {
					break
				}
				if time.Now().After(deadline) {
					t.Fatalf("peer %s never heard of subnet %d", p.CrawlerID(), r.Subnet)
				}
				time.Sleep(5 * time.Millisecond)
			}
		}
	}
	for _, p := range tn.peers {
		p.WithPolicy(func(pol delegation.Policy) {
			l, ok := pol.(delegation.Learner)
			if !ok {
				t.Fatalf("%s: policy %s does not learn", p.CrawlerID(), pol.Name())
			}
			for _, r := range recs {
				if l.Learn(r) {
					t.Errorf("%s had not learned subnet %d decided by %s", p.CrawlerID(), r.Subnet, r.DecidedBy)
				}
			}
		})
	}
	// the check is not vacuous: a record nobody decided is new to everyone
	fresh := recs[0]
	fresh.Epoch += 5
	tn.peers[1].WithPolicy(func(pol delegation.Policy) {
		if !pol.(delegation.Learner).Learn(fresh) {
			t.Error("an unseen record was not learned")
		}
	})
}
