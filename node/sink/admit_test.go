package sink

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/encoding/protodelim"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/overlay"
)

// joinTest starts a light member on h for a test network (its own
// snapshot id, fast heartbeats), closed when the test ends.
func joinTest(t *testing.T, h host.Host, sink bool, boot ...string) *overlay.LightMember {
	t.Helper()
	l, err := overlay.JoinMembership(context.Background(), h, overlay.LightConfig{Snapshot: hierarchy.SnapshotID{1, 2, 3}, Nodes: 1,
		Sink: sink, Bootstrap: boot, HeartbeatInterval: 50 * time.Millisecond, FailureTimeout: 500 * time.Millisecond, LoopbackTestnet: true})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

func waitUntil(t *testing.T, what string, cond func() bool) {
	t.Helper()
	for deadline := time.Now().Add(20 * time.Second); !cond(); time.Sleep(10 * time.Millisecond) {
		if time.Now().After(deadline) {
			t.Fatalf("timed out waiting for %s", what)
		}
	}
}

// The sink admits carriers from live members only (AdmitMembers over its
// light member's view): a member's carrier is committed; a stranger's, and
// then the member's once it has left, are answered NOT_MEMBER with the
// reason — retryable, so the sender keeps them — counted by status, and
// nothing stored changes. A sender of wire version 1, which would keep an
// unknown status aside, is told UNAVAILABLE instead.
func TestSinkAdmitsLiveMembersOnly(t *testing.T) {
	reg := prometheus.NewRegistry()
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sinkHost, memberHost, strangerHost := newHost(t), newHost(t), newHost(t)
	lm := joinTest(t, sinkHost, true)
	(&Server{Store: s, Timeout: 5 * time.Second, Admit: AdmitMembers(lm.Members())}).Register(sinkHost)
	sinkInfo := peer.AddrInfo{ID: sinkHost.ID(), Addrs: sinkHost.Addrs()}
	member := joinTest(t, memberHost, false, sinkHost.Addrs()[0].String()+"/p2p/"+sinkHost.ID().String())
	waitUntil(t, "the sink to hear the member", func() bool {
		mi, ok := lm.Members().Member(memberHost.ID())
		return ok && !mi.Dead
	})

	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	deliver := func(h host.Host, seq uint64, from int) error {
		id := h.ID().String()
		return (&Client{Host: h, Sink: sinkInfo, Timeout: 5 * time.Second}).Deliver(ctx, pack.Carrier{CrawlerID: id, Seq: seq, Data: carrier(id, seq, from, 5)})
	}
	refused := func(err error, why string) {
		t.Helper()
		var re *RefusedError
		if !errors.As(err, &re) || re.Status != pb.Status_NOT_MEMBER || !strings.Contains(re.Reason, why) {
			t.Fatalf("refusal %v: want NOT_MEMBER saying %q", err, why)
		}
		if errors.Is(err, pack.ErrRejected) {
			t.Fatalf("refusal %v would be kept aside: a non-member's carrier is sent again later", err)
		}
	}

	refused(deliver(strangerHost, 0, 0), "the sink has heard no heartbeat of it")
	if s.Head() != 0 {
		t.Fatalf("a stranger's carrier moved the head to %d", s.Head())
	}
	if err := deliver(memberHost, 0, 100); err != nil {
		t.Fatalf("a member's carrier: %v", err)
	}
	before := readAll(t, s)
	refused(deliver(strangerHost, 1, 200), "not a member")

	// version 1: UNAVAILABLE, with the reason
	var ack pb.CarrierAck
	id := strangerHost.ID().String()
	if err := overlay.RoundTrip(ctx, strangerHost, sinkHost.ID(), ProtoCarrier, maxPushMsg, 5*time.Second,
		&pb.CarrierPush{Version: 1, Carrier: carrier(id, 2, 300, 5)}, &ack); err != nil {
		t.Fatal(err)
	}
	if ack.Status != pb.Status_UNAVAILABLE || !strings.Contains(ack.Reason, "not a member") {
		t.Fatalf("a version-1 stranger was answered %v %q, want UNAVAILABLE with the reason", ack.Status, ack.Reason)
	}

	member.Close() // its leave
	waitUntil(t, "the sink to hear the member leave", func() bool {
		mi, _ := lm.Members().Member(memberHost.ID())
		return mi.Dead
	})
	refused(deliver(memberHost, 1, 400), "it left")

	after := readAll(t, s)
	if len(after) != 5 || len(before) != 5 || after[4].Seq != before[4].Seq || after[4].Record.URL != before[4].Record.URL ||
		after[4].Carrier != before[4].Carrier {
		t.Fatalf("the log holds %d records (%d after the member's carrier): refusals touched it", len(after), len(before))
	}
	if got := counter(t, reg, "micra_sink_rejected_carriers_total", "status", "not_member"); got != 4 {
		t.Fatalf("micra_sink_rejected_carriers_total{status=\"not_member\"} = %v, want 4", got)
	}
	if c, _ := s.Counts(); c.Rejected != 4 || c.Carriers != 1 {
		t.Fatalf("counts %+v: want 1 carrier committed, 4 refused", c)
	}
}

// readAll is the log's entries, in order.
func readAll(t *testing.T, s *Store) []Entry {
	t.Helper()
	es, _, err := s.Read(0, 1000, Filter{})
	if err != nil {
		t.Fatal(err)
	}
	return es
}

// counter is the value of a counter of reg with the label name=value.
func counter(t *testing.T, reg *prometheus.Registry, family, name, value string) float64 {
	t.Helper()
	mfs, err := reg.Gather()
	if err != nil {
		t.Fatal(err)
	}
	for _, mf := range mfs {
		if mf.GetName() != family {
			continue
		}
		for _, m := range mf.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == name && l.GetValue() == value {
					return m.GetCounter().GetValue()
				}
			}
		}
	}
	return 0
}

// A stranger is refused before its carrier is read: one that announces an
// 8 MiB push and sends only its first bytes is answered at once, not when
// the sink's read would time out, and a version-2 stranger is told
// NOT_MEMBER, a version-1 one UNAVAILABLE.
func TestSinkRefusesStrangerUnread(t *testing.T) {
	s, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	sinkHost, strangerHost := newHost(t), newHost(t)
	lm := joinTest(t, sinkHost, true)
	(&Server{Store: s, Timeout: time.Minute, Admit: AdmitMembers(lm.Members())}).Register(sinkHost)
	strangerHost.Peerstore().AddAddrs(sinkHost.ID(), sinkHost.Addrs(), time.Hour)
	for _, v := range []uint64{2, 1} {
		ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
		st, err := strangerHost.NewStream(ctx, sinkHost.ID(), ProtoCarrier)
		if err != nil {
			t.Fatal(err)
		}
		// the length of an 8 MiB message, then its version field only
		head := binary.AppendUvarint(nil, 8<<20)
		head = append(head, versionTag)
		head = binary.AppendUvarint(head, v)
		if _, err := st.Write(head); err != nil {
			t.Fatal(err)
		}
		_ = st.SetReadDeadline(time.Now().Add(10 * time.Second)) // the sink's read would wait a minute
		var ack pb.CarrierAck
		if err := protodelim.UnmarshalFrom(bufio.NewReader(st), &ack); err != nil {
			t.Fatalf("version %d: no answer before the carrier was sent: %v", v, err)
		}
		want := pb.Status_NOT_MEMBER
		if v < 2 {
			want = pb.Status_UNAVAILABLE
		}
		if ack.Status != want || !strings.Contains(ack.Reason, "heard no heartbeat") {
			t.Errorf("version %d: answered %v %q, want %v with the reason", v, ack.Status, ack.Reason, want)
		}
		st.Reset()
		cancel()
	}
	if s.Head() != 0 {
		t.Fatalf("a stranger's push moved the head to %d", s.Head())
	}
}
