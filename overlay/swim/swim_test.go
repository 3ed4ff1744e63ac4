package swim

import (
	"fmt"
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
