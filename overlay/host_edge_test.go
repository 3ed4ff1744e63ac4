package overlay

import (
	"bytes"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	rcmgr "github.com/libp2p/go-libp2p/p2p/host/resource-manager"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/overlay/pb"
)

// A stale (or planted) <key>.tmp keeps its own mode: os.WriteFile does not
// chmod an existing file, and the rename installs it as the identity.
func TestKeyIgnoresStaleTempFile(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	if err := os.WriteFile(path+".tmp", []byte("left over by a crash"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err != nil {
		t.Fatal(err)
	}
	fi, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	if fi.Mode().Perm() != 0o600 {
		t.Fatalf("new identity key has mode %v, want 0600", fi.Mode().Perm())
	}
}

// An existing private key readable by group/others is used silently.
func TestKeyTooOpenRefused(t *testing.T) {
	path := filepath.Join(t.TempDir(), "identity.key")
	if _, err := LoadOrCreateKey(path); err != nil {
		t.Fatal(err)
	}
	if err := os.Chmod(path, 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := LoadOrCreateKey(path); err == nil {
		t.Fatal("identity key with mode 0644 (world-readable) accepted without error")
	}
}

// swarm.key parsing stops after 32 bytes: a 64-byte key (or any trailing
// data) is accepted, and two different keys that share their first half
// open the same private network.
func TestPSKWrongLengthRefused(t *testing.T) {
	dir := t.TempDir()
	first := strings.Repeat("ab", 32)
	write := func(name, second string) string {
		p := filepath.Join(dir, name)
		data := "/key/swarm/psk/1.0.0/\n/base16/\n" + first + second + "\n"
		if err := os.WriteFile(p, []byte(data), 0o600); err != nil {
			t.Fatal(err)
		}
		return p
	}
	a := write("a.key", strings.Repeat("01", 32))
	b := write("b.key", strings.Repeat("fe", 32))
	ka, errA := LoadPSK(a)
	kb, errB := LoadPSK(b)
	if errA == nil || errB == nil {
		t.Fatalf("64-byte swarm keys accepted (errs %v, %v); distinct files decode equal: %v",
			errA, errB, bytes.Equal(ka, kb))
	}
}

// Config.Validate promises ConnHighWater < the resource manager's
// connection limit, but only System.Conns is set: the scaled default
// System.ConnsInbound (96 at 512 MiB) refuses inbound connections long
// before the connection manager (high water 192) ever trims.
func TestRcmgrInboundAboveHighWater(t *testing.T) {
	cfg := DefaultConfig()
	cfg.ListenAddrs = []string{"/ip4/127.0.0.1/tcp/0"}
	h, err := NewHost(cfg)
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	var in, out int
	h.Network().ResourceManager().ViewSystem(func(s network.ResourceScope) error {
		l := s.(rcmgr.ResourceScopeLimiter).Limit()
		in, out = l.GetConnLimit(network.DirInbound), l.GetConnLimit(network.DirOutbound)
		return nil
	})
	if in <= cfg.ConnHighWater || out <= cfg.ConnHighWater {
		t.Fatalf("system conn limits inbound %d / outbound %d, total %d: not above ConnHighWater %d",
			in, out, cfg.MaxConns, cfg.ConnHighWater)
	}
}

// Validate accepts heartbeat intervals that every peer's membership
// validator (10 ms–60 s) rejects: such a peer is never a member anywhere.
func TestHeartbeatIntervalOutsideWireRangeRefused(t *testing.T) {
	for _, iv := range []time.Duration{90 * time.Second, 5 * time.Millisecond} {
		cfg := DefaultConfig()
		cfg.HeartbeatInterval, cfg.FailureTimeout = iv, 5*iv
		if cfg.Validate() != nil {
			continue // refused up front: fine
		}
		// as publishHeartbeat builds it
		hb := &pb.Heartbeat{Version: wireVersion, Seq: 1, AtUnixNano: time.Now().UnixNano(),
			IntervalMs: uint32(cfg.HeartbeatInterval / time.Millisecond), Snapshot: make([]byte, 32),
			Capacity: uint32(cfg.Capacity)}
		data, err := proto.Marshal(hb)
		if err != nil {
			t.Fatal(err)
		}
		if _, err := decodeHeartbeat(data); err != nil {
			t.Errorf("HeartbeatInterval %v passes Validate, but its heartbeats are rejected: %v", iv, err)
		}
	}
}
