package sink

import (
	"context"
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/overlay"
)

// ProtoPages is the libp2p protocol a crawler asks the sink on for the page
// history of a subnet (an address range) it owns now: page recovery when
// the subnet's previous owner is dead or does not answer. Requesters are
// admitted as carriers' senders are (Server.Admit).
const ProtoPages protocol.ID = "/micra/pages/1"

const (
	// maxPagesMsg bounds an answer; pagesAnswerBytes is what the server
	// fills before it ends a page early (the rest comes with the next).
	maxPagesMsg      = 4 << 20
	pagesAnswerBytes = 2 << 20
	// maxQueries bounds the page queries the sink answers at once.
	maxQueries = 4
)

// pages answers one PagesRequest from peer from.
func (s *Server) pages(from peer.ID, req *pb.PagesRequest) *pb.PagesAnswer {
	nack := func(st pb.Status, reason string) *pb.PagesAnswer {
		return &pb.PagesAnswer{Version: wireVersion, Status: st, Reason: reason}
	}
	if s.Admit != nil {
		if err := s.Admit(from); err != nil {
			var re *RefusedError
			if errors.As(err, &re) {
				return nack(re.Status, re.Reason)
			}
			return nack(pb.Status_NOT_MEMBER, err.Error())
		}
	}
	select {
	case s.queries <- struct{}{}:
		defer func() { <-s.queries }()
	default:
		return nack(pb.Status_UNAVAILABLE, "sink busy: too many page queries running; ask again later")
	}
	first, ok1 := netip.AddrFromSlice(req.First)
	last, ok2 := netip.AddrFromSlice(req.Last)
	if !ok1 || !ok2 {
		return nack(pb.Status_MALFORMED, fmt.Sprintf("range: addresses of %d and %d bytes (want 4 or 16 each)", len(req.First), len(req.Last)))
	}
	ans, err := s.Store.PlacedPages(PlacedQuery{First: first, Last: last, After: req.After, Limit: int(req.Limit)})
	var bq *BadQueryError
	switch {
	case errors.As(err, &bq):
		return nack(pb.Status_MALFORMED, bq.Reason)
	case err != nil:
		return nack(pb.Status_INTERNAL, err.Error())
	}
	out := &pb.PagesAnswer{Version: wireVersion, Next: ans.Next, Done: ans.Done}
	size := 0
	for _, p := range ans.Pages {
		m := toPageStatePB(p)
		if size += proto.Size(m) + 8; size > pagesAnswerBytes && len(out.Pages) > 0 {
			out.Done = false // the rest with the next query, from the last page sent
			break
		}
		out.Pages = append(out.Pages, m)
		out.Next = p.cursor
	}
	return out
}

func toPageStatePB(p PlacedPage) *pb.PageState {
	r := &p.Record
	m := &pb.PageState{Url: r.URL, FinalUrl: r.FinalURL, Status: uint32(r.Status), Etag: r.ETag, LastModified: r.LastModified,
		FetchedUnixNano: r.FetchedAt.UnixNano(), TotalNs: int64(r.Timing.Total), Seq: p.Seq, Crawler: r.CrawlerID,
		Links: r.Links, Outlinks: uint32(max(0, r.OutLinks)), Nofollow: r.Flags&pack.FlagNoFollow != 0}
	if r.ContentHash != ([16]byte{}) {
		m.ContentHash = r.ContentHash[:]
	}
	if r.Addr.IsValid() {
		m.Addr = r.Addr.AsSlice()
	}
	return m
}

// fromPageStatePB checks a page state from the sink's answer.
func fromPageStatePB(m *pb.PageState) (PlacedPage, error) {
	const maxURL, maxLinks = 8 << 10, 10_000
	if m.Url == "" || len(m.Url) > maxURL || len(m.FinalUrl) > maxURL || len(m.Etag) > 1024 || len(m.LastModified) > 128 ||
		(len(m.ContentHash) != 0 && len(m.ContentHash) != 16) || m.Status > 999 || len(m.Links) > maxLinks {
		return PlacedPage{}, fmt.Errorf("page state for %.80q out of bounds", m.Url)
	}
	for _, l := range m.Links {
		if l == "" || len(l) > maxURL {
			return PlacedPage{}, fmt.Errorf("page state for %.80q: a link out of bounds", m.Url)
		}
	}
	r := pack.Record{URL: m.Url, FinalURL: m.FinalUrl, Status: int(m.Status), ETag: m.Etag, LastModified: m.LastModified,
		Timing: pack.Timing{Total: time.Duration(max(0, m.TotalNs))}, CrawlerID: m.Crawler, Links: m.Links, OutLinks: int(m.Outlinks)}
	if m.Nofollow {
		r.Flags |= pack.FlagNoFollow
	}
	if m.FetchedUnixNano != 0 {
		r.FetchedAt = time.Unix(0, m.FetchedUnixNano)
	}
	copy(r.ContentHash[:], m.ContentHash)
	if a, ok := netip.AddrFromSlice(m.Addr); ok {
		r.Addr = a
	}
	return PlacedPage{Seq: m.Seq, Record: r}, nil
}

func (s *Server) handlePages(st network.Stream) {
	var req pb.PagesRequest
	from := st.Conn().RemotePeer()
	overlay.ServeRequest(st, maxPagesMsg, s.Timeout, &req, func() proto.Message {
		ans := s.pages(from, &req)
		if ans.Status != pb.Status_OK {
			s.Logger.Info("page query refused", "from", from.String(), "status", ans.Status.String(), "reason", ans.Reason)
		}
		return ans
	})
}

// QueryError is the sink's refusal of a page query, with its reason.
type QueryError struct {
	Status pb.Status
	Reason string
}

func (e *QueryError) Error() string {
	return fmt.Sprintf("sink: page query refused (%s): %s", e.Status, e.Reason)
}

// PageLimit is how many pages a Client asks for in one query.
const PageLimit = 500

// Permanent reports whether asking again cannot help (a bad query, or a
// requester refused for good); the others (busy, not a member yet) may pass.
func (e *QueryError) Permanent() bool {
	return e.Status == pb.Status_MALFORMED || e.Status == pb.Status_REFUSED
}

// QueryPlaced asks the sink once for the latest records of the pages a
// crawler placed in the address range [first, last] (a subnet's or a
// block's): up to PageLimit of them after the cursor after (nil: from the
// range's start), and the cursor to continue from. The records carry what
// page recovery needs: URL, final URL, status, validators, content hash,
// fetch time and total time, address, crawler, and the page's out-links
// (as shipped: none unless its crawler ships links), their count and the
// nofollow flag.
func (c *Client) QueryPlaced(ctx context.Context, first, last netip.Addr, after []byte) (PlacedAnswer, error) {
	timeout := c.Timeout
	if timeout <= 0 {
		timeout = 30 * time.Second
	}
	if len(c.Sink.Addrs) > 0 {
		c.Host.Peerstore().AddAddrs(c.Sink.ID, c.Sink.Addrs, time.Hour)
	}
	req := &pb.PagesRequest{Version: wireVersion, First: first.AsSlice(), Last: last.AsSlice(), After: after, Limit: PageLimit}
	var ans pb.PagesAnswer
	if err := overlay.RoundTrip(ctx, c.Host, c.Sink.ID, ProtoPages, maxPagesMsg, timeout, req, &ans); err != nil {
		return PlacedAnswer{}, fmt.Errorf("sink: page query %v…%v: %w", first, last, err)
	}
	if ans.Status != pb.Status_OK {
		return PlacedAnswer{}, &QueryError{Status: ans.Status, Reason: ans.Reason}
	}
	out := PlacedAnswer{Next: ans.Next, Done: ans.Done, Pages: make([]PlacedPage, 0, len(ans.Pages))}
	for _, m := range ans.Pages {
		p, err := fromPageStatePB(m)
		if err != nil {
			return PlacedAnswer{}, fmt.Errorf("sink %s: %w", c.Sink.ID, err)
		}
		out.Pages = append(out.Pages, p)
	}
	if !out.Done && (len(out.Next) == 0 || string(out.Next) == string(after)) {
		return PlacedAnswer{}, fmt.Errorf("sink %s: page query %v…%v: an answer that is not done moved no further", c.Sink.ID, first, last)
	}
	return out, nil
}
