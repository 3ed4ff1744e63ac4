package overlay

// Review of the overlay's probe, membership and related protocols: each
// test demonstrates one defect and fails on the code it was written against.

import (
	"context"
	"log/slog"
	"net"
	"net/netip"
	"runtime"
	"strconv"
	"sync/atomic"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// PublicOnly is the default probe guard of a volunteer's node. It must
// refuse every address that is not a public web server, like the crawler's
// own fetch guard (crawl/fetch.ForbiddenAddr) does: shared/CGNAT space
// (also Tailscale's tailnet range), reserved and benchmarking ranges, and
// IPv6 forms that embed a private or loopback IPv4 address (NAT64, 6to4,
// IPv4-compatible), or the deprecated site-local range.
func TestProbeGuardRefusesReservedAndEmbeddedPrivate(t *testing.T) {
	for _, s := range []string{
		"100.64.0.1",       // RFC 6598 shared address space (CGNAT, tailnets)
		"100.100.100.100",  // idem
		"198.18.0.1",       // benchmarking
		"240.0.0.1",        // reserved
		"0.1.2.3",          // "this network"
		"192.0.0.1",        // IETF protocol assignments
		"64:ff9b::a00:1",   // NAT64 of 10.0.0.1
		"64:ff9b::7f00:1",  // NAT64 of 127.0.0.1
		"2002:7f00:1::1",   // 6to4 of 127.0.0.1
		"2002:c0a8:101::1", // 6to4 of 192.168.1.1
		"::7f00:1",         // IPv4-compatible 127.0.0.1
		"fec0::1",          // deprecated site-local
	} {
		if err := PublicOnly(netip.MustParseAddr(s)); err == nil {
			t.Errorf("PublicOnly(%s) = nil: a peer can make this crawler probe a non-public address", s)
		}
	}
}

type countingMeasurer struct{ n atomic.Int32 }

func (m *countingMeasurer) Measure(context.Context, ProbeTarget) (time.Duration, error) {
	m.n.Add(1)
	return time.Millisecond, nil
}

// A probe request names any port; the default (public) configuration
// connects to it. A crawler probes web hosts: a request for SMTP, SSH,
// … on a public host turns every volunteer into a port scanner (and, for
// HTTP HEAD, a protocol-smuggling relay). The crawler's fetch refuses the
// WHATWG bad ports; the probe server must refuse non-web ports before
// measuring (configurable, as testnets listen on random ports).
func TestProbeRefusesSmugglingPorts(t *testing.T) {
	m := &countingMeasurer{}
	p := &Peer{cfg: DefaultConfig(), measurer: m}
	target := netip.MustParseAddr("8.8.8.8")
	for _, port := range []uint16{25, 22, 6667} {
		_, st, err := p.measureLocal(context.Background(), ProbeTarget{Addr: target, Method: pb.ProbeMethod_TCP_CONNECT, Port: port}, 5)
		if st != pb.Status_REFUSED {
			t.Errorf("probe of %v port %d: status %v (err %v), want REFUSED", target, port, st, err)
		}
	}
	if n := m.n.Load(); n != 0 {
		t.Errorf("measurer called %d times for non-web ports", n)
	}
}

// Heartbeats carry the sender's interval (validated up to 60 s), but the
// failure detector declares a member dead after the observer's own
// FailureTimeout whatever the member's interval. A member whose interval is
// longer than that timeout (a larger deployment slows heartbeats, as the
// 50-peer bench does) flaps dead/alive on every heartbeat.
func TestFailureDetectorHonoursSenderInterval(t *testing.T) {
	self, other := newKeyed(t), newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	oid, _ := peer.Decode(string(other.id))
	m := newMembers(sid, delegation.Crawler{ID: self.id}, 5*time.Second, slog.Default())
	var deaths atomic.Int32
	m.OnChange(func(ev MemberEvent) {
		if ev.Dead {
			deaths.Add(1)
		}
	})
	now := time.Now()
	for i := range 3 {
		at := now.Add(time.Duration(i) * 10 * time.Second)
		m.observe(oid, &pb.Heartbeat{Version: 1, Seq: uint64(i + 1), AtUnixNano: at.UnixNano(), IntervalMs: 10_000,
			Snapshot: make([]byte, 32)}, at)
		// 6 s later: the member's next heartbeat is due only at 10 s
		m.sweep(at.Add(6 * time.Second))
		if !m.IsLive(other.id) {
			t.Errorf("heartbeat %d: member with a 10 s interval declared dead 6 s after it (its next beat is not due yet)", i+1)
		}
	}
	if d := deaths.Load(); d != 0 {
		t.Errorf("%d death events for a member that never missed a heartbeat (flapping)", d)
	}
}

// With PublicDHTFilters (a public deployment: "drop private and loopback
// addresses"), listen addresses from a member's heartbeat still go to the
// peerstore and are dialled at once: any member can make every peer open
// TCP connections to the peer's own loopback or LAN (here a loopback
// listener standing for a local service).
func TestHeartbeatAddrsNotDialledWhenPublic(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	var accepted atomic.Int32
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			accepted.Add(1)
			c.Close()
		}
	}()
	cfg := TestnetConfig()
	cfg.PublicDHTFilters = true
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})

	forged := newKeyed(t)
	fid, _ := peer.Decode(string(forged.id))
	local, err := ma.NewMultiaddr("/ip4/127.0.0.1/tcp/" + strconv.Itoa(ln.Addr().(*net.TCPAddr).Port))
	if err != nil {
		t.Fatal(err)
	}
	// what validateHeartbeat accepts from any signed member
	p.members.observe(fid, &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000,
		Snapshot: p.snap[:], ListenAddrs: [][]byte{local.Bytes()}}, time.Now())

	deadline := time.Now().Add(3 * time.Second)
	for time.Now().Before(deadline) && accepted.Load() == 0 {
		time.Sleep(20 * time.Millisecond)
	}
	if n := accepted.Load(); n != 0 {
		t.Errorf("public-mode peer dialled a loopback address advertised in a heartbeat (%d connections)", n)
	}
	if addrs := p.h.Peerstore().Addrs(fid); len(addrs) != 0 {
		t.Errorf("public-mode peer stored non-public member addresses %v", addrs)
	}
}

// FetchSnapshot allocates the size a serving peer announces in its header
// (up to maxSnapshot, 512 MiB) before a single byte of data arrived: any
// member (FetchSnapshotAny asks them in turn) makes a volunteer's node
// reserve half a GiB with one small message. The buffer should grow with
// the data received.
func TestSnapshotHeaderSizeNotTrustedForAllocation(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = 2 * time.Second
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	liar := rawHost(t)
	liar.SetStreamHandler(ProtoSnapshot, func(s network.Stream) {
		defer s.Close()
		st := newStream(s, maxSnapshotMsg, 5*time.Second)
		var req pb.SnapshotRequest
		if err := st.read(&req); err != nil {
			s.Reset()
			return
		}
		_ = st.write(&pb.SnapshotHeader{Version: wireVersion, Size: maxSnapshot})
	})
	p.h.Peerstore().AddAddrs(liar.ID(), liar.Addrs(), time.Minute)

	var before, after runtime.MemStats
	runtime.ReadMemStats(&before)
	_, err := p.FetchSnapshot(context.Background(), liar.ID(), p.snap)
	runtime.ReadMemStats(&after)
	if err == nil {
		t.Fatal("empty answer accepted")
	}
	if d := after.TotalAlloc - before.TotalAlloc; d > 64<<20 {
		t.Errorf("FetchSnapshot allocated %d MiB on a header's word, before any data (err: %v)", d>>20, err)
	}
}
