package overlay

import (
	"context"
	"net/netip"
	"runtime"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// discardLearner learns nothing and keeps nothing, so the learn queue does
// not hold records while the footprint is measured.
type discardLearner struct{ recordingLearner }

func (*discardLearner) Learn(delegation.Record) bool { return true }

// footprint merges n sealed records (12 crawlers, 8 probes each, the shape
// of a delegation at 12 crawlers) into a real peer's directory and returns
// the heap the directory keeps per record, beside what the sealed value and
// its decoding weigh per record when kept as received (the cache before it
// kept digests and interned ids).
func footprint(t testing.TB, n int) (perRecord, sealedPerRecord float64) {
	t.Helper()
	tree := loopbackTree(t, 32, 128) // 4,129 nodes
	if n >= tree.Len() {
		t.Fatalf("%d records need as many subnets; the tree has %d nodes", n, tree.Len())
	}
	p := lonePeer(t, tree)
	p.UsePolicy(&discardLearner{})
	ks := make([]keyed, 12)
	for i := range ks {
		ks[i] = newKeyed(t)
	}
	now := time.Now()
	vals := make([][]byte, n)
	for i := range vals {
		owner, decider := ks[i%len(ks)], ks[(i+1)%len(ks)]
		rec := delegation.Record{Subnet: hierarchy.NodeID(1 + i), Snapshot: p.snap, Owner: owner.id, OwnerRTT: 9 * time.Millisecond,
			Epoch: 1, DecidedBy: decider.id, At: now}
		for j := range 8 {
			k := ks[(i+j)%len(ks)]
			rec.Probes = append(rec.Probes, delegation.ProbeResult{Crawler: k.id, RTT: time.Duration(9+j) * time.Millisecond, OK: true})
		}
		vals[i] = seal(t, rec, owner.sk, decider.sk)
	}
	heap := func() uint64 {
		var m runtime.MemStats
		runtime.GC()
		runtime.ReadMemStats(&m)
		return m.HeapAlloc
	}

	// the sealed values and their decodings, as the cache used to keep them
	type asReceived struct {
		rec delegation.Record
		raw []byte
	}
	before := heap()
	kept := make([]asReceived, n)
	for i, v := range vals {
		rec, err := openRecord(v)
		if err != nil {
			t.Fatal(err)
		}
		kept[i] = asReceived{rec, append([]byte(nil), v...)} // a copy the cache would own
	}
	sealed := heap() - before
	runtime.KeepAlive(kept)
	kept = nil

	// the directory: measured as what clearing it frees, so that the
	// validator's bounded cache of decodings does not count
	for i, v := range vals {
		if _, _, err := p.dir.mergeValue(hierarchy.NodeID(1+i), v); err != nil {
			t.Fatal(err)
		}
	}
	p.LearnPending()
	vals = nil
	// the validator's cache of decodings shares the crawler ids of the
	// records it decoded: emptied (as 8192 later values would), the cache's
	// own copies of ids, not interned, would count as the directory's
	p.validator.Verified.mu.Lock()
	clear(p.validator.Verified.m)
	p.validator.Verified.mu.Unlock()
	withRecords := heap()
	if got := len(p.dir.Records()); got != n {
		t.Fatalf("directory holds %d records, want %d", got, n)
	}
	p.dir.mu.Lock()
	p.dir.recs = make(map[hierarchy.NodeID]*cached)
	p.dir.mu.Unlock()
	t.Logf("records alone: %.0f B per record", (float64(withRecords)-float64(heap()))/float64(n))
	p.dir.mu.Lock()
	p.dir.under = make(map[hierarchy.NodeID]map[delegation.CrawlerID]int)
	p.dir.org = make(map[hierarchy.OrgID]map[delegation.CrawlerID]int)
	p.dir.mu.Unlock()
	p.dir.idMu.Lock()
	p.dir.ids = nil
	p.dir.idMu.Unlock()
	freed := float64(withRecords) - float64(heap())
	return freed / float64(n), float64(sealed) / float64(n)
}

// TestDirectoryRecordFootprint: a peer keeps every record it sees (one per
// delegated subnet, up to the hierarchy's 582,398 nodes), so what one
// weighs is what a volunteer's peer pays. The cache keeps a digest of the
// sealed value and one copy of each crawler id; kept as received, a record
// weighed about four times as much (≈ 2 KB with 8 probes).
func TestDirectoryRecordFootprint(t *testing.T) {
	per, sealed := footprint(t, 1000)
	t.Logf("directory: %.0f B per record (indexes included); sealed value and its decoding: %.0f B (%.1f×)", per, sealed, sealed/per)
	if per <= 0 || sealed <= 0 {
		t.Fatalf("measurement failed: %.0f / %.0f B per record", per, sealed)
	}
	if per > sealed/2 {
		t.Fatalf("the directory keeps %.0f B per record, more than half the %.0f B of the sealed value and its decoding", per, sealed)
	}
}

// BenchmarkDirectoryFootprint reports the directory's bytes per record
// (B/record) beside the sealed value and its decoding kept as received
// (B/record-sealed), measured in the same run.
func BenchmarkDirectoryFootprint(b *testing.B) {
	for range b.N {
		per, sealed := footprint(b, 4000)
		b.ReportMetric(per, "B/record")
		b.ReportMetric(sealed, "B/record-sealed")
	}
}

// TestHoldersUnderCountsTheSubnetsOwnOwner: the holder index leaves a
// subnet's own owner out of the subnet's own set (indexLocked); HoldersUnder
// must still name it, for the subnet and for its ancestors.
func TestHoldersUnderCountsTheSubnetsOwnOwner(t *testing.T) {
	tree := testTree(t)
	p := lonePeer(t, tree)
	s := tree.SmallestNonUnary(netip.MustParseAddr("127.5.2.9"))
	rec := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: p.selfID, OwnerRTT: time.Millisecond, Epoch: 1, DecidedBy: p.selfID, At: time.Now(),
		Probes: []delegation.ProbeResult{{Crawler: p.selfID, RTT: time.Millisecond, OK: true}}}
	if _, _, err := p.dir.mergeValue(s, seal(t, rec, p.sk, p.sk)); err != nil {
		t.Fatal(err)
	}
	for _, a := range []hierarchy.NodeID{s, tree.Parent(s)} {
		hs, err := p.dir.HoldersUnder(context.Background(), a)
		if err != nil || len(hs) != 1 || hs[0] != p.selfID {
			t.Fatalf("HoldersUnder(%d) = %v, %v; want [%s] (the owner of %d)", a, hs, err, p.selfID, s)
		}
	}
}
