package overlay

import (
	"bufio"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	ma "github.com/multiformats/go-multiaddr"
	manet "github.com/multiformats/go-multiaddr/net"
	"google.golang.org/protobuf/encoding/protowire"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
	"github.com/micra-crawler/micra/overlay/swim"
)

// Membership protocols (Config.Membership, LightConfig.Membership).
// Config's zero value "" also means heartbeats (DefaultConfig sets SWIM);
// LightConfig's means DefaultConfig's.
const (
	MembershipHeartbeat = "heartbeat"
	MembershipSWIM      = "swim"
)

// SWIM's protocols: one message per stream (a probe, a probe request, an
// answer), and the full-state exchange a member joins by.
const (
	ProtoSWIM     protocol.ID = "/micra/swim/1"
	ProtoSWIMSync protocol.ID = "/micra/swim-sync/1"

	swimRecordDomain = "micra-swim-record/1\n"
	// maxSWIMSyncBytes bounds a full-state answer: ~20,000 records.
	maxSWIMSyncBytes = 16 << 20
	// swimSenders: messages in flight at once (each opens a stream).
	swimSenders = 16
	// a member may send this many messages a second (burst: 4×): a probe,
	// its answers and probe requests are a handful.
	swimRate = 50
)

// swimRunner runs the swim state machine for a Peer or a LightMember on
// libp2p streams and feeds its view into Members: a record's arrival is a
// heartbeat's (Members.observe), a death is declared by the protocol
// (Members.fail), and Members no longer judges members by their silence.
//
// A member's record is its heartbeat (pb.Heartbeat: addresses, capacity,
// load, position, start, certificate, leaving), signed by the member and
// sealed again only when it changes — at most every swimRefresh — or to
// refute a suspicion. Its leave is such a record, so nobody can make
// another member leave or state what it did not.
type swimRunner struct {
	h       host.Host
	sk      crypto.PrivKey
	log     *slog.Logger
	members *Members
	revs    *revocationSync // nil: an open network
	boot    []peer.AddrInfo
	period  time.Duration
	snap    hierarchy.SnapshotID
	nodes   int
	adm     *Admission
	// publicOnly: members' stated addresses that are not public are never
	// dialled (Config.PublicDHTFilters)
	publicOnly bool
	// heartbeat builds this member's next heartbeat with a seq above
	// minSeq (nil once it left).
	heartbeat func(minSeq uint64, leaving bool) ([]byte, error)

	mu       sync.Mutex
	node     *swim.Node
	sealed   time.Time // when this member's record was last sealed
	content  []byte    // its heartbeat without seq and time: a change re-seals
	limit    peerLimiter
	sendQ    chan swim.Out
	syncing  bool // a full-state exchange the protocol asked for runs
	ctx      context.Context
	wg       sync.WaitGroup
	suspects func() // counts a suspicion (metrics)
	refused  func() // counts a record refused (metrics)
	// admit, when set, applies an open network's identity limits
	// (identities.go) to a member's record delivered by via: the peer
	// whose message or full-state exchange is being applied (r.mu held)
	admit func(author, via peer.ID) bool
	via   peer.ID
	// kept: the ring neighbours whose connections the connection manager
	// must not trim (loop's goroutine only)
	kept map[peer.ID]bool
}

// swimKeepTag protects a ring neighbour's connection in the connection
// manager: trimmed at its high water, every probe to it would open a new
// connection (Noise, identify) once a period.
const swimKeepTag = "micra-swim"

// errIdentityLimit: a record of a member the identity limits refuse.
var errIdentityLimit = errors.New("swim record: past the open network's identity limits for the peer that delivered it")

func newSWIMRunner(h host.Host, log *slog.Logger, members *Members, revs *revocationSync, boot []peer.AddrInfo, period time.Duration,
	snap hierarchy.SnapshotID, nodes int, adm *Admission, heartbeat func(uint64, bool) ([]byte, error)) (*swimRunner, error) {
	sk := h.Peerstore().PrivKey(h.ID())
	if sk == nil {
		return nil, errors.New("overlay: swim: host has no private key")
	}
	r := &swimRunner{h: h, sk: sk, log: log, members: members, revs: revs, boot: boot, period: period, snap: snap, nodes: nodes, adm: adm,
		heartbeat: heartbeat, sendQ: make(chan swim.Out, 1024)}
	self, err := r.seal(0, false)
	if err != nil {
		return nil, err
	}
	cfg := SWIMConfig(period)
	cfg.Open = func(b []byte) (swim.Record, error) {
		rec, _, err := r.open(b)
		if err == nil && r.admit != nil && !r.admit(peer.ID(rec.ID), r.via) {
			err = errIdentityLimit
		}
		if err != nil {
			r.log.Debug("overlay: swim record refused", "via", shortID(r.via), "err", err)
			if r.refused != nil {
				r.refused()
			}
			return swim.Record{}, err
		}
		return rec, nil
	}
	cfg.Refute = func(seq uint64) []byte {
		b, err := r.seal(seq, false)
		if err != nil {
			return nil
		}
		return b
	}
	cfg.Seed = rand.Uint64()
	r.node, err = swim.New(cfg, self)
	if err != nil {
		return nil, err
	}
	r.sealed = time.Now()
	members.mu.Lock()
	members.bySWIM = true
	members.mu.Unlock()
	members.OnChange(func(ev MemberEvent) {
		if ev.Dead && ev.Reason == ReasonRevoked {
			r.mu.Lock()
			r.node.Evict(swim.ID(ev.Peer))
			r.mu.Unlock()
		}
	})
	return r, nil
}

// SWIMConfig is the protocol's tuning on the overlay, for a period (the
// HeartbeatInterval): memberlist's defaults but a suspicion half as long
// (2·log10(N) periods at the least), which keeps a crash's detection near
// the heartbeat detector's at small sizes; refutation by the buddy rule is
// quick enough that the simulation at 5 % loss declares no live member
// dead with it.
//
// A message carries up to 8 KiB of changes (memberlist's 1,200 bytes fit a
// UDP packet; a libp2p stream has no such bound): a change costs the same
// bytes either way, but a burst of them — a network forming, a restart of
// many members — goes out in fewer periods. With 1,200 bytes (three
// records with certificates) a 12-node testnet took 34–41 s to form.
func SWIMConfig(period time.Duration) swim.Config {
	return swim.Config{Period: period, SuspicionMult: 2, MaxPiggyback: 8 << 10}
}

// seal builds and signs this member's record (nil data, no error: it left).
func (r *swimRunner) seal(minSeq uint64, leaving bool) ([]byte, error) {
	hb, err := r.heartbeat(minSeq, leaving)
	if err != nil || hb == nil {
		return nil, err
	}
	return sealSWIMRecord(r.sk, r.h.ID(), hb)
}

// sealSWIMRecord signs heartbeat hb as member id's record with its key sk.
func sealSWIMRecord(sk crypto.PrivKey, member peer.ID, hb []byte) ([]byte, error) {
	id := []byte(member)
	sig, err := sk.Sign(swimSigned(id, hb))
	if err != nil {
		return nil, fmt.Errorf("overlay: swim: sign record: %w", err)
	}
	b := protowire.AppendTag(nil, 1, protowire.BytesType)
	b = protowire.AppendBytes(b, id)
	b = protowire.AppendTag(b, 2, protowire.BytesType)
	b = protowire.AppendBytes(b, hb)
	b = protowire.AppendTag(b, 3, protowire.BytesType)
	return protowire.AppendBytes(b, sig), nil
}

func swimSigned(id, hb []byte) []byte {
	b := append([]byte(swimRecordDomain), byte(len(id)))
	b = append(b, id...)
	return append(b, hb...)
}

// open verifies a member's record: its signature by the member its id
// names, the heartbeat's fields, this network's snapshot, and in a network
// with admission the member's certificate.
func (r *swimRunner) open(b []byte) (swim.Record, *pb.Heartbeat, error) {
	var idb, hbb, sig []byte
	data := b
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || typ != protowire.BytesType {
			return swim.Record{}, nil, errors.New("swim record: malformed")
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return swim.Record{}, nil, errors.New("swim record: malformed")
		}
		switch num {
		case 1:
			idb = v
		case 2:
			hbb = v
		case 3:
			sig = v
		default:
			return swim.Record{}, nil, fmt.Errorf("swim record: unknown field %d", num)
		}
		b = b[n+m:]
	}
	id, err := peer.IDFromBytes(idb)
	if err != nil {
		return swim.Record{}, nil, fmt.Errorf("swim record: member id: %w", err)
	}
	pk, err := id.ExtractPublicKey()
	if err != nil {
		return swim.Record{}, nil, fmt.Errorf("swim record: member key: %w", err)
	}
	if ok, err := pk.Verify(swimSigned(idb, hbb), sig); err != nil || !ok {
		return swim.Record{}, nil, errors.New("swim record: not signed by its member")
	}
	hb, err := decodeHeartbeatFields(hbb)
	if err != nil {
		return swim.Record{}, nil, err
	}
	if string(hb.Snapshot) != string(r.snap[:]) {
		return swim.Record{}, nil, errors.New("swim record: another snapshot")
	}
	if hb.Subnets > uint32(r.nodes) {
		return swim.Record{}, nil, fmt.Errorf("swim record: holds %d subnets of %d", hb.Subnets, r.nodes)
	}
	if time.Until(time.Unix(0, hb.AtUnixNano)) > clockSkew {
		return swim.Record{}, nil, errors.New("swim record: sealed in the future")
	}
	if r.adm != nil {
		c, err := r.adm.Check(id, hb.Certificate)
		if err != nil {
			return swim.Record{}, nil, fmt.Errorf("swim record: %w", err)
		}
		if hb.Sink && !c.Sink {
			return swim.Record{}, nil, errors.New("swim record: announces the sink role its certificate does not give")
		}
	}
	rec := swim.Record{ID: swim.ID(id), Inc: swim.Inc{Start: hb.StartUnixNano, Seq: hb.Seq}, Leaving: hb.Leaving, Data: data}
	return rec, hb, nil
}

// SealedRecordSize is the size of a member's sealed SWIM record as this
// peer would seal it now (the simulation's RecordBytes).
func (p *Peer) SealedRecordSize() int {
	if p.swim == nil {
		return 0
	}
	p.swim.mu.Lock()
	defer p.swim.mu.Unlock()
	return len(p.swim.node.Self().Data)
}

// start runs the protocol until ctx ends.
func (r *swimRunner) start(ctx context.Context) {
	r.ctx = ctx
	r.h.SetStreamHandler(ProtoSWIM, r.serve)
	r.h.SetStreamHandler(ProtoSWIMSync, r.serveSync)
	for range swimSenders {
		r.wg.Go(func() { r.sender(ctx) })
	}
	r.wg.Go(func() { r.loop(ctx) })
}

// stop waits for the protocol's goroutines (ctx ended) and removes its
// handlers.
func (r *swimRunner) stop() {
	r.h.RemoveStreamHandler(ProtoSWIM)
	r.h.RemoveStreamHandler(ProtoSWIMSync)
	r.wg.Wait()
}

// swimRefresh is how often a member's record may be sealed again for a
// change of what it states (load, subnets, addresses): each new record
// costs every member 4·log10(N) transmissions of it, so the network's rate
// of changes is held at one in 3 s (at 10,000 members with certificates,
// ≈ 2.7 kB/s per member at most); a member's advertised load is then up to
// max(30 s, N·3 s) old.
func swimRefresh(members int) time.Duration {
	return max(30*time.Second, time.Duration(members)*3*time.Second)
}

func (r *swimRunner) loop(ctx context.Context) {
	tick := time.NewTicker(r.period / 4)
	defer tick.Stop()
	r.join(ctx)
	lastJoin, lastForget := time.Now(), time.Now()
	for {
		select {
		case <-ctx.Done():
			return
		case now := <-tick.C:
			r.mu.Lock()
			r.node.Tick(now)
			alone := r.node.Count() == 1
			if now.Sub(lastForget) > time.Minute {
				r.node.Forget(now.Add(-memberForget))
				lastForget = now
			}
			r.refresh(now)
			nb := r.node.Neighbours()
			r.mu.Unlock()
			r.keep(nb)
			r.flush()
			// (deaths are the protocol's; the sweep forgets the members
			// dead for memberForget, so they stop counting against the
			// quorum, as under heartbeats)
			r.members.sweep(now)
			if alone && now.Sub(lastJoin) >= r.period {
				r.join(ctx)
				lastJoin = time.Now()
			}
		}
	}
}

// keep protects the connections to the ring neighbours nb and releases
// those that are no longer neighbours.
func (r *swimRunner) keep(nb []swim.ID) {
	cm := r.h.ConnManager()
	now := make(map[peer.ID]bool, len(nb))
	for _, id := range nb {
		p := peer.ID(id)
		now[p] = true
		if !r.kept[p] {
			cm.Protect(p, swimKeepTag)
		}
	}
	for p := range r.kept {
		if !now[p] {
			cm.Unprotect(p, swimKeepTag)
		}
	}
	r.kept = now
}

// refresh seals this member's record again if what it states changed and
// swimRefresh has passed (r.mu held).
func (r *swimRunner) refresh(now time.Time) {
	if now.Sub(r.sealed) < swimRefresh(r.node.Count()) {
		return
	}
	self := r.node.Self()
	if self.Leaving {
		return
	}
	_, cur, err := r.open(self.Data)
	if err != nil {
		return
	}
	if r.content == nil {
		r.content = heartbeatContent(cur)
	}
	data, err := r.seal(0, false)
	if err != nil || data == nil {
		return
	}
	_, hb, err := r.open(data)
	if err != nil {
		return
	}
	c := heartbeatContent(hb)
	r.sealed = now
	if string(c) == string(r.content) {
		return
	}
	if err := r.node.SetSelf(now, data); err == nil {
		r.content = c
	}
}

// heartbeatContent is what a heartbeat states, without its seq and time.
func heartbeatContent(hb *pb.Heartbeat) []byte {
	c := proto.Clone(hb).(*pb.Heartbeat)
	c.Seq, c.AtUnixNano = 0, 0
	b, _ := proto.MarshalOptions{Deterministic: true}.Marshal(c)
	return b
}

// flush sends what the node has to send and applies its events.
func (r *swimRunner) flush() {
	r.mu.Lock()
	outs, evs := r.node.Ready()
	syncs := r.node.Syncs()
	start := len(syncs) > 0 && !r.syncing && r.ctx != nil && r.ctx.Err() == nil
	r.syncing = r.syncing || start
	r.mu.Unlock()
	if start {
		r.wg.Go(func() {
			if err := r.syncWith(r.ctx, peer.ID(syncs[0])); err != nil && r.ctx.Err() == nil {
				r.log.Debug("overlay: swim exchange", "peer", shortID(peer.ID(syncs[0])), "err", err)
			}
			r.mu.Lock()
			r.syncing = false
			r.mu.Unlock()
		})
	}
	var rev uint64
	if r.revs != nil {
		rev = r.revs.held()
	}
	for _, o := range outs {
		o.Msg.Revocations = rev
		select {
		case r.sendQ <- o:
		default:
			// a backlog: a lost message, which the protocol tolerates
		}
	}
	r.apply(evs, time.Now())
}

// apply feeds the protocol's events into Members, the path every
// membership change takes: a record is a heartbeat (observe: joins,
// revivals, leaves), a suspicion makes the member unheard for decisions
// (suspect), a death is a failure (fail: the owner grace and the quorum
// run from it as from a heartbeat timeout).
func (r *swimRunner) apply(evs []swim.Event, now time.Time) {
	for _, ev := range evs {
		id := peer.ID(ev.ID)
		switch ev.State {
		case swim.Alive, swim.Left:
			_, hb, err := r.open(ev.Record.Data)
			if err != nil {
				continue
			}
			r.members.observe(id, hb, now)
			if r.revs != nil {
				r.revs.heard(id, hb.Revocations)
			}
		case swim.Suspect:
			r.log.Debug("overlay: member suspected", "member", shortID(id), "by", shortID(peer.ID(ev.From)))
			r.members.suspect(id, now)
			if r.suspects != nil {
				r.suspects()
			}
		case swim.Dead:
			r.members.fail(id, now)
		}
	}
}

// recheck asks a member this peer's protocol holds dead whether it is
// there, telling it it was declared dead: if it is, it refutes with a new
// record, which its answer carries, and it is alive again here (and
// spreads from here). Nothing else would revive it: nobody probes a dead
// member, and after a partition each side holds the other dead.
func (r *swimRunner) recheck(id peer.ID) {
	r.mu.Lock()
	ok := r.node.Recheck(swim.ID(id))
	r.mu.Unlock()
	if ok {
		r.flush()
	}
}

func (r *swimRunner) sender(ctx context.Context) {
	for {
		select {
		case <-ctx.Done():
			return
		case o := <-r.sendQ:
			r.send(ctx, o)
		}
	}
}

// send writes one message on a new stream to its member (dialling the
// addresses its record states if not connected).
func (r *swimRunner) send(ctx context.Context, o swim.Out) {
	to := peer.ID(o.To)
	if r.h.Network().Connectedness(to) != network.Connected {
		addrs := r.members.Addrs(to)
		if r.publicOnly {
			addrs = slices.DeleteFunc(slices.Clone(addrs), func(a ma.Multiaddr) bool { return !manet.IsPublicAddr(a) })
		}
		if len(addrs) > 0 {
			r.h.Peerstore().AddAddrs(to, addrs, 2*memberForget)
		}
	}
	sctx, cancel := context.WithTimeout(ctx, r.period)
	defer cancel()
	s, err := r.h.NewStream(network.WithAllowLimitedConn(sctx, "swim"), to, ProtoSWIM)
	if err != nil {
		return
	}
	_ = s.SetDeadline(time.Now().Add(r.period))
	b := o.Msg.Encode()
	frame := binary.AppendUvarint(make([]byte, 0, len(b)+4), uint64(len(b)))
	if _, err := s.Write(append(frame, b...)); err != nil {
		s.Reset()
		return
	}
	_ = s.Close()
}

// serve takes one message.
func (r *swimRunner) serve(s network.Stream) {
	defer s.Close()
	from := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(r.period))
	b, err := readFrame(bufio.NewReader(s), swim.MaxMsgBytes)
	if err != nil {
		s.Reset()
		return
	}
	now := time.Now()
	if !r.limit.allow(from, swimRate, 4*swimRate, now) {
		return
	}
	m, err := swim.Decode(b)
	if err != nil {
		r.log.Debug("overlay: swim message refused", "from", shortID(from), "err", err)
		s.Reset()
		return
	}
	if r.revs != nil && m.Revocations != 0 {
		r.revs.heard(from, m.Revocations)
	}
	r.mu.Lock()
	r.via = from
	r.node.Handle(now, swim.ID(from), m)
	r.via = ""
	r.mu.Unlock()
	r.flush()
}

// join exchanges full state with the bootstrap peers and the peers this
// one is connected to: it sends its record (which the other spreads) and
// takes theirs.
func (r *swimRunner) join(ctx context.Context) {
	ids := make([]peer.ID, 0, len(r.boot))
	for _, ai := range r.boot {
		ids = append(ids, ai.ID)
		r.h.Peerstore().AddAddrs(ai.ID, ai.Addrs, time.Hour)
	}
	for _, id := range r.h.Network().Peers() {
		if !slices.Contains(ids, id) {
			ids = append(ids, id)
		}
	}
	rand.Shuffle(len(ids), func(i, j int) { ids[i], ids[j] = ids[j], ids[i] })
	done := 0
	for _, id := range ids {
		if done == 2 || ctx.Err() != nil {
			return
		}
		if id == r.h.ID() {
			continue
		}
		if err := r.syncWith(ctx, id); err != nil {
			r.log.Debug("overlay: swim join", "peer", shortID(id), "err", err)
			continue
		}
		done++
	}
}

func (r *swimRunner) syncWith(ctx context.Context, id peer.ID) error {
	sctx, cancel := context.WithTimeout(ctx, 10*r.period)
	defer cancel()
	s, err := r.h.NewStream(sctx, id, ProtoSWIMSync)
	if err != nil {
		return err
	}
	defer s.Close()
	_ = s.SetDeadline(time.Now().Add(10 * r.period))
	r.mu.Lock()
	self := r.node.Self().Data
	r.mu.Unlock()
	if err := writeRecords(s, [][]byte{self}); err != nil {
		s.Reset()
		return err
	}
	_ = s.CloseWrite()
	recs, err := readRecords(bufio.NewReader(s))
	if err != nil {
		s.Reset()
		return err
	}
	r.mu.Lock()
	r.via = id
	r.node.Merge(time.Now(), recs, false)
	r.via = ""
	r.mu.Unlock()
	r.flush()
	return nil
}

// serveSync answers a full-state exchange: it takes the requester's record
// (spread as a change) and answers with every record it holds.
func (r *swimRunner) serveSync(s network.Stream) {
	defer s.Close()
	from := s.Conn().RemotePeer()
	_ = s.SetDeadline(time.Now().Add(10 * r.period))
	if !r.limit.allow(from, swimRate, 4*swimRate, time.Now()) {
		s.Reset()
		return
	}
	recs, err := readRecords(bufio.NewReader(s))
	if err != nil || len(recs) != 1 {
		s.Reset()
		return
	}
	if rec, _, err := r.open(recs[0]); err != nil || peer.ID(rec.ID) != from {
		r.log.Debug("overlay: swim join refused", "from", shortID(from), "err", err)
		if r.refused != nil {
			r.refused()
		}
		s.Reset()
		return
	}
	r.mu.Lock()
	r.via = from
	r.node.Merge(time.Now(), recs, true)
	r.via = ""
	all := r.node.Records()
	r.mu.Unlock()
	r.flush()
	if err := writeRecords(s, all); err != nil {
		s.Reset()
	}
}

func writeRecords(w io.Writer, recs [][]byte) error {
	var b []byte
	for _, rec := range recs {
		b = protowire.AppendTag(b, 1, protowire.BytesType)
		b = protowire.AppendBytes(b, rec)
	}
	frame := binary.AppendUvarint(nil, uint64(len(b)))
	_, err := w.Write(append(frame, b...))
	return err
}

func readRecords(br *bufio.Reader) ([][]byte, error) {
	b, err := readFrame(br, maxSWIMSyncBytes)
	if err != nil {
		return nil, err
	}
	var out [][]byte
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 || num != 1 || typ != protowire.BytesType {
			return nil, errors.New("swim sync: malformed")
		}
		v, m := protowire.ConsumeBytes(b[n:])
		if m < 0 {
			return nil, errors.New("swim sync: malformed")
		}
		out = append(out, v)
		b = b[n+m:]
	}
	return out, nil
}

func readFrame(br *bufio.Reader, limit int) ([]byte, error) {
	n, err := binary.ReadUvarint(br)
	if err != nil {
		return nil, err
	}
	if n > uint64(limit) {
		return nil, fmt.Errorf("frame of %d bytes exceeds %d", n, limit)
	}
	b := make([]byte, n)
	_, err = io.ReadFull(br, b)
	return b, err
}

// leave seals this member's leaving record, sends it to its neighbours at
// once (and spreads it as any change), and waits until each answered or
// ctx ends.
func (r *swimRunner) leave(ctx context.Context) error {
	data, err := r.seal(0, true)
	if err != nil || data == nil {
		return err
	}
	r.mu.Lock()
	err = r.node.SetSelf(time.Now(), data)
	r.mu.Unlock()
	if err != nil {
		return err
	}
	r.flush()
	t := time.NewTicker(20 * time.Millisecond)
	defer t.Stop()
	for {
		r.mu.Lock()
		acked, sent := r.node.Leaving()
		r.mu.Unlock()
		if acked == sent {
			r.log.Info("overlay: left", "told", sent)
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("overlay: leave: %d of %d neighbours answered", acked, sent)
		case <-t.C:
		}
	}
}

// fail declares a member dead because the SWIM protocol did (suspected,
// not refuted in time).
func (m *Members) fail(id peer.ID, now time.Time) {
	m.mu.Lock()
	st, ok := m.byID[id]
	if !ok || st.dead {
		m.mu.Unlock()
		return
	}
	ev := MemberEvent{Peer: id, Dead: true, Reason: ReasonFailed, Silence: now.Sub(st.lastSeen), LastSeen: st.lastSeen}
	st.dead, st.reason, st.deadAt = true, ReasonFailed, now
	st.lastSeen = now // forgotten memberForget after its death
	m.rebuild()
	ls := m.listeners
	m.mu.Unlock()
	m.log.Info("overlay: peer declared dead", "peer", id, "reason", ReasonFailed, "by", "swim")
	for _, fn := range ls {
		fn(ev)
	}
}

// swimHeartbeat is a Peer's record content: its next heartbeat, with a
// seq above minSeq.
func (p *Peer) swimHeartbeat(minSeq uint64, leaving bool) ([]byte, error) {
	p.hbMu.Lock()
	p.hbSeq = max(p.hbSeq, minSeq)
	p.hbMu.Unlock()
	return p.nextHeartbeat(leaving)
}

// SWIMPending is the number of membership changes this peer still has to
// piggyback (0 with heartbeat membership): a formed network is quiet once
// every peer's is 0.
func (p *Peer) SWIMPending() int {
	if p.swim == nil {
		return 0
	}
	p.swim.mu.Lock()
	defer p.swim.mu.Unlock()
	return p.swim.node.Pending()
}

// SWIMStats returns what this peer's SWIM protocol did since it opened
// (zero with heartbeat membership).
func (p *Peer) SWIMStats() swim.Stats {
	if p.swim == nil {
		return swim.Stats{}
	}
	p.swim.mu.Lock()
	defer p.swim.mu.Unlock()
	return p.swim.node.Stats()
}
