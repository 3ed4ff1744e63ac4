package overlay

import (
	"context"
	"fmt"
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// PageState is what a crawler remembers about one page: enough for the next
// owner to revisit it with a conditional GET and to judge its timings.
type PageState struct {
	URL          string
	ETag         string
	LastModified string
	ContentHash  []byte
	LastFetch    time.Time
	FetchTimes   []time.Duration
	HTTPStatus   int
	// Addr is the address the page's host was placed at, when known (the
	// archive's answers; a peer's recovery answer does not carry it).
	Addr netip.Addr
	// Links are the page's out-links, from the archive: a page recovered
	// from there is not fetched again, and the URLs only its dead crawler
	// had queued are found again through them. A live owner hands its
	// queued URLs over itself, so its answers carry none.
	Links []string
}

// PageHistory is the crawler's per-page history (implemented by the node
// package). The old owner serves History; the new owner Imports it.
type PageHistory interface {
	// History calls emit for every page of subnet s this crawler knows; with
	// a valid block (delegation.BlockOf of a host), only the pages whose
	// host lies in that block.
	History(ctx context.Context, s hierarchy.NodeID, block netip.Prefix, emit func(PageState) error) error
	// Import merges pages of subnet s recovered from a previous owner. It
	// keeps only the pages whose hosts this crawler owns now: a peer that
	// predates block recovery sends the whole subnet, and a subnet's old
	// owner may still know pages of blocks that other crawlers own.
	Import(ctx context.Context, s hierarchy.NodeID, pages []PageState) error
}

// PageArchive is where a subnet's page history outlives its crawlers: the
// index sink, which keeps every record the crawlers delivered, each with
// the address its host was placed at (implemented by the node package).
// A subnet's new owner asks it when the previous owner is dead or does
// not answer a recovery request.
type PageArchive interface {
	// Pages calls emit with the last known state of each page whose host
	// was placed in the address range [first, last], in batches; it stops
	// at emit's first error.
	Pages(ctx context.Context, first, last netip.Addr, emit func([]PageState) error) error
}

// PageFence is implemented by a PageHistory whose crawler can finish its
// fetches of hosts it no longer owns: the old owner of a subnet calls it
// before it sends the subnet's history (a recovery request that carries
// the record of the move), so every page it fetched is in what it sends.
type PageFence interface {
	// Fence returns once no fetch is running of a host of subnet s (of
	// block, when valid) that this crawler does not own by its cached
	// record, or with ctx's error.
	Fence(ctx context.Context, s hierarchy.NodeID, block netip.Prefix) error
}

// fenceWait bounds, in RequestTimeouts, how long a history waits for the
// old owner's running fetches (Fence): past it the history goes as it
// stands (a page fetched meanwhile may be fetched again: overlap, never a
// loss).
const fenceWait = 2

// arrivalPoll is how often a history request waiting for this peer's own
// recovery of the same hosts looks again.
const arrivalPoll = 50 * time.Millisecond

func toPagePB(ps PageState) *pb.PageState {
	m := &pb.PageState{Url: ps.URL, Etag: ps.ETag, LastModified: ps.LastModified, ContentHash: ps.ContentHash, HttpStatus: uint32(ps.HTTPStatus)}
	if !ps.LastFetch.IsZero() {
		m.LastFetchUnixNano = ps.LastFetch.UnixNano()
	}
	for _, d := range ps.FetchTimes {
		m.FetchNs = append(m.FetchNs, int64(d))
	}
	return m
}

func fromPagePB(m *pb.PageState) (PageState, error) {
	if len(m.Url) == 0 || len(m.Url) > maxURLLen || len(m.ContentHash) > 64 || len(m.FetchNs) > 64 || len(m.Etag) > 1024 || len(m.LastModified) > 128 {
		return PageState{}, fmt.Errorf("page state for %.80q out of bounds", m.Url)
	}
	ps := PageState{URL: m.Url, ETag: m.Etag, LastModified: m.LastModified, ContentHash: m.ContentHash, HTTPStatus: int(m.HttpStatus)}
	if m.LastFetchUnixNano != 0 {
		ps.LastFetch = time.Unix(0, m.LastFetchUnixNano)
	}
	for _, d := range m.FetchNs {
		ps.FetchTimes = append(ps.FetchTimes, time.Duration(d))
	}
	return ps, nil
}

// Page recovery is a bulk transfer like a snapshot (snapshot.go): the
// client's reads must move bytes within RequestTimeout (a stalled peer costs
// that, not the whole budget), and the whole transfer is capped at
// recoverBudget — the history's size is not announced, so the cap is a
// fixed multiple of RequestTimeout — and by the caller's context. The
// server's side is shaped by the two ways a live transfer goes quiet:
//   - its history scan may find nothing to send for a while (a sparse
//     subnet, a slow DNS lookup per host): it sends an empty frame whenever
//     nothing was written for RequestTimeout/2, so the client's idle read
//     deadline measures a live peer, not the scan's luck;
//   - the client imports each frame before reading the next, and an import
//     may outlast RequestTimeout (a lookup per new host, a database write):
//     the server's writes are bounded by the budget only, not by an idle
//     time, or a slow importer would be cut mid-transfer.
const recoverBudget = 6

func (p *Peer) handleRecover(s network.Stream) {
	defer s.Close()
	st := newIdleStream(s, maxRecoverMsg, p.cfg.RequestTimeout, time.Now().Add(recoverBudget*p.cfg.RequestTimeout))
	var req pb.RecoverRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	fail := func(code pb.Status, msg string) {
		_ = st.write(&pb.RecoverFrame{Version: wireVersion, Status: code, Error: msg, Done: true})
	}
	sub := hierarchy.NodeID(req.Subnet)
	switch {
	case string(req.Snapshot) != string(p.snap[:]):
		fail(pb.Status_WRONG_SNAPSHOT, "hierarchy snapshot differs")
		return
	case int(sub) >= p.tree.Len():
		fail(pb.Status_BAD_REQUEST, fmt.Sprintf("subnet %d not in the hierarchy", sub))
		return
	case p.pages == nil:
		fail(pb.Status_NOT_FOUND, "this peer keeps no page history")
		return
	}
	var block netip.Prefix
	if len(req.BlockHost) > 0 {
		host, ok := netip.AddrFromSlice(req.BlockHost)
		if !ok || p.tree.SmallestNonUnary(host) != sub {
			fail(pb.Status_BAD_REQUEST, fmt.Sprintf("block host %x is not an address of subnet %d", req.BlockHost, sub))
			return
		}
		block = delegation.BlockOf(host)
	}
	moved := false
	if len(req.Record) > 0 {
		if err := p.learnMove(sub, req.BlockHost, req.Record, s.Conn().RemotePeer()); err != nil {
			fail(pb.Status_BAD_REQUEST, err.Error())
			return
		}
		moved = true
	}
	rt := p.cfg.RequestTimeout
	st.setIdle(recoverBudget * rt) // writes: the budget only (see above)
	ctx, cancel := context.WithTimeout(p.ctx, recoverBudget*rt)
	defer cancel()
	// frames go out under wmu: the scan's and the keep-alives
	var wmu sync.Mutex
	lastWrite := time.Now()
	send := func(f *pb.RecoverFrame) error {
		wmu.Lock()
		defer wmu.Unlock()
		lastWrite = time.Now()
		return st.write(f)
	}
	kctx, kstop := context.WithCancel(ctx)
	var kwg sync.WaitGroup
	kwg.Go(func() {
		t := time.NewTicker(rt / 4)
		defer t.Stop()
		for {
			select {
			case <-kctx.Done():
				return
			case <-t.C:
			}
			wmu.Lock()
			var err error
			if time.Since(lastWrite) >= rt/2 {
				lastWrite = time.Now()
				err = st.write(&pb.RecoverFrame{Version: wireVersion})
			}
			wmu.Unlock()
			if err != nil {
				cancel() // the client is gone: stop the scan
				return
			}
		}
	})
	if f, ok := p.pages.(PageFence); ok && moved {
		// (the keep-alives above run meanwhile)
		fctx, fcancel := context.WithTimeout(ctx, fenceWait*rt)
		if err := f.Fence(fctx, sub, block); err != nil && ctx.Err() == nil {
			p.log.Debug("overlay: history sent with fetches of the moved hosts still running", "subnet", sub, "err", err)
		}
		fcancel()
	}
	// this peer may itself still be receiving these hosts' history (from
	// the crawler before it, or the archive): what it sends includes it.
	// That recovery has a budget of its own as long as this one's, so the
	// wait takes what this budget leaves after fenceWait RequestTimeouts
	// kept for the scan and the send (the keep-alives run meanwhile).
	deadline, _ := ctx.Deadline()
	wctx, wcancel := context.WithDeadline(ctx, deadline.Add(-fenceWait*rt))
	for p.arrivingIn(sub, block) && wctx.Err() == nil {
		select {
		case <-wctx.Done():
		case <-time.After(arrivalPoll):
		}
	}
	wcancel()
	frame := &pb.RecoverFrame{Version: wireVersion}
	err := p.pages.History(ctx, sub, block, func(ps PageState) error {
		frame.Pages = append(frame.Pages, toPagePB(ps))
		if len(frame.Pages) >= recoverBatch {
			if err := send(frame); err != nil {
				return err
			}
			frame = &pb.RecoverFrame{Version: wireVersion}
		}
		return nil
	})
	kstop()
	kwg.Wait()
	if err != nil {
		fail(pb.Status_INTERNAL, "history: "+err.Error())
		return
	}
	frame.Done = true
	if err := st.write(frame); err != nil {
		s.Reset()
	}
}

// RecoverPages pulls subnet s's page history from its previous owner and
// imports it (UbiCrawler's page recovery: nothing is fetched again for
// nothing after an ownership change). It returns the pages received;
// PageHistory.Import keeps those whose hosts this crawler owns.
func (p *Peer) RecoverPages(ctx context.Context, from peer.ID, s hierarchy.NodeID) (int, error) {
	return p.recoverPagesWith(ctx, from, s, netip.Addr{}, nil)
}

// RecoverBlock is RecoverPages for the block (delegation.BlockOf) of host
// inside subnet s: a block delegation (delegation.Record.Blocks) moves
// those hosts between crawlers, and their history moves with them.
func (p *Peer) RecoverBlock(ctx context.Context, from peer.ID, s hierarchy.NodeID, host netip.Addr) (int, error) {
	if !host.IsValid() {
		return 0, fmt.Errorf("%s: no block host", ProtoRecover)
	}
	return p.recoverPagesWith(ctx, from, s, host, nil)
}

// recoverPagesWith is RecoverPages (RecoverBlock with a valid blockHost);
// record, if any, is the sealed record that moved the pages here, sent
// along so that from learns the move and stops first (PageFence).
func (p *Peer) recoverPagesWith(ctx context.Context, from peer.ID, s hierarchy.NodeID, blockHost netip.Addr, record []byte) (n int, err error) {
	return p.recoverPagesOpen(ctx, from, s, blockHost, record, p.cfg.RequestTimeout)
}

// recoverPagesOpen is recoverPagesWith with open bounding the stream's
// opening (dial and protocol negotiation).
func (p *Peer) recoverPagesOpen(ctx context.Context, from peer.ID, s hierarchy.NodeID, blockHost netip.Addr, record []byte, open time.Duration) (n int, err error) {
	if p.pages == nil {
		return 0, fmt.Errorf("%s: this peer keeps no page history", ProtoRecover)
	}
	rt := p.cfg.RequestTimeout
	ctx, cancel := context.WithTimeout(ctx, recoverBudget*rt)
	defer cancel()
	end, _ := ctx.Deadline()
	octx, ocancel := context.WithTimeout(ctx, open) // dial and protocol negotiation
	str, err := p.h.NewStream(octx, from, ProtoRecover)
	ocancel()
	if err != nil {
		return 0, fmt.Errorf("%s: open stream to %s: %w", ProtoRecover, shortID(from), err)
	}
	stop := context.AfterFunc(ctx, func() { str.Reset() })
	defer func() {
		stop()
		if err != nil {
			str.Reset() // the server's handler stops at once
			if ctx.Err() != nil {
				err = fmt.Errorf("%w (%w)", err, ctx.Err())
			}
			return
		}
		str.Close()
	}()
	st := newIdleStream(str, maxRecoverMsg, rt, end)
	req := &pb.RecoverRequest{Version: wireVersion, Subnet: uint32(s), Snapshot: p.snap[:], Record: record}
	if blockHost.IsValid() {
		req.BlockHost = blockHost.AsSlice()
	}
	if err := st.write(req); err != nil {
		return 0, fmt.Errorf("%s: %w", ProtoRecover, err)
	}
	_ = str.CloseWrite()
	for {
		var f pb.RecoverFrame
		if err := st.read(&f); err != nil {
			return n, fmt.Errorf("%s: from %s after %d pages: %w", ProtoRecover, shortID(from), n, err)
		}
		if err := remoteErr(from, ProtoRecover, f.Status, f.Error); err != nil {
			return n, err
		}
		pages := make([]PageState, 0, len(f.Pages))
		for _, m := range f.Pages {
			ps, err := fromPagePB(m)
			if err != nil {
				return n, fmt.Errorf("%s: from %s: %w", ProtoRecover, shortID(from), err)
			}
			pages = append(pages, ps)
		}
		if len(pages) > 0 {
			if err := p.pages.Import(ctx, s, pages); err != nil {
				return n, fmt.Errorf("%s: import: %w", ProtoRecover, err)
			}
			n += len(pages)
		}
		if f.Done {
			p.metrics.pagesRecovered.Add(float64(n))
			return n, nil
		}
	}
}

// learnMove verifies the record a recovery request carries and merges it
// into the cache: it must be a valid record of subnet s that makes the
// requester the crawler of s's hosts (of blockHost's block, when given).
// A record older than the cached one changes nothing (Select keeps the
// better), so a replayed one cannot move anything back.
func (p *Peer) learnMove(s hierarchy.NodeID, blockHost []byte, raw []byte, requester peer.ID) error {
	rec, sum, err := p.validator.check(DelegKey(s), raw)
	if err != nil {
		return fmt.Errorf("record: %w", err)
	}
	crawler := rec.Owner
	if len(blockHost) > 0 {
		host, _ := netip.AddrFromSlice(blockHost) // checked by the caller
		crawler = rec.OwnerOf(host, nil)
	}
	if string(crawler) != requester.String() {
		return fmt.Errorf("record of subnet %d (epoch %d) does not name the requester as its crawler", s, rec.Epoch)
	}
	p.dir.merge(rec, sum, raw)
	return nil
}

// recoverArchived pulls the page history of subnet s (of block, when valid)
// from the archive and imports it: the previous owner is dead, or did not
// answer. What the archive lacks is what that owner had not delivered yet
// (its outbox): those pages are fetched again.
func (p *Peer) recoverArchived(ctx context.Context, s hierarchy.NodeID, block netip.Prefix) (int, error) {
	first, last, ok := p.rangeOf(s, block)
	if !ok {
		return 0, fmt.Errorf("overlay: subnet %d (block %v) has no address range", s, block)
	}
	ctx, cancel := context.WithTimeout(ctx, recoverBudget*p.cfg.RequestTimeout)
	defer cancel()
	n := 0
	err := p.archive.Pages(ctx, first, last, func(pages []PageState) error {
		// the range holds s's sub-subnets too: their pages are not s's
		mine := pages[:0:0]
		for _, ps := range pages {
			if !ps.Addr.IsValid() || p.tree.SmallestNonUnary(ps.Addr) == s {
				mine = append(mine, ps)
			}
		}
		if len(mine) == 0 {
			return nil
		}
		if err := p.pages.Import(ctx, s, mine); err != nil {
			return fmt.Errorf("import: %w", err)
		}
		n += len(mine)
		return nil
	})
	p.metrics.pagesArchived.Add(float64(n))
	if err != nil {
		return n, fmt.Errorf("overlay: page history of subnet %d from the archive, after %d pages: %w", s, n, err)
	}
	return n, nil
}

// rangeOf is the address range of subnet s, within block when valid.
func (p *Peer) rangeOf(s hierarchy.NodeID, block netip.Prefix) (first, last netip.Addr, ok bool) {
	if s == hierarchy.Root || int(s) >= p.tree.Len() {
		return first, last, false
	}
	n := p.tree.Node(s)
	first, last = n.Start, n.End
	if !first.IsValid() || !last.IsValid() {
		return first, last, false
	}
	if block.IsValid() {
		bf, bl := block.Masked().Addr(), lastOf(block)
		if bf.Is4() != first.Is4() || bl.Less(first) || last.Less(bf) {
			return first, last, false
		}
		if first.Less(bf) {
			first = bf
		}
		if bl.Less(last) {
			last = bl
		}
	}
	return first, last, true
}

// lastOf is the last address of prefix b.
func lastOf(b netip.Prefix) netip.Addr {
	a := b.Masked().Addr().AsSlice()
	for i := b.Bits(); i < len(a)*8; i++ {
		a[i/8] |= 0x80 >> (i % 8)
	}
	l, _ := netip.AddrFromSlice(a)
	return l
}
