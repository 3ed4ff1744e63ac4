package overlay

import (
	"bytes"
	"context"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"io"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
)

// countingLimiter lets everything through and counts what was asked, or
// fails once cutAt bytes were served (closing the stream mid-transfer).
type countingLimiter struct {
	n     atomic.Int64
	cutAt int64
}

func (l *countingLimiter) WaitN(_ context.Context, n int) error {
	if l.cutAt > 0 && l.n.Load()+int64(n) > l.cutAt {
		return errors.New("cut")
	}
	l.n.Add(int64(n))
	return nil
}

type releaseNet struct {
	tn       *testNet
	rels     []*Releases
	lims     []*countingLimiter
	mu       sync.Mutex
	got      []map[string]bool // bundles delivered, per peer
	verified atomic.Int64
}

// newReleaseNet is n peers with release channels whose Verify accepts
// bundles that start with "good" and rejects the rest.
func newReleaseNet(t *testing.T, n int) *releaseNet {
	rn := &releaseNet{tn: newTestNet(t, n, nil)}
	for i, p := range rn.tn.peers {
		rn.got = append(rn.got, map[string]bool{})
		lim := &countingLimiter{}
		r, err := OpenReleases(p, ReleaseConfig{
			Store:   filepath.Join(t.TempDir(), "store"),
			Limiter: lim,
			Verify: func(a ReleaseAnnouncement) ReleaseVerdict {
				rn.verified.Add(1)
				if bytes.HasPrefix(a.Bundle, []byte("good")) {
					return ReleaseAccept
				}
				return ReleaseReject
			},
			Deliver: func(a ReleaseAnnouncement) {
				rn.mu.Lock()
				rn.got[i][string(a.Bundle)] = true
				rn.mu.Unlock()
			},
		})
		if err != nil {
			t.Fatal(err)
		}
		t.Cleanup(func() { r.Close() })
		rn.rels, rn.lims = append(rn.rels, r), append(rn.lims, lim)
	}
	return rn
}

func (rn *releaseNet) delivered(i int, bundle string) bool {
	rn.mu.Lock()
	defer rn.mu.Unlock()
	return rn.got[i][bundle]
}

// a binary in peer i's store, returned with its hex SHA-256
func storeBinary(t *testing.T, r *Releases, size int) ([]byte, string) {
	data := make([]byte, size)
	rand.Read(data)
	sum := sha256.Sum256(data)
	target := hex.EncodeToString(sum[:])
	if err := os.WriteFile(filepath.Join(r.cfg.Store, target), data, 0o644); err != nil {
		t.Fatal(err)
	}
	return data, target
}

// An announcement reaches every member and names its author as a holder;
// the binary comes over the protocol, paced by the limiter byte for byte;
// a rejected announcement is delivered nowhere.
func TestReleaseAnnounceAndFetch(t *testing.T) {
	rn := newReleaseNet(t, 3)
	data, target := storeBinary(t, rn.rels[0], 300<<10)
	ctx := context.Background()
	if err := rn.rels[0].Announce([]byte("good bundle"), target); err != nil {
		t.Fatal(err)
	}
	if err := rn.rels[2].Announce([]byte("forged bundle"), ""); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return rn.delivered(1, "good bundle") && rn.delivered(2, "good bundle") })
	// both announcements judged by the two peers each reached
	waitFor(t, 20*time.Second, func() bool { return rn.verified.Load() >= 4 })
	for i := 0; i < 2; i++ {
		if rn.delivered(i, "forged bundle") {
			t.Errorf("peer %d delivered a rejected announcement", i)
		}
	}
	for i := 1; i < 3; i++ {
		if h := rn.rels[i].Holders(target); len(h) != 1 || h[0] != rn.tn.peers[0].ID() {
			t.Errorf("peer %d: holders %v", i, h)
		}
	}
	dst := filepath.Join(t.TempDir(), "micra")
	from, err := rn.rels[1].Fetch(ctx, target, int64(len(data)), dst)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if from != rn.tn.peers[0].ID() || !bytes.Equal(got, data) {
		t.Fatalf("fetched %d bytes from %s", len(got), from)
	}
	if n := rn.lims[0].n.Load(); n != int64(len(data)) {
		t.Errorf("the limiter paced %d bytes, %d were served", n, len(data))
	}
	if _, err := os.Stat(dst + ".part"); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("the partial file stayed: %v", err)
	}
}

// A member's report rides on its announcements: the others learn the
// version it runs and the releases it rolled back, and a changed report is
// published again without a new bundle.
func TestReleaseReportSpreads(t *testing.T) {
	rn := newReleaseNet(t, 3)
	_, target := storeBinary(t, rn.rels[0], 1<<10)
	if err := rn.rels[0].Report(ReleaseReport{Running: "v0.2.0", OnTrial: true}); err != nil {
		t.Fatal(err)
	}
	if err := rn.rels[0].Announce([]byte("good bundle"), target); err != nil {
		t.Fatal(err)
	}
	id := rn.tn.peers[0].ID()
	waitFor(t, 20*time.Second, func() bool {
		return rn.rels[1].Reports()[id].Running == "v0.2.0" && rn.rels[2].Reports()[id].OnTrial
	})
	rb := ReleaseReport{Running: "v0.1.0", RolledBack: []RolledBack{{SHA256: target, Version: "v0.2.0", Reason: "exited 3 times"}}}
	if err := rn.rels[0].Report(rb); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool {
		return reflect.DeepEqual(rn.rels[1].Reports()[id], rb) && reflect.DeepEqual(rn.rels[2].Reports()[id], rb)
	})
	if _, ok := rn.rels[0].Reports()[id]; ok {
		t.Error("a peer lists its own report among the members'")
	}
	if err := rn.rels[0].Report(ReleaseReport{RolledBack: []RolledBack{{SHA256: "not hex"}}}); err == nil {
		t.Error("a report naming a release by something else than its SHA-256 was taken")
	}
}

// The holder closes the stream mid-transfer; the next fetch resumes where
// the cut left the partial file, and only the rest crosses the wire.
func TestReleaseFetchResumesAfterCut(t *testing.T) {
	rn := newReleaseNet(t, 2)
	data, target := storeBinary(t, rn.rels[0], 512<<10)
	rn.lims[0].cutAt = 200 << 10
	ctx := context.Background()
	if err := rn.rels[0].Announce([]byte("good"), target); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 20*time.Second, func() bool { return len(rn.rels[1].Holders(target)) == 1 })
	dst := filepath.Join(t.TempDir(), "micra")
	if _, err := rn.rels[1].Fetch(ctx, target, int64(len(data)), dst); err == nil || !strings.Contains(err.Error(), "cut at byte") {
		t.Fatalf("fetch through a cut stream: %v", err)
	}
	st, err := os.Stat(dst + ".part")
	if err != nil || st.Size() == 0 || st.Size() > 200<<10 {
		t.Fatalf("partial file after the cut: %v, %v", st, err)
	}
	kept := st.Size()
	served := rn.lims[0].n.Load()
	rn.lims[0].cutAt = 0
	if _, err := rn.rels[1].Fetch(ctx, target, int64(len(data)), dst); err != nil {
		t.Fatal(err)
	}
	got, _ := os.ReadFile(dst)
	if !bytes.Equal(got, data) {
		t.Fatal("the resumed binary differs")
	}
	if again := rn.lims[0].n.Load() - served; again != int64(len(data))-kept {
		t.Errorf("resumed with %d bytes, want the %d missing", again, int64(len(data))-kept)
	}
}

// A host that is no member is refused, and so is a request for a binary
// the peer does not hold.
func TestReleaseProtocolMembersOnly(t *testing.T) {
	rn := newReleaseNet(t, 2)
	_, target := storeBinary(t, rn.rels[0], 1024)
	sum, _ := hex.DecodeString(target)
	outsider := rawHost(t)
	p0 := rn.tn.peers[0]
	if err := outsider.Connect(context.Background(), p0.AddrInfo()); err != nil {
		t.Fatal(err)
	}
	status := func(s io.ReadWriteCloser, sum []byte) byte {
		var req [sha256.Size + 8]byte
		copy(req[:], sum)
		if _, err := s.Write(req[:]); err != nil {
			t.Fatal(err)
		}
		var hdr [9]byte
		if _, err := io.ReadFull(s, hdr[:]); err != nil {
			t.Fatal(err)
		}
		_ = binary.BigEndian.Uint64(hdr[1:])
		return hdr[0]
	}
	s, err := outsider.NewStream(context.Background(), p0.ID(), ProtoRelease)
	if err != nil {
		t.Fatal(err)
	}
	if st := status(s, sum); st != relNotMember {
		t.Errorf("an outsider got status %d, want not a member", st)
	}
	s.Close()
	s, err = rn.tn.peers[1].Host().NewStream(context.Background(), p0.ID(), ProtoRelease)
	if err != nil {
		t.Fatal(err)
	}
	other := sha256.Sum256([]byte("not held"))
	if st := status(s, other[:]); st != relNotFound {
		t.Errorf("a member asking for an unknown binary got status %d", st)
	}
	s.Close()
}

func TestReleaseAnnouncementWire(t *testing.T) {
	p := lonePeer(t, testTree(t))
	sum := sha256.Sum256([]byte("x"))
	a := ReleaseAnnouncement{From: p.ID(), Bundle: []byte("MRB1..."), Target: hex.EncodeToString(sum[:]),
		Report: ReleaseReport{Running: "v0.1.0", OnTrial: true, RolledBack: []RolledBack{
			{SHA256: hex.EncodeToString(sum[:]), Version: "v0.3.0", Reason: "exited 3 times before it was healthy"}}}}
	data, err := encodeAnnouncement(a)
	if err != nil {
		t.Fatal(err)
	}
	b, err := decodeAnnouncement(data)
	if err != nil || b.From != a.From || b.Target != a.Target || !bytes.Equal(b.Bundle, a.Bundle) || !reflect.DeepEqual(b.Report, a.Report) {
		t.Fatalf("round trip: %+v %v", b, err)
	}
	if _, err := encodeAnnouncement(ReleaseAnnouncement{From: p.ID(), Bundle: make([]byte, maxAnnounceBytes)}); err == nil {
		t.Error("an oversized announcement encoded")
	}
	// a build before reports: the same without one
	v1 := ReleaseAnnouncement{From: p.ID(), Bundle: a.Bundle, Target: a.Target}
	old, err := encodeAnnouncement(v1)
	if err != nil {
		t.Fatal(err)
	}
	old = append([]byte(announceMagicV1), old[len(announceMagic):]...)
	old = slices.Delete(old, len(old)-len(a.Bundle)-3, len(old)-len(a.Bundle)) // (an empty report is 3 bytes)
	if b, err := decodeAnnouncement(old); err != nil || b.Target != a.Target || !bytes.Equal(b.Bundle, a.Bundle) || b.Report.Running != "" {
		t.Fatalf("an MRA1 announcement: %+v %v", b, err)
	}
	many := a
	many.Report.RolledBack = slices.Repeat(a.Report.RolledBack, maxRolledBack+1)
	if _, err := encodeAnnouncement(many); err == nil {
		t.Error("a report of more releases rolled back than the limit encoded")
	}
	for _, bad := range [][]byte{nil, []byte("MRA1"), []byte("MRA2"), data[:len(data)-len(a.Bundle)], append([]byte("MRA3"), data[4:]...),
		data[:len(data)-len(a.Bundle)-10]} {
		if _, err := decodeAnnouncement(bad); err == nil {
			t.Errorf("decoded %q", bad)
		}
	}
}

func FuzzDecodeReleaseAnnouncement(f *testing.F) {
	f.Add([]byte("MRA1\x00\x00\x00\x00\x00\x00\x00\x01\x02ab\x00bundle"))
	f.Add([]byte("MRA2\x00\x00\x00\x00\x00\x00\x00\x01\x02ab\x00\x06v0.1.0\x01\x00bundle"))
	f.Fuzz(func(t *testing.T, data []byte) {
		a, err := decodeAnnouncement(data)
		if err != nil {
			return
		}
		if len(a.Bundle) == 0 || (a.Target != "" && len(a.Target) != 64) || len(a.Report.RolledBack) > maxRolledBack {
			t.Fatalf("decoded %+v", a)
		}
	})
}

// An announcement that arrives before its author's first heartbeat is
// ignored then, and taken when the author joins: its author does not send
// it again for minutes (Every), so a member that joined just then would
// otherwise not learn of the release.
func TestReleaseAnnouncementBeforeHeartbeatTaken(t *testing.T) {
	rn := newReleaseNet(t, 1)
	p, r := rn.tn.peers[0], rn.rels[0]
	author := newKeyed(t)
	aid := pid(t, author)
	data, err := encodeAnnouncement(ReleaseAnnouncement{From: aid, Bundle: []byte("good early"), Target: strings.Repeat("ab", 32)})
	if err != nil {
		t.Fatal(err)
	}
	msg := &pubsub.Message{Message: &pubsubpb.Message{From: []byte(aid), Data: data}}
	if v := r.validate(context.Background(), aid, msg); v != pubsub.ValidationIgnore {
		t.Fatalf("an announcement of a peer not heard yet: %v, want ignored", v)
	}
	if rn.delivered(0, "good early") {
		t.Fatal("delivered before its author was a member")
	}
	heardFrom(p, aid)
	waitFor(t, 10*time.Second, func() bool { return rn.delivered(0, "good early") })
	if h := r.Holders(strings.Repeat("ab", 32)); len(h) != 1 || h[0] != aid {
		t.Fatalf("holders %v, want the author", h)
	}
}
