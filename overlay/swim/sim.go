package swim

import (
	"container/heap"
	"encoding/binary"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"
)

// SimConfig configures a discrete-event simulation of N nodes running this
// package's protocol with the real message encoding.
type SimConfig struct {
	N int
	// Node is the nodes' protocol configuration (Open, Refute, Base and
	// Seed are the simulation's).
	Node Config
	// RecordBytes is the size of a member's sealed record (the overlay's
	// real one: SealedRecordSize).
	RecordBytes int
	// IDBytes is the size of a member id (a libp2p Ed25519 peer id: 38).
	IDBytes int
	// MsgOverhead is added to each message's bytes: what carrying it costs
	// besides its payload (the overlay: a libp2p stream's framing).
	MsgOverhead int
	// Latency is the one-way delay, uniform in [Latency/2, 3·Latency/2].
	Latency time.Duration
	// Loss is the probability that a message is lost.
	Loss float64
	// Warm is run before the measurement window; Window measures traffic
	// and false suspicions; then one node crashes and the simulation runs
	// until every other node declared it dead, or Detect has passed.
	Warm, Window, Detect time.Duration
	Seed                 uint64
}

// SimResult is what a simulation measured.
type SimResult struct {
	N int `json:"peers"`
	// Per node per second over the window: bytes (payload + overhead) and
	// messages, sent and received.
	BytesOutPerS float64 `json:"bytes_out_per_s"`
	BytesInPerS  float64 `json:"bytes_in_per_s"`
	MsgsOutPerS  float64 `json:"msgs_out_per_s"`
	// FalseSuspicions counts suspicions of live members raised during the
	// window (by the member that raised them), FalseDeaths live members
	// declared dead by anyone; both also per member-hour.
	FalseSuspicions        int     `json:"false_suspicions"`
	FalseDeaths            int     `json:"false_deaths"`
	FalseSuspicionsPerHour float64 `json:"false_suspicions_per_peer_hour"`
	FalseDeathsPerHour     float64 `json:"false_deaths_per_peer_hour"`
	// Crash detection: time from the crash until the first / every other
	// node suspected it, and until every other node declared it dead.
	SuspectedFirstS float64 `json:"suspected_first_s"`
	SuspectedAllS   float64 `json:"suspected_all_s"`
	DeadAllS        float64 `json:"dead_all_s"`
	DetectedBy      int     `json:"detected_by"`
	WindowS         float64 `json:"window_s"`
	Loss            float64 `json:"loss"`
	RecordBytes     int     `json:"record_bytes"`
}

type simEvent struct {
	at   time.Duration
	kind uint8 // 0 tick, 1 deliver
	node int32
	from int32
	msg  Msg
	seq  uint64
}

type eventHeap []*simEvent

func (h eventHeap) Len() int { return len(h) }
func (h eventHeap) Less(i, j int) bool {
	if h[i].at != h[j].at {
		return h[i].at < h[j].at
	}
	return h[i].seq < h[j].seq
}
func (h eventHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *eventHeap) Push(x any)   { *h = append(*h, x.(*simEvent)) }
func (h *eventHeap) Pop() any {
	old := *h
	e := old[len(old)-1]
	*h = old[:len(old)-1]
	return e
}

// SimRecord is the simulation's sealed record: its id, incarnation and
// leave flag, padded to size bytes (no signature: the simulation measures
// sizes and timing, not authenticity).
func SimRecord(id ID, inc Inc, leaving bool, size int) []byte {
	b := make([]byte, 0, max(size, 2+len(id)+17))
	b = append(b, byte(len(id)))
	b = append(b, id...)
	b = binary.BigEndian.AppendUint64(b, uint64(inc.Start))
	b = binary.BigEndian.AppendUint64(b, inc.Seq)
	if leaving {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	for len(b) < size {
		b = append(b, 0)
	}
	return b
}

// OpenSimRecord opens a SimRecord.
func OpenSimRecord(b []byte) (Record, error) {
	if len(b) < 1 || len(b) < 1+int(b[0])+17 {
		return Record{}, errors.New("swim: short record")
	}
	l := int(b[0])
	id := ID(b[1 : 1+l])
	p := b[1+l:]
	return Record{ID: id, Inc: Inc{Start: int64(binary.BigEndian.Uint64(p)), Seq: binary.BigEndian.Uint64(p[8:])}, Leaving: p[16] == 1, Data: b}, nil
}

func simID(i, size int) ID {
	s := fmt.Sprintf("sim-%08d", i)
	for len(s) < size {
		s += "."
	}
	return ID(s)
}

// Simulate runs the protocol on N simulated nodes: every node starts
// knowing every other (a formed network, shared through a Roster), runs
// Warm, is measured over Window, then node 0 crashes.
func Simulate(c SimConfig) (SimResult, error) {
	if c.N < 3 {
		return SimResult{}, errors.New("swim: simulate at least 3 nodes")
	}
	if c.IDBytes <= 0 {
		c.IDBytes = 38
	}
	if c.Latency <= 0 {
		c.Latency = 30 * time.Millisecond
	}
	if c.Detect <= 0 {
		c.Detect = 2 * time.Minute
	}
	base := c.Node
	base.Open = OpenSimRecord
	base.Refute = func(uint64) []byte { return nil } // each node's own below
	if err := base.defaults(); err != nil {
		return SimResult{}, err
	}
	ids := make([]ID, c.N)
	idx := make(map[ID]int32, c.N)
	recs := make([]Record, c.N)
	for i := range ids {
		ids[i] = simID(i, c.IDBytes)
		idx[ids[i]] = int32(i)
		recs[i], _ = OpenSimRecord(SimRecord(ids[i], Inc{Start: 1, Seq: 1}, false, c.RecordBytes))
	}
	roster := NewRoster(recs, base.GossipRings)
	rnd := rand.New(rand.NewPCG(c.Seed, 0x51a))
	nodes := make([]*Node, c.N)
	for i := range nodes {
		cfg := base
		cfg.Base, cfg.Seed = roster, c.Seed*1_000_003+uint64(i)
		id := ids[i]
		cfg.Refute = func(seq uint64) []byte { return SimRecord(id, Inc{Start: 1, Seq: seq + 1}, false, c.RecordBytes) }
		n, err := New(cfg, recs[i].Data)
		if err != nil {
			return SimResult{}, err
		}
		nodes[i] = n
	}
	var q eventHeap
	var seq uint64
	push := func(e *simEvent) { seq++; e.seq = seq; heap.Push(&q, e) }
	tick := base.Period / 4
	for i := range nodes {
		push(&simEvent{at: time.Duration(rnd.Int64N(int64(base.Period))), kind: 0, node: int32(i)})
	}
	epoch := time.Unix(0, 0)
	crashAt := c.Warm + c.Window
	end := crashAt + c.Detect
	crashed := int32(0)
	res := SimResult{N: c.N, WindowS: c.Window.Seconds(), Loss: c.Loss, RecordBytes: c.RecordBytes}
	var bytesOut, bytesIn, msgsOut uint64
	suspectedBy := make([]bool, c.N)
	deadBy := make([]bool, c.N)
	var nSusp, nDead int
	var firstSusp, allSusp, allDead time.Duration
	lat := func() time.Duration { return c.Latency/2 + time.Duration(rnd.Int64N(int64(c.Latency)+1)) }
	flush := func(now time.Duration, i int32) {
		outs, evs := nodes[i].Ready()
		inWindow := now >= c.Warm && now < crashAt
		for _, ev := range evs {
			j, ok := idx[ev.ID]
			if !ok {
				continue
			}
			switch {
			case now < crashAt && inWindow && ev.State == Suspect && ev.From == ids[i]:
				res.FalseSuspicions++
			case now < crashAt && inWindow && ev.State == Dead:
				res.FalseDeaths++
			case now >= crashAt && j == crashed && ev.State == Suspect && !suspectedBy[i]:
				suspectedBy[i] = true
				nSusp++
				if nSusp == 1 {
					firstSusp = now - crashAt
				}
				if nSusp == c.N-1 {
					allSusp = now - crashAt
				}
			case now >= crashAt && j == crashed && ev.State == Dead && !deadBy[i]:
				deadBy[i] = true
				if !suspectedBy[i] {
					suspectedBy[i] = true
					nSusp++
					if nSusp == c.N-1 {
						allSusp = now - crashAt
					}
				}
				nDead++
				if nDead == c.N-1 {
					allDead = now - crashAt
				}
			}
		}
		for _, j := range nodes[i].Syncs() {
			// the full-state exchange (as the overlay's /micra/swim-sync/1):
			// this node's record one way, every record the other holds back
			jj := idx[j]
			if jj == crashed && now >= crashAt {
				continue
			}
			recs := nodes[jj].Records()
			size := uint64(len(nodes[i].Self().Data) + 2*c.MsgOverhead)
			for _, r := range recs {
				size += uint64(len(r) + 3)
			}
			if inWindow {
				bytesOut += size
				bytesIn += size
				msgsOut += 2
			}
			nodes[jj].Merge(epoch.Add(now), [][]byte{nodes[i].Self().Data}, true)
			nodes[i].Merge(epoch.Add(now), recs, false)
		}
		for _, o := range outs {
			size := uint64(o.Msg.Size() + c.MsgOverhead)
			if inWindow {
				bytesOut += size
				msgsOut++
			}
			if rnd.Float64() < c.Loss {
				continue
			}
			j := idx[o.To]
			push(&simEvent{at: now + lat(), kind: 1, node: j, from: i, msg: o.Msg})
		}
	}
	for q.Len() > 0 {
		e := heap.Pop(&q).(*simEvent)
		if e.at > end || (e.at >= crashAt && nDead == c.N-1) {
			break
		}
		if e.at >= crashAt && e.node == crashed {
			continue
		}
		now := epoch.Add(e.at)
		switch e.kind {
		case 0:
			nodes[e.node].Tick(now)
			if e.at/time.Second != (e.at-tick)/time.Second {
				nodes[e.node].Forget(now.Add(-time.Hour))
			}
			push(&simEvent{at: e.at + tick, kind: 0, node: e.node})
		case 1:
			if e.at >= c.Warm && e.at < crashAt {
				bytesIn += uint64(e.msg.Size() + c.MsgOverhead)
			}
			nodes[e.node].Handle(now, ids[e.from], e.msg)
		}
		flush(e.at, e.node)
	}
	per := float64(c.N) * c.Window.Seconds()
	res.BytesOutPerS, res.BytesInPerS, res.MsgsOutPerS = float64(bytesOut)/per, float64(bytesIn)/per, float64(msgsOut)/per
	hours := per / 3600
	res.FalseSuspicionsPerHour, res.FalseDeathsPerHour = float64(res.FalseSuspicions)/hours, float64(res.FalseDeaths)/hours
	res.SuspectedFirstS, res.DetectedBy = firstSusp.Seconds(), nDead
	res.SuspectedAllS, res.DeadAllS = -1, -1
	if nSusp == c.N-1 {
		res.SuspectedAllS = allSusp.Seconds()
	}
	if nDead == c.N-1 {
		res.DeadAllS = allDead.Seconds()
	}
	return res, nil
}
