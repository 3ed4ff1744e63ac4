package overlay

import (
	"bufio"
	"bytes"
	"net/netip"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// The requests of /micra/probe/1, /micra/snapshot/1 and /micra/handoff/1 as
// a peer takes them from a member. Seeds: f.Add below and
// testdata/fuzz/<target>/.

// FuzzProbeRequest: a member's probe request. This peer measures (with a
// modelled measurer: nothing is dialled) only an address of the subnet
// being decided, on a port this network probes, with / or /robots.txt of
// the target itself, at most 5 samples.
func FuzzProbeRequest(f *testing.F) {
	p := openPeer(f, testTree(f), TestnetConfig(), Services{Measurer: modelMeasurer{}})
	from := pid(f, newKeyed(f))
	heardFrom(p, from)
	target := netip.MustParseAddr("127.6.1.1")
	subnet := uint32(p.tree.SmallestNonUnary(target))
	for _, req := range []*pb.ProbeRequest{
		{Version: wireVersion, Target: target.AsSlice(), Subnet: subnet, Samples: 3},
		{Version: wireVersion, Target: target.AsSlice(), Subnet: subnet, Method: pb.ProbeMethod_HTTP_HEAD, Port: 443, Url: "https://127.6.1.1/robots.txt"},
		{Version: wireVersion, Target: target.AsSlice(), Subnet: subnet + 1, Port: 22},
		{Version: wireVersion, Target: netip.MustParseAddr("::ffff:127.6.1.1").AsSlice(), Subnet: subnet},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.ProbeRequest
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		resp := p.serveProbe(from, &req)
		if resp.Status != pb.Status_OK {
			if len(resp.RttNs) > 0 || resp.Error == "" {
				t.Fatalf("%v with %d samples, error %q", resp.Status, len(resp.RttNs), resp.Error)
			}
			return
		}
		a, ok := netip.AddrFromSlice(req.Target)
		switch {
		case !ok || !p.probeSubnetOK(hierarchy.NodeID(req.Subnet), a.Unmap()):
			t.Fatalf("measured %v, not an address of subnet %d", req.Target, req.Subnet)
		case req.Port != 0 && req.Port != 80 && req.Port != 443 && req.Port != uint32(p.cfg.ProbePort):
			t.Fatalf("measured port %d", req.Port)
		case req.Url != "" && !probeURLAllowed(req.Url, a):
			t.Fatalf("measured url %q", req.Url)
		case len(resp.RttNs) == 0 || len(resp.RttNs) > 5:
			t.Fatalf("OK with %d samples", len(resp.RttNs))
		}
	})
}

// FuzzSnapshotRequest: a peer's snapshot request. The answer is OK only
// with the bytes of a snapshot this peer holds, by its full id.
func FuzzSnapshotRequest(f *testing.F) {
	tr := testTree(f)
	var held hierarchy.SnapshotID
	held[0], held[31] = 1, 2
	data := []byte("snapshot bytes")
	cfg := TestnetConfig()
	p := openPeer(f, tr, cfg, Services{Measurer: modelMeasurer{}, Snapshots: TreeSnapshots{held: data}})
	for _, id := range [][]byte{held[:], held[:6], nil, make([]byte, 33)} {
		b, err := proto.Marshal(&pb.SnapshotRequest{Version: wireVersion, Id: id})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		var req pb.SnapshotRequest
		if proto.Unmarshal(b, &req) != nil {
			return
		}
		hdr, got := p.snapshotFor(&req)
		if hdr.Status == pb.Status_OK {
			if !bytes.Equal(req.Id, held[:]) || !bytes.Equal(got, data) || hdr.Size != uint64(len(data)) {
				t.Fatalf("OK for id %x: %d bytes, size %d", req.Id, len(got), hdr.Size)
			}
		} else if hdr.Error == "" {
			t.Fatalf("%v without a reason", hdr.Status)
		}
	})
}

// FuzzReadHandoff: a member's hand-off message as the stream reader takes
// it (handoff_read.go): what it takes, proto.Unmarshal takes the same way;
// it refuses only what proto.Unmarshal would, or fields past their bounds;
// and it spends one token of the quota per URL taken.
func FuzzReadHandoff(f *testing.F) {
	for _, req := range []*pb.HandoffRequest{
		{Version: wireVersion, BatchId: 1, Snapshot: make([]byte, 32), Batches: []*pb.HandoffBatch{{Subnet: 7, Urls: []string{"http://127.3.0.1/a", "http://127.3.0.1/b"}, Addr: []byte{127, 3, 0, 1}}}},
		{Version: wireVersion, BatchId: 2, Batches: []*pb.HandoffBatch{{Subnet: 1}, {Subnet: 2, Urls: []string{""}}}},
	} {
		b, err := proto.Marshal(req)
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Add([]byte{})
	f.Add(protowire.AppendTag(nil, 9, protowire.StartGroupType))
	// A second address replaces an oversized first one in proto.Unmarshal.
	batch := protowire.AppendBytes(protowire.AppendTag(nil, 3, protowire.BytesType), make([]byte, 18))
	batch = protowire.AppendBytes(protowire.AppendTag(batch, 3, protowire.BytesType), []byte{127, 0, 0, 1})
	f.Add(protowire.AppendBytes(protowire.AppendTag(nil, 4, protowire.BytesType), batch))
	now := time.Unix(1_700_000_000, 0)
	f.Fuzz(func(t *testing.T, data []byte) {
		framed := protowire.AppendVarint(nil, uint64(len(data)))
		framed = append(framed, data...)
		lim := (&peerLimiter{}).limiter("m", 1, 1<<20)
		q := &quotaTaker{lim: lim, now: now}
		got, err := readHandoff(bufio.NewReader(bytes.NewReader(framed)), maxHandoffMsg, q)
		var want pb.HandoffRequest
		werr := proto.UnmarshalOptions{DiscardUnknown: true}.Unmarshal(data, &want)
		if err != nil {
			if werr == nil && !pastBounds(data) && !strings.Contains(err.Error(), "wire type") {
				t.Fatalf("refused what proto.Unmarshal takes: %v", err)
			}
			return
		}
		if werr != nil {
			t.Fatalf("took what proto.Unmarshal refuses (%v)", werr)
		}
		if !proto.Equal(got, &want) {
			t.Fatalf("read %v, proto.Unmarshal %v", got, &want)
		}
		q.settle()
		urls := 0
		for _, b := range got.Batches {
			urls += len(b.Urls)
		}
		if spent := float64(1<<20) - lim.TokensAt(now); spent < float64(urls)-0.01 || spent > float64(urls)+0.01 {
			t.Fatalf("%.1f tokens spent on %d URLs", spent, urls)
		}
	})
}

// pastBounds: data holds a field longer than readHandoff reads. It walks
// the wire bytes, not the decoded message: proto.Unmarshal keeps only the
// last of a repeated singular field (a second snapshot or address), while
// readHandoff refuses the first one past its bound.
func pastBounds(data []byte) bool {
	return walkFields(data, func(num protowire.Number, v []byte) bool {
		switch num {
		case 3:
			return len(v) > 64
		case 4:
			return walkFields(v, func(num protowire.Number, v []byte) bool {
				return (num == 2 && len(v) > maxURLLen) || (num == 3 && len(v) > 16)
			})
		}
		return false
	})
}

// walkFields calls past on each length-delimited field of b until it says
// true; it stops at the first malformed field.
func walkFields(b []byte, past func(protowire.Number, []byte) bool) bool {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return false
		}
		b = b[n:]
		if typ == protowire.BytesType {
			v, m := protowire.ConsumeBytes(b)
			if m < 0 {
				return false
			}
			if past(num, v) {
				return true
			}
			b = b[m:]
			continue
		}
		m := protowire.ConsumeFieldValue(num, typ, b)
		if m < 0 {
			return false
		}
		b = b[m:]
	}
	return false
}
