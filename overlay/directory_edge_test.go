package overlay

import (
	"context"
	"net/netip"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// recordingLearner is a policy that learns and records what it learned.
type recordingLearner struct{ learned []delegation.Record }

func (*recordingLearner) Name() string { return "recording" }
func (*recordingLearner) Join(context.Context, delegation.Crawler) (delegation.Decision, error) {
	return delegation.Decision{}, nil
}
func (*recordingLearner) Delegate(context.Context, netip.Addr) (delegation.Decision, error) {
	return delegation.Decision{}, nil
}
func (*recordingLearner) Redelegate(context.Context, netip.Addr) (delegation.Decision, error) {
	return delegation.Decision{}, nil
}
func (l *recordingLearner) Learn(r delegation.Record) bool {
	for _, x := range l.learned {
		if x.Epoch == r.Epoch && x.DecidedBy == r.DecidedBy && x.Subnet == r.Subnet {
			return false
		}
	}
	l.learned = append(l.learned, r)
	return true
}

// TestRecordsBeforePolicyAreLearned: records arrive by gossip from the
// moment New starts the calibration loop, before UsePolicy (node.Open
// installs the policy after overlay.Open has bootstrapped). The loop's
// tryDrainLearn then drains the queue into no policy: drainLearnLocked
// empties the queue and returns because a nil policy is no Learner. UsePolicy
// re-feeds only the cache, i.e. the records that prevailed: a superseded or
// losing record — evidence the docs say is learned "whether or not it
// prevails" — is dropped silently (not even learn_dropped counts it).
func TestRecordsBeforePolicyAreLearned(t *testing.T) {
	tree := testTree(t)
	p := lonePeer(t, tree)
	x, y := newKeyed(t), newKeyed(t)
	s := tree.SmallestNonUnary(netip.MustParseAddr("127.5.2.9"))
	now := time.Now()
	first := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: x.id, OwnerRTT: 9 * time.Millisecond, Epoch: 1, DecidedBy: x.id, At: now,
		Probes: []delegation.ProbeResult{{Crawler: x.id, RTT: 9 * time.Millisecond, OK: true}, {Crawler: y.id, RTT: 30 * time.Millisecond, OK: true}}}
	second := first
	second.Owner, second.OwnerRTT, second.Epoch, second.DecidedBy = y.id, 4*time.Millisecond, 2, y.id
	second.Probes = []delegation.ProbeResult{{Crawler: y.id, RTT: 4 * time.Millisecond, OK: true}, {Crawler: x.id, RTT: 20 * time.Millisecond, OK: true}}
	// as runCalibration does for two DELEGATED announcements
	for _, r := range []struct {
		rec    delegation.Record
		o, dec keyed
	}{{first, x, x}, {second, y, y}} {
		if _, _, err := p.dir.mergeValue(s, seal(t, r.rec, r.o.sk, r.dec.sk)); err != nil {
			t.Fatal(err)
		}
		p.tryDrainLearn()
	}
	l := &recordingLearner{}
	p.UsePolicy(l)
	p.LearnPending()
	if len(l.learned) != 2 {
		t.Fatalf("policy installed after 2 verified records arrived learned %d of them (epochs %v); the superseded one was dropped silently",
			len(l.learned), epochs(l.learned))
	}
}

func epochs(rs []delegation.Record) []uint64 {
	var out []uint64
	for _, r := range rs {
		out = append(out, r.Epoch)
	}
	return out
}

// TestRepublishDropsDeadBlockOwners: an owner republishes its records
// every RepublishInterval as they are, blocks included. A block delegated
// to a crawler that has died is never re-decided (Delegate answers the
// subnet's owner for its hosts and publishes nothing), so the owner's
// republish keeps that dead delegation alive indefinitely — past
// MaxRecordAge, the bound every other dead delegation gets. When the dead
// crawler's identity comes back (a restart, weeks later), it takes the
// block back at once, by a record nobody re-decided, without any merge that
// would make it recover the subnet owner's page history for the block.
func TestRepublishDropsDeadBlockOwners(t *testing.T) {
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		c.RepublishInterval = 500 * time.Millisecond
	})
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[2]
	// a /16 of the test tree (four /24 blocks and more): a owns it, one of
	// its blocks is delegated to b
	host := netip.MustParseAddr("127.0.9.77")
	s := tn.tree.SmallestNonUnary(host)
	if n := tn.tree.Node(s); delegation.BlockOf(n.Start) == delegation.BlockOf(n.End) {
		t.Fatalf("subnet %d is a single block", s)
	}
	rec := delegation.Record{Subnet: s, Snapshot: a.snap, Owner: a.CrawlerID(), OwnerRTT: 2 * time.Millisecond, Epoch: 1,
		DecidedBy: a.CrawlerID(), At: time.Now(),
		Blocks: []delegation.BlockDelegation{{Host: host, Owner: b.CrawlerID(), OwnerRTT: time.Millisecond}}}
	got, err := a.Directory().Publish(ctx, rec)
	if err != nil || got.Owner != a.CrawlerID() || len(got.Blocks) != 1 {
		t.Fatalf("publish with a block: %+v %v", got, err)
	}
	if o, ok := a.CachedOwner(host); !ok || o != b.CrawlerID() {
		t.Fatalf("block owner before the death: %v %v", o, ok)
	}
	// b dies for real
	if err := b.Close(); err != nil {
		t.Fatal(err)
	}
	waitFor(t, 15*time.Second, func() bool { return !a.Members().IsLive(b.CrawlerID()) })
	dead := time.Now()
	// let a republish a few times
	waitFor(t, 15*time.Second, func() bool {
		r, ok := a.Directory().get(s)
		return ok && r.At.After(dead.Add(time.Second))
	})
	r, _ := a.Directory().get(s)
	for _, bl := range r.Blocks {
		if bl.Owner == b.CrawlerID() {
			t.Fatalf("republished record of subnet %d (at %v, %v after the death) still delegates block %v to the dead crawler",
				s, r.At.Format(time.TimeOnly), r.At.Sub(dead).Round(time.Millisecond), bl.Block())
		}
	}
}
