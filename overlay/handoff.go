package overlay

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
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

// handoffQueue batches URLs per subnet and delivers them to the subnet's
// owner over /micra/handoff/1, re-sending unacknowledged batches (to the new
// owner if ownership moved meanwhile).
type handoffQueue struct {
	p    *Peer
	mu   sync.Mutex
	pend map[hierarchy.NodeID]*pending
	kick chan struct{}

	batchSeq atomic.Uint64
	// Stats.
	messages, urls, resent, failures atomic.Uint64
}

type pending struct {
	ip      netip.Addr // any address in the subnet, to re-delegate if the owner died
	urls    []string
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
	Pending  int    // URLs waiting
}

func newHandoffQueue(p *Peer) *handoffQueue {
	return &handoffQueue{p: p, pend: make(map[hierarchy.NodeID]*pending), kick: make(chan struct{}, 1)}
}

// Handoff queues urls (all in subnet s, reached at ip) for the subnet's owner.
func (p *Peer) Handoff(s hierarchy.NodeID, ip netip.Addr, urls ...string) {
	q := p.handoff
	q.mu.Lock()
	e, ok := q.pend[s]
	if !ok {
		e = &pending{ip: ip}
		q.pend[s] = e
	}
	e.urls = append(e.urls, urls...)
	full := len(e.urls) >= p.cfg.HandoffBatch
	q.mu.Unlock()
	if full {
		select {
		case q.kick <- struct{}{}:
		default:
		}
	}
}

// HandoffStats returns the hand-off counters.
func (p *Peer) HandoffStats() HandoffStats {
	q := p.handoff
	q.mu.Lock()
	n := 0
	for _, e := range q.pend {
		n += len(e.urls)
	}
	q.mu.Unlock()
	return HandoffStats{Messages: q.messages.Load(), URLs: q.urls.Load(), Resent: q.resent.Load(), Failures: q.failures.Load(), Pending: n}
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

// flush sends one batch per subnet that is due.
func (q *handoffQueue) flush(ctx context.Context) {
	now := time.Now()
	type job struct {
		s     hierarchy.NodeID
		ip    netip.Addr
		urls  []string
		retry bool
	}
	var jobs []job
	q.mu.Lock()
	for s, e := range q.pend {
		if len(e.urls) == 0 || now.Before(e.retryAt) {
			continue
		}
		n := min(len(e.urls), q.p.cfg.HandoffBatch)
		jobs = append(jobs, job{s, e.ip, e.urls[:n:n], e.backoff > 0})
	}
	q.mu.Unlock()
	var wg sync.WaitGroup
	for _, j := range jobs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if j.retry {
				q.resent.Add(1)
			}
			err := q.deliver(ctx, j.s, j.ip, j.urls)
			q.mu.Lock()
			defer q.mu.Unlock()
			e := q.pend[j.s]
			if err != nil {
				q.failures.Add(1)
				e.backoff = min(max(2*e.backoff, q.p.cfg.HandoffInterval), 30*time.Second)
				e.retryAt = time.Now().Add(e.backoff)
				if ctx.Err() == nil {
					q.p.log.Debug("overlay: hand-off failed; will resend", "subnet", j.s, "urls", len(j.urls), "err", err)
				}
				return
			}
			// Acknowledged: drop exactly the URLs sent (more may have been appended).
			e.urls = e.urls[len(j.urls):]
			e.backoff, e.retryAt = 0, time.Time{}
			if len(e.urls) == 0 {
				delete(q.pend, j.s)
			}
		}()
	}
	wg.Wait()
}

// deliver resolves the subnet's current owner and hands the batch to it.
func (q *handoffQueue) deliver(ctx context.Context, s hierarchy.NodeID, ip netip.Addr, urls []string) error {
	p := q.p
	owner, err := p.ownerFor(ctx, s, ip)
	if err != nil {
		return err
	}
	if owner == p.selfID {
		if p.sink == nil {
			return errors.New("handoff: this peer owns the subnet but has no sink")
		}
		return p.sink.Accept(ctx, urls)
	}
	id, err := peer.Decode(string(owner))
	if err != nil {
		return err
	}
	req := &pb.HandoffRequest{Version: wireVersion, BatchId: q.batchSeq.Add(1), Subnet: uint32(s), Snapshot: p.snap[:], Urls: urls}
	var resp pb.HandoffResponse
	if err := roundTrip(ctx, p.h, id, ProtoHandoff, maxHandoffMsg, p.cfg.RequestTimeout, req, &resp); err != nil {
		return err
	}
	if resp.Status == pb.Status_NOT_OWNER {
		// Our view is stale: re-read the DHT before the resend.
		p.dir.Invalidate(s)
	}
	if err := remoteErr(id, ProtoHandoff, resp.Status, resp.Error); err != nil {
		return err
	}
	if resp.BatchId != req.BatchId || int(resp.Accepted) != len(urls) {
		return fmt.Errorf("handoff: %s acknowledged batch %d/%d urls, sent %d/%d", shortID(id), resp.BatchId, resp.Accepted, req.BatchId, len(urls))
	}
	q.messages.Add(1)
	q.urls.Add(uint64(len(urls)))
	return nil
}

// ownerFor returns the live owner of s, re-delegating (through the policy)
// when the recorded owner is dead or the subnet was never delegated.
func (p *Peer) ownerFor(ctx context.Context, s hierarchy.NodeID, ip netip.Addr) (delegation.CrawlerID, error) {
	if rec, ok := p.dir.Cached(s); ok {
		return rec.Owner, nil
	}
	rec, ok, err := p.dir.Lookup(ctx, s)
	if err != nil {
		return "", err
	}
	if ok {
		return rec.Owner, nil
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

func (p *Peer) handleHandoff(s network.Stream) {
	defer s.Close()
	st := newStream(s, maxHandoffMsg, p.cfg.RequestTimeout)
	var req pb.HandoffRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	resp := &pb.HandoffResponse{Version: wireVersion, BatchId: req.BatchId}
	resp.Status, resp.Error = p.acceptHandoff(&req)
	if resp.Status == pb.Status_OK {
		resp.Accepted = uint32(len(req.Urls))
	}
	if err := st.write(resp); err != nil {
		s.Reset()
	}
}

func (p *Peer) acceptHandoff(req *pb.HandoffRequest) (pb.Status, string) {
	s := hierarchy.NodeID(req.Subnet)
	switch {
	case string(req.Snapshot) != string(p.snap[:]):
		return pb.Status_WRONG_SNAPSHOT, "hierarchy snapshot differs"
	case len(req.Urls) == 0 || len(req.Urls) > maxHandoffURLs:
		return pb.Status_BAD_REQUEST, fmt.Sprintf("%d urls (1..%d allowed)", len(req.Urls), maxHandoffURLs)
	case int(s) >= p.tree.Len():
		return pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d not in the hierarchy", s)
	case p.sink == nil:
		return pb.Status_UNAVAILABLE, "this peer does not crawl (no hand-off sink)"
	}
	for i, u := range req.Urls {
		if len(u) == 0 || len(u) > maxURLLen {
			return pb.Status_BAD_REQUEST, fmt.Sprintf("url %d has %d bytes", i, len(u))
		}
	}
	// Refuse only when we know a live peer holds a record that beats any
	// claim of ours; a lazily delegated subnet we have not heard of yet is
	// accepted.
	if rec, ok := p.dir.get(s); ok && rec.Owner != p.selfID && p.members.IsLive(rec.Owner) {
		return pb.Status_NOT_OWNER, fmt.Sprintf("subnet %d is owned by %s", s, rec.Owner)
	}
	ctx, cancel := context.WithTimeout(p.ctx, p.cfg.RequestTimeout)
	defer cancel()
	if err := p.sink.Accept(ctx, req.Urls); err != nil {
		return pb.Status_UNAVAILABLE, "sink: " + err.Error()
	}
	return pb.Status_OK, ""
}
