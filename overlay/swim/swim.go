// Package swim owns micra's scalable membership protocol as a pure state
// machine: SWIM's failure detector (Das, Gupta, Motivala 2002) with
// Lifeguard's suspicion (Dadgar et al. 2018), members' self-signed records
// disseminated by piggybacking on the probes, and probe targets on K hash
// rings so that a member talks to a constant set of neighbours.
//
// A Node does no I/O and reads no clock: its host calls Tick with the time,
// hands it every message received (Handle) and sends what Ready returns,
// after etcd raft's Ready/Step. The overlay runs it on libp2p streams; the
// overlay-cost bench runs thousands in a discrete-event simulation.
//
// What a member pays does not grow with the network: one probe (and one
// answer) per period, an indirect probe through a few helpers only when the
// direct one is lost, and each membership change piggybacked a number of
// times that grows with log10 of the network's size.
package swim

import (
	"bytes"
	"cmp"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"hash/maphash"
	"math"
	"math/rand/v2"
	"slices"
	"time"
)

// ID names a member (the overlay: a libp2p peer id's bytes as a string).
type ID string

// Inc orders a member's records: a later run (Start) supersedes every
// record of an earlier one, and within a run a higher Seq supersedes a
// lower. A member refutes a suspicion by sealing a record with a higher Seq.
type Inc struct {
	Start int64
	Seq   uint64
}

// Compare orders incarnations.
func (a Inc) Compare(b Inc) int {
	if c := cmp.Compare(a.Start, b.Start); c != 0 {
		return c
	}
	return cmp.Compare(a.Seq, b.Seq)
}

// Record is a member's own statement of itself, sealed (signed) by it: the
// host opens and verifies Data (Config.Open). Leaving marks its last record:
// it announced its leave.
type Record struct {
	ID      ID
	Inc     Inc
	Leaving bool
	Data    []byte
}

// State is what a node believes of a member.
type State uint8

// Member states.
const (
	Alive State = iota
	Suspect
	Dead // failed: suspected and not refuted in time
	Left // announced its leave
)

func (s State) String() string {
	return [...]string{"alive", "suspect", "dead", "left"}[s]
}

// Config configures a Node.
type Config struct {
	// Period is the protocol period: one probe per period (the overlay:
	// its HeartbeatInterval, 1 s).
	Period time.Duration
	// ProbeTimeout is how long a direct probe waits for its answer before
	// helpers are asked (default Period/2); the indirect probe has the
	// rest of the period.
	ProbeTimeout time.Duration
	// Rings is the number of hash rings: a member probes its successor on
	// each ring, so each member has Rings observers (default 3).
	Rings int
	// GossipRings is the number of rings whose neighbours (successor and
	// predecessor on each) changes are sent to besides the probes: one
	// message a period to one of them while changes wait (default 8; a
	// member keeps about twice as many connections).
	GossipRings int
	// SyncMin and SyncPerMember set how often a member exchanges full
	// state with a neighbour, the backstop for a change the piggybacking
	// missed: every max(SyncMin, N·SyncPerMember), so what the exchange
	// costs a member per second stays flat as the network grows (defaults
	// 30 and 1 periods).
	SyncMin, SyncPerMember time.Duration
	// IndirectChecks is the number of helpers asked to probe a member
	// that did not answer (default 3).
	IndirectChecks int
	// SuspicionMult sets the shortest suspicion: SuspicionMult ·
	// log10(max(N, 10)) periods (default 4, memberlist's); SuspicionMaxMult
	// times that is the longest, for a suspicion nobody else confirms
	// (default 3). Lifeguard shortens it with independent confirmations.
	SuspicionMult, SuspicionMaxMult float64
	// RetransmitMult: each update is piggybacked RetransmitMult ·
	// ceil(log10(N+1)) times (default 4).
	RetransmitMult int
	// LocalHealth is the largest multiplier of Lifeguard's local health
	// (memberlist's awareness, default 8; 1 turns it off): a member whose
	// own probes go unanswered while a helper does not even nack (say it
	// could not reach the target either), or who has to refute a
	// suspicion of itself, is more likely slow itself (a starved process,
	// a saturated link) than surrounded by failures, so each such sign
	// stretches its probe period and timeouts by one more Period (up to
	// LocalHealth times), and each answered probe shrinks them by one. A starved
	// member then suspects its healthy neighbours less, which is what
	// would otherwise set off a cascade of suspicions and refutations.
	LocalHealth int
	// MaxPiggyback bounds the update bytes one message carries (default
	// 1200; an update larger than that still goes alone).
	MaxPiggyback int
	// Open verifies a member's sealed record and returns what it says
	// (required). A record it refuses is dropped.
	Open func(data []byte) (Record, error)
	// Refute seals a new record of this member with a Seq above seq
	// (required): the answer to a suspicion of this member.
	Refute func(seq uint64) []byte
	// Seed seeds the node's random choices (helpers, the probe order).
	Seed uint64
	// Base, if set, is a roster every node of a simulation shares: its
	// members are known alive until the node learns otherwise.
	Base *Roster
}

func (c *Config) defaults() error {
	if c.Period <= 0 {
		return errors.New("swim: Period must be positive")
	}
	if c.Open == nil || c.Refute == nil {
		return errors.New("swim: Open and Refute are required")
	}
	c.tuning()
	return nil
}

// Suspicion is the shortest and the longest a suspicion lasts in a
// network of n members (Lifeguard: the longest when nobody confirms it).
func (c Config) Suspicion(n int) (shortest, longest time.Duration) {
	c.tuning()
	shortest = time.Duration(c.SuspicionMult * math.Log10(math.Max(float64(n), 10)) * float64(c.Period))
	return shortest, time.Duration(c.SuspicionMaxMult * float64(shortest))
}

// DeadWithin bounds, with no message lost, how long after a member of a
// network of n crashes its first healthy observer declares it dead: the
// observer probes it once every Rings periods, the probe and its helpers
// take a period, and the suspicion lasts its longest. Every other member
// declares it as the death reaches it (log(n) periods of piggybacking).
func (c Config) DeadWithin(n int) time.Duration { return c.deadWithin(n, 1) }

// DeadWithinUnhealthy is DeadWithin for an observer at its worst local
// health, as when a partition cuts it off from many members: most of its
// probes go unanswered, so it stretches its probe period and timeouts
// LocalHealth times (the suspicion itself is not stretched).
func (c Config) DeadWithinUnhealthy(n int) time.Duration {
	c.tuning()
	return c.deadWithin(n, c.LocalHealth)
}

// deadWithin is DeadWithin with the probe period stretched stretch times.
func (c Config) deadWithin(n, stretch int) time.Duration {
	c.tuning()
	_, longest := c.Suspicion(n)
	return time.Duration((c.Rings+1)*stretch)*c.Period + longest
}

// tuning fills in the tuning's defaults.
func (c *Config) tuning() {
	if c.ProbeTimeout <= 0 || c.ProbeTimeout >= c.Period {
		c.ProbeTimeout = c.Period / 2
	}
	if c.Rings <= 0 {
		c.Rings = 3
	}
	if c.GossipRings < c.Rings {
		c.GossipRings = max(8, c.Rings)
	}
	if c.SyncMin <= 0 {
		c.SyncMin = 30 * c.Period
	}
	if c.SyncPerMember <= 0 {
		c.SyncPerMember = c.Period
	}
	if c.IndirectChecks <= 0 {
		c.IndirectChecks = 3
	}
	if c.SuspicionMult <= 0 {
		c.SuspicionMult = 4
	}
	if c.SuspicionMaxMult < 1 {
		c.SuspicionMaxMult = 3
	}
	if c.RetransmitMult <= 0 {
		c.RetransmitMult = 4
	}
	if c.LocalHealth <= 0 {
		c.LocalHealth = 8
	}
	if c.MaxPiggyback <= 0 {
		c.MaxPiggyback = 1200
	}
}

// Event reports a change of a member's state to the host.
type Event struct {
	ID     ID
	State  State
	Record Record // the member's latest record (Alive, Left)
	// From is who suspected or declared it (Suspect, Dead).
	From ID
}

// Out is a message to send.
type Out struct {
	To  ID
	Msg Msg
}

// entry is a node's view of one member.
type entry struct {
	rec   Record
	state State
	inc   Inc // the incarnation the state refers to
	since time.Time
	susp  *suspicion
}

type suspicion struct {
	start   time.Time
	confirm map[ID]bool // who suspected it, this node included if it did
	min     time.Duration
	max     time.Duration
}

// deadline is Lifeguard's: from max down to min as independent
// confirmations arrive (expected: Rings).
func (s *suspicion) deadline(expected int) time.Time {
	c := float64(len(s.confirm) - 1)
	if c < 0 {
		c = 0
	}
	frac := math.Log(c+1) / math.Log(float64(expected)+1)
	d := s.max - time.Duration(frac*float64(s.max-s.min))
	return s.start.Add(max(d, s.min))
}

type probe struct {
	target   ID
	seq      uint32
	sent     time.Time
	indirect bool
	acked    bool
	// helpers were asked to probe target; nackers said they could not
	// reach it either. A failed probe is judged at judgeAt: the helpers
	// that did not nack count against this node's own health.
	helpers, nackers []ID
	judgeAt          time.Time
}

type relay struct {
	to     ID
	seq    uint32
	target ID
	until  time.Time
	nackAt time.Time // no ack from target by then: tell the asker
	nacked bool
}

// Node is one member's protocol state.
type Node struct {
	cfg  Config
	self Record
	rnd  *rand.Rand

	mem map[ID]*entry // this node's view, over the base's
	// held maps a hash of every sealed record this node holds (its own
	// included) to its member: a copy of one is dropped without Open. A
	// record arrives many times over (from each member spreading it and in
	// every full-state exchange), and Open's signature check is what a
	// record costs its receiver.
	held      map[uint64]ID
	hseed     maphash.Seed
	live      int         // alive or suspect members, this one excluded
	rings     [][]ringEnt // nil: rebuild (product); shared (Base)
	ringDirty bool

	seq       uint32
	health    int // Lifeguard's local health score: 0 healthy … LocalHealth-1
	cur       *probe
	judged    *probe // the last failed probe, until its nacks are counted
	lastProbe time.Time
	next      int // round robin over the subjects
	relays    map[uint32]relay
	leave     map[ID]bool // neighbours a leave was sent to: acked?

	queue     []*bcast
	nextSync  time.Time
	syncGap   time.Duration
	syncFound bool // an exchange since the last one brought a new record
	syncs     []ID
	outs      []Out
	evs       []Event
	stats     Stats
}

// Stats counts what a node did (for the bench and the metrics).
type Stats struct {
	Probes, Indirect, Suspicions, Refutes uint64
	// Nacks: helpers that said they could not reach a member this node
	// asked them to probe
	Nacks uint64
	// Health is the local health score now (0: healthy; Config.LocalHealth
	// − 1 at most): the probe period and timeouts are (Health+1) times
	// the configured ones.
	Health         int
	Sent, Received uint64
	// Duplicates: records received that this node held already, dropped
	// without opening them.
	Duplicates               uint64
	BytesSent, BytesReceived uint64
}

type bcast struct {
	u     Update
	about ID
	sent  int
	size  int
}

// New starts a node whose own record is self (Open must accept it).
func New(cfg Config, self []byte) (*Node, error) {
	if err := cfg.defaults(); err != nil {
		return nil, err
	}
	rec, err := cfg.Open(self)
	if err != nil {
		return nil, errors.Join(errors.New("swim: own record"), err)
	}
	n := &Node{cfg: cfg, self: rec, rnd: rand.New(rand.NewPCG(cfg.Seed, 0x5717)), mem: map[ID]*entry{}, relays: map[uint32]relay{}, ringDirty: true,
		held: map[uint64]ID{}, hseed: maphash.MakeSeed()}
	if cfg.Base != nil {
		n.live = len(cfg.Base.recs)
		if _, in := cfg.Base.recs[rec.ID]; in {
			n.live--
		}
		n.rings, n.ringDirty = cfg.Base.rings, false
	}
	return n, nil
}

// Self is this member's current record.
func (n *Node) Self() Record { return n.self }

// Stats returns the node's counters.
func (n *Node) Stats() Stats { return n.stats }

// Count is the number of members believed alive or suspect, this one
// included.
func (n *Node) Count() int { return n.live + 1 }

func (n *Node) get(id ID) (*entry, bool) {
	if e, ok := n.mem[id]; ok {
		return e, true
	}
	if n.cfg.Base != nil {
		if r, ok := n.cfg.Base.recs[id]; ok {
			return &entry{rec: r, state: Alive, inc: r.Inc}, true
		}
	}
	return nil, false
}

// own returns id's entry, copied over from the base if need be, so it can
// be changed.
func (n *Node) own(id ID) *entry {
	if e, ok := n.mem[id]; ok {
		return e
	}
	e, ok := n.get(id)
	if !ok {
		return nil
	}
	n.mem[id] = e
	return e
}

// State returns what this node believes of id.
func (n *Node) State(id ID) (State, bool) {
	if id == n.self.ID {
		return Alive, true
	}
	e, ok := n.get(id)
	if !ok {
		return 0, false
	}
	return e.state, true
}

// Records returns the sealed records of the members this node believes
// alive or suspect, its own first: what a joining member is sent.
func (n *Node) Records() [][]byte {
	out := [][]byte{n.self.Data}
	seen := map[ID]bool{}
	for id, e := range n.mem {
		seen[id] = true
		if e.state <= Suspect {
			out = append(out, e.rec.Data)
		}
	}
	if n.cfg.Base != nil {
		for id, r := range n.cfg.Base.recs {
			if !seen[id] && id != n.self.ID {
				out = append(out, r.Data)
			}
		}
	}
	return out
}

// Merge applies records received by a full-state exchange (a join): each
// as an alive update, spread only if spread is set (a joiner's own record
// at the member it joined through).
func (n *Node) Merge(now time.Time, recs [][]byte, spread bool) {
	for _, d := range recs {
		if n.applyAlive(now, d, spread) {
			n.syncFound = true
		}
	}
}

// SetSelf replaces this member's record (a change of what it states, or
// its leave) and spreads it. A leaving record is also sent at once to this
// node's neighbours (Leaving reports which answered).
func (n *Node) SetSelf(now time.Time, data []byte) error {
	rec, err := n.cfg.Open(data)
	if err != nil {
		return err
	}
	if rec.ID != n.self.ID || rec.Inc.Compare(n.self.Inc) <= 0 {
		return errors.New("swim: a new own record must be this member's, of a later incarnation")
	}
	n.self = rec
	n.enqueue(Update{Kind: UpAlive, Record: data}, rec.ID)
	if rec.Leaving {
		n.leave = map[ID]bool{}
		for _, id := range n.neighbours() {
			n.leave[id] = false
			n.seq++
			n.send(id, Msg{Kind: MsgPing, Seq: n.seq})
		}
	}
	return nil
}

// Leaving reports how many neighbours a leave was sent to and how many
// answered since.
func (n *Node) Leaving() (acked, sent int) {
	for _, ok := range n.leave {
		if ok {
			acked++
		}
	}
	return acked, len(n.leave)
}

// Evict forgets id at once and for good in this node's view (the network
// revoked it): no event, no update.
func (n *Node) Evict(id ID) {
	e := n.own(id)
	if e == nil {
		return
	}
	if e.state <= Suspect {
		n.live--
	}
	e.state, e.susp = Dead, nil
	e.inc = Inc{Start: math.MaxInt64, Seq: math.MaxUint64}
}

// Recheck sends a member this node holds dead (failed, not left) a probe
// that tells it so; it reports whether it sent one. A member that is
// there refutes, and its answer carries its new record, which revives it
// here: after a partition heals, each side holds the other dead and
// nobody probes a dead member, so the host rechecks the dead members it
// reaches again.
func (n *Node) Recheck(id ID) bool {
	e, ok := n.mem[id]
	if !ok || e.state != Dead {
		return false
	}
	n.seq++
	n.send(id, Msg{Kind: MsgPing, Seq: n.seq, Updates: []Update{{Kind: UpDead, ID: id, Inc: e.inc, From: n.self.ID}}})
	return true
}

// Syncs returns the members this node wants to exchange full state with
// (its host runs the exchange: Records, Merge), since the last call.
func (n *Node) Syncs() []ID {
	s := n.syncs
	n.syncs = nil
	return s
}

// Pending is the number of changes waiting to be piggybacked.
func (n *Node) Pending() int { return len(n.queue) }

// Ready returns the messages to send and the events to apply since the
// last call.
func (n *Node) Ready() ([]Out, []Event) {
	o, e := n.outs, n.evs
	n.outs, n.evs = nil, nil
	return o, e
}

// Tick advances the node's timers to now: it starts the period's probe,
// asks helpers for one unanswered, suspects a member nobody could reach,
// and declares dead the suspects whose time ran out.
func (n *Node) Tick(now time.Time) {
	if j := n.judged; j != nil && !now.Before(j.judgeAt) {
		n.judge(j)
		n.judged = nil
	}
	scale := time.Duration(n.health + 1)
	if p := n.cur; p != nil && !p.acked {
		switch {
		case !p.indirect && now.Sub(p.sent) >= scale*n.cfg.ProbeTimeout:
			p.indirect = true
			n.stats.Indirect++
			p.helpers = n.helpers(p.target)
			for _, h := range p.helpers {
				n.send(h, Msg{Kind: MsgPingReq, Seq: p.seq, Target: p.target})
			}
		case p.indirect && now.Sub(p.sent) >= scale*n.cfg.Period:
			n.suspect(now, p.target, n.self.ID, Inc{})
			n.cur = nil
			// the helpers' nacks may still be on their way: they get a
			// period more
			if n.judged != nil {
				n.judge(n.judged)
			}
			p.judgeAt = now.Add(n.cfg.Period)
			n.judged = p
		}
	}
	if now.Sub(n.lastProbe) >= scale*n.cfg.Period {
		n.startProbe(now)
		if len(n.queue) > 0 {
			if nb := n.neighbours(); len(nb) > 0 {
				n.send(nb[n.rnd.IntN(len(nb))], Msg{Kind: MsgGossip})
			}
		}
	}
	if n.nextSync.IsZero() {
		// a new member exchanges again after 2, 4, 8, … periods while its
		// exchanges bring members it did not know, then at the regular
		// pace: while a network forms, changes are many and some
		// piggybacked ones are lost; base members (a simulation's formed
		// network) start at a random phase, spreading the exchanges in time
		n.syncGap, n.syncFound = 2*n.cfg.Period, true
		if n.cfg.Base != nil {
			n.syncGap = n.syncEvery()
		}
		n.nextSync = now.Add(time.Duration(n.rnd.Int64N(int64(n.syncGap))))
	}
	if !now.Before(n.nextSync) {
		n.syncGap = min(2*n.syncGap, n.syncEvery())
		if !n.syncFound {
			n.syncGap = n.syncEvery() // the last exchange brought nothing new
		}
		n.syncFound = false
		n.nextSync = now.Add(n.syncGap)
		if nb := n.neighbours(); len(nb) > 0 {
			to := nb[n.rnd.IntN(len(nb))]
			n.syncs = append(n.syncs, to)
			// the exchange carries live members' records: the deaths and
			// leaves this node holds go beside it, so a notice the
			// piggybacking lost still reaches a member that does not
			// probe the one gone (it would hold it alive)
			if gone := n.goneNotices(); len(gone) > 0 {
				n.send(to, Msg{Kind: MsgGossip, Updates: gone})
			}
		}
	}
	for id, e := range n.mem {
		if e.state == Suspect && e.susp != nil && !now.Before(e.susp.deadline(n.cfg.Rings)) {
			n.declare(now, id, e, Dead, n.self.ID)
			n.enqueue(Update{Kind: UpDead, ID: id, Inc: e.inc, From: n.self.ID}, id)
		}
	}
	for s, r := range n.relays {
		if now.After(r.until) {
			delete(n.relays, s)
			continue
		}
		if !r.nacked && !now.Before(r.nackAt) {
			r.nacked = true
			n.relays[s] = r
			n.send(r.to, Msg{Kind: MsgNack, Seq: r.seq, Target: r.target})
		}
	}
}

// judge moves the local health by a failed probe (Lifeguard): when every
// helper nacked, the target is unreachable, not this node, and the miss
// costs nothing; a helper that neither answered nor nacked is a sign this
// node is the slow one (it did not get their messages in time), and so is
// a miss with no helper to ask. Such a probe counts once, not once per
// silent helper as in memberlist: this node's gossip goes out with its
// probes, so a steeper score would also starve the refutations a cut-off
// member needs to hear of (TestSuspicionRefuted).
func (n *Node) judge(p *probe) {
	if len(p.helpers) == 0 || len(p.nackers) < len(p.helpers) {
		n.worse()
	}
}

// worse and better move the local health score (Config.LocalHealth).
func (n *Node) worse() {
	n.health = min(n.health+1, n.cfg.LocalHealth-1)
	n.stats.Health = n.health
}

func (n *Node) better() {
	n.health = max(n.health-1, 0)
	n.stats.Health = n.health
}

func (n *Node) syncEvery() time.Duration {
	return max(n.cfg.SyncMin, time.Duration(n.Count())*n.cfg.SyncPerMember)
}

func (n *Node) startProbe(now time.Time) {
	n.cur, n.lastProbe = nil, now
	subj := n.subjects()
	if len(subj) == 0 {
		return
	}
	t := subj[n.next%len(subj)]
	n.next++
	n.seq++
	n.cur = &probe{target: t, seq: n.seq, sent: now}
	n.stats.Probes++
	n.send(t, Msg{Kind: MsgPing, Seq: n.seq})
}

// Handle applies a message from a member (the transport authenticates
// from).
func (n *Node) Handle(now time.Time, from ID, m Msg) {
	n.stats.Received++
	n.stats.BytesReceived += uint64(m.Size())
	for _, u := range m.Updates {
		n.apply(now, u)
	}
	switch m.Kind {
	case MsgPing:
		n.send(from, Msg{Kind: MsgAck, Seq: m.Seq})
	case MsgPingReq:
		if m.Target == n.self.ID {
			n.send(from, Msg{Kind: MsgAck, Seq: m.Seq, Target: m.Target})
			return
		}
		if e, ok := n.get(m.Target); !ok || e.state >= Dead {
			// probes only members: nobody can make it dial strangers; and
			// one it holds dead it need not reach to say it cannot
			n.send(from, Msg{Kind: MsgNack, Seq: m.Seq, Target: m.Target})
			return
		}
		n.seq++
		// the nack must reach the asker before it judges its probe, a
		// period after it suspected the target
		n.relays[n.seq] = relay{to: from, seq: m.Seq, target: m.Target, until: now.Add(n.cfg.Period),
			nackAt: now.Add(n.cfg.ProbeTimeout * 4 / 5)}
		n.send(m.Target, Msg{Kind: MsgPing, Seq: n.seq})
	case MsgNack:
		for _, p := range []*probe{n.cur, n.judged} {
			if p != nil && p.seq == m.Seq && p.target == m.Target && slices.Contains(p.helpers, from) && !slices.Contains(p.nackers, from) {
				p.nackers = append(p.nackers, from)
				n.stats.Nacks++
			}
		}
	case MsgAck:
		if r, ok := n.relays[m.Seq]; ok && r.target == from {
			delete(n.relays, m.Seq)
			n.send(r.to, Msg{Kind: MsgAck, Seq: r.seq, Target: from})
			return
		}
		if p := n.cur; p != nil && p.seq == m.Seq && (from == p.target || m.Target == p.target) {
			if !p.acked {
				p.acked = true
				n.better()
			}
			return
		}
		if _, ok := n.leave[from]; ok {
			n.leave[from] = true
		}
	}
}

func (n *Node) apply(now time.Time, u Update) {
	switch u.Kind {
	case UpAlive:
		n.applyAlive(now, u.Record, true)
	case UpSuspect:
		n.suspect(now, u.ID, u.From, u.Inc)
	case UpDead:
		if u.ID == n.self.ID {
			n.refute(u.Inc)
			return
		}
		e := n.own(u.ID)
		if e == nil || e.state >= Dead || u.Inc.Compare(e.inc) < 0 {
			return
		}
		e.inc = u.Inc
		n.declare(now, u.ID, e, Dead, u.From)
		n.enqueue(u, u.ID)
	}
}

// applyAlive applies a member's record; it reports whether the record was
// newer than what this node held.
func (n *Node) applyAlive(now time.Time, data []byte, spread bool) bool {
	h := maphash.Bytes(n.hseed, data)
	if n.holds(h, data) {
		n.stats.Duplicates++
		return false // not newer than itself
	}
	rec, err := n.cfg.Open(data)
	if err != nil {
		return false
	}
	if rec.ID == n.self.ID {
		if bytes.Equal(data, n.self.Data) {
			n.held[h] = rec.ID
		}
		return false
	}
	if e, ok := n.get(rec.ID); ok && rec.Inc.Compare(e.inc) <= 0 {
		return false // not newer than what this node holds
	}
	e := n.own(rec.ID)
	if e == nil {
		e = &entry{state: Dead}
		n.mem[rec.ID] = e
		n.ringDirty = true
	}
	if e.rec.Data != nil {
		delete(n.held, maphash.Bytes(n.hseed, e.rec.Data))
	}
	n.held[h] = rec.ID
	e.rec, e.inc, e.susp = rec, rec.Inc, nil
	st := Alive
	if rec.Leaving {
		st = Left
	}
	n.declare(now, rec.ID, e, st, rec.ID)
	if st == Alive && n.cur != nil && n.cur.target == rec.ID {
		n.cur.acked = true // it refuted: this probe need not suspect it
	}
	if spread {
		n.enqueue(Update{Kind: UpAlive, Record: data}, rec.ID)
	}
	return true
}

// holds reports whether data (of hash h) is a sealed record this node
// holds: its own or a member's current one. A hash left by a member no
// longer held is dropped.
func (n *Node) holds(h uint64, data []byte) bool {
	id, ok := n.held[h]
	if !ok {
		return false
	}
	if id == n.self.ID {
		return bytes.Equal(data, n.self.Data)
	}
	e, ok := n.get(id)
	if !ok {
		delete(n.held, h)
		return false
	}
	return bytes.Equal(data, e.rec.Data)
}

// suspect applies a suspicion of id at inc by from (inc zero: this node's
// own, of the incarnation it holds).
func (n *Node) suspect(now time.Time, id, from ID, inc Inc) {
	if id == n.self.ID {
		n.refute(inc)
		return
	}
	e := n.own(id)
	if e == nil || e.state >= Dead {
		return
	}
	if inc == (Inc{}) {
		inc = e.inc
	}
	if inc.Compare(e.inc) < 0 {
		return
	}
	u := Update{Kind: UpSuspect, ID: id, Inc: inc, From: from}
	if e.state == Suspect && inc == e.inc {
		if e.susp != nil && !e.susp.confirm[from] && len(e.susp.confirm) <= n.cfg.Rings {
			e.susp.confirm[from] = true
			n.enqueue(u, id)
		}
		return
	}
	e.inc = inc
	min, max := n.cfg.Suspicion(n.Count())
	e.susp = &suspicion{start: now, confirm: map[ID]bool{from: true}, min: min, max: max}
	n.declare(now, id, e, Suspect, from)
	n.stats.Suspicions++
	n.enqueue(u, id)
}

func (n *Node) refute(inc Inc) {
	if n.self.Leaving {
		return
	}
	if inc.Compare(n.self.Inc) < 0 {
		// refuted already, but whoever said it has not heard: spread the
		// record that refuted it again (its answer to a Recheck)
		n.enqueue(Update{Kind: UpAlive, Record: n.self.Data}, n.self.ID)
		return
	}
	data := n.cfg.Refute(max(inc.Seq, n.self.Seq()))
	rec, err := n.cfg.Open(data)
	if err != nil || rec.Inc.Compare(n.self.Inc) <= 0 {
		return
	}
	n.self = rec
	n.stats.Refutes++
	n.worse() // suspected while alive: likely slow to answer
	n.enqueue(Update{Kind: UpAlive, Record: data}, rec.ID)
}

// Seq is the record's sequence number.
func (r Record) Seq() uint64 { return r.Inc.Seq }

func (n *Node) declare(now time.Time, id ID, e *entry, st State, from ID) {
	was := e.state
	if was <= Suspect && st >= Dead {
		n.live--
	}
	if was >= Dead && st <= Suspect {
		n.live++
	}
	e.state, e.since = st, now
	if st >= Dead {
		e.susp = nil
	}
	n.evs = append(n.evs, Event{ID: id, State: st, Record: e.rec, From: from})
}

// maxGoneNotices bounds the deaths and leaves sent beside a full-state
// exchange (the most recent).
const maxGoneNotices = 16

// goneNotices are the most recent deaths (as death notices) and leaves (as
// the leaving records) this node holds.
func (n *Node) goneNotices() []Update {
	type gone struct {
		id ID
		e  *entry
	}
	var all []gone
	for id, e := range n.mem {
		if e.state >= Dead {
			all = append(all, gone{id, e})
		}
	}
	slices.SortFunc(all, func(a, b gone) int { return b.e.since.Compare(a.e.since) })
	out := make([]Update, 0, min(len(all), maxGoneNotices))
	for _, g := range all[:min(len(all), maxGoneNotices)] {
		if g.e.state == Left {
			out = append(out, Update{Kind: UpAlive, Record: g.e.rec.Data})
		} else {
			out = append(out, Update{Kind: UpDead, ID: g.id, Inc: g.e.inc, From: n.self.ID})
		}
	}
	return out
}

// Forget drops members dead or gone since before the cutoff from this
// node's view (their records could otherwise be kept for ever).
func (n *Node) Forget(before time.Time) {
	for id, e := range n.mem {
		if e.state >= Dead && e.since.Before(before) {
			if n.cfg.Base != nil {
				if _, in := n.cfg.Base.recs[id]; in {
					continue // its base entry would say alive again
				}
			}
			delete(n.mem, id)
			n.ringDirty = true
		}
	}
}

// send queues m to to with the updates it can carry: first those about the
// recipient (Lifeguard's buddy system: a suspected member hears of it from
// the member that probes it), then the least sent.
func (n *Node) send(to ID, m Msg) {
	n.limitQueue()
	budget := n.cfg.MaxPiggyback
	for _, u := range m.Updates {
		budget -= u.size()
	}
	if e, ok := n.mem[to]; ok && e.state == Suspect && m.Kind == MsgPing {
		// a suspect always hears of it from the members that probe it,
		// however often the suspicion was sent: it can refute only what it
		// hears, and the retransmissions may all have gone while it was cut off
		u := Update{Kind: UpSuspect, ID: to, Inc: e.inc, From: n.self.ID}
		m.Updates = append(m.Updates, u)
		budget -= u.size()
	}
	limit := n.cfg.RetransmitMult * int(math.Ceil(math.Log10(float64(n.Count())+1)))
	slices.SortStableFunc(n.queue, func(a, b *bcast) int {
		if (a.about == to) != (b.about == to) {
			if a.about == to {
				return -1
			}
			return 1
		}
		return cmp.Compare(a.sent, b.sent)
	})
	for _, b := range n.queue {
		if len(m.Updates) == MaxUpdates {
			break // what a receiver decodes (small updates: a large budget holds more)
		}
		if b.size > budget && len(m.Updates) > 0 {
			continue
		}
		m.Updates = append(m.Updates, b.u)
		b.sent++
		budget -= b.size
		if budget <= 0 {
			break
		}
	}
	n.queue = slices.DeleteFunc(n.queue, func(b *bcast) bool { return b.sent >= limit })
	n.stats.Sent++
	n.stats.BytesSent += uint64(m.Size())
	n.outs = append(n.outs, Out{To: to, Msg: m})
}

// enqueue queues u for dissemination; it replaces a queued update about
// the same member (the newer supersedes it).
func (n *Node) enqueue(u Update, about ID) {
	b := &bcast{u: u, about: about, size: u.size()}
	for i, q := range n.queue {
		if q.about == about && (q.u.Kind != UpSuspect || u.Kind != UpSuspect || q.u.From == u.From) {
			n.queue[i] = b
			return
		}
	}
	n.queue = append(n.queue, b)
}

// limitQueue bounds the queue: past 64 × the log of the network's size the
// most sent updates go (a burst of changes cannot grow a node's memory
// without bound; the full-state exchange of a join still carries them).
func (n *Node) limitQueue() {
	lim := 64 * int(math.Ceil(math.Log10(float64(n.Count())+1)))
	if len(n.queue) <= lim {
		return
	}
	slices.SortStableFunc(n.queue, func(a, b *bcast) int { return cmp.Compare(a.sent, b.sent) })
	n.queue = n.queue[:lim]
}

// ringEnt is a member's place on one ring.
type ringEnt struct {
	h  uint64
	id ID
}

func ringHash(r int, id ID) uint64 {
	s := sha256.Sum256(append([]byte{byte(r)}, id...))
	return binary.BigEndian.Uint64(s[:8])
}

func buildRings(k int, ids []ID) [][]ringEnt {
	rings := make([][]ringEnt, k)
	for r := range k {
		ring := make([]ringEnt, len(ids))
		for i, id := range ids {
			ring[i] = ringEnt{ringHash(r, id), id}
		}
		slices.SortFunc(ring, func(a, b ringEnt) int { return cmp.Compare(a.h, b.h) })
		rings[r] = ring
	}
	return rings
}

func (n *Node) ensureRings() {
	if !n.ringDirty {
		return
	}
	ids := []ID{n.self.ID}
	for id := range n.mem {
		ids = append(ids, id)
	}
	if n.cfg.Base != nil {
		for id := range n.cfg.Base.recs {
			if _, in := n.mem[id]; !in && id != n.self.ID {
				ids = append(ids, id)
			}
		}
	}
	n.rings, n.ringDirty = buildRings(n.cfg.GossipRings, ids), false
}

// walk returns the first member after (dir 1) or before (dir -1) this one
// on ring r that is alive or suspect.
func (n *Node) walk(r, dir int) (ID, bool) {
	ring := n.rings[r]
	h := ringHash(r, n.self.ID)
	i, _ := slices.BinarySearchFunc(ring, h, func(e ringEnt, h uint64) int { return cmp.Compare(e.h, h) })
	for k := 1; k < len(ring); k++ {
		j := ((i+dir*k)%len(ring) + len(ring)) % len(ring)
		id := ring[j].id
		if id == n.self.ID {
			continue
		}
		if e, ok := n.get(id); ok && e.state <= Suspect {
			return id, true
		}
	}
	return "", false
}

// subjects are the members this one probes: its successor on each ring.
func (n *Node) subjects() []ID {
	n.ensureRings()
	var out []ID
	for r := range min(n.cfg.Rings, len(n.rings)) {
		if id, ok := n.walk(r, 1); ok && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	return out
}

// neighbours are the members next to this one on every ring (those it
// probes, those that probe it, those it gossips with).
// Neighbours lists the members this node talks to for ever while the
// membership holds still: its successor and predecessor on every ring (its
// probe subjects among them). The host keeps its connections to them.
func (n *Node) Neighbours() []ID { return n.neighbours() }

func (n *Node) neighbours() []ID {
	n.ensureRings()
	var out []ID
	for r := range n.rings {
		for _, dir := range []int{1, -1} {
			if id, ok := n.walk(r, dir); ok && !slices.Contains(out, id) {
				out = append(out, id)
			}
		}
	}
	return out
}

// helpers are up to IndirectChecks members, other than target, asked to
// probe it: its other observers where this node knows them (they are
// connected to it), else random live members.
func (n *Node) helpers(target ID) []ID {
	n.ensureRings()
	var out []ID
	ring := n.rings[0]
	for tries := 0; len(out) < n.cfg.IndirectChecks && tries < 8*n.cfg.IndirectChecks && len(ring) > 2; tries++ {
		id := ring[n.rnd.IntN(len(ring))].id
		if id == n.self.ID || id == target || slices.Contains(out, id) {
			continue
		}
		if e, ok := n.get(id); ok && e.state == Alive {
			out = append(out, id)
		}
	}
	return out
}

// Roster is a set of records every node of a simulation starts from,
// shared read-only (thousands of nodes need not each copy it).
type Roster struct {
	recs  map[ID]Record
	rings [][]ringEnt
}

// NewRoster builds a roster from opened records, with k rings (the nodes'
// Config.GossipRings).
func NewRoster(recs []Record, k int) *Roster {
	r := &Roster{recs: make(map[ID]Record, len(recs))}
	ids := make([]ID, 0, len(recs))
	for _, rec := range recs {
		r.recs[rec.ID] = rec
		ids = append(ids, rec.ID)
	}
	if k <= 0 {
		k = 8
	}
	r.rings = buildRings(k, ids)
	return r
}
