package overlay

import (
	"math"
	"strings"
	"testing"
	"time"

	"google.golang.org/protobuf/encoding/protowire"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// sealRaw seals r with k as both owner and decider, with unknown (raw
// protobuf fields) appended to the record: what a hostile peer can put on
// the wire.
func sealRaw(t *testing.T, r delegation.Record, k keyed, unknown []byte) []byte {
	t.Helper()
	m, err := toPB(r)
	if err != nil {
		t.Fatal(err)
	}
	if unknown != nil {
		m.ProtoReflect().SetUnknown(unknown)
	}
	env, err := sealOwner(m, k.sk)
	if err != nil {
		t.Fatal(err)
	}
	val, err := sealDecision(env, k.sk)
	if err != nil {
		t.Fatal(err)
	}
	return val
}

// TestHostileRecordsRefused: the records a hostile peer could
// take or freeze a subnet with are refused by every peer's validator, and
// an honest record after a dead owner's still wins.
func TestHostileRecordsRefused(t *testing.T) {
	var snap hierarchy.SnapshotID
	snap[0] = 7
	now := time.Now()
	v := RecordValidator{Snapshot: snap, Nodes: 100, MaxAge: 48 * time.Hour, Now: func() time.Time { return now }}
	mallory, honest := newKeyed(t), newKeyed(t)
	base := delegation.Record{Subnet: 42, Snapshot: snap, Owner: mallory.id, OwnerRTT: time.Nanosecond,
		DecidedBy: mallory.id, At: now, Probes: []delegation.ProbeResult{{Crawler: mallory.id, RTT: time.Nanosecond, OK: true}}}

	frozen := base
	frozen.Epoch = math.MaxUint64 // won every comparison; its successor wrapped to 0
	ahead := base
	ahead.Epoch = delegation.EpochCeiling(now) + 1
	unknown := base
	unknown.Epoch = delegation.NextEpoch(0, now)
	twice := unknown
	twice.Probes = append(twice.Probes, delegation.ProbeResult{Crawler: honest.id, RTT: time.Nanosecond, OK: true})
	for name, val := range map[string][]byte{
		"epoch 2^64-1":                  sealRaw(t, frozen, mallory, nil),
		"epoch past its time's ceiling": sealRaw(t, ahead, mallory, nil),
		"6 KiB of unknown fields": sealRaw(t, unknown, mallory,
			protowire.AppendBytes(protowire.AppendTag(nil, 99, protowire.BytesType), make([]byte, 6<<10))),
	} {
		if err := v.Validate(DelegKey(42), val); err == nil {
			t.Errorf("%s: accepted", name)
		} else {
			t.Logf("%s: %v", name, err)
		}
	}
	// a crawler listed twice with made-up RTTs: toPB keeps one answer a
	// crawler, so the hostile form is built on the wire
	m, err := toPB(twice)
	if err != nil {
		t.Fatal(err)
	}
	m.Probes = append(m.Probes, m.Probes[1])
	if _, err := fromPB(m); err == nil || !strings.Contains(err.Error(), "probed twice") {
		t.Errorf("a crawler probed twice: %v", err)
	}

	// an epoch at the ceiling is valid (a decider whose clock runs ahead),
	// and the honest decision once the clocks pass it wins over it
	edge := base
	edge.Epoch = delegation.EpochCeiling(now)
	edgeVal := sealRaw(t, edge, mallory, nil)
	if err := v.Validate(DelegKey(42), edgeVal); err != nil {
		t.Fatalf("epoch at the ceiling: %v", err)
	}
	later := now.Add(time.Duration(delegation.EpochSlack)*time.Millisecond + time.Second)
	v.Now = func() time.Time { return later }
	succ := base
	succ.Owner, succ.DecidedBy, succ.At, succ.OwnerRTT = honest.id, honest.id, later, 20*time.Millisecond
	succ.Probes = []delegation.ProbeResult{{Crawler: honest.id, RTT: 20 * time.Millisecond, OK: true}}
	succ.Epoch = delegation.NextEpoch(edge.Epoch, later)
	succVal := sealRaw(t, succ, honest, nil)
	if i, err := v.Select(DelegKey(42), [][]byte{edgeVal, succVal}); err != nil || i != 1 {
		t.Fatalf("honest successor %d minutes later: select %d, %v; want it (1)", delegation.EpochSlack/60000+1, i, err)
	}
}
