package overlay

import (
	"context"
	"testing"
	"time"
)

// TestSlowPageFromNonOwnerRedelegatesNothing: ReportSlowPage re-runs the
// delegation of ip's subnet whoever calls it. A calibration event means
// "the owner's path got slow": a peer that does not own the subnet has no
// such path, yet its call bumps the epoch and moves/re-publishes the
// subnet. (The node's router checks ownership with Delegate before calling,
// but outside the policy lock: two workers whose pages of one subnet slow
// down together both pass the check, and the second re-delegates a subnet
// the first just gave away.)
func TestSlowPageFromNonOwnerRedelegatesNothing(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[1]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn.settle(t, tn.peers, 5*time.Second)
	if o, ok := b.CachedOwner(a.cfg.CrawlerAddr); !ok || o != a.CrawlerID() {
		t.Fatalf("b's view of the owner: %v %v", o, ok)
	}
	ip := a.cfg.CrawlerAddr
	rd, err := b.ReportSlowPage(ctx, ip, "http://"+ip.String()+"/slow", time.Second, 100*time.Millisecond)
	if err == nil && rd.Record.Epoch > d.Record.Epoch {
		t.Fatalf("non-owner %s's slow page re-delegated subnet %d: epoch %d → %d, decided by %s",
			shortID(b.ID()), d.Subnet, d.Record.Epoch, rd.Record.Epoch, rd.Record.DecidedBy)
	}
}

// TestStaleEntryFreshAfterDHTRead: a cache entry marked stale (a
// SLOW_PAGE/RELEASED event, a NOT_OWNER answer) whose DHT copy is older
// than the cached record (the DELEGATED announcement arrived, the DHT put
// is best-effort and not yet/never landed) stays stale after the DHT read:
// Lookup unstales only when the DHT has nothing or identical bytes. From
// then on Cached/CachedOwner miss and every lookup of the subnet is a DHT
// quorum read, until a record at least as good reaches the DHT.
func TestStaleEntryFreshAfterDHTRead(t *testing.T) {
	tn := newTestNet(t, 2, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[1]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Subnet
	tn.settle(t, tn.peers, 5*time.Second)
	// a's next record reaches b by gossip only (its DHT put did not land)
	next := d.Record
	next.Epoch, next.At = next.Epoch+1, time.Now()
	val := seal(t, next, a.sk, a.sk)
	if _, _, err := b.Directory().mergeValue(s, val); err != nil {
		t.Fatal(err)
	}
	b.Directory().Invalidate(s) // e.g. a SLOW_PAGE event for s
	rec, ok, err := b.Directory().Lookup(ctx, s)
	if err != nil || !ok || rec.Epoch != next.Epoch {
		t.Fatalf("lookup after invalidation: %+v %v %v", rec, ok, err)
	}
	for i := range 3 {
		if _, ok := b.Directory().Cached(s); !ok {
			t.Fatalf("after %d DHT reads the entry of subnet %d is still stale: Cached misses, every lookup reads the DHT again", i+1, s)
		}
		b.Directory().Lookup(ctx, s)
	}
}

// TestNewOwnerThatMissedTheAnnouncementAcceptsHandoffs: after a re-delegation to C,
// C learns that it owns the subnet only from the DELEGATED announcement.
// Gossip is best-effort (and a validator ignores an announcement whose
// author C does not (yet) see live): when it does not reach C, C keeps
// the old record — never stale, never expiring — and acceptHandoff,
// which reads that cache without any DHT fallback, refuses every
// hand-off for the subnet (NOT_OWNER) while the senders' DHT reads keep
// sending them back to C. The subnet's URLs are crawled by nobody.
func TestNewOwnerThatMissedTheAnnouncementAcceptsHandoffs(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	a, b, c := tn.peers[0], tn.peers[1], tn.peers[2]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Subnet
	tn.settle(t, tn.peers, 5*time.Second)
	// b re-delegates s to c: c endorses, b signs and puts; the
	// announcement does not reach c
	rec := d.Record
	rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT, rec.Probes = c.CrawlerID(), b.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond, nil
	m, err := toPB(rec)
	if err != nil {
		t.Fatal(err)
	}
	env, err := b.endorse(ctx, c.ID(), m)
	if err != nil {
		t.Fatalf("c refused to endorse: %v", err)
	}
	val, err := sealDecision(env, b.sk)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := b.Directory().put(ctx, s, val, false); err != nil || got.Owner != c.CrawlerID() {
		t.Fatalf("put: %+v %v", got, err)
	}
	if o, ok := b.CachedOwner(a.cfg.CrawlerAddr); !ok || o != c.CrawlerID() {
		t.Fatalf("b's owner of s: %v %v", o, ok)
	}
	u := "http://" + a.cfg.CrawlerAddr.String() + "/page"
	if err := b.Handoff(ctx, s, a.cfg.CrawlerAddr, u); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(8 * time.Second)
	for time.Now().Before(deadline) {
		for _, got := range tn.sinks[2].got() {
			if got == u {
				return
			}
		}
		time.Sleep(50 * time.Millisecond)
	}
	cr, _ := c.Directory().get(s)
	t.Fatalf("hand-off to the new owner c not accepted within 8 s: c still believes %s owns subnet %d (epoch %d; DHT epoch %d); a got %d URLs",
		short(string(cr.Owner)), s, cr.Epoch, rec.Epoch, len(tn.sinks[0].got()))
}

func short(s string) string {
	if len(s) > 8 {
		return s[len(s)-8:]
	}
	return s
}
