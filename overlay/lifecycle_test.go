package overlay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// An owner re-puts its delegations inside MaxRecordAge: the refreshed copy
// (same epoch and owner, later time) wins the Select everywhere.
func TestOwnerRepublishesAndProvides(t *testing.T) {
	tn := newTestNet(t, 4, func(i int, c *Config, s *Services) {
		c.RepublishInterval = 700 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	owner := tn.peers[1]
	d, err := owner.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	first := d.Record.At
	waitFor(t, 10*time.Second, func() bool {
		rec, found, err := tn.peers[3].Directory().LookupDHT(ctx, d.Subnet)
		return err == nil && found && rec.At.After(first) && rec.Owner == owner.CrawlerID() && rec.Epoch == d.Record.Epoch
	})
	// Provider records: a peer whose cache knows nothing finds the holder
	// of the subnet under its ancestors through the DHT.
	blank := tn.peers[2].Directory()
	blank.mu.Lock()
	clear(blank.recs)
	clear(blank.under)
	clear(blank.org)
	clear(blank.prov)
	blank.mu.Unlock()
	anc := tn.tree.Parent(d.Subnet)
	waitFor(t, 10*time.Second, func() bool {
		blank.invalidateProviders()
		hs, err := blank.HoldersUnder(ctx, anc)
		return err == nil && len(hs) == 1 && hs[0] == owner.CrawlerID()
	})
}

// When a subnet changes owner while the old owner lives, the new owner
// pulls its page history (page recovery), and a slow-page calibration
// event re-runs the delegation with a higher epoch.
func TestOwnershipChangeRecoversPages(t *testing.T) {
	pages := []*memPages{{pages: map[hierarchy.NodeID][]PageState{}}, {}, {}}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) { s.Pages = pages[i] })
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[1]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	for i := range 30 {
		pages[0].pages[d.Subnet] = append(pages[0].pages[d.Subnet], PageState{URL: fmt.Sprintf("http://127.0.0.1/%d", i), ETag: `"e"`, HTTPStatus: 200})
	}
	tn.settle(t, tn.peers, 5*time.Second)
	// b takes the subnet over with a higher epoch (as load balancing would).
	rec := d.Record
	rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT = b.CrawlerID(), b.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond
	got, err := b.Directory().Publish(ctx, rec)
	if err != nil || got.Owner != b.CrawlerID() {
		t.Fatalf("take-over: %v %v", got, err)
	}
	waitFor(t, 10*time.Second, func() bool {
		pages[1].mu.Lock()
		defer pages[1].mu.Unlock()
		return len(pages[1].imported[d.Subnet]) == 30
	})
	owners := tn.settle(t, tn.peers, 5*time.Second)
	if owners[d.Subnet] != b.CrawlerID() {
		t.Fatalf("owner after take-over: %s", owners[d.Subnet])
	}
	// Calibration: a slow page on the subnet re-runs its delegation.
	ip := a.cfg.CrawlerAddr
	rd, err := b.ReportSlowPage(ctx, ip, "http://"+ip.String()+"/slow", time.Second, 100*time.Millisecond)
	if err != nil {
		t.Fatal(err)
	}
	if rd.Record.Epoch <= rec.Epoch {
		t.Fatalf("re-delegation epoch %d, want > %d", rd.Record.Epoch, rec.Epoch)
	}
	tn.settle(t, tn.peers, 5*time.Second)
}
