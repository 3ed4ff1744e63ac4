package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// HandoffSink receives URLs handed off to this peer (the crawler's durable
// frontier implements it). Accept must return only once the URLs are
// durably queued: the sender forgets them on our acknowledgement.
type HandoffSink interface {
	Accept(ctx context.Context, urls []string) error
}

// HandoffLedger keeps what a crawler handed to whom, so that the URLs are
// routed again if their owner dies (the node's ledger). Whoever hands URLs
// off records them under the owner it routed them to; Delivered records
// those an owner acknowledged that were spooled for no owner (none could
// be decided then) or for another one (the subnet moved meanwhile). It is
// called before they leave the spool; an error is logged, not retried.
type HandoffLedger interface {
	Delivered(owner delegation.CrawlerID, urls []string) error
}

// handoffQueue batches URLs per subnet and block and delivers them to their
// owner over /micra/handoff/1, re-sending unacknowledged batches (to the new
// owner if ownership moved meanwhile). Every queued URL is first in the
// durable spool, and leaves it only once its owner acknowledged it.
type handoffQueue struct {
	p     *Peer
	spool *spool
	mu    sync.Mutex
	pend  map[handoffKey]*pending
	kick  chan struct{}

	// closeMu keeps Close from closing the spool under a Handoff call.
	closeMu sync.RWMutex
	closed  bool

	seq      atomic.Uint64 // next spool sequence number
	batchSeq atomic.Uint64
	// Stats.
	messages, urls, resent, failures, reloaded atomic.Uint64
}

// handoffKey is what URLs wait under: their subnet and the block of their
// hosts (BlockOf; a delegation record may give a block to another crawler
// than the subnet's owner), the zero block when no address is known.
type handoffKey struct {
	s     hierarchy.NodeID
	block netip.Prefix
}

func keyOf(s hierarchy.NodeID, ip netip.Addr) handoffKey {
	k := handoffKey{s: s}
	if ip.IsValid() {
		k.block = delegation.BlockOf(ip)
	}
	return k
}

type pending struct {
	ip    netip.Addr           // any address in the key's block, to find its owner (and re-delegate if the owner died)
	owner delegation.CrawlerID // the owner the latest URLs were routed to, under record epoch
	epoch uint64
	// mixed: some of ents were spooled for no owner or another owner than
	// owner (HandoffLedger is told of them whoever acknowledges them)
	mixed   bool
	ents    []spoolEntry // spooled chunks, oldest first
	n       int          // URLs in ents
	retryAt time.Time
	backoff time.Duration
}

// HandoffStats counts hand-off traffic (UbiCrawler's bound: fewer URL
// messages than crawled pages).
type HandoffStats struct {
	Messages uint64 // batches acknowledged by a remote owner
	URLs     uint64 // URLs in them
	Resent   uint64 // batches sent again after a failure
	Failures uint64 // failed attempts
	Reloaded uint64 // URLs found in the spool at start (queued before a restart)
	Pending  int    // URLs waiting
}

// newHandoffQueue opens the spool and reloads what a previous run left in
// it; the first flush re-sends it to the subnets' current owners.
func newHandoffQueue(p *Peer) (*handoffQueue, error) {
	sp, err := openSpool(p.cfg.HandoffDir, p.cfg.HandoffInMemory, p.cfg.HandoffSyncWrites, p.log)
	if err != nil {
		return nil, err
	}
	q := &handoffQueue{p: p, spool: sp, kick: make(chan struct{}, 1)}
	pend, n, err := sp.load(p.tree, p.log)
	if err != nil {
		sp.close()
		return nil, err
	}
	q.pend = pend
	q.seq.Store(sp.seq)
	q.reloaded.Store(uint64(n))
	p.members.OnChange(func(ev MemberEvent) {
		if !ev.Dead {
			q.wake(delegation.CrawlerID(ev.Peer.String()))
		}
	})
	if n > 0 {
		p.log.Info("overlay: reloaded unacknowledged hand-offs", "urls", n, "subnets", len(pend))
		q.kick <- struct{}{}
	}
	return q, nil
}

// Handoff queues urls (all in subnet s, their hosts in ip's block) for
// their owner. It returns nil only once they are durably in the spool (Badger,
// fsynced unless Config.HandoffSyncWrites is off); from then on they are
// delivered at least once to their owner of the moment, across
// restarts, and leave the spool only on the owner's acknowledgement.
func (p *Peer) Handoff(ctx context.Context, s hierarchy.NodeID, ip netip.Addr, urls ...string) error {
	return p.HandoffAll(ctx, []HandoffItem{{Subnet: s, IP: ip, URLs: urls}})
}

// HandoffItem is one subnet's URLs for HandoffAll.
type HandoffItem struct {
	Subnet hierarchy.NodeID
	// IP is an address of the URLs' hosts, which must share its block
	// (delegation.BlockOf): it finds their owner, and delegates the subnet
	// if nobody owns it.
	IP   netip.Addr
	URLs []string
	// Owner and Epoch are who the sender routed the URLs to and the epoch
	// of the record it read: while the cached record keeps that epoch (and
	// the owner lives), the flush sends to Owner without working it out
	// again. Zero: worked out at the flush.
	Owner delegation.CrawlerID
	Epoch uint64
}

// HandoffAll is Handoff for several subnets at once — a page's foreign
// links — in one durable commit (one fsync instead of one per subnet). All
// items are checked first; on error none is queued.
func (p *Peer) HandoffAll(ctx context.Context, items []HandoffItem) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	type chunked struct {
		HandoffItem
		chunks [][]string
	}
	var todo []chunked
	nchunks := 0
	for _, it := range items {
		if len(it.URLs) == 0 {
			continue
		}
		if int(it.Subnet) >= p.tree.Len() {
			return fmt.Errorf("overlay: handoff: subnet %d not in the hierarchy (%d nodes)", it.Subnet, p.tree.Len())
		}
		for i, u := range it.URLs {
			if len(u) == 0 || len(u) > maxURLLen {
				return fmt.Errorf("overlay: handoff: subnet %d url %d (%.80q) has %d bytes (1..%d allowed)", it.Subnet, i, u, len(u), maxURLLen)
			}
		}
		c := chunked{HandoffItem: it}
		for rest := it.URLs; len(rest) > 0; {
			n, size := 0, 0
			for n < len(rest) && n < maxHandoffURLs && (n == 0 || size+len(rest[n]) <= maxSpoolChunkBytes) {
				size += len(rest[n])
				n++
			}
			c.chunks = append(c.chunks, slices.Clone(rest[:n]))
			rest = rest[n:]
		}
		nchunks += len(c.chunks)
		todo = append(todo, c)
	}
	if len(todo) == 0 {
		return nil
	}
	q := p.handoff
	q.closeMu.RLock()
	if q.closed {
		q.closeMu.RUnlock()
		return errors.New("overlay: handoff: peer closed")
	}
	seq := q.seq.Add(uint64(nchunks)) - uint64(nchunks)
	puts := make([]spoolPut, len(todo))
	for i, c := range todo {
		puts[i] = spoolPut{s: c.Subnet, ip: c.IP, first: seq, chunks: c.chunks}
		seq += uint64(len(c.chunks))
	}
	ents, err := q.spool.put(puts)
	q.closeMu.RUnlock()
	if err != nil {
		return err
	}
	full, now := false, time.Now()
	q.mu.Lock()
	for i, c := range todo {
		k := keyOf(c.Subnet, c.IP)
		e, ok := q.pend[k]
		if !ok {
			e = &pending{}
			q.pend[k] = e
		}
		if c.IP.IsValid() {
			e.ip = c.IP
		}
		e.mixed = e.mixed || c.Owner == "" || (len(e.ents) > 0 && e.owner != c.Owner)
		e.owner, e.epoch = c.Owner, c.Epoch
		e.ents = append(e.ents, ents[i]...)
		e.n += len(c.URLs)
		// (a queue waiting out its back-off is not sent now: kicking a
		// flush for it would only send the others early, page after page)
		full = full || (e.n >= p.cfg.HandoffBatch && !now.Before(e.retryAt))
	}
	q.mu.Unlock()
	if full {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
	return nil
}

// HandoffStats returns the hand-off counters.
func (p *Peer) HandoffStats() HandoffStats {
	q := p.handoff
	q.mu.Lock()
	n := 0
	for _, e := range q.pend {
		n += e.n
	}
	q.mu.Unlock()
	return HandoffStats{Messages: q.messages.Load(), URLs: q.urls.Load(), Resent: q.resent.Load(),
		Failures: q.failures.Load(), Reloaded: q.reloaded.Load(), Pending: n}
}

// close stops new hand-offs and closes the spool; call after run returned.
func (q *handoffQueue) close() error {
	q.closeMu.Lock()
	defer q.closeMu.Unlock()
	if q.closed {
		return nil
	}
	q.closed = true
	return q.spool.close()
}

func (q *handoffQueue) run(ctx context.Context) {
	t := time.NewTicker(q.p.cfg.HandoffInterval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		case <-q.kick:
		}
		q.flush(ctx)
	}
}

// wake makes the URLs waiting for owner due now: it is back (a stall, a
// restart, a healed partition) and held its subnets meanwhile
// (Members.IsLive), so nothing else would deliver them before the
// back-off of the failed sends is over. URLs routed to no owner (no
// quorum, a failed decision) are due too: the return may bring one back.
func (q *handoffQueue) wake(owner delegation.CrawlerID) {
	q.mu.Lock()
	n := 0
	for _, e := range q.pend {
		if (e.owner == owner || e.owner == "") && e.n > 0 {
			e.backoff, e.retryAt = 0, time.Time{}
			n++
		}
	}
	q.mu.Unlock()
	if n == 0 {
		return
	}
	select {
	case q.kick <- struct{}{}:
	default: // a flush is due anyway
	}
}

// flush resolves the owner of every subnet that is due and sends each
// owner one message carrying all its subnets' URLs (split at the message
// limit).
func (q *handoffQueue) flush(ctx context.Context) {
	now := time.Now()
	type item struct {
		k     handoffKey
		ip    netip.Addr
		owner delegation.CrawlerID
		epoch uint64
		urls  []string
		bytes int // of the urls
		ents  int // spool entries the urls come from (a prefix of pending.ents)
		mixed bool
		retry bool
	}
	var due []item
	q.mu.Lock()
	for k, e := range q.pend {
		if e.n == 0 || now.Before(e.retryAt) {
			continue
		}
		// Whole spool entries, up to one message's worth (an entry holds
		// at most maxHandoffURLs, so at least one fits).
		it := item{k: k, ip: e.ip, owner: e.owner, epoch: e.epoch, mixed: e.mixed, retry: e.backoff > 0}
		for _, en := range e.ents {
			b := urlBytes(en.urls)
			if it.ents > 0 && (len(it.urls)+len(en.urls) > maxHandoffURLs || it.bytes+b > maxHandoffPayload) {
				break
			}
			it.urls, it.bytes = append(it.urls, en.urls...), it.bytes+b
			it.ents++
		}
		due = append(due, it)
	}
	q.mu.Unlock()
	if len(due) == 0 {
		return
	}
	byOwner := map[delegation.CrawlerID][]item{}
	var failed []item
	for _, it := range due {
		owner, err := q.p.routedOwner(ctx, it.k.s, it.ip, it.owner, it.epoch)
		if err != nil {
			q.p.log.Debug("overlay: hand-off owner unknown; will retry", "subnet", it.k.s, "err", err)
			failed = append(failed, it)
			continue
		}
		byOwner[owner] = append(byOwner[owner], it)
	}
	// Split each owner's items into messages of at most maxHandoffURLs
	// URLs; every message reports on its own, so the results channel holds
	// one per message (one per owner would block the second message of an
	// owner, and with it the flush, for good).
	type message struct {
		owner delegation.CrawlerID
		items []item
	}
	var msgs []message
	for owner, items := range byOwner {
		var cur []item
		size, bytes := 0, 0
		for _, it := range items {
			if (size+len(it.urls) > maxHandoffURLs || bytes+it.bytes > maxHandoffPayload) && len(cur) > 0 {
				msgs, cur, size, bytes = append(msgs, message{owner, cur}), nil, 0, 0
			}
			cur, size, bytes = append(cur, it), size+len(it.urls), bytes+it.bytes
		}
		msgs = append(msgs, message{owner, cur})
	}
	results := make(chan map[handoffKey]bool, len(msgs)) // key → acknowledged
	var wg sync.WaitGroup
	for _, msg := range msgs {
		owner, m := msg.owner, msg.items
		wg.Add(1)
		go func() {
			defer wg.Done()
			res := map[handoffKey]bool{}
			batches := make([]*pb.HandoffBatch, len(m))
			for i, it := range m {
				batches[i] = &pb.HandoffBatch{Subnet: uint32(it.k.s), Urls: it.urls}
				if it.ip.IsValid() {
					batches[i].Addr = it.ip.AsSlice()
				}
				if it.retry {
					q.resent.Add(1)
				}
			}
			acked, err := q.deliver(ctx, owner, batches)
			if err != nil && ctx.Err() == nil {
				q.p.log.Debug("overlay: hand-off failed; will resend", "owner", owner, "batches", len(m), "err", err)
			}
			for i, it := range m {
				res[it.k] = err == nil && acked[i]
			}
			results <- res
		}()
	}
	wg.Wait()
	close(results)
	acked := map[handoffKey]bool{}
	for res := range results {
		for k, ok := range res {
			acked[k] = ok
		}
	}
	for _, it := range failed {
		acked[it.k] = false
	}
	if l := q.p.ledger; l != nil {
		// URLs acknowledged by an owner they were not spooled for: the
		// ledger records them under it before they leave the spool
		for owner, items := range byOwner {
			var urls []string
			for _, it := range items {
				if acked[it.k] && (it.owner != owner || it.mixed) && owner != q.p.selfID {
					urls = append(urls, it.urls...)
				}
			}
			if len(urls) == 0 {
				continue
			}
			if err := l.Delivered(owner, urls); err != nil {
				q.p.log.Warn("overlay: hand-off ledger not written; these URLs are not routed again if their owner dies",
					"owner", owner, "urls", len(urls), "err", err)
			}
		}
	}
	// Acknowledged entries leave the spool first, then memory. Only this
	// goroutine removes entries, so the prefix taken above is still there
	// (Handoff only appends).
	var done [][]byte
	q.mu.Lock()
	for _, it := range due {
		if acked[it.k] {
			for _, en := range q.pend[it.k].ents[:it.ents] {
				done = append(done, en.key)
			}
		}
	}
	q.mu.Unlock()
	if len(done) > 0 {
		if err := q.spool.remove(done); err != nil {
			// Delivered but still spooled: a restart sends them again
			// (at-least-once), nothing is lost.
			q.p.log.Error("overlay: removing acknowledged hand-offs from the spool", "entries", len(done), "err", err)
		}
	}
	q.mu.Lock()
	defer q.mu.Unlock()
	for _, it := range due {
		e := q.pend[it.k]
		if !acked[it.k] {
			q.failures.Add(1)
			e.backoff = min(max(2*e.backoff, q.p.cfg.HandoffInterval), 30*time.Second)
			e.retryAt = time.Now().Add(e.backoff)
			continue
		}
		// Acknowledged: drop exactly the entries sent (more may have been appended).
		clear(e.ents[:it.ents])
		e.ents = e.ents[it.ents:]
		e.n -= len(it.urls)
		e.backoff, e.retryAt = 0, time.Time{}
		if len(e.ents) == 0 {
			delete(q.pend, it.k)
		}
	}
}

// deliver hands batches to owner and returns, per batch, whether it was
// acknowledged.
func (q *handoffQueue) deliver(ctx context.Context, owner delegation.CrawlerID, batches []*pb.HandoffBatch) ([]bool, error) {
	p := q.p
	acked := make([]bool, len(batches))
	if owner == p.selfID {
		if p.sink == nil {
			return nil, errors.New("handoff: this peer owns the subnets but has no sink")
		}
		var urls []string
		for _, b := range batches {
			urls = append(urls, b.Urls...)
		}
		if err := p.sink.Accept(ctx, urls); err != nil {
			return nil, err
		}
		for i := range acked {
			acked[i] = true
		}
		return acked, nil
	}
	id, err := peer.Decode(string(owner))
	if err != nil {
		return nil, err
	}
	req := &pb.HandoffRequest{Version: wireVersion, BatchId: q.batchSeq.Add(1), Snapshot: p.snap[:], Batches: batches}
	var resp pb.HandoffResponse
	if err := roundTrip(ctx, p.h, id, ProtoHandoff, maxHandoffMsg, p.cfg.RequestTimeout, req, &resp); err != nil {
		return nil, err
	}
	if err := remoteErr(id, ProtoHandoff, resp.Status, resp.Error); err != nil {
		return nil, err
	}
	refused := make([]bool, len(batches))
	if len(resp.NotOwnerBatch) > 0 {
		for _, i := range resp.NotOwnerBatch {
			if int(i) >= len(batches) {
				return nil, fmt.Errorf("handoff: %s refused batch %d of %d", shortID(id), i, len(batches))
			}
			refused[i] = true
		}
	} else {
		// a receiver that names subnets only: every batch of them
		subs := map[uint32]bool{}
		for _, s := range resp.NotOwner {
			subs[s] = true
		}
		for i, b := range batches {
			refused[i] = subs[b.Subnet]
		}
	}
	want := 0
	for i, b := range batches {
		if refused[i] {
			p.dir.Invalidate(hierarchy.NodeID(b.Subnet)) // our view is stale: re-read the DHT before the resend
			continue
		}
		want += len(b.Urls)
	}
	if resp.BatchId != req.BatchId || int(resp.Accepted) != want {
		return nil, fmt.Errorf("handoff: %s acknowledged batch %d with %d urls, sent batch %d with %d", shortID(id), resp.BatchId, resp.Accepted, req.BatchId, want)
	}
	for i := range acked {
		acked[i] = !refused[i]
	}
	p.audit.delivered(owner, batches, acked) // its crawl progress is checked at the sink later
	q.messages.Add(1)
	q.urls.Add(uint64(want))
	return acked, nil
}

// routedOwner is the owner to send a pending group to: the owner its URLs were routed
// to while the cached record still has the epoch they were routed under
// and that owner lives, else worked out again (ownerFor).
func (p *Peer) routedOwner(ctx context.Context, s hierarchy.NodeID, ip netip.Addr, owner delegation.CrawlerID, epoch uint64) (delegation.CrawlerID, error) {
	if owner != "" && epoch != 0 {
		if rec, ok := p.dir.Cached(s); ok && rec.Epoch == epoch && p.blockOwner(rec, ip) == owner && p.members.IsLive(owner) {
			return owner, nil
		}
	}
	return p.ownerFor(ctx, s, ip)
}

// ownerFor returns the live owner of ip's block in s — the block's if the
// record delegates it to a live crawler, else the subnet's — re-delegating
// (through the policy) when the recorded owner is dead or the subnet was
// never delegated.
func (p *Peer) ownerFor(ctx context.Context, s hierarchy.NodeID, ip netip.Addr) (delegation.CrawlerID, error) {
	if rec, ok := p.dir.Cached(s); ok {
		return p.blockOwner(rec, ip), nil
	}
	// Just started (e.g. with a reloaded spool): until the DHT has peers
	// and every member's heartbeat had time to arrive, a lookup finds no
	// record and a decision (hashed ones are not published) would be made
	// over a membership of one — sending URLs to a wrong owner. A peer
	// without bootstrap peers is a network of one and need not wait.
	if len(p.cfg.Bootstrap) > 0 {
		if p.dht.RoutingTable().Size() == 0 {
			return "", errors.New("handoff: not connected to the overlay yet")
		}
		if up := time.Since(p.members.started); up < 2*p.cfg.HeartbeatInterval {
			return "", fmt.Errorf("handoff: membership still forming (up %v)", up.Round(time.Millisecond))
		}
	}
	rec, ok, err := p.dir.Lookup(ctx, s)
	if err != nil {
		return "", err
	}
	if ok {
		return p.blockOwner(rec, ip), nil
	}
	if !ip.IsValid() {
		return "", fmt.Errorf("handoff: subnet %d has no live owner and no address to delegate it by", s)
	}
	d, err := p.Delegate(ctx, ip)
	if err != nil {
		return "", err
	}
	return d.Owner, nil
}

// CachedOwner returns the live owner of ip as this peer's cache knows it —
// its block's owner if the record delegates the block to a live crawler,
// else its subnet's — without a lookup, a decision or any bookkeeping; ok
// is false when no record with a live owner is cached for ip's subnet.
func (p *Peer) CachedOwner(ip netip.Addr) (delegation.CrawlerID, bool) {
	owner, _, ok := p.CachedRoute(ip)
	return owner, ok
}

// CachedRoute is CachedOwner with the record the owner was read from (its
// epoch names the routing), from one read of the cache.
func (p *Peer) CachedRoute(ip netip.Addr) (delegation.CrawlerID, delegation.Record, bool) {
	s := p.tree.SmallestNonUnary(ip)
	if s == hierarchy.None {
		return "", delegation.Record{}, false
	}
	rec, ok := p.dir.Cached(s)
	if !ok {
		return "", delegation.Record{}, false
	}
	return p.blockOwner(rec, ip), rec, true
}

// CachedRecord returns the cached record of subnet s if its owner is live
// (Directory.Cached).
func (p *Peer) CachedRecord(s hierarchy.NodeID) (delegation.Record, bool) { return p.dir.Cached(s) }

// blockOwner is who crawls ip under rec by this peer's liveness view
// (delegation.Record.OwnerOf).
func (p *Peer) blockOwner(rec delegation.Record, ip netip.Addr) delegation.CrawlerID {
	return rec.OwnerOf(ip, p.members.IsLive)
}

// handleHandoff serves /micra/handoff/1. The request may be up to 4 MiB, so
// it is read like a bulk transfer (see roundTrip): bytes must come every
// RequestTimeout — a sender that stalls is dropped after that — and the
// whole of it within exchangeBudget of a full message (RequestTimeout + 64
// s), so a sender on a slow link is not cut, and one trickling a byte per
// RequestTimeout not held for ever. The answer is small and keeps a bound
// of RequestTimeout.
func (p *Peer) handleHandoff(s network.Stream) {
	defer s.Close()
	rt := p.cfg.RequestTimeout
	if from := s.Conn().RemotePeer(); !p.isMember(from) {
		// only members hand off: anyone else could fill this crawler's
		// frontier and disk and steer its crawl. Refused before the
		// message is read; an honest sender not heard of yet retries.
		p.metrics.handoffsRefused.Inc()
		st := newStream(s, maxHandoffMsg, rt)
		_ = st.write(&pb.HandoffResponse{Version: wireVersion, Status: pb.Status_REFUSED,
			Error: fmt.Sprintf("%s is not a live member of this network", shortID(from))})
		return // (closed: the request is not read)
	}
	st := newIdleStream(s, maxHandoffMsg, rt, time.Now().Add(exchangeBudget(rt, maxHandoffMsg)))
	// a member's flood would fill this crawler's frontier, disk and memory
	// and steer its crawl: its URLs are counted against its quota as they
	// are read (handoff_read.go), with few of its messages read at once; the
	// sender's spool keeps what is refused and retries
	from := s.Conn().RemotePeer()
	limited := func(why string) {
		p.metrics.handoffsRefused.Inc()
		_ = st.write(&pb.HandoffResponse{Version: wireVersion, Status: pb.Status_UNAVAILABLE, Error: why})
	}
	if !p.handoffReads.enter(from) {
		limited(fmt.Sprintf("rate limited: a member may have %d hand-offs read at once", maxHandoffsInFlight))
		return
	}
	defer p.handoffReads.leave(from)
	q := &quotaTaker{lim: p.handoffLimit.limiter(from, handoffRate, handoffBurst), now: p.now()}
	req, err := readHandoff(st.r, maxHandoffMsg, q)
	if errors.Is(err, errHandoffQuota) {
		q.refund()
		limited(fmt.Sprintf("rate limited: a member may hand off %d URLs a second (%d at once)", handoffRate, handoffBurst))
		return
	}
	if err != nil {
		q.refund()
		s.Reset()
		return
	}
	q.settle()
	resp := &pb.HandoffResponse{Version: wireVersion, BatchId: req.BatchId}
	resp.Status, resp.Error, resp.Accepted, resp.NotOwnerBatch = p.acceptHandoff(req)
	st.setEnd(time.Now().Add(rt))
	seen := map[uint32]bool{}
	for _, i := range resp.NotOwnerBatch {
		if s := req.Batches[i].Subnet; !seen[s] {
			seen[s] = true
			resp.NotOwner = append(resp.NotOwner, s) // for senders that read subnets only
		}
	}
	if err := st.write(resp); err != nil {
		s.Reset()
	}
}

// acceptHandoff checks a hand-off and passes the URLs of the batches this
// peer may own to the sink; it acknowledges only after the sink has them
// durably. It returns the indexes of the batches it refused.
func (p *Peer) acceptHandoff(req *pb.HandoffRequest) (pb.Status, string, uint32, []uint32) {
	if string(req.Snapshot) != string(p.snap[:]) {
		return pb.Status_WRONG_SNAPSHOT, "hierarchy snapshot differs", 0, nil
	}
	if p.sink == nil {
		return pb.Status_UNAVAILABLE, "this peer does not crawl (no hand-off sink)", 0, nil
	}
	if len(req.Batches) == 0 {
		return pb.Status_BAD_REQUEST, "no batches", 0, nil
	}
	total := 0
	for _, b := range req.Batches {
		total += len(b.Urls)
		if int(b.Subnet) >= p.tree.Len() {
			return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d not in the hierarchy", b.Subnet), 0, nil
		}
		for i, u := range b.Urls {
			if len(u) == 0 || len(u) > maxURLLen {
				return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d url %d has %d bytes", b.Subnet, i, len(u)), 0, nil
			}
		}
	}
	if total == 0 || total > maxHandoffURLs {
		return pb.Status_BAD_REQUEST, fmt.Sprintf("%d urls (1..%d allowed)", total, maxHandoffURLs), 0, nil
	}
	var urls []string
	var notOwner []uint32
	for i, b := range req.Batches {
		var addr netip.Addr
		if len(b.Addr) > 0 {
			a, ok := netip.AddrFromSlice(b.Addr)
			if !ok {
				return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d: address of %d bytes", b.Subnet, len(b.Addr)), 0, nil
			}
			addr = a
			if !p.tree.Contains(hierarchy.NodeID(b.Subnet), addr) {
				return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d: address %v is not in it", b.Subnet, addr), 0, nil
			}
		}
		// Refuse only when a live peer holds the subnet (or the batch's
		// block) by our cache; a lazily delegated subnet we have not heard
		// of yet is accepted.
		if rec, ok := p.dir.get(hierarchy.NodeID(b.Subnet)); ok {
			if o := p.blockOwner(rec, addr); o != p.selfID && p.members.IsLive(o) {
				// the sender read another record: ours may be the old one
				p.dir.Recheck(hierarchy.NodeID(b.Subnet))
				notOwner = append(notOwner, uint32(i))
				continue
			}
		}
		urls = append(urls, b.Urls...)
	}
	if len(urls) > 0 {
		ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RequestTimeout)
		defer cancel()
		if err := p.sink.Accept(ctx, urls); err != nil {
			return pb.Status_UNAVAILABLE, "sink: " + err.Error(), 0, nil
		}
	}
	return pb.Status_OK, "", uint32(len(urls)), notOwner
}

// handoffRate and handoffBurst bound the URLs one member hands this peer:
// a crawler hands off the links of the pages it fetches, far below this,
// and a burst (seeds, a dead owner's URLs re-routed) waits in the sender's
// spool for the bucket to refill.
const (
	handoffRate  = 2000
	handoffBurst = 3 * maxHandoffURLs
)

// maxHandoffPayload bounds the URL bytes of one hand-off message: 4096 URLs
// of up to 8 KiB would pass maxHandoffURLs and still exceed maxHandoffMsg,
// and a message refused for its size would be rebuilt the same for ever.
// (Framing is at most 3 bytes a URL, 12 KiB for a full message.)
const maxHandoffPayload = maxHandoffMsg - 64<<10

// urlBytes is the length of urls together.
func urlBytes(urls []string) int {
	n := 0
	for _, u := range urls {
		n += len(u)
	}
	return n
}
