package overlay

import (
	"net/netip"
	"testing"
	"time"

	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// The decoders of untrusted bytes a peer receives (hostile
// inputs): DHT values, gossip messages and page states. Each must refuse
// what it cannot read with an error, never panic, and what it accepts must
// keep the invariants the rest of the code relies on. `make fuzz` runs each
// briefly; the seeds below are the committed corpus.

// FuzzOpenRecord: a DHT value (two envelopes around a delegation record).
func FuzzOpenRecord(f *testing.F) {
	owner := newKeyed(f)
	var snap hierarchy.SnapshotID
	snap[0] = 7
	now := time.Unix(1_790_000_000, 0)
	rec := delegation.Record{Subnet: 42, Snapshot: snap, Owner: owner.id, OwnerRTT: 12 * time.Millisecond,
		Epoch: delegation.NextEpoch(0, now), DecidedBy: owner.id, At: now,
		Probes: []delegation.ProbeResult{{Crawler: owner.id, RTT: 12 * time.Millisecond, OK: true}}}
	f.Add(seal(f, rec, owner.sk, owner.sk))
	other := newKeyed(f)
	withBlock := rec
	withBlock.Blocks = []delegation.BlockDelegation{{Host: netip.MustParseAddr("30.1.2.3"), Owner: other.id, OwnerRTT: time.Millisecond}}
	giveConsents(f, &withBlock, other)
	f.Add(seal(f, withBlock, owner.sk, owner.sk))
	f.Add([]byte{})
	f.Add([]byte("not an envelope"))
	f.Fuzz(func(t *testing.T, value []byte) {
		r, err := openRecord(value)
		if err != nil {
			return
		}
		seen := map[delegation.CrawlerID]bool{}
		for _, p := range r.Probes {
			if seen[p.Crawler] {
				t.Fatalf("accepted a record with %s probed twice", p.Crawler)
			}
			seen[p.Crawler] = true
		}
		if len(r.Probes) > maxProbes || len(r.Blocks) > delegation.MaxBlocks || r.OwnerRTT < 0 {
			t.Fatalf("accepted an out-of-bounds record: %+v", r)
		}
	})
}

// FuzzDecodeHeartbeat: a membership heartbeat.
func FuzzDecodeHeartbeat(f *testing.F) {
	now := time.Now()
	hb := &pb.Heartbeat{Version: 1, Seq: 3, AtUnixNano: now.UnixNano(), StartUnixNano: now.Add(-time.Minute).UnixNano(),
		IntervalMs: 1000, Snapshot: make([]byte, 32), Capacity: 1000, CrawlerAddr: []byte{192, 0, 2, 1}}
	b, _ := proto.Marshal(hb)
	f.Add(b)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		hb, err := decodeHeartbeat(data)
		if err == nil && hb == nil {
			t.Fatal("nil heartbeat without an error")
		}
	})
}

// FuzzDecodeCalibration: a calibration event.
func FuzzDecodeCalibration(f *testing.F) {
	for _, ev := range []*pb.CalibrationEvent{
		{Version: 1, Kind: pb.CalibrationKind_SLOW_PAGE, Subnet: 9, Snapshot: make([]byte, 32), Url: "http://192.0.2.1/",
			ObservedNs: int64(time.Second), ExpectedNs: int64(time.Millisecond), AtUnixNano: time.Now().UnixNano()},
		{Version: 1, Kind: pb.CalibrationKind_RELEASED, Subnet: 9, Snapshot: make([]byte, 32), AtUnixNano: time.Now().UnixNano()},
	} {
		b, _ := proto.Marshal(ev)
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		ev, err := decodeCalibration(data)
		if err != nil {
			return
		}
		if len(data) > maxCalibrationBytes || len(ev.Snapshot) != 32 {
			t.Fatalf("accepted %d bytes, snapshot of %d", len(data), len(ev.Snapshot))
		}
	})
}

// FuzzPageState: a page state of /micra/recover/1.
func FuzzPageState(f *testing.F) {
	b, _ := proto.Marshal(toPagePB(PageState{URL: "http://192.0.2.1/a", ETag: `"x"`, LastFetch: time.Unix(1_790_000_000, 0),
		FetchTimes: []time.Duration{time.Millisecond}, HTTPStatus: 200, ContentHash: []byte{1, 2}}))
	f.Add(b)
	f.Fuzz(func(t *testing.T, data []byte) {
		var m pb.PageState
		if proto.Unmarshal(data, &m) != nil {
			return
		}
		ps, err := fromPagePB(&m)
		if err != nil {
			return
		}
		if ps.URL == "" || len(ps.URL) > maxURLLen || len(ps.FetchTimes) > 64 {
			t.Fatalf("accepted an out-of-bounds page state: %.80q, %d times", ps.URL, len(ps.FetchTimes))
		}
	})
}

// FuzzAdmission: a membership certificate (in heartbeats and decisions)
// and a revocation list (/micra/revocations/1), as a peer of a network with
// admission checks them: never a panic, and nothing accepted for a peer
// it does not name or from another network.
func FuzzAdmission(f *testing.F) {
	net, k := newNetwork(f), newKeyed(f)
	id := pid(f, k)
	cert := net.admit(f, id, true)
	list := net.revoke(f, 3, id)
	f.Add(cert)
	f.Add(list)
	f.Add([]byte{})
	f.Add(append(cert[:len(cert)-3:len(cert)-3], 1, 2, 3))
	f.Fuzz(func(t *testing.T, raw []byte) {
		adm, err := NewAdmission(net.id, nil, "")
		if err != nil {
			t.Fatal(err)
		}
		if c, err := adm.Check(id, raw); err == nil && (c.Peer != id || c.Network != net.id) {
			t.Fatalf("accepted a certificate of %s in %s for %s", c.Peer, c.Network, id)
		}
		if _, err := adm.ApplyRevocations(raw); err == nil {
			if r, err := OpenRevocations(raw); err != nil || r.Network != net.id {
				t.Fatalf("took a revocation list it cannot open, or of another network: %v", err)
			}
		}
	})
}

// FuzzHandoffRequest: a member's /micra/handoff/1 message, as a crawler
// takes it: the URLs acknowledged are exactly those its crawler got, each
// within the bounds the frontier relies on.
func FuzzHandoffRequest(f *testing.F) {
	sink := &memSink{}
	p := openPeer(f, testTree(f), TestnetConfig(), Services{Sink: sink, Measurer: modelMeasurer{}})
	good, _ := proto.Marshal(&pb.HandoffRequest{Version: wireVersion, BatchId: 1, Snapshot: p.snap[:],
		Batches: []*pb.HandoffBatch{{Subnet: 7, Urls: []string{"http://127.3.0.1/a", "http://127.3.0.1/b"}, Addr: []byte{127, 3, 0, 1}}}})
	f.Add(good)
	f.Add([]byte{})
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.HandoffRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		before := len(sink.got())
		st, _, accepted, notOwner := p.acceptHandoff(&req)
		got := sink.got()[before:]
		if st != pb.Status_OK && len(got) > 0 {
			t.Fatalf("status %v, yet the crawler got %d URLs", st, len(got))
		}
		if int(accepted) != len(got) || len(got) > maxHandoffURLs {
			t.Fatalf("acknowledged %d URLs, the crawler got %d", accepted, len(got))
		}
		for _, u := range got {
			if u == "" || len(u) > maxURLLen {
				t.Fatalf("took a URL of %d bytes", len(u))
			}
		}
		for _, i := range notOwner {
			if int(i) >= len(req.Batches) {
				t.Fatalf("refused batch %d of %d", i, len(req.Batches))
			}
		}
	})
}

// FuzzEndorseRequest: a member's /micra/endorse/1 request: this peer signs
// nothing but a record naming it (as owner, or as a block's crawler).
func FuzzEndorseRequest(f *testing.F) {
	p := lonePeer(f, testTree(f))
	decider := newKeyed(f)
	did := pid(f, decider)
	heardFrom(p, did)
	now := time.Now()
	rec := delegation.Record{Subnet: 7, Snapshot: p.snap, Owner: p.selfID, DecidedBy: decider.id, At: now, Epoch: delegation.NextEpoch(0, now)}
	m, _ := toPB(rec)
	raw, _ := proto.Marshal(m)
	f.Add(raw, uint32(0))
	f.Add(raw, uint32(1))
	f.Add([]byte{}, uint32(0))
	f.Fuzz(func(t *testing.T, raw []byte, block uint32) {
		st, _, env := p.checkEndorse(did, raw, int(block%20))
		if st != pb.Status_OK {
			return
		}
		var m pb.DelegationRecord
		if err := proto.Unmarshal(raw, &m); err != nil {
			t.Fatalf("signed a record it cannot read: %v", err)
		}
		r, err := fromPB(&m)
		if err != nil || len(env) == 0 {
			t.Fatalf("signed a record that does not check: %v", err)
		}
		if block%20 == 0 && r.Owner != p.selfID || block%20 > 0 && r.Blocks[block%20-1].Owner != p.selfID {
			t.Fatalf("signed a record that names it nowhere: %+v", r)
		}
	})
}
