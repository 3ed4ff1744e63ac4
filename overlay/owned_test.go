package overlay

import (
	"context"
	"fmt"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus/testutil"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// ownedRecord is a record of subnet s owned and decided by k, sealed.
func ownedRecord(t testing.TB, p *Peer, s hierarchy.NodeID, k keyed) *pb.OwnedRecord {
	t.Helper()
	now := time.Now()
	rec := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: k.id, OwnerRTT: 3 * time.Millisecond, DecidedBy: k.id,
		At: now, Epoch: delegation.NextEpoch(0, now), Probes: []delegation.ProbeResult{{Crawler: k.id, RTT: 3 * time.Millisecond, OK: true}}}
	return &pb.OwnedRecord{Subnet: uint32(s), Value: seal(t, rec, k.sk, k.sk)}
}

// Owned records are taken from members only, each checked on its own: a
// record that is not its sender's, or does not verify, is refused and the
// others are merged; a message too long, for another snapshot, or over
// the sender's budget is refused whole.
func TestOwnedRecordsChecked(t *testing.T) {
	p := lonePeer(t, testTree(t))
	member, stranger, other := newKeyed(t), newKeyed(t), newKeyed(t)
	heardFrom(p, pid(t, member))
	heardFrom(p, pid(t, other))
	now := time.Now()
	owner := func(s hierarchy.NodeID) delegation.CrawlerID {
		rec, _ := p.dir.get(s)
		return rec.Owner
	}

	resp := p.acceptOwned(pid(t, stranger), &pb.OwnedRequest{Snapshot: p.snap[:],
		Records: []*pb.OwnedRecord{ownedRecord(t, p, 5, stranger)}}, now)
	if resp.Status != pb.Status_REFUSED || resp.Merged != 0 || owner(5) != "" {
		t.Fatalf("a stranger's record: %v %q, merged %d, owner %q", resp.Status, resp.Error, resp.Merged, owner(5))
	}

	garbage := &pb.OwnedRecord{Subnet: 8, Value: []byte("not a record")}
	resp = p.acceptOwned(pid(t, member), &pb.OwnedRequest{Snapshot: p.snap[:], Records: []*pb.OwnedRecord{
		ownedRecord(t, p, 5, member), ownedRecord(t, p, 6, other), garbage, ownedRecord(t, p, 7, member)}}, now)
	if resp.Status != pb.Status_OK || resp.Merged != 2 || resp.Refused != 2 {
		t.Fatalf("mixed message: %v %q, merged %d, refused %d", resp.Status, resp.Error, resp.Merged, resp.Refused)
	}
	if owner(5) != member.id || owner(7) != member.id || owner(6) != "" || owner(8) != "" {
		t.Fatalf("owners after the mixed message: 5 %q, 6 %q, 7 %q, 8 %q", owner(5), owner(6), owner(7), owner(8))
	}

	wrong := p.snap
	wrong[0] ^= 1
	if resp := p.acceptOwned(pid(t, member), &pb.OwnedRequest{Snapshot: wrong[:]}, now); resp.Status != pb.Status_WRONG_SNAPSHOT {
		t.Fatalf("another snapshot: %v %q", resp.Status, resp.Error)
	}
	// a long made-up snapshot is not echoed back whole
	if resp := p.acceptOwned(pid(t, member), &pb.OwnedRequest{Snapshot: make([]byte, 64<<10)}, now); resp.Status != pb.Status_WRONG_SNAPSHOT || len(resp.Error) > 200 {
		t.Fatalf("a 64 KiB snapshot: %v, an answer of %d bytes", resp.Status, len(resp.Error))
	}
	long := &pb.OwnedRequest{Snapshot: p.snap[:]}
	rec := ownedRecord(t, p, 9, member)
	for range ownedBatchRecords + 1 {
		long.Records = append(long.Records, rec)
	}
	if resp := p.acceptOwned(pid(t, member), long, now); resp.Status != pb.Status_TOO_LARGE || owner(9) != "" {
		t.Fatalf("%d records: %v %q, owner %q", len(long.Records), resp.Status, resp.Error, owner(9))
	}

	// the budget: a burst, then ownedRate records a second
	full := &pb.OwnedRequest{Snapshot: p.snap[:], Records: long.Records[:ownedBatchRecords]}
	now = now.Add(time.Minute) // a full bucket again
	for i := range ownedBurst / ownedBatchRecords {
		if resp := p.acceptOwned(pid(t, member), full, now); resp.Status != pb.Status_OK {
			t.Fatalf("message %d within the burst: %v %q", i, resp.Status, resp.Error)
		}
	}
	if resp := p.acceptOwned(pid(t, member), full, now); resp.Status != pb.Status_UNAVAILABLE {
		t.Fatalf("past the burst: %v %q", resp.Status, resp.Error)
	}
	later := now.Add(time.Duration(ownedBatchRecords) * time.Second / ownedRate)
	if resp := p.acceptOwned(pid(t, member), full, later); resp.Status != pb.Status_OK {
		t.Fatalf("once the budget refilled: %v %q", resp.Status, resp.Error)
	}
}

// Two members that have each declared the other dead and see it back:
// one sends its owned records and asks for the other's; both caches end
// with both peers' records, over real streams.
func TestOwnedRecordsGoBothWays(t *testing.T) {
	tree := testTree(t)
	a, b := lonePeer(t, tree), lonePeer(t, tree)
	heardFrom(a, b.ID())
	heardFrom(b, a.ID())
	a.h.Peerstore().AddAddrs(b.ID(), b.h.Addrs(), time.Minute)
	b.h.Peerstore().AddAddrs(a.ID(), a.h.Addrs(), time.Minute)
	own := func(p *Peer, subnets ...hierarchy.NodeID) {
		t.Helper()
		for _, s := range subnets {
			r := ownedRecord(t, p, s, keyed{p.sk, p.selfID})
			if _, _, err := p.dir.mergeValue(s, r.Value); err != nil {
				t.Fatal(err)
			}
		}
	}
	own(a, 5, 6, 7)
	own(b, 9, 10)
	owners := func(p *Peer) string {
		out := ""
		for _, s := range []hierarchy.NodeID{5, 6, 7, 9, 10} {
			rec, _ := p.dir.get(s)
			out += fmt.Sprintf("%d:%s ", s, shortID(peerID(t, rec.Owner)))
		}
		return out
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := a.sendOwned(ctx, b.ID(), a.resealOwned(), true); err != nil {
		t.Fatal(err)
	}
	want := fmt.Sprintf("5:%s 6:%s 7:%s 9:%s 10:%s ", shortID(a.ID()), shortID(a.ID()), shortID(a.ID()), shortID(b.ID()), shortID(b.ID()))
	if got := owners(b); got != want {
		t.Fatalf("the receiver's cache: %s, want %s", got, want)
	}
	waitFor(t, 10*time.Second, func() bool { return owners(a) == want })
	waitFor(t, 10*time.Second, func() bool { return b.ownedGiven.recently(a.ID(), time.Now()) })

	// b's own round for a's return, right after: a has b's records from
	// b's answer, and they are not sent again
	sent := func(p *Peer) float64 { return testutil.ToFloat64(p.metrics.ownedRecords.WithLabelValues("sent")) }
	if got := sent(b); got != 2 {
		t.Fatalf("b sent %v records in its answer, want 2", got)
	}
	if took := b.giveOwned(ctx, []peer.ID{a.ID()}, false); len(took) != 1 || sent(b) != 2 {
		t.Fatalf("b's round after its answer: took %v, %v records sent in all, want a and 2", took, sent(b))
	}
	if got := sent(a); got != 3 {
		t.Fatalf("a sent %v records, want its 3", got)
	}
}

func peerID(t testing.TB, c delegation.CrawlerID) peer.ID {
	if c == "" {
		return ""
	}
	id, err := peer.Decode(string(c))
	if err != nil {
		t.Fatal(err)
	}
	return id
}

// FuzzOwnedRequest: a member's /micra/owned/1 message: whatever it holds,
// only records that verify and name their sender reach the cache, and the
// counts add up.
func FuzzOwnedRequest(f *testing.F) {
	p := lonePeer(f, testTree(f))
	member := newKeyed(f)
	from := pid(f, member)
	heardFrom(p, from)
	good, _ := proto.Marshal(&pb.OwnedRequest{Version: wireVersion, Snapshot: p.snap[:],
		Records: []*pb.OwnedRecord{ownedRecord(f, p, 5, member), {Subnet: 6, Value: []byte{1, 2}}}})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.OwnedRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		req.Reply = false // no stream to a member that is only a key
		resp := p.acceptOwned(from, &req, time.Now())
		if resp.Status != pb.Status_OK {
			if resp.Merged != 0 {
				t.Fatalf("status %v, yet %d records merged", resp.Status, resp.Merged)
			}
			return
		}
		if int(resp.Merged+resp.Refused) != len(req.Records) {
			t.Fatalf("%d merged and %d refused of %d records", resp.Merged, resp.Refused, len(req.Records))
		}
		for _, s := range p.dir.Owned() {
			t.Fatalf("this peer owns subnet %d after a member's message", s)
		}
		for _, r := range req.Records {
			if rec, ok := p.dir.get(hierarchy.NodeID(r.Subnet)); ok && rec.Owner != member.id && rec.DecidedBy != member.id {
				t.Fatalf("subnet %d cached with owner %s, decided by %s", r.Subnet, rec.Owner, rec.DecidedBy)
			}
		}
	})
}

// The index sink (a light member) keeps no records: a peer counts it as
// given them without a stream, while a crawler it cannot reach is left
// for a later round.
func TestGiveOwnedSkipsTheSink(t *testing.T) {
	p := lonePeer(t, testTree(t))
	sink, crawler := newKeyed(t), newKeyed(t)
	p.members.observe(pid(t, sink), &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
		Snapshot: p.snap[:], Sink: true}, time.Now())
	heardFrom(p, pid(t, crawler))
	if info, _ := p.members.Member(pid(t, sink)); !info.Sink {
		t.Fatal("the sink's heartbeat did not make it a sink")
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	took := p.giveOwned(ctx, []peer.ID{pid(t, sink), pid(t, crawler)}, false)
	if len(took) != 1 || took[0] != pid(t, sink) {
		t.Fatalf("took %v, want the sink only (the crawler has no address to reach)", took)
	}
}
