package overlay

import (
	"context"
	"errors"
	"log/slog"
	"net/netip"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/overlay/swim"
)

// membershipProtocols are the two membership protocols a behaviour test
// runs under (Config.Membership).
var membershipProtocols = []string{MembershipHeartbeat, MembershipSWIM}

func protocolName(m string) string {
	if m == MembershipHeartbeat {
		return "heartbeat"
	}
	return m
}

// forEachProtocol runs fn as a subtest under each membership protocol.
func forEachProtocol(t *testing.T, fn func(t *testing.T, membership string)) {
	for _, m := range membershipProtocols {
		t.Run(protocolName(m), func(t *testing.T) { fn(t, m) })
	}
}

// quorumNet is a membership of self and others (crawlers), on a clock the
// test moves: every heartbeat, sweep and judgement of IsLive is at t.
// Under SWIM the members' changes reach Members as the runner's events
// (swimRunner.apply), as the protocol makes them: a record when a member
// joins or refutes, nothing while it answers its probes, a suspicion one
// period after it stops answering, its death when the suspicion (the
// protocol's configured minimum for this network's size: a crash is
// confirmed by all its observers) runs out.
type quorumNet struct {
	m      *Members
	others []peer.ID
	keys   map[peer.ID]crypto.PrivKey
	seq    map[peer.ID]uint64
	t      time.Time
	start  time.Time
	// SWIM (nil: heartbeats)
	swim      *swimRunner
	silent    map[peer.ID]time.Time // since when a member does not answer
	suspicion time.Duration
}

const quorumPeriod = time.Second

func newQuorumNet(t *testing.T, membership string, crawlers int, grace time.Duration) *quorumNet {
	t.Helper()
	self := newKeyed(t)
	sid, _ := peer.Decode(string(self.id))
	q := &quorumNet{seq: map[peer.ID]uint64{}, keys: map[peer.ID]crypto.PrivKey{}, t: time.Now(), start: time.Now().Add(-time.Hour),
		silent: map[peer.ID]time.Time{}}
	q.m = newMembers(sid, delegation.Crawler{ID: self.id, Capacity: 100}, 5*time.Second, slog.Default())
	q.m.started = q.start // past the presumption for peers never heard of
	q.m.grace = grace
	q.m.now = func() time.Time { return q.t }
	if membership == MembershipSWIM {
		q.swim = &swimRunner{members: q.m, log: slog.Default(), period: quorumPeriod, nodes: 1 << 20}
		q.m.bySWIM = true
		q.suspicion, _ = SWIMConfig(quorumPeriod).Suspicion(crawlers)
	}
	for range crawlers - 1 {
		k := newKeyed(t)
		id, _ := peer.Decode(string(k.id))
		q.others = append(q.others, id)
		q.keys[id] = k.sk
		q.beat(id)
	}
	return q
}

// detect is how long after a member falls silent the protocol declares it
// dead, at the latest, on this clock (whole seconds).
func (q *quorumNet) detect() time.Duration {
	if q.swim == nil {
		return q.m.timeout + time.Second // the sweep after the timeout
	}
	return (quorumPeriod + q.suspicion + time.Second - 1).Truncate(time.Second)
}

// beat is id heard at the current time: a heartbeat, or under SWIM a new
// record of it (a join, a refutation), sealed by its key.
func (q *quorumNet) beat(id peer.ID) { q.heartbeat(id, false, false) }

// leave is id's signed leave.
func (q *quorumNet) leave(id peer.ID) { q.heartbeat(id, true, false) }

func (q *quorumNet) heartbeat(id peer.ID, leaving, sink bool) {
	q.seq[id]++
	hb := &pb.Heartbeat{Version: 1, Seq: q.seq[id], AtUnixNano: q.t.UnixNano(), StartUnixNano: q.start.UnixNano(),
		IntervalMs: 1000, Capacity: 100, Leaving: leaving, Sink: sink, Snapshot: make([]byte, 32)}
	if sink {
		hb.Capacity = 0
	}
	if q.swim == nil {
		q.m.observe(id, hb, q.t)
		return
	}
	b, err := proto.Marshal(hb)
	if err != nil {
		panic(err)
	}
	data, err := sealSWIMRecord(q.keys[id], id, b)
	if err != nil {
		panic(err)
	}
	rec, _, err := q.swim.open(data)
	if err != nil {
		panic(err)
	}
	st := swim.Alive
	if leaving {
		st = swim.Left
	}
	delete(q.silent, id)
	q.swim.apply([]swim.Event{{ID: rec.ID, State: st, Record: rec}}, q.t)
}

// run moves the clock by d, one second at a time: the members in alive
// heartbeat each second (under SWIM: answer their probes; one that had
// stopped refutes), the others are silent, and the failure detector
// sweeps.
func (q *quorumNet) run(d time.Duration, alive []peer.ID) {
	for end := q.t.Add(d); q.t.Before(end); {
		q.t = q.t.Add(time.Second)
		if q.swim == nil {
			for _, id := range alive {
				q.beat(id)
			}
			q.m.sweep(q.t)
			continue
		}
		for _, id := range q.others {
			info, known := q.m.Member(id)
			if !known || info.Reason == ReasonLeft {
				continue
			}
			since, quiet := q.silent[id]
			if slices.Contains(alive, id) {
				if quiet {
					q.beat(id) // refutes the suspicion, or revives (swimRunner.recheck)
				}
				continue
			}
			if !quiet {
				since = q.t.Add(-time.Second) // silent since the last step
				q.silent[id] = since
			}
			switch {
			case !info.Dead && q.t.Sub(since) >= quorumPeriod+q.suspicion:
				q.swim.apply([]swim.Event{{ID: swim.ID(id), State: swim.Dead}}, q.t)
			case !info.Dead && q.t.Sub(since) >= quorumPeriod && !info.Suspected:
				q.swim.apply([]swim.Event{{ID: swim.ID(id), State: swim.Suspect}}, q.t)
			}
		}
		q.m.sweep(q.t)
	}
}

func crawlerOf(id peer.ID) delegation.CrawlerID { return delegation.CrawlerID(id.String()) }

// A partition into two halves of 6 crawlers: each half declares the other
// dead, but neither sees a strict majority of the 12 it knew, so neither
// gives the other's subnets up (both would crawl them); when the other half
// is heard again, nothing moved. Without the quorum the first side to
// declare the deaths re-delegated them.
func TestQuorumPartitionKeepsOwners(t *testing.T) { forEachProtocol(t, testQuorumPartitionKeepsOwners) }

func testQuorumPartitionKeepsOwners(t *testing.T, membership string) {
	q := newQuorumNet(t, membership, 12, 0)
	mine, other := q.others[:5], q.others[5:]
	if q.detect() >= 20*time.Second {
		t.Fatalf("detection in %v: the test's 20 s of silence do not cover it", q.detect())
	}
	q.run(20*time.Second, mine)
	for _, id := range other {
		if _, ok := q.m.Member(id); !ok || q.m.IsPeerLive(id) {
			t.Fatalf("%s: a member silent for 20 s is not declared dead", shortID(id))
		}
		if !q.m.IsLive(crawlerOf(id)) || !q.m.Held(crawlerOf(id)) {
			t.Fatalf("%s: the other half of a partition is given up by a side of 6 of 12", shortID(id))
		}
	}
	if q.m.Quorum() {
		t.Fatal("6 of 12 crawlers heard: a quorum")
	}
	if got := len(q.m.Crawlers().Live()); got != 6 {
		t.Fatalf("%d crawlers live for new delegations, want the 6 heard", got)
	}
	// the heal: heard again, live, not held
	q.run(time.Second, q.others)
	for _, id := range other {
		if !q.m.IsLive(crawlerOf(id)) || q.m.Held(crawlerOf(id)) {
			t.Fatalf("%s: heard again but not live, or still held", shortID(id))
		}
	}
}

// A crash of a third (8 of 12 alive) is a minority: its subnets are given
// up as soon as the grace is over.
func TestQuorumCrashOfAThirdRedelegates(t *testing.T) {
	forEachProtocol(t, testQuorumCrashOfAThirdRedelegates)
}

func testQuorumCrashOfAThirdRedelegates(t *testing.T, membership string) {
	const grace = 10 * time.Second
	q := newQuorumNet(t, membership, 12, grace)
	alive, killed := q.others[:7], q.others[7:]
	q.run(q.detect(), alive) // declared dead by now
	for _, id := range killed {
		if info, _ := q.m.Member(id); !info.Dead || info.Reason != ReasonFailed {
			t.Fatalf("%s: not declared dead (%s) %v after it fell silent", shortID(id), info.Reason, q.detect())
		}
		if !q.m.IsLive(crawlerOf(id)) || !q.m.Held(crawlerOf(id)) {
			t.Fatalf("%s: given up within the owner grace", shortID(id))
		}
	}
	q.run(grace, alive)
	if !q.m.Quorum() {
		t.Fatal("8 of 12 crawlers heard: no quorum")
	}
	for _, id := range killed {
		if q.m.IsLive(crawlerOf(id)) || q.m.Held(crawlerOf(id)) {
			t.Fatalf("%s: a crashed minority's member still owns its subnets after the grace", shortID(id))
		}
	}
}

// A partition's deaths are declared over a heartbeat or two (the members'
// last heartbeats were not simultaneous): the grace makes the quorum be
// judged once they are all in. Here the other half fell silent one second
// apart; without the grace the first five deaths (11 to 7 of 12 heard, a
// quorum each time) were given up before the sixth lost the quorum.
func TestQuorumJudgedAfterTheGrace(t *testing.T) { forEachProtocol(t, testQuorumJudgedAfterTheGrace) }

func testQuorumJudgedAfterTheGrace(t *testing.T, membership string) {
	q := newQuorumNet(t, membership, 12, 8*time.Second)
	mine, other := q.others[:5], q.others[5:]
	for i := range other {
		// one more member of the other half falls silent each second
		q.run(time.Second, append(append([]peer.ID(nil), mine...), other[i+1:]...))
	}
	for range 20 {
		q.run(time.Second, mine)
		for _, id := range other {
			if !q.m.IsLive(crawlerOf(id)) {
				t.Fatalf("%s: given up by a side of 6 of 12 at %v", shortID(id), q.t.Sub(q.start))
			}
		}
	}
}

// A member that left is no longer counted (it said so): the crawlers that
// stay are the whole network. Two crawlers always have a quorum (a lone
// survivor cannot wait 15 minutes), and a dead member forgotten after
// memberForget no longer counts either.
func TestQuorumLeavesSmallNetworksAndForgetting(t *testing.T) {
	forEachProtocol(t, testQuorumLeavesSmallNetworksAndForgetting)
}

func testQuorumLeavesSmallNetworksAndForgetting(t *testing.T, membership string) {
	t.Run("two crawlers", func(t *testing.T) {
		q := newQuorumNet(t, membership, 2, time.Second)
		q.run(8*time.Second, nil)
		if q.m.IsLive(crawlerOf(q.others[0])) {
			t.Fatal("the other of two crawlers, silent past its grace, still owns its subnets")
		}
	})
	t.Run("left", func(t *testing.T) {
		q := newQuorumNet(t, membership, 4, time.Minute)
		gone := q.others[0]
		q.leave(gone)
		if q.m.IsLive(crawlerOf(gone)) || q.m.Held(crawlerOf(gone)) {
			t.Fatal("a member that left is held")
		}
		// 3 crawlers left; one silent is 2 of 3: a quorum
		q.run(8*time.Second, q.others[1:2])
		if !q.m.Quorum() {
			t.Fatal("2 of 3 crawlers (one left): no quorum")
		}
	})
	t.Run("forgotten", func(t *testing.T) {
		q := newQuorumNet(t, membership, 4, 0)
		q.run(memberForget/2, q.others[:1])
		if q.m.Quorum() || !q.m.IsLive(crawlerOf(q.others[2])) {
			t.Fatal("2 of 4 crawlers heard: a quorum")
		}
		q.run(memberForget, q.others[:1])
		if !q.m.Quorum() || q.m.IsLive(crawlerOf(q.others[2])) {
			t.Fatal("members silent past memberForget still count against the quorum")
		}
	})
	t.Run("sink not counted", func(t *testing.T) {
		q := newQuorumNet(t, membership, 3, 0)
		sink := newKeyed(t)
		sid, _ := peer.Decode(string(sink.id))
		q.keys[sid] = sink.sk
		q.heartbeat(sid, false, true)
		// self and the sink heard, both other crawlers silent: 1 of 3
		q.run(8*time.Second, []peer.ID{sid})
		if q.m.Quorum() {
			t.Fatal("the sink (no crawler) counted toward the quorum")
		}
	})
}

// lonePeerOn is lonePeer running membership.
func lonePeerOn(t testing.TB, tree *hierarchy.Tree, membership string) *Peer {
	t.Helper()
	cfg := TestnetConfig()
	cfg.Membership = membership
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	return openPeer(t, tree, cfg, Services{})
}

// hearMember makes a real peer hear the member whose key is sk state hb,
// by its membership protocol's path: a heartbeat as its topic delivers it,
// or under SWIM the member's sealed record taken by the protocol's state
// machine (as a full-state exchange brings it), its events applied.
func hearMember(t *testing.T, p *Peer, sk crypto.PrivKey, hb *pb.Heartbeat, now time.Time) {
	t.Helper()
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		t.Fatal(err)
	}
	if p.swim == nil {
		p.members.observe(id, hb, now)
		return
	}
	b, err := proto.Marshal(hb)
	if err != nil {
		t.Fatal(err)
	}
	rec, err := sealSWIMRecord(sk, id, b)
	if err != nil {
		t.Fatal(err)
	}
	p.swim.mu.Lock()
	p.swim.node.Merge(now, [][]byte{rec}, false)
	p.swim.mu.Unlock()
	p.swim.flush()
	if info, ok := p.members.Member(id); !ok || info.Dead {
		t.Fatalf("%s: its record was not taken", shortID(id))
	}
}

// declareDead has a real peer's membership declare ids dead for their
// silence: the heartbeat detector's sweep past the failure timeout, or
// SWIM's deaths (a suspicion not refuted) through the runner.
func declareDead(p *Peer, ids []peer.ID, now time.Time) {
	if p.swim == nil {
		p.members.sweep(now)
		return
	}
	evs := make([]swim.Event, 0, len(ids))
	for _, id := range ids {
		evs = append(evs, swim.Event{ID: swim.ID(id), State: swim.Dead})
	}
	p.swim.apply(evs, now)
}

// A peer that hears 1 of the 4 crawlers it knows decides nothing: the
// other side of a partition may decide the same subnet, and both would
// crawl it. Its own subnet's record, made before, still answers.
func TestNoQuorumNoDelegation(t *testing.T) { forEachProtocol(t, testNoQuorumNoDelegation) }

func testNoQuorumNoDelegation(t *testing.T, membership string) {
	tree := testTree(t)
	p := lonePeerOn(t, tree, membership)
	p.NewPolicy(delegation.NewMicra, delegation.Config{})
	ctx := context.Background()
	own, err := p.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	var others []peer.ID
	keys := map[peer.ID]crypto.PrivKey{}
	for i := range 3 {
		k := newKeyed(t)
		id, _ := peer.Decode(string(k.id))
		others = append(others, id)
		keys[id] = k.sk
		hearMember(t, p, k.sk, &pb.Heartbeat{Version: 1, Seq: 1, AtUnixNano: now.UnixNano(), StartUnixNano: now.UnixNano(),
			IntervalMs: 1000, Capacity: 100, CrawlerAddr: netip.AddrFrom4([4]byte{127, byte(2 + i), 0, 1}).AsSlice(), Snapshot: p.snap[:]}, now)
	}
	declareDead(p, others, now.Add(time.Minute)) // all three: 1 of 4 heard
	if p.members.Quorum() {
		t.Fatal("1 of 4 crawlers heard: a quorum")
	}
	d, err := p.Delegate(ctx, netip.MustParseAddr("127.5.1.9"))
	if !errors.Is(err, ErrNoQuorum) {
		t.Fatalf("a subnet never delegated, decided without a quorum: %+v, %v, want ErrNoQuorum", d, err)
	}
	if d, err := p.Delegate(ctx, p.cfg.CrawlerAddr); err != nil || d.Owner != own.Owner {
		t.Fatalf("own subnet without a quorum: %v, %v; want its record's owner %s", d.Owner, err, own.Owner)
	}
	for _, id := range others { // heard again: a quorum, and a decision
		hearMember(t, p, keys[id], &pb.Heartbeat{Version: 1, Seq: 2, AtUnixNano: now.Add(time.Minute).UnixNano(), StartUnixNano: now.UnixNano(),
			IntervalMs: 1000, Capacity: 100, Snapshot: p.snap[:]}, now.Add(time.Minute))
	}
	if _, err := p.Delegate(ctx, netip.MustParseAddr("127.5.1.9")); errors.Is(err, ErrNoQuorum) {
		t.Fatalf("quorum back, still refused: %v", err)
	}
}

// In the seconds after a split, before either side declares the other dead,
// a decision would still be made on both sides: decisions are judged on the
// crawlers heard within two heartbeats, so 6 of 12 heard lately is no
// quorum for them, while the owners' view (Quorum) is unchanged until the
// deaths are declared.
//
// Under SWIM, which sends nothing while members answer their probes, a
// crawler counts as heard while the protocol does not suspect it: a
// settled network decides (no record for a minute), half of it suspected
// does not.
func TestDecisionQuorumOnRecentHeartbeats(t *testing.T) {
	forEachProtocol(t, testDecisionQuorumOnRecentHeartbeats)
}

func testDecisionQuorumOnRecentHeartbeats(t *testing.T, membership string) {
	q := newQuorumNet(t, membership, 12, 0)
	if !q.m.DecisionQuorum() {
		t.Fatal("every crawler heard: no quorum to decide")
	}
	q.run(time.Minute, q.others)
	if !q.m.DecisionQuorum() {
		t.Fatal("every crawler heard for a minute: no quorum to decide")
	}
	silence := 3 * time.Second
	if q.swim != nil {
		silence = 2 * quorumPeriod // suspected, not yet dead
	}
	if silence >= q.detect() {
		t.Fatalf("silence %v: already past the detection (%v)", silence, q.detect())
	}
	q.run(silence, q.others[:5]) // half silent: not yet declared dead
	if !q.m.Quorum() {
		t.Fatal("no member declared dead, yet no quorum")
	}
	if q.m.DecisionQuorum() {
		t.Fatal("6 of 12 crawlers heard in the last 3 s: a quorum to decide")
	}
	q.run(time.Second, q.others)
	if !q.m.DecisionQuorum() {
		t.Fatal("every crawler heard again: no quorum to decide")
	}
}

// URLs held for a silent owner wait with the spool's back-off (up to 30 s
// between sends); when the owner is heard again they are due at once, and
// so are URLs spooled with no owner (no quorum then), rather than up to
// 30 s later.
func TestReturnWakesHeldHandoffs(t *testing.T) { forEachProtocol(t, testReturnWakesHeldHandoffs) }

func testReturnWakesHeldHandoffs(t *testing.T, membership string) {
	p := lonePeerOn(t, testTree(t), membership)
	k := newKeyed(t)
	id, _ := peer.Decode(string(k.id))
	now := time.Now()
	hb := func(seq uint64, at time.Time) *pb.Heartbeat {
		return &pb.Heartbeat{Version: 1, Seq: seq, AtUnixNano: at.UnixNano(), StartUnixNano: now.UnixNano(),
			IntervalMs: 1000, Capacity: 100, Snapshot: p.snap[:]}
	}
	hearMember(t, p, k.sk, hb(1, now), now)
	declareDead(p, []peer.ID{id}, now.Add(time.Minute))
	q := p.handoff
	later := time.Now().Add(time.Hour)
	keys := []handoffKey{{s: 101}, {s: 102}, {s: 103}}
	owners := []delegation.CrawlerID{k.id, "", "12D3KooWSomeoneElse"}
	q.mu.Lock()
	for i, key := range keys {
		q.pend[key] = &pending{owner: owners[i], epoch: 1, n: 1, ents: []spoolEntry{{key: []byte{byte(i)}, urls: []string{"http://h.example/"}}},
			retryAt: later, backoff: 30 * time.Second}
	}
	q.mu.Unlock()
	hearMember(t, p, k.sk, hb(2, now.Add(time.Minute)), now.Add(time.Minute)) // heard again
	q.mu.Lock()
	defer q.mu.Unlock()
	for i, key := range keys {
		woken := q.pend[key].retryAt.Before(later)
		if want := i < 2; woken != want {
			t.Errorf("URLs for owner %q: woken %v, want %v", owners[i], woken, want)
		}
	}
}

// What an operator reads of a member (micra peers: its state and
// silence): with heartbeats, the time since its last heartbeat; under
// SWIM, which sends nothing while a member answers its probes, a member
// the protocol holds alive and unsuspected is heard now, however old its
// record, and a suspected one was last heard when the suspicion began.
func TestMemberInfoHeard(t *testing.T) {
	forEachProtocol(t, func(t *testing.T, membership string) {
		q := newQuorumNet(t, membership, 3, 0)
		a, b := q.others[0], q.others[1]
		q.run(time.Minute, q.others)
		info, _ := q.m.Member(a)
		if info.Suspected || info.Dead || !info.Heard.Equal(q.t) {
			t.Fatalf("a member heard all along: %+v at %v", info, q.t)
		}
		if q.swim != nil && !info.LastSeen.Before(q.t.Add(-50*time.Second)) {
			t.Fatalf("no record for a minute, yet its record is from %v", info.LastSeen)
		}
		q.run(2*time.Second, []peer.ID{a})
		info, _ = q.m.Member(b)
		switch {
		case q.swim == nil:
			if info.Suspected || !info.Heard.Equal(q.t.Add(-2*time.Second)) {
				t.Fatalf("silent for 2 s: %+v at %v", info, q.t)
			}
		default: // suspected a period after it stopped answering
			if !info.Suspected || info.Dead || !info.Heard.Equal(q.t.Add(-time.Second)) {
				t.Fatalf("suspected a second ago: %+v at %v", info, q.t)
			}
		}
		q.run(q.detect(), []peer.ID{a})
		if info, _ = q.m.Member(b); !info.Dead || info.Suspected || q.t.Sub(info.Heard) < q.detect() {
			t.Fatalf("dead: %+v at %v, want last heard at least %v ago", info, q.t, q.detect())
		}
		q.run(time.Second, q.others) // back: it refutes (or heartbeats again)
		if info, _ = q.m.Member(b); info.Dead || info.Suspected || !info.Heard.Equal(q.t) {
			t.Fatalf("back: %+v at %v", info, q.t)
		}
	})
}
