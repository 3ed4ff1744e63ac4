package pack

import (
	"context"
	"encoding/binary"
	"fmt"
	"hash/crc32"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// A crawler killed while workers were inside Add leaves records durable in
// Badger that had not yet joined the in-memory carrier (Add writes the record
// first, then appends it under the lock). On reload, load() appends every
// stored record to one carrier without looking at MaxBytes, so the first
// carrier after a restart is larger than MaxBytes by many records.
func TestReloadKeepsTheCarrierBound(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	db := openDB(t, dir)
	const maxBytes = 4096
	down := &flakySink{FileSink: FileSink{Dir: out}}
	down.fail.Store(1 << 30)
	ob, err := NewOutbox(db, down, Options{CrawlerID: "c1", MaxBytes: maxBytes, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	for i := range 10 {
		r := sampleRecord(i)
		if err := ob.Add(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	// 16 workers were in Add's first step (record stored, not yet appended)
	// when the process was killed: exactly what Add writes before it takes
	// the lock.
	ob.mu.Lock()
	seq := ob.nextRecSeq
	ob.mu.Unlock()
	for i := range 16 {
		r := sampleRecord(100 + i)
		r.CrawlerID = "c1"
		key := binary.BigEndian.AppendUint64(append([]byte(nil), ob.recPrefix...), seq+uint64(i))
		if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key, r.AppendBinary(nil)) }); err != nil {
			t.Fatal(err)
		}
	}
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	ob, err = NewOutbox(db, FileSink{Dir: out}, Options{CrawlerID: "c1", MaxBytes: maxBytes, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	rctx, cancel := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ob.Run(rctx) })
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := ob.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	cancel()
	wg.Wait()
	recLen := len(func() []byte { r := sampleRecord(100); r.CrawlerID = "c1"; return r.AppendBinary(nil) }())
	err = ReadDir(out, func(h Header, _ *Record) error {
		if h.RawBytes > maxBytes+recLen {
			return fmt.Errorf("carrier %d: raw payload %d bytes (%d records), MaxBytes %d: over by more than one record (%d bytes)",
				h.Seq, h.RawBytes, h.Records, maxBytes, recLen)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

// The record count in the carrier header is not covered by the checksum
// (only the compressed payload is), and Decode allocates
// make([]Record, 0, h.Records) before checking it: a damaged count in an
// otherwise valid file panics the reader (micra carriers cat, a sink)
// instead of giving "file: reason" and going on with the other files.
func TestDecodeBadRecordCountIsAnError(t *testing.T) {
	c := EncodeCarrier("c1", 1, time.Now(), []Record{sampleRecord(1)})
	h, _, err := DecodeHeader(c.Data)
	if err != nil {
		t.Fatal(err)
	}
	// Rebuild the same header with a damaged record count.
	b := append([]byte(nil), c.Data[:5]...)
	b = appendString(b, h.CrawlerID)
	b = binary.AppendUvarint(b, h.Seq)
	b = binary.AppendVarint(b, h.Created.UnixMicro())
	b = binary.AppendUvarint(b, 1<<62) // was 1
	b = binary.AppendUvarint(b, uint64(h.RawBytes))
	_, compressed, _ := DecodeHeader(c.Data)
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(compressed, crcTable))
	b = append(b, compressed...)

	var derr error
	func() {
		defer func() {
			if p := recover(); p != nil {
				t.Fatalf("Decode of a carrier with a damaged record count panicked: %v", p)
			}
		}()
		_, _, derr = Decode(b)
	}()
	if derr == nil {
		t.Fatal("damaged record count accepted")
	}
}

// A carrier that cannot be decoded is moved aside by deliverNext, but the
// PendingCarriers counter is not decremented, so Drain (and the engine's
// StopWhenIdle run, which drains before it returns) waits forever although
// the outbox is empty.
func TestDrainEndsAfterCorruptCarrierMovedAside(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	db := openDB(t, dir)
	defer db.Close()
	// One undeliverable (corrupt) carrier left in the outbox.
	key := binary.BigEndian.AppendUint64([]byte("pk/c/"), 0)
	if err := db.Update(func(txn *badger.Txn) error { return txn.Set(key, []byte("garbage, not a carrier")) }); err != nil {
		t.Fatal(err)
	}
	ob, ctx, stop := runOutbox(t, db, FileSink{Dir: out}, Options{CrawlerID: "c1", MaxHold: time.Hour})
	defer stop()
	r := sampleRecord(1)
	if err := ob.Add(ctx, &r); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 3*time.Second)
	defer dcancel()
	if err := ob.Drain(dctx); err != nil {
		t.Fatalf("Drain: %v (stats %+v)", err, ob.Stats())
	}
}
