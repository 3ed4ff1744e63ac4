package overlay

import (
	"crypto/rand"
	"crypto/sha256"
	"log/slog"
	"net/netip"
	"reflect"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/prometheus/client_golang/prometheus"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

type keyed struct {
	sk crypto.PrivKey
	id delegation.CrawlerID
}

func newKeyed(t testing.TB) keyed {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return keyed{sk, delegation.CrawlerID(id.String())}
}

func seal(t testing.TB, r delegation.Record, owner, decider crypto.PrivKey) []byte {
	t.Helper()
	m, err := toPB(r)
	if err != nil {
		t.Fatal(err)
	}
	env, err := sealOwner(m, owner)
	if err != nil {
		t.Fatal(err)
	}
	val, err := sealDecision(env, decider)
	if err != nil {
		t.Fatal(err)
	}
	return val
}

func TestRecordValidator(t *testing.T) {
	var snap hierarchy.SnapshotID
	snap[0] = 7
	v := RecordValidator{Snapshot: snap, Nodes: 100, MaxAge: 48 * time.Hour, Verified: NewVerifiedCache(16)}
	owner, decider, mallory := newKeyed(t), newKeyed(t), newKeyed(t)
	now := time.Now()
	rec := delegation.Record{Subnet: 42, Snapshot: snap, Owner: owner.id, OwnerRTT: 12 * time.Millisecond, Epoch: 3,
		DecidedBy: decider.id, At: now, Probes: []delegation.ProbeResult{{Crawler: owner.id, RTT: 12 * time.Millisecond, OK: true}}}
	good := seal(t, rec, owner.sk, decider.sk)
	if err := v.Validate(DelegKey(42), good); err != nil {
		t.Fatalf("good record rejected: %v", err)
	}
	got, err := openRecord(good)
	if err != nil || got.Owner != owner.id || got.DecidedBy != decider.id || got.OwnerRTT != rec.OwnerRTT || len(got.Probes) != 1 || !got.At.Equal(now) {
		t.Fatalf("round trip: %+v %v", got, err)
	}
	cases := map[string]struct {
		key string
		val []byte
	}{
		"owner signature forged":   {DelegKey(42), seal(t, rec, mallory.sk, decider.sk)},
		"decider signature forged": {DelegKey(42), seal(t, rec, owner.sk, mallory.sk)},
		"wrong key":                {DelegKey(43), good},
		"non-canonical key":        {"/micra/deleg/042", good},
		"other namespace key":      {"/micra/other/42", good},
		"garbage":                  {DelegKey(42), []byte("not an envelope")},
		"too large":                {DelegKey(42), append(good, make([]byte, maxRecordBytes)...)},
	}
	other := rec
	other.Snapshot[0] = 8
	cases["other snapshot"] = struct {
		key string
		val []byte
	}{DelegKey(42), seal(t, other, owner.sk, decider.sk)}
	future := rec
	future.At = now.Add(time.Hour)
	cases["from the future"] = struct {
		key string
		val []byte
	}{DelegKey(42), seal(t, future, owner.sk, decider.sk)}
	old := rec
	old.At = now.Add(-49*time.Hour - clockSkew)
	cases["expired"] = struct {
		key string
		val []byte
	}{DelegKey(42), seal(t, old, owner.sk, decider.sk)}
	outside := rec
	outside.Subnet = 500
	cases["subnet outside the tree"] = struct {
		key string
		val []byte
	}{DelegKey(500), seal(t, outside, owner.sk, decider.sk)}
	for name, c := range cases {
		if err := v.Validate(c.key, c.val); err == nil {
			t.Errorf("%s: accepted", name)
		} else if !strings.Contains(err.Error(), "micra validator") {
			t.Errorf("%s: error %q does not say who rejected it", name, err)
		}
	}
	// The inner envelope must be the owner's payload type, not a decision.
	m, _ := toPB(rec)
	raw, _ := proto.Marshal(m)
	bogus, _ := sealDecision(raw, decider.sk)
	if v.Validate(DelegKey(42), bogus) == nil {
		t.Error("decision without owner envelope accepted")
	}
}

func TestSelectTotalOrder(t *testing.T) {
	var snap hierarchy.SnapshotID
	v := RecordValidator{Snapshot: snap, MaxAge: 48 * time.Hour}
	a, b, c := newKeyed(t), newKeyed(t), newKeyed(t)
	now := time.Now().Truncate(time.Millisecond)
	base := delegation.Record{Subnet: 5, Snapshot: snap, Owner: a.id, OwnerRTT: 20 * time.Millisecond, Epoch: 2, DecidedBy: c.id, At: now}
	mk := func(f func(*delegation.Record), owner, dec keyed) []byte {
		r := base
		f(&r)
		r.Owner, r.DecidedBy = owner.id, dec.id
		return seal(t, r, owner.sk, dec.sk)
	}
	lowOwner, highOwner := a, b
	if b.id < a.id {
		lowOwner, highOwner = b, a
	}
	higherEpoch := mk(func(r *delegation.Record) { r.Epoch = 3; r.OwnerRTT = time.Second }, highOwner, c)
	lowerRTT := mk(func(r *delegation.Record) { r.OwnerRTT = 10 * time.Millisecond }, highOwner, c)
	lowerOwner := mk(func(*delegation.Record) {}, lowOwner, c)
	higherOwner := mk(func(*delegation.Record) {}, highOwner, c)
	later := mk(func(r *delegation.Record) { r.At = now.Add(time.Second) }, highOwner, c)
	pairs := []struct {
		name          string
		better, worse []byte
	}{
		{"epoch", higherEpoch, lowerRTT},
		{"rtt", lowerRTT, lowerOwner},
		{"owner id", lowerOwner, higherOwner},
		{"refresh time", later, higherOwner},
	}
	for _, p := range pairs {
		for _, order := range [][2][]byte{{p.better, p.worse}, {p.worse, p.better}} {
			i, err := v.Select(DelegKey(5), [][]byte{order[0], order[1]})
			if err != nil {
				t.Fatal(err)
			}
			if string([][]byte{order[0], order[1]}[i]) != string(p.better) {
				t.Errorf("%s: Select picked the worse record", p.name)
			}
		}
	}
	// Identical bytes: index 0 (the DHT needs it to accept re-puts).
	if i, _ := v.Select(DelegKey(5), [][]byte{lowerRTT, lowerRTT}); i != 0 {
		t.Errorf("tie returned %d, want 0", i)
	}
	// Invalid values lose against any valid one.
	if i, _ := v.Select(DelegKey(5), [][]byte{[]byte("junk"), lowerOwner}); i != 1 {
		t.Errorf("invalid value selected")
	}
	// The best of many is independent of order.
	all := [][]byte{higherOwner, lowerOwner, later, lowerRTT, higherEpoch}
	for rot := range all {
		vals := append(append([][]byte{}, all[rot:]...), all[:rot]...)
		i, _ := v.Select(DelegKey(5), vals)
		if string(vals[i]) != string(higherEpoch) {
			t.Errorf("rotation %d: wrong winner", rot)
		}
	}
}

func TestDecodeGossipRejectsImplausible(t *testing.T) {
	hb := &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: time.Now().UnixNano(), IntervalMs: 1000, Snapshot: make([]byte, 32), Capacity: 10}
	ok, _ := proto.Marshal(hb)
	if _, err := decodeHeartbeat(ok); err != nil {
		t.Fatalf("good heartbeat: %v", err)
	}
	bad := []func(*pb.Heartbeat){
		func(h *pb.Heartbeat) { h.IntervalMs = 1 },
		func(h *pb.Heartbeat) { h.Capacity = maxCapacity + 1 },
		func(h *pb.Heartbeat) { h.Snapshot = nil },
		func(h *pb.Heartbeat) { h.AtUnixNano = time.Now().Add(time.Hour).UnixNano() },
		func(h *pb.Heartbeat) { h.CrawlerAddr = []byte{1, 2, 3} },
	}
	for i, f := range bad {
		h := proto.CloneOf(hb)
		f(h)
		b, _ := proto.Marshal(h)
		if _, err := decodeHeartbeat(b); err == nil {
			t.Errorf("bad heartbeat %d accepted", i)
		}
	}
	ev := &pb.CalibrationEvent{Version: 1, Kind: pb.CalibrationKind_SLOW_PAGE, Snapshot: make([]byte, 32), AtUnixNano: time.Now().UnixNano(),
		Url: "http://x/", ObservedNs: 10, ExpectedNs: 20}
	b, _ := proto.Marshal(ev)
	if _, err := decodeCalibration(b); err == nil {
		t.Error("slow page faster than expected accepted")
	}
}

func TestMembersIgnoreReplaysAcceptRestarts(t *testing.T) {
	self, other := newKeyed(t), newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	oid, _ := peer.Decode(string(other.id))
	m := newMembers(sid, delegation.Crawler{ID: self.id}, 2*time.Second, slog.Default())
	now := time.Now()
	hb := func(seq uint64, at time.Time) *pb.Heartbeat {
		return &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: at.UnixNano(), IntervalMs: 500, Snapshot: make([]byte, 32)}
	}
	m.observe(oid, hb(5, now), now)
	if !m.IsLive(other.id) || m.Count() != 2 {
		t.Fatal("first heartbeat not accepted")
	}
	m.sweep(now.Add(3 * time.Second))
	if m.IsLive(other.id) {
		t.Fatal("silent peer not declared dead")
	}
	m.observe(oid, hb(4, now.Add(-time.Second)), now.Add(3*time.Second)) // replay
	if m.IsLive(other.id) {
		t.Fatal("replayed heartbeat revived a dead peer")
	}
	m.observe(oid, hb(1, now.Add(4*time.Second)), now.Add(4*time.Second)) // restarted process
	if !m.IsLive(other.id) {
		t.Fatal("restarted peer (seq 1, later time) not accepted")
	}
}

func TestMetricsShareARegistry(t *testing.T) {
	reg := prometheus.NewRegistry()
	if _, err := newMetrics(reg, "a"); err != nil {
		t.Fatal(err)
	}
	if _, err := newMetrics(reg, "b"); err != nil {
		t.Fatalf("second peer on one registry: %v", err)
	}
	if _, err := newMetrics(reg, "a"); err == nil {
		t.Fatal("duplicate peer registration accepted")
	}
}

// TestBlocksOnTheWire: block delegations survive the signed wire form and
// the validator; malformed ones are refused with a reason.
func TestBlocksOnTheWire(t *testing.T) {
	hb := hierarchy.NewBuilder()
	for _, r := range [][2]string{{"30.0.0.0", "30.255.255.255"}, {"30.1.0.0", "30.1.255.255"}, {"30.2.0.0", "30.2.255.255"}} {
		if err := hb.Add(hierarchy.Range{Start: netip.MustParseAddr(r[0]), End: netip.MustParseAddr(r[1]), Org: r[0], Country: "DE",
			Registry: hierarchy.RegistryRIPENCC, Status: hierarchy.StatusAssigned}); err != nil {
			t.Fatal(err)
		}
	}
	tree, _, err := hb.Build()
	if err != nil {
		t.Fatal(err)
	}
	s := tree.SmallestNonUnary(netip.MustParseAddr("30.1.2.3"))
	owner, b, c := newKeyed(t), newKeyed(t), newKeyed(t)
	v := RecordValidator{Snapshot: tree.ID(), Nodes: tree.Len(), Tree: tree}
	rec := delegation.Record{Subnet: s, Snapshot: tree.ID(), Owner: owner.id, OwnerRTT: 12 * time.Millisecond, Epoch: 2,
		DecidedBy: owner.id, At: time.Now(), Probes: []delegation.ProbeResult{{Crawler: owner.id, RTT: 12 * time.Millisecond, OK: true}},
		Blocks: []delegation.BlockDelegation{
			{Host: netip.MustParseAddr("30.1.2.3"), Owner: b.id, OwnerRTT: 4 * time.Millisecond},
			{Host: netip.MustParseAddr("30.1.9.1"), Owner: c.id, OwnerRTT: 6 * time.Millisecond},
		}}
	giveConsents(t, &rec, b, c)
	val := seal(t, rec, owner.sk, owner.sk)
	if err := v.Validate(DelegKey(s), val); err != nil {
		t.Fatalf("record with blocks refused: %v", err)
	}
	got, err := openRecord(val)
	if err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(got.Blocks, rec.Blocks) {
		t.Fatalf("blocks after the wire: %+v, want %+v", got.Blocks, rec.Blocks)
	}
	if got.OwnerOf(netip.MustParseAddr("30.1.2.200"), nil) != b.id || got.OwnerOf(netip.MustParseAddr("30.1.3.1"), nil) != owner.id {
		t.Fatal("OwnerOf after the wire does not follow the blocks")
	}

	bad := func(name, want string, mutate func(r *delegation.Record), raw func(m *pb.DelegationRecord)) {
		t.Helper()
		r := rec
		r.Blocks = slices.Clone(rec.Blocks)
		if mutate != nil {
			mutate(&r)
			giveConsents(t, &r, b, c, owner)
		}
		m, err := toPB(r)
		if err != nil {
			t.Fatalf("%s: toPB: %v", name, err)
		}
		if raw != nil {
			raw(m)
		}
		env, err := sealOwner(m, owner.sk)
		if err != nil {
			t.Fatal(err)
		}
		val, err := sealDecision(env, owner.sk)
		if err != nil {
			t.Fatal(err)
		}
		if err := v.Validate(DelegKey(s), val); err == nil || !strings.Contains(err.Error(), want) {
			t.Errorf("%s: err = %v, want %q", name, err, want)
		}
	}
	bad("same block twice", "delegated twice", func(r *delegation.Record) {
		r.Blocks = append(r.Blocks, delegation.BlockDelegation{Host: netip.MustParseAddr("30.1.2.77"), Owner: c.id})
	}, nil)
	bad("block of the subnet's owner", "own owner", func(r *delegation.Record) { r.Blocks[0].Owner = owner.id }, nil)
	bad("host outside the subnet", "not in subnet", func(r *delegation.Record) { r.Blocks[1].Host = netip.MustParseAddr("30.2.0.1") }, nil)
	bad("too many", "limit", func(r *delegation.Record) {
		r.Blocks = nil
		for i := range delegation.MaxBlocks + 1 {
			r.Blocks = append(r.Blocks, delegation.BlockDelegation{Host: netip.AddrFrom4([4]byte{30, 1, byte(i), 1}), Owner: b.id})
		}
	}, nil)
	bad("host of 3 bytes", "not an address", nil, func(m *pb.DelegationRecord) { m.Blocks[0].Host = []byte{30, 1, 2} })
	bad("negative rtt", "implausible", nil, func(m *pb.DelegationRecord) { m.Blocks[0].OwnerRttNs = -1 })
}

// TestVerifiedCacheOwnsItsSlices: what the cache returns, on a miss or a
// hit, can be changed by the caller without changing what it returns next.
func TestVerifiedCacheOwnsItsSlices(t *testing.T) {
	owner, b := newKeyed(t), newKeyed(t)
	rec := delegation.Record{Subnet: 42, Owner: owner.id, DecidedBy: owner.id, At: time.Now(),
		Probes: []delegation.ProbeResult{{Crawler: owner.id, RTT: time.Millisecond, OK: true}},
		Blocks: []delegation.BlockDelegation{{Host: netip.MustParseAddr("30.1.2.3"), Owner: b.id}}}
	giveConsents(t, &rec, b)
	val := seal(t, rec, owner.sk, owner.sk)
	c := NewVerifiedCache(4)
	for range 2 { // a miss, then a hit
		got, sum, err := c.open(val)
		if err != nil {
			t.Fatal(err)
		}
		if sum != sha256.Sum256(val) {
			t.Fatal("open returned another digest than the value's SHA-256")
		}
		if got.Probes[0].RTT != time.Millisecond || got.Blocks[0].Owner != b.id {
			t.Fatalf("the cache returned a record changed by a caller: %+v", got)
		}
		got.Probes[0].RTT, got.Blocks[0].Owner = time.Nanosecond, "MUTATED"
	}
}

func TestBlocksGained(t *testing.T) {
	self, a, b, dead := delegation.CrawlerID("self"), delegation.CrawlerID("a"), delegation.CrawlerID("b"), delegation.CrawlerID("dead")
	live := func(c delegation.CrawlerID) bool { return c != dead }
	h1, h1b, h2 := netip.MustParseAddr("127.5.11.5"), netip.MustParseAddr("127.5.11.77"), netip.MustParseAddr("127.5.12.1")
	rec := func(owner delegation.CrawlerID, blocks ...delegation.BlockDelegation) delegation.Record {
		return delegation.Record{Subnet: 5, Owner: owner, Blocks: blocks}
	}
	blk := func(h netip.Addr, o delegation.CrawlerID) delegation.BlockDelegation {
		return delegation.BlockDelegation{Host: h, Owner: o}
	}
	for _, tc := range []struct {
		name     string
		old, new delegation.Record
		want     []delegation.BlockDelegation // Host: a host of the block, Owner: the previous crawler
	}{
		{"block made for self", rec(a), rec(a, blk(h1, self)), []delegation.BlockDelegation{blk(h1, a)}},
		{"block moves from b to self", rec(a, blk(h1, b)), rec(a, blk(h1b, self)), []delegation.BlockDelegation{blk(h1b, b)}},
		{"block dissolved into self's subnet", rec(self, blk(h1, b)), rec(self), []delegation.BlockDelegation{blk(h1, b)}},
		{"subnet gained, block kept by b", rec(a, blk(h1, b)), rec(self, blk(h1, b)), nil},
		{"subnet gained, block dissolved", rec(a, blk(h1, b)), rec(self), []delegation.BlockDelegation{blk(h1, b)}},
		{"block made for another", rec(self), rec(self, blk(h2, b)), nil},
		{"self keeps its block", rec(a, blk(h1, self)), rec(b, blk(h1b, self)), nil},
		{"two blocks gained", rec(a, blk(h1, b)), rec(a, blk(h1, self), blk(h2, self)), []delegation.BlockDelegation{blk(h1, b), blk(h2, a)}},
		{"block of a dead crawler: the subnet's owner crawled it", rec(a, blk(h1, dead)), rec(a, blk(h1, self)), []delegation.BlockDelegation{blk(h1, a)}},
		{"own block while the block's owner is dead", rec(self, blk(h1, dead)), rec(self), nil},
	} {
		if got := blocksGained(tc.old, tc.new, self, live); !slices.EqualFunc(got, tc.want, func(x, y delegation.BlockDelegation) bool {
			return x.Host == y.Host && x.Owner == y.Owner && x.OwnerRTT == y.OwnerRTT
		}) {
			t.Errorf("%s: got %v, want %v", tc.name, got, tc.want)
		}
	}
}
