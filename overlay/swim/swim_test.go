package swim

import (
	"fmt"
	"slices"
	"testing"
	"time"
)

// net is a test network of nodes that exchange messages instantly, on a
// fake clock; drop, if set, loses a message.
type net struct {
	t     *testing.T
	now   time.Time
	nodes map[ID]*Node
	down  map[ID]bool
	evs   map[ID][]Event
	drop  func(from, to ID, m Msg) bool
	// slow, if set, is a member that handles every message it receives
	// lag late (a starved process)
	slow  ID
	lag   time.Duration
	later []delayed
}

type delayed struct {
	at       time.Time
	from, to ID
	m        Msg
}

func newNet(t *testing.T, n int, cfg Config) *net {
	t.Helper()
	w := &net{t: t, now: time.Unix(1000, 0), nodes: map[ID]*Node{}, down: map[ID]bool{}, evs: map[ID][]Event{}}
	var recs [][]byte
	for i := range n {
		recs = append(recs, SimRecord(ID(fmt.Sprintf("node-%02d", i)), Inc{Start: 1, Seq: 1}, false, 200))
	}
	for i, r := range recs {
		c := cfg
		c.Open, c.Seed = OpenSimRecord, uint64(i)
		id := ID(fmt.Sprintf("node-%02d", i))
		c.Refute = func(seq uint64) []byte { return SimRecord(id, Inc{Start: 1, Seq: seq + 1}, false, 200) }
		nd, err := New(c, r)
		if err != nil {
			t.Fatal(err)
		}
		w.nodes[id] = nd
	}
	for _, nd := range w.nodes {
		nd.Merge(w.now, recs, false)
	}
	w.flush()
	for id := range w.nodes {
		w.evs[id] = nil
	}
	return w
}

// flush delivers every queued message until none is left.
func (w *net) flush() {
	for {
		moved := false
		for id, nd := range w.nodes {
			outs, evs := nd.Ready()
			w.evs[id] = append(w.evs[id], evs...)
			for _, o := range outs {
				moved = true
				if w.down[id] || w.down[o.To] || (w.drop != nil && w.drop(id, o.To, o.Msg)) {
					continue
				}
				// through the wire form, as on the network
				m, err := Decode(o.Msg.Encode())
				if err != nil {
					w.t.Fatal(err)
				}
				if o.To == w.slow && w.lag > 0 {
					w.later = append(w.later, delayed{at: w.now.Add(w.lag), from: id, to: o.To, m: m})
					continue
				}
				w.nodes[o.To].Handle(w.now, id, m)
			}
		}
		if !moved {
			return
		}
	}
}

func (w *net) run(d, step time.Duration) {
	for end := w.now.Add(d); w.now.Before(end); w.now = w.now.Add(step) {
		due := w.later[:0:0]
		keep := w.later[:0]
		for _, l := range w.later {
			if l.at.After(w.now) {
				keep = append(keep, l)
			} else {
				due = append(due, l)
			}
		}
		w.later = keep
		for _, l := range due {
			if !w.down[l.to] {
				w.nodes[l.to].Handle(w.now, l.from, l.m)
			}
		}
		for id, nd := range w.nodes {
			if !w.down[id] {
				nd.Tick(w.now)
			}
		}
		w.flush()
	}
}

func (w *net) state(of, about ID) State {
	s, ok := w.nodes[of].State(about)
	if !ok {
		w.t.Fatalf("%s does not know %s", of, about)
	}
	return s
}

func TestCrashedMemberDeclaredDeadByAll(t *testing.T) {
	w := newNet(t, 12, Config{Period: time.Second})
	w.run(10*time.Second, 250*time.Millisecond)
	for id := range w.nodes {
		for _, ev := range w.evs[id] {
			t.Errorf("%s: %+v on a healthy network", id, ev)
		}
	}
	w.down["node-03"] = true
	crash := w.now
	w.run(40*time.Second, 250*time.Millisecond)
	for id := range w.nodes {
		if id == "node-03" {
			continue
		}
		if s := w.state(id, "node-03"); s != Dead {
			t.Errorf("%s believes the crashed member %v", id, s)
		}
		var dead time.Time
		for _, ev := range w.evs[id] {
			if ev.ID == "node-03" && ev.State == Dead {
				dead = w.now // (events carry no time; bounded by the run)
			}
			if ev.ID != "node-03" {
				t.Errorf("%s: %+v about a live member", id, ev)
			}
		}
		if dead.IsZero() {
			t.Errorf("%s: no death event", id)
		}
	}
	_ = crash
}

// A suspicion of a live member reaches it, and it refutes with a later
// record that every node takes: nobody declares it dead.
func TestSuspicionRefuted(t *testing.T) {
	w := newNet(t, 8, Config{Period: time.Second})
	w.run(3*time.Second, 250*time.Millisecond)
	// node-01 cannot be reached for two periods: its observers suspect it
	w.drop = func(from, to ID, m Msg) bool { return to == "node-01" || from == "node-01" }
	w.run(2500*time.Millisecond, 250*time.Millisecond)
	w.drop = nil
	w.run(30*time.Second, 250*time.Millisecond)
	suspected := false
	for id := range w.nodes {
		for _, ev := range w.evs[id] {
			if ev.ID == "node-01" && ev.State == Suspect {
				suspected = true
			}
			if ev.State == Dead {
				t.Errorf("%s declared %s dead", id, ev.ID)
			}
		}
		if id != "node-01" && w.state(id, "node-01") != Alive {
			t.Errorf("%s: node-01 %v after refuting", id, w.state(id, "node-01"))
		}
	}
	if !suspected {
		t.Fatal("nobody suspected the cut-off member: the test shows nothing")
	}
	if got := w.nodes["node-01"].Self().Inc.Seq; got <= 1 {
		t.Errorf("node-01 did not refute (seq %d)", got)
	}
}

// A leave is a record of the member's, spread to all: every node has it
// Left, and a later run of it is alive again.
func TestLeaveAndRestart(t *testing.T) {
	w := newNet(t, 10, Config{Period: time.Second})
	w.run(2*time.Second, 250*time.Millisecond)
	n := w.nodes["node-05"]
	if err := n.SetSelf(w.now, SimRecord("node-05", Inc{Start: 1, Seq: 9}, true, 200)); err != nil {
		t.Fatal(err)
	}
	w.flush()
	if acked, sent := n.Leaving(); sent == 0 || acked != sent {
		t.Errorf("leave answered by %d of %d neighbours", acked, sent)
	}
	w.down["node-05"] = true
	w.run(15*time.Second, 250*time.Millisecond)
	for id := range w.nodes {
		if id != "node-05" && w.state(id, "node-05") != Left {
			t.Errorf("%s: node-05 %v after its leave", id, w.state(id, "node-05"))
		}
	}
	// restarted: a later start, through one member
	delete(w.down, "node-05")
	c := Config{Period: time.Second, Open: OpenSimRecord, Refute: func(seq uint64) []byte { return SimRecord("node-05", Inc{Start: 2, Seq: seq + 1}, false, 200) }}
	nn, err := New(c, SimRecord("node-05", Inc{Start: 2, Seq: 1}, false, 200))
	if err != nil {
		t.Fatal(err)
	}
	w.nodes["node-05"] = nn
	nn.Merge(w.now, w.nodes["node-00"].Records(), false)
	w.nodes["node-00"].Merge(w.now, [][]byte{nn.Self().Data}, true)
	w.run(15*time.Second, 250*time.Millisecond)
	for id := range w.nodes {
		if id != "node-05" && w.state(id, "node-05") != Alive {
			t.Errorf("%s: restarted node-05 %v", id, w.state(id, "node-05"))
		}
	}
}

// Stale records and suspicions of an older incarnation change nothing.
func TestOlderIncarnationIgnored(t *testing.T) {
	w := newNet(t, 4, Config{Period: time.Second})
	a := w.nodes["node-00"]
	a.Handle(w.now, "node-02", Msg{Kind: MsgAck, Updates: []Update{{Kind: UpAlive, Record: SimRecord("node-01", Inc{Start: 1, Seq: 5}, false, 200)}}})
	a.Handle(w.now, "node-02", Msg{Kind: MsgAck, Updates: []Update{{Kind: UpDead, ID: "node-01", Inc: Inc{Start: 1, Seq: 4}, From: "node-02"}}})
	if s := w.state("node-00", "node-01"); s != Alive {
		t.Errorf("a death of an older incarnation took: %v", s)
	}
	a.Handle(w.now, "node-02", Msg{Kind: MsgAck, Updates: []Update{{Kind: UpAlive, Record: SimRecord("node-01", Inc{Start: 1, Seq: 3}, true, 200)}}})
	if s := w.state("node-00", "node-01"); s != Alive {
		t.Errorf("an older leave took: %v", s)
	}
}

func TestDecodeRefusesBadMessages(t *testing.T) {
	good := Msg{Kind: MsgPingReq, Seq: 7, Target: "x", Updates: []Update{{Kind: UpSuspect, ID: "a", From: "b", Inc: Inc{1, 2}}}, Revocations: 3}
	m, err := Decode(good.Encode())
	if err != nil || m.Seq != 7 || m.Target != "x" || len(m.Updates) != 1 || m.Updates[0].Inc != (Inc{1, 2}) || m.Revocations != 3 {
		t.Fatalf("round trip: %+v, %v", m, err)
	}
	for name, b := range map[string][]byte{
		"no kind":         Msg{}.Encode(),
		"ping-req no tgt": Msg{Kind: MsgPingReq}.Encode(),
		"suspect no from": Msg{Kind: MsgPing, Updates: []Update{{Kind: UpSuspect, ID: "a"}}}.Encode(),
		"alive no record": Msg{Kind: MsgPing, Updates: []Update{{Kind: UpAlive}}}.Encode(),
		"unknown field":   append(Msg{Kind: MsgPing}.Encode(), 0x40, 1),
		"truncated":       Msg{Kind: MsgPing, Target: "abcdef"}.Encode()[:4],
		"too large":       make([]byte, MaxMsgBytes+1),
	} {
		if _, err := Decode(b); err == nil {
			t.Errorf("%s: accepted", name)
		}
	}
}

func TestSimulateSmall(t *testing.T) {
	res, err := Simulate(SimConfig{N: 200, Node: Config{Period: time.Second}, RecordBytes: 300, Loss: 0.01,
		Warm: 10 * time.Second, Window: 60 * time.Second, Detect: time.Minute, Seed: 1})
	if err != nil {
		t.Fatal(err)
	}
	t.Logf("%+v", res)
	if res.DeadAllS < 0 || res.DetectedBy != 199 {
		t.Errorf("crash declared dead by %d of 199 (all: %v s)", res.DetectedBy, res.DeadAllS)
	}
	if res.MsgsOutPerS < 1 || res.MsgsOutPerS > 4 {
		t.Errorf("%.2f messages a second per node: want about two (a probe and an answer)", res.MsgsOutPerS)
	}
	if res.FalseDeaths != 0 {
		t.Errorf("%d live members declared dead under 1%% loss", res.FalseDeaths)
	}
}

// After a partition each side holds the other dead and nobody probes a
// dead member, so the halves stay apart when it heals; a Recheck tells a
// dead member it was declared dead, and its answer carries the record
// that refutes it, alive again at the node that asked (and from there
// everywhere).
func TestRecheckRevivesAfterAPartition(t *testing.T) {
	w := newNet(t, 8, Config{Period: time.Second})
	side := func(id ID) bool { return id < "node-04" }
	w.drop = func(from, to ID, _ Msg) bool { return side(from) != side(to) }
	w.run(60*time.Second, 250*time.Millisecond)
	for a := range w.nodes {
		for b := range w.nodes {
			if a != b && side(a) != side(b) && w.state(a, b) != Dead {
				t.Fatalf("%s holds %s across the partition %v", a, b, w.state(a, b))
			}
		}
	}
	w.drop = nil
	w.run(20*time.Second, 250*time.Millisecond)
	if w.state("node-00", "node-07") != Dead {
		t.Fatalf("healed without a recheck: node-07 %v at node-00 (the recheck is not needed?)", w.state("node-00", "node-07"))
	}
	if !w.nodes["node-00"].Recheck("node-07") {
		t.Fatal("no recheck sent to a dead member")
	}
	if w.nodes["node-00"].Recheck("node-01") {
		t.Fatal("a recheck sent to a live member")
	}
	w.flush()
	if s := w.state("node-00", "node-07"); s != Alive {
		t.Fatalf("node-07 answered a recheck, still %v at node-00", s)
	}
	// every node rechecks the dead members it reaches (the overlay's redial)
	for a, nd := range w.nodes {
		for b := range w.nodes {
			if a != b {
				nd.Recheck(b)
			}
		}
	}
	w.flush()
	w.run(10*time.Second, 250*time.Millisecond)
	for a := range w.nodes {
		for b := range w.nodes {
			if a != b && w.state(a, b) != Alive {
				t.Errorf("%s holds %s %v after the heal and the rechecks", a, b, w.state(a, b))
			}
		}
	}
}

// However large the piggyback budget, a message carries no more updates
// than a receiver decodes: small updates (suspicions, deaths, small
// records) past MaxUpdates wait for the next message.
func TestMessageUpdatesWithinMaxUpdates(t *testing.T) {
	var recs [][]byte
	for i := range 300 {
		recs = append(recs, SimRecord(ID(fmt.Sprintf("m-%03d", i)), Inc{Start: 1, Seq: 1}, false, 8))
	}
	self := SimRecord("self", Inc{Start: 1, Seq: 1}, false, 8)
	cfg := Config{Period: time.Second, MaxPiggyback: 64 << 10, Open: OpenSimRecord,
		Refute: func(seq uint64) []byte { return SimRecord("self", Inc{Start: 1, Seq: seq + 1}, false, 8) }}
	nd, err := New(cfg, self)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	nd.Merge(now, recs, true) // 300 small changes queued
	nd.Tick(now)
	outs, _ := nd.Ready()
	if len(outs) == 0 {
		t.Fatal("nothing sent")
	}
	for _, o := range outs {
		if n := len(o.Msg.Updates); n == 0 || n > MaxUpdates {
			t.Fatalf("a message with %d updates (at most %d decode)", n, MaxUpdates)
		}
		if _, err := Decode(o.Msg.Encode()); err != nil {
			t.Fatalf("a message its receiver refuses: %v", err)
		}
	}
}

// A death notice the piggybacking lost leaves the member alive at a node
// that does not probe it; the deaths sent beside the full-state exchanges
// reach that node.
func TestLostDeathNoticeReachesByTheExchange(t *testing.T) {
	w := newNet(t, 12, Config{Period: time.Second})
	w.run(5*time.Second, 250*time.Millisecond)
	const gone = ID("node-03")
	var blind ID // a node that does not probe the crashed one
	for id, nd := range w.nodes {
		if id != gone && !slices.Contains(nd.subjects(), gone) {
			blind = id
			break
		}
	}
	if blind == "" {
		t.Fatal("every node probes node-03")
	}
	lost := true
	w.drop = func(_, to ID, m Msg) bool {
		if !lost || to != blind {
			return false
		}
		return slices.ContainsFunc(m.Updates, func(u Update) bool { return u.ID == gone && u.Kind != UpAlive })
	}
	w.down[gone] = true
	w.run(25*time.Second, 250*time.Millisecond)
	for id := range w.nodes {
		if id != gone && id != blind && w.state(id, gone) != Dead {
			t.Fatalf("%s holds the crashed member %v", id, w.state(id, gone))
		}
	}
	if s := w.state(blind, gone); s != Alive {
		t.Fatalf("%s, its notices lost, holds the crashed member %v (want alive: the case to cover)", blind, s)
	}
	lost = false
	// each exchange goes to a random neighbour: in a round of them, 11
	// members all pass this one by about a third of the time; ten rounds
	w.run(10*w.nodes[blind].syncEvery(), 250*time.Millisecond)
	if s := w.state(blind, gone); s != Dead {
		t.Fatalf("%s still holds the crashed member %v after the exchanges", blind, s)
	}
}

func TestHeldRecordNotOpenedAgain(t *testing.T) {
	opens := 0
	c := Config{Period: time.Second, Open: func(b []byte) (Record, error) { opens++; return OpenSimRecord(b) },
		Refute: func(seq uint64) []byte { return SimRecord("a", Inc{Start: 1, Seq: seq + 1}, false, 200) }}
	self := SimRecord("a", Inc{Start: 1, Seq: 1}, false, 200)
	a, err := New(c, self)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Unix(1000, 0)
	b1, b2 := SimRecord("b", Inc{Start: 1, Seq: 1}, false, 200), SimRecord("b", Inc{Start: 1, Seq: 2}, false, 200)
	opens = 0
	a.Merge(now, [][]byte{self, b1}, false)
	a.Merge(now, [][]byte{self, b1}, false)
	a.Handle(now, "b", Msg{Kind: MsgAck, Updates: []Update{{Kind: UpAlive, Record: b1}}})
	if opens != 2 || a.Stats().Duplicates != 3 {
		t.Errorf("own record and b's received 3 times each: %d opened, %d dropped as held; want 2 and 3", opens, a.Stats().Duplicates)
	}
	// a newer record is opened and replaces the one held; the older one,
	// no longer held, is opened again and refused as older
	a.Merge(now, [][]byte{b2, b1}, false)
	if opens != 4 {
		t.Errorf("after b's newer record and its older one: %d opened, want 4", opens)
	}
	if e, ok := a.get("b"); !ok || e.inc.Seq != 2 {
		t.Errorf("b's record held: %+v, want seq 2", e)
	}
	a.Merge(now, [][]byte{b2}, false)
	if opens != 4 {
		t.Errorf("b's newer record again: opened (%d opens), want dropped as held", opens)
	}
}

// A starved member (every message reaches it 1.5 periods late) misses its
// probes' answers and suspects its healthy neighbours; Lifeguard's local
// health stretches its probe period and timeouts as it misses them and as
// it has to refute, so it raises far fewer of those suspicions, and nobody
// is declared dead.
func TestLocalHealthQuietsAStarvedMember(t *testing.T) {
	starved := func(localHealth int) (st Stats, deaths int) {
		w := newNet(t, 12, Config{Period: time.Second, LocalHealth: localHealth})
		w.slow, w.lag = "node-05", 1500*time.Millisecond
		w.run(120*time.Second, 250*time.Millisecond)
		for id := range w.nodes {
			for _, ev := range w.evs[id] {
				if ev.State == Dead {
					deaths++
				}
			}
		}
		return w.nodes["node-05"].Stats(), deaths
	}
	off, deathsOff := starved(1)
	on, deathsOn := starved(0) // the default, 8
	t.Logf("the starved member in 120 s: without local health %+v, deaths %d; with %+v, deaths %d", off, deathsOff, on, deathsOn)
	if off.Suspicions < 20 {
		t.Fatalf("the starved member raised only %d suspicions without local health: the test's lag does not starve it", off.Suspicions)
	}
	if 2*on.Suspicions > off.Suspicions {
		t.Errorf("with local health the starved member raised %d suspicions, without %d: want at most half", on.Suspicions, off.Suspicions)
	}
	if on.Probes >= off.Probes {
		t.Errorf("with local health the starved member probed %d times, without %d: its period did not stretch", on.Probes, off.Probes)
	}
	if deathsOn != 0 {
		t.Errorf("%d deaths declared with local health on a network where nobody crashed", deathsOn)
	}
}

// The score moves by one per sign, within [0, LocalHealth-1], and scales
// the probe period.
func TestLocalHealthScore(t *testing.T) {
	w := newNet(t, 4, Config{Period: time.Second, LocalHealth: 3})
	n := w.nodes["node-00"]
	n.worse()
	n.worse()
	n.worse()
	if n.Stats().Health != 2 {
		t.Fatalf("health %d after three misses with LocalHealth 3, want 2", n.Stats().Health)
	}
	// at health 2 a probe goes out every 3 periods
	before := n.Stats().Probes
	w.drop = func(from, to ID, m Msg) bool { return from == "node-00" || to == "node-00" }
	for range 12 {
		w.now = w.now.Add(250 * time.Millisecond)
		n.Tick(w.now)
		n.Ready()
	}
	if got := n.Stats().Probes - before; got > 1 {
		t.Errorf("%d probes in 3 s at health 2 (period 1 s): want at most 1", got)
	}
	n.better()
	n.better()
	n.better()
	if n.Stats().Health != 0 {
		t.Fatalf("health %d after three answers, want 0", n.Stats().Health)
	}
}

// Lifeguard's nack: probing a crashed member, a healthy node's helpers say
// they cannot reach it either, so the miss is not held against the node's
// own health and its probe period does not stretch while it detects the
// crash. Without the nacks (dropped) the same misses raise the score.
func TestNacksSpareTheProbersOfACrash(t *testing.T) {
	crash := func(dropNacks bool) (worst int, nacks uint64) {
		w := newNet(t, 12, Config{Period: time.Second})
		w.run(5*time.Second, 250*time.Millisecond)
		if dropNacks {
			w.drop = func(_, _ ID, m Msg) bool { return m.Kind == MsgNack }
		}
		w.down["node-03"] = true
		for range 40 {
			w.run(time.Second, 250*time.Millisecond)
			for id, nd := range w.nodes {
				if id != "node-03" {
					worst = max(worst, nd.Stats().Health)
				}
			}
		}
		for id, nd := range w.nodes {
			if id != "node-03" {
				nacks += nd.Stats().Nacks
				if s := w.state(id, "node-03"); s != Dead {
					t.Errorf("%s: the crashed member %v", id, s)
				}
			}
		}
		return worst, nacks
	}
	worst, nacks := crash(false)
	if nacks == 0 || worst != 0 {
		t.Errorf("with nacks: %d nacks received, worst health %d; want nacks and 0", nacks, worst)
	}
	if worst, _ := crash(true); worst == 0 {
		t.Error("with the nacks dropped no prober's health moved: the test shows nothing")
	}
}
