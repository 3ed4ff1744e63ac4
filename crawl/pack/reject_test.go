package pack

import (
	"bytes"
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"testing"
	"time"
)

// rejectFirst refuses the first carrier for good and takes the others.
type rejectFirst struct {
	mu   sync.Mutex
	seen []uint64
}

func (r *rejectFirst) Deliver(_ context.Context, c Carrier) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.seen = append(r.seen, c.Seq)
	if c.Seq == 0 {
		return fmt.Errorf("sink said MALFORMED: %w", ErrRejected)
	}
	return nil
}

// A carrier the receiver rejects for good is moved aside (kept, logged)
// and the carriers behind it are delivered: it does not hold them for ever.
func TestRejectedCarrierMovedAside(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	recv := &rejectFirst{}
	ob, ctx, stop := runOutbox(t, db, recv, Options{CrawlerID: "c1", MaxHold: time.Hour})
	defer stop()
	for i := range 2 {
		r := sampleRecord(i)
		if err := ob.Add(ctx, &r); err != nil {
			t.Fatal(err)
		}
		if err := ob.Flush(); err != nil {
			t.Fatal(err)
		}
	}
	dctx, cancel := context.WithTimeout(ctx, 5*time.Second)
	defer cancel()
	if err := ob.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v", err)
	}
	st := ob.Stats()
	recv.mu.Lock()
	defer recv.mu.Unlock()
	if st.CarriersAside != 1 || st.CarriersDelivered != 1 || len(recv.seen) != 2 {
		t.Fatalf("stats %+v, deliveries %v; want the rejected carrier aside and the next delivered", st, recv.seen)
	}
}

// DecodeWithin refuses a carrier claiming more than its limit before
// decompressing, and a bomb (a small header claim, a huge payload) costs no
// more than the claim.
func TestDecodeWithinBounds(t *testing.T) {
	r := sampleRecord(1)
	c := EncodeCarrier("c1", 1, time.Now(), []Record{r})
	if _, recs, err := DecodeWithin(c.Data, 1<<20, nil); err != nil || len(recs) != 1 {
		t.Fatalf("a good carrier: %v", err)
	}
	if _, _, err := DecodeWithin(c.Data, 10, nil); !errors.Is(err, ErrTooLarge) {
		t.Fatalf("a carrier over the limit: %v", err)
	}
	// a payload of 64 MiB of zeros compresses to a few KiB; the header
	// below claims 100 bytes
	bomb := Seal("c1", 2, time.Now(), 1, make([]byte, 64<<20))
	h, compressed, err := DecodeHeader(bomb.Data)
	if err != nil {
		t.Fatal(err)
	}
	forged := encodeRawClaim(t, h, compressed, 100)
	if _, _, err := DecodeWithin(forged, 1<<20, nil); err == nil {
		t.Fatal("a bomb accepted")
	}
}

// encodeRawClaim rebuilds a carrier's header with another claim of
// its decompressed size, over the same (valid, checksummed) payload.
func encodeRawClaim(t *testing.T, h Header, compressed []byte, raw uint64) []byte {
	t.Helper()
	b := append([]byte(nil), carrierMagic[:]...)
	b = append(b, CarrierVersion)
	b = appendString(b, h.CrawlerID)
	b = binary.AppendUvarint(b, h.Seq)
	b = binary.AppendVarint(b, h.Created.UnixMicro())
	b = binary.AppendUvarint(b, uint64(h.Records))
	b = binary.AppendUvarint(b, raw)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(compressed, crcTable))
	return append(b, compressed...)
}

// A record claiming as many keywords as it has bytes left is refused before
// the keywords are allocated (each takes at least 2 bytes): a forged
// carrier must not make a reader allocate many times its size.
func TestRecordKeywordCountBounded(t *testing.T) {
	r := Record{URL: "http://a/", Keywords: []Keyword{{Term: "x", Weight: 1}}}
	b := r.AppendBinary(nil)
	// find the keyword count (1, followed by the keyword "x") and forge it
	i := bytes.Index(b, []byte{1, 1, 'x', 1})
	if i < 0 {
		t.Fatal("keyword not found in the encoding")
	}
	rest := len(b) - i - 1
	forged := append(append(append([]byte(nil), b[:i]...), binary.AppendUvarint(nil, uint64(rest))...), b[i+1:]...)
	var got Record
	if err := got.UnmarshalBinary(forged); err == nil || !strings.Contains(err.Error(), "keyword count exceeds") {
		t.Fatalf("forged keyword count: %v", err)
	}
}

// The outbox seals a carrier at MaxCarrierRecords records, whatever its
// byte bound: a sink commits a carrier in one transaction.
func TestOutboxSealsAtMaxRecords(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	ob, err := NewOutbox(db, FileSink{Dir: t.TempDir()}, Options{CrawlerID: "c1", MaxBytes: 64 << 20, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	for i := range MaxCarrierRecords + 1 {
		r := Record{URL: "http://a/" + strconv.Itoa(i)}
		if err := ob.Add(context.Background(), &r); err != nil {
			t.Fatal(err)
		}
	}
	if st := ob.Stats(); st.CarriersSealed != 1 || st.PendingRecords != 1 {
		t.Fatalf("stats %+v: want one carrier of %d sealed and one record pending", st, MaxCarrierRecords)
	}
}

// A record with links is written as version 2 and read back; one without
// keeps version 1, so readers that predate links read it.
func TestRecordLinksRoundTrip(t *testing.T) {
	r := Record{URL: "http://a/", Links: []string{"http://a/b", "http://c/"}}
	b := r.AppendBinary(nil)
	var got Record
	if err := got.UnmarshalBinary(b); err != nil || len(got.Links) != 2 || got.Links[1] != "http://c/" || b[0] != recordVersionLinks {
		t.Fatalf("links: %v %+v (version %d)", err, got, b[0])
	}
	plain := (&Record{URL: "http://a/"}).AppendBinary(nil)
	if plain[0] != RecordVersion {
		t.Fatalf("a record without links is version %d", plain[0])
	}
}

// A record with an address is written as version 3, with or without
// links, and read back; a bad address length is refused with a reason.
func TestRecordAddrRoundTrip(t *testing.T) {
	for _, r := range []Record{
		{URL: "http://a/", Addr: netip.MustParseAddr("192.0.2.7")},
		{URL: "http://a/", Addr: netip.MustParseAddr("2001:db8::1"), Links: []string{"http://a/b"}},
	} {
		b := r.AppendBinary(nil)
		var got Record
		if err := got.UnmarshalBinary(b); err != nil || got.Addr != r.Addr || len(got.Links) != len(r.Links) || b[0] != recordVersionAddr {
			t.Fatalf("%v: %v %+v (version %d)", r.Addr, err, got, b[0])
		}
		if j := r.JSON("c"); j.Addr != r.Addr.String() {
			t.Fatalf("JSON addr %q", j.Addr)
		}
	}
	b := (&Record{URL: "http://a/", Addr: netip.MustParseAddr("192.0.2.7")}).AppendBinary(nil)
	b[len(b)-5] = 5 // the address's length byte
	var got Record
	if err := got.UnmarshalBinary(b); err == nil || !strings.Contains(err.Error(), "address of 5 bytes") {
		t.Fatalf("bad address length: %v", err)
	}
}
