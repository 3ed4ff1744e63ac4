package delegation

import (
	"context"
	"fmt"
	"testing"
	"time"
)

// heldMembers is a membership whose Liveness holds some crawlers that are
// no longer live (the overlay's view of a silent owner within its grace or
// without a quorum): they own what they were delegated, but are no
// candidates for anything new.
type heldMembers struct {
	*MemMembership
	held map[CrawlerID]bool
}

func (h heldMembers) IsLive(c CrawlerID) bool { return h.held[c] || h.MemMembership.IsLive(c) }

// A held owner keeps its subnet: the engine answers its record, with or
// without load balancing (a held owner's load is unknown, so it is not
// judged short of room), and re-delegates once the hold ends. Judged by
// Live alone, the engine re-delegated at the first silence.
func TestHeldOwnerKeepsItsSubnet(t *testing.T) {
	for _, bal := range []BalanceMode{BalanceOff, BalanceSecondBest} {
		t.Run(fmt.Sprint(bal), func(t *testing.T) {
			w := newFlatWorld(t, 4)
			hm := heldMembers{w.members, map[CrawlerID]bool{}}
			w.dir = NewMemDirectory(w.tree, hm)
			for i := range 4 {
				c := crawlerAt(i)
				c.Capacity = 1000
				w.members.Add(c)
				w.rtt[c.ID] = time.Duration(10+i) * time.Millisecond
			}
			deps := w.deps()
			deps.Members = hm
			p := NewMicra(deps, Config{Balance: bal})
			ctx := context.Background()
			d, err := p.Delegate(ctx, w.host(0))
			if err != nil {
				t.Fatal(err)
			}
			owner := d.Owner
			w.members.Remove(owner)
			hm.held[owner] = true
			d, err = p.Delegate(ctx, w.host(0))
			if err != nil {
				t.Fatal(err)
			}
			if d.Owner != owner || !d.Cached {
				t.Fatalf("held owner %s: answered %s (cached %v, %s), want the held owner's record", owner, d.Owner, d.Cached, d.Reason)
			}
			delete(hm.held, owner)
			d, err = p.Delegate(ctx, w.host(0))
			if err != nil {
				t.Fatal(err)
			}
			if d.Owner == owner {
				t.Fatalf("owner %s no longer held and not live: still answered", owner)
			}
		})
	}
}
