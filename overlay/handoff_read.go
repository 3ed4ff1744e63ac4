package overlay

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"sync"
	"time"
	"unicode/utf8"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"
	"google.golang.org/protobuf/encoding/protowire"

	"github.com/micra-crawler/micra/overlay/pb"
)

// Reading a member's hand-off within its quota.
//
// A hand-off message is up to maxHandoffMsg (4 MiB, ~8 MB decoded). It is
// read a field at a time, and the member's URL quota is taken before each
// URL is read, so a member past its quota costs this peer the few bytes
// read before it ran out, not a whole message in memory; and each member
// has at most maxHandoffsInFlight messages being read at once.

// maxHandoffsInFlight bounds the hand-off streams of one member read at
// once: an honest flush sends each owner at most its burst
// (handoffBurst / maxHandoffURLs messages) at a time.
const maxHandoffsInFlight = handoffBurst / maxHandoffURLs

// errHandoffQuota: the member ran out of its quota during the read.
var errHandoffQuota = errors.New("hand-off quota exhausted")

// handoffReads counts each member's hand-off streams being read.
type handoffReads struct {
	mu sync.Mutex
	n  map[peer.ID]int
}

// enter takes one of id's read slots; false when it holds
// maxHandoffsInFlight already. The caller calls leave when done.
func (h *handoffReads) enter(id peer.ID) bool {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n == nil {
		h.n = make(map[peer.ID]int)
	}
	if h.n[id] >= maxHandoffsInFlight {
		return false
	}
	h.n[id]++
	return true
}

func (h *handoffReads) leave(id peer.ID) {
	h.mu.Lock()
	defer h.mu.Unlock()
	if h.n[id]--; h.n[id] <= 0 {
		delete(h.n, id)
	}
}

// quotaTaker takes a member's URL tokens as its URLs are read, in
// reservations of up to quotaChunk at a time; settle gives back what the
// last reservation did not use, refund all of them.
type quotaTaker struct {
	lim  *rate.Limiter
	now  time.Time
	held []*rate.Reservation
	last int // tokens of the last reservation
	free int // of them, not used yet
	used int // URLs read
}

// quotaChunk is the most URL tokens reserved ahead of the read.
const quotaChunk = 256

// take accounts one URL about to be read, the message having left bytes
// more: true when the quota covers it. A URL costs at least 3 bytes on the
// wire (tag, length, one byte), so no more is reserved than left/3 can
// hold, nor more than the bucket holds.
func (q *quotaTaker) take(left int) bool {
	if q.free == 0 {
		n := max(1, min(quotaChunk, left/3+1, int(q.lim.TokensAt(q.now))))
		r := q.lim.ReserveN(q.now, n)
		if !r.OK() || r.DelayFrom(q.now) > 0 {
			r.CancelAt(q.now)
			return false
		}
		q.held = append(q.held, r)
		q.last, q.free = n, n
	}
	q.free--
	q.used++
	return true
}

// settle returns the tokens of the last reservation the read did not use.
func (q *quotaTaker) settle() {
	if q.free == 0 || len(q.held) == 0 {
		return
	}
	q.held[len(q.held)-1].CancelAt(q.now)
	if used := q.last - q.free; used > 0 {
		q.lim.ReserveN(q.now, used) // what was read is spent, whatever the debt
	}
	q.free = 0
}

// refund returns every token taken (the message was refused).
func (q *quotaTaker) refund() {
	for i := len(q.held) - 1; i >= 0; i-- {
		q.held[i].CancelAt(q.now)
	}
	q.held, q.free = nil, 0
}

// readHandoff reads one length-delimited HandoffRequest of at most max
// bytes from r, taking a token of q for each URL before reading it. It
// takes what proto.Unmarshal takes (unknown fields skipped, groups
// refused); a URL longer than maxURLLen, or a snapshot or an address
// longer than any valid one, is an error before its bytes are read.
func readHandoff(r *bufio.Reader, max int, q *quotaTaker) (*pb.HandoffRequest, error) {
	size, err := binary.ReadUvarint(r)
	if err != nil {
		if errors.Is(err, io.EOF) {
			return nil, fmt.Errorf("stream closed before a complete message: %w", io.ErrUnexpectedEOF)
		}
		return nil, err
	}
	if size > uint64(max) {
		return nil, fmt.Errorf("message of %d bytes exceeds limit %d", size, max)
	}
	msg := &limitedReader{r: r, n: int(size)}
	req := &pb.HandoffRequest{}
	for msg.n > 0 {
		num, typ, err := msg.tag()
		if err != nil {
			return nil, err
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, err := msg.uvarint()
			if err != nil {
				return nil, err
			}
			req.Version = uint32(v)
		case num == 2 && typ == protowire.VarintType:
			if req.BatchId, err = msg.uvarint(); err != nil {
				return nil, err
			}
		case num == 3 && typ == protowire.BytesType:
			if req.Snapshot, err = msg.bytes(64); err != nil {
				return nil, err
			}
		case num == 4 && typ == protowire.BytesType:
			n, err := msg.length()
			if err != nil {
				return nil, err
			}
			b, err := readBatch(&limitedReader{r: msg, n: n}, q, msg)
			if err != nil {
				return nil, err
			}
			req.Batches = append(req.Batches, b)
		default:
			if err := msg.skip(typ); err != nil {
				return nil, err
			}
		}
	}
	return req, nil
}

// readBatch reads one HandoffBatch, all of br, a part of msg.
func readBatch(br *limitedReader, q *quotaTaker, msg *limitedReader) (*pb.HandoffBatch, error) {
	b := &pb.HandoffBatch{}
	for br.n > 0 {
		num, typ, err := br.tag()
		if err != nil {
			return nil, err
		}
		switch {
		case num == 1 && typ == protowire.VarintType:
			v, err := br.uvarint()
			if err != nil {
				return nil, err
			}
			b.Subnet = uint32(v)
		case num == 2 && typ == protowire.BytesType:
			if !q.take(msg.n) {
				return nil, errHandoffQuota
			}
			u, err := br.bytes(maxURLLen)
			if err != nil {
				return nil, err
			}
			if !utf8.Valid(u) {
				return nil, errors.New("a URL is not valid UTF-8")
			}
			b.Urls = append(b.Urls, string(u))
		case num == 3 && typ == protowire.BytesType:
			if b.Addr, err = br.bytes(16); err != nil {
				return nil, err
			}
		default:
			if err := br.skip(typ); err != nil {
				return nil, err
			}
		}
	}
	return b, nil
}

// byteReader is what limitedReader reads from.
type byteReader interface {
	io.Reader
	io.ByteReader
}

// limitedReader reads the n bytes of one message or field left.
type limitedReader struct {
	r byteReader
	n int
}

var errTruncated = errors.New("a field runs past its message")

func (l *limitedReader) ReadByte() (byte, error) {
	if l.n <= 0 {
		return 0, errTruncated
	}
	b, err := l.r.ReadByte()
	if err == nil {
		l.n--
	}
	return b, err
}

func (l *limitedReader) Read(p []byte) (int, error) {
	if l.n <= 0 {
		return 0, errTruncated
	}
	if len(p) > l.n {
		p = p[:l.n]
	}
	n, err := l.r.Read(p)
	l.n -= n
	return n, err
}

func (l *limitedReader) uvarint() (uint64, error) {
	v, err := binary.ReadUvarint(l)
	if errors.Is(err, io.EOF) {
		err = io.ErrUnexpectedEOF
	}
	return v, err
}

func (l *limitedReader) tag() (protowire.Number, protowire.Type, error) {
	v, err := l.uvarint()
	if err != nil {
		return 0, 0, err
	}
	num, typ := protowire.DecodeTag(v)
	if num < protowire.MinValidNumber || v>>3 > uint64(protowire.MaxValidNumber) {
		return 0, 0, fmt.Errorf("invalid field number %d", v>>3)
	}
	return num, typ, nil
}

// length reads a length prefix, which must fit in what is left.
func (l *limitedReader) length() (int, error) {
	v, err := l.uvarint()
	if err != nil {
		return 0, err
	}
	if v > uint64(l.n) {
		return 0, errTruncated
	}
	return int(v), nil
}

// bytes reads a length-delimited field of at most maxLen bytes.
func (l *limitedReader) bytes(maxLen int) ([]byte, error) {
	n, err := l.length()
	if err != nil {
		return nil, err
	}
	if n > maxLen {
		return nil, fmt.Errorf("a field of %d bytes (at most %d)", n, maxLen)
	}
	b := make([]byte, n)
	if _, err := io.ReadFull(l, b); err != nil {
		return nil, err
	}
	return b, nil
}

// skip reads past an unknown field of type typ.
func (l *limitedReader) skip(typ protowire.Type) error {
	var n int
	switch typ {
	case protowire.VarintType:
		_, err := l.uvarint()
		return err
	case protowire.Fixed32Type:
		n = 4
	case protowire.Fixed64Type:
		n = 8
	case protowire.BytesType:
		var err error
		if n, err = l.length(); err != nil {
			return err
		}
	default:
		return fmt.Errorf("unsupported wire type %d", typ)
	}
	if n > l.n {
		return errTruncated
	}
	_, err := io.CopyN(io.Discard, l, int64(n))
	return err
}
