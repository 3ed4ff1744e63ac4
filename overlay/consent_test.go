package overlay

import (
	"context"
	"net/netip"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// giveConsents seals each block's consent with its owner's key (one of
// owners), as the block owners would over /micra/endorse/1.
func giveConsents(t testing.TB, rec *delegation.Record, owners ...keyed) {
	t.Helper()
	dec, err := peer.Decode(string(rec.DecidedBy))
	if err != nil {
		t.Fatal(err)
	}
	for i, b := range rec.Blocks {
		for _, k := range owners {
			if k.id != b.Owner {
				continue
			}
			c, err := sealConsent(k.sk, rec.Snapshot, rec.Subnet, b, dec, time.Now())
			if err != nil {
				t.Fatal(err)
			}
			rec.Blocks[i].Consent = c
		}
	}
}

// A block's consent must be its owner's, to that very block: missing,
// signed by another, or stating another RTT, host or subnet, it is refused.
func TestBlockConsentChecked(t *testing.T) {
	owner, b, c := newKeyed(t), newKeyed(t), newKeyed(t)
	rec := delegation.Record{Subnet: 42, Owner: owner.id, DecidedBy: owner.id, At: time.Now(),
		Blocks: []delegation.BlockDelegation{{Host: netip.MustParseAddr("30.1.2.3"), Owner: b.id, OwnerRTT: 4 * time.Millisecond}}}
	giveConsents(t, &rec, b)
	if err := checkConsent(rec.Snapshot, rec.Subnet, rec.Blocks[0]); err != nil {
		t.Fatalf("b's own consent: %v", err)
	}
	if _, err := openRecord(seal(t, rec, owner.sk, owner.sk)); err != nil {
		t.Fatalf("a record with consented blocks: %v", err)
	}
	for name, tc := range map[string]struct {
		mutate func(r *delegation.Record)
		want   string
	}{
		"no consent":             {func(r *delegation.Record) { r.Blocks[0].Consent = nil }, "no consent"},
		"signed by another":      {func(r *delegation.Record) { r.Blocks[0].Owner = c.id }, "not its owner"},
		"another rtt":            {func(r *delegation.Record) { r.Blocks[0].OwnerRTT = time.Nanosecond }, "states rtt"},
		"another host":           {func(r *delegation.Record) { r.Blocks[0].Host = netip.MustParseAddr("30.1.2.4") }, "consent is to host"},
		"another subnet":         {func(r *delegation.Record) { r.Subnet = 43 }, "another record"},
		"not an envelope at all": {func(r *delegation.Record) { r.Blocks[0].Consent = []byte("yes") }, "consent"},
	} {
		r := rec
		r.Blocks = []delegation.BlockDelegation{rec.Blocks[0]}
		tc.mutate(&r)
		if _, err := openRecord(seal(t, r, owner.sk, owner.sk)); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: %v, want refused: %s", name, err, tc.want)
		}
	}
}

// On real peers: a decider publishing a block for another member asks it
// for its consent, which it gives for the RTT it reported and refuses for
// a made-up one; the published record carries it and every peer takes it.
func TestBlockOwnerConsents(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	dec, other := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*20*time.Second)
	defer cancel()
	host := netip.MustParseAddr("127.3.0.7")
	s := tn.tree.SmallestNonUnary(host)
	target := ProbeTarget{Addr: host, Method: pb.ProbeMethod_TCP_CONNECT}
	rtt, err := dec.ProbeOne(ctx, delegation.CrawlerID(other.ID().String()), target)
	if err != nil {
		t.Fatal(err)
	}
	rec := delegation.Record{Subnet: s, Snapshot: dec.snap, Owner: dec.selfID, DecidedBy: dec.selfID, At: time.Now(),
		Epoch:  delegation.NextEpoch(0, time.Now()),
		Blocks: []delegation.BlockDelegation{{Host: host, Owner: other.selfID, OwnerRTT: rtt + 3*time.Millisecond}}}
	if _, err := dec.Directory().Publish(ctx, rec); err == nil || StatusOf(err) != pb.Status_REFUSED {
		t.Fatalf("a block with an rtt its owner never reported: %v, want REFUSED", err)
	}
	rec.Blocks[0].OwnerRTT = rtt
	got, err := dec.Directory().Publish(ctx, rec)
	if err != nil {
		t.Fatal(err)
	}
	if len(got.Blocks) != 1 || got.Blocks[0].Owner != other.selfID || checkConsent(got.Snapshot, s, got.Blocks[0]) != nil {
		t.Fatalf("published record's blocks: %+v", got.Blocks)
	}
	third := tn.peers[2]
	waitFor(t, slowdown*10*time.Second, func() bool {
		r, ok := third.Directory().get(s)
		return ok && len(r.Blocks) == 1 && r.Blocks[0].Owner == other.selfID
	})
}
