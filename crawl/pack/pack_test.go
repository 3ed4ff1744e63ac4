package pack

import (
	"context"
	"errors"
	"fmt"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func sampleRecord(i int) Record {
	return Record{
		URL: fmt.Sprintf("http://h%d.test/page/%d", i%7, i), FinalURL: "", Status: 200,
		Source: SourceHTTP, Change: ChangeNew, FetchedAt: time.UnixMicro(1_700_000_000_000_000 + int64(i)).UTC(),
		Timing:    Timing{DNS: time.Millisecond, Connect: 2 * time.Millisecond, FirstByte: 5 * time.Millisecond, Total: 9 * time.Millisecond},
		WireBytes: 4000, BodyBytes: 10000, TextBytes: 3000, ContentType: "text/html",
		Title: fmt.Sprintf("Page %d about crawling", i), Lang: "en",
		Keywords: []Keyword{{"crawl", 12}, {"page", 7}, {fmt.Sprintf("term%d", i), 3}},
		OutLinks: 20, ContentHash: [16]byte{1, 2, 3, byte(i)}, SimHash: 0xdeadbeef<<8 | uint64(i),
		ETag: `"abc"`, LastModified: "Mon, 02 Jan 2006 15:04:05 GMT", CrawlerID: "c1", Flags: FlagNoFollow,
	}
}

func TestRecordRoundTrip(t *testing.T) {
	r := sampleRecord(3)
	b, _ := r.MarshalBinary()
	var got Record
	if err := got.UnmarshalBinary(b); err != nil {
		t.Fatal(err)
	}
	if fmt.Sprint(got) != fmt.Sprint(r) {
		t.Fatalf("round trip:\n got %+v\nwant %+v", got, r)
	}
	// Every truncation must be an error, never a panic or a silent short record.
	for i := 0; i < len(b); i++ {
		if err := new(Record).UnmarshalBinary(b[:i]); err == nil {
			t.Fatalf("truncated at %d/%d decoded without error", i, len(b))
		}
	}
	b[0] = 9
	if err := new(Record).UnmarshalBinary(b); err == nil || !strings.Contains(err.Error(), "version") {
		t.Fatalf("unknown version accepted: %v", err)
	}
}

func TestCarrierRoundTripAndCorruption(t *testing.T) {
	var recs []Record
	for i := range 50 {
		recs = append(recs, sampleRecord(i))
	}
	c := EncodeCarrier("c1", 7, time.Now(), recs)
	h, got, err := Decode(c.Data)
	if err != nil {
		t.Fatal(err)
	}
	if h.Seq != 7 || h.CrawlerID != "c1" || h.Records != 50 || len(got) != 50 || got[49].URL != recs[49].URL {
		t.Fatalf("bad decode: %+v, %d records", h, len(got))
	}
	if len(c.Data) >= c.RawBytes/3 {
		t.Errorf("zstd barely compressed: %d of %d raw", len(c.Data), c.RawBytes)
	}
	bad := append([]byte(nil), c.Data...)
	bad[len(bad)-3] ^= 0xff
	if _, _, err := Decode(bad); err == nil || !strings.Contains(err.Error(), "checksum") {
		t.Fatalf("corruption not detected: %v", err)
	}
	if _, _, err := Decode([]byte("not a carrier")); err == nil {
		t.Fatal("garbage accepted")
	}
}

func openDB(t *testing.T, dir string) *badger.DB {
	t.Helper()
	db, err := badger.Open(badger.DefaultOptions(dir).WithLogger(nil).WithMemTableSize(8 << 20).WithNumMemtables(2))
	if err != nil {
		t.Fatal(err)
	}
	return db
}

// runOutbox opens an outbox over db and runs it until the returned stop is
// called (defer it before db's Close runs: stop waits for Run to return).
func runOutbox(t *testing.T, db *badger.DB, sink Receiver, opt Options) (*Outbox, context.Context, func()) {
	t.Helper()
	ob, err := NewOutbox(db, sink, opt)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ob.Run(ctx) })
	return ob, ctx, func() { cancel(); wg.Wait() }
}

// flakySink fails its first n deliveries, then writes to a FileSink.
type flakySink struct {
	fail  atomic.Int32
	calls atomic.Int32
	FileSink
}

func (f *flakySink) Deliver(ctx context.Context, c Carrier) error {
	f.calls.Add(1)
	if f.fail.Add(-1) >= 0 {
		return errors.New("sink unreachable")
	}
	return f.FileSink.Deliver(ctx, c)
}

func TestOutboxSizeBoundRetryAndDelivery(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	db := openDB(t, dir)
	defer db.Close()
	sink := &flakySink{FileSink: FileSink{Dir: out}}
	sink.fail.Store(3)
	reg := prometheus.NewRegistry()
	ob, err := NewOutbox(db, sink, Options{CrawlerID: "c1", MaxBytes: 4096, MaxHold: time.Hour,
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond, Registerer: reg})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { ob.Run(ctx) })
	for i := range 200 {
		r := sampleRecord(i)
		if err := ob.Add(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	if err := ob.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	dcancel()
	cancel()
	wg.Wait()
	st := ob.Stats()
	if st.DeliveryErrors != 3 || st.PendingCarriers != 0 || st.CarriersDelivered != st.CarriersSealed || st.CarriersSealed < 5 {
		t.Fatalf("stats %+v", st)
	}
	seen := map[string]bool{}
	files, _ := CarrierFiles(out)
	if int64(len(files)) != st.CarriersSealed {
		t.Fatalf("%d files for %d carriers", len(files), st.CarriersSealed)
	}
	for _, f := range files {
		h, recs, err := ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		if h.RawBytes > 4096 {
			t.Errorf("%s: raw payload %d exceeds MaxBytes", f, h.RawBytes)
		}
		for _, r := range recs {
			seen[r.URL] = true
		}
	}
	if len(seen) != 200 {
		t.Fatalf("%d distinct records delivered, want 200", len(seen))
	}
}

func TestOutboxHoldTime(t *testing.T) {
	db := openDB(t, t.TempDir())
	defer db.Close()
	out := t.TempDir()
	ob, ctx, stop := runOutbox(t, db, FileSink{Dir: out}, Options{CrawlerID: "c1", MaxHold: 40 * time.Millisecond})
	defer stop()
	r := sampleRecord(1)
	ob.Add(ctx, &r)
	deadline := time.Now().Add(5 * time.Second)
	for ob.Stats().CarriersDelivered == 0 {
		if time.Now().After(deadline) {
			t.Fatal("hold time did not seal the carrier")
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// A restart must lose neither pending records nor unacknowledged carriers,
// and must keep carrier sequence numbers increasing.
func TestOutboxSurvivesRestart(t *testing.T) {
	dir, out := t.TempDir(), t.TempDir()
	db := openDB(t, dir)
	down := &flakySink{FileSink: FileSink{Dir: out}}
	down.fail.Store(1 << 30)
	ob, _ := NewOutbox(db, down, Options{CrawlerID: "c1", MaxBytes: 2048, MaxHold: time.Hour})
	ctx := context.Background()
	for i := range 60 {
		r := sampleRecord(i)
		if err := ob.Add(ctx, &r); err != nil {
			t.Fatal(err)
		}
	}
	before := ob.Stats()
	if before.PendingCarriers == 0 || before.PendingRecords == 0 {
		t.Fatalf("want both sealed and pending records before restart: %+v", before)
	}
	db.Close()

	db = openDB(t, dir)
	defer db.Close()
	ob, err := NewOutbox(db, FileSink{Dir: out}, Options{CrawlerID: "c1", MaxBytes: 2048, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	if st := ob.Stats(); st.PendingCarriers != before.PendingCarriers || st.PendingRecords != before.PendingRecords {
		t.Fatalf("after restart %+v, before %+v", st, before)
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
	urls := map[string]bool{}
	var lastSeq uint64
	err = ReadDir(out, func(h Header, r *Record) error {
		if h.Seq < lastSeq {
			return fmt.Errorf("sequence went back: %d after %d", h.Seq, lastSeq)
		}
		lastSeq = h.Seq
		urls[r.URL] = true
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(urls) != 60 {
		t.Fatalf("%d records survived the restart, want 60", len(urls))
	}
}

func BenchmarkCarrierEncode(b *testing.B) {
	var recs []Record
	for i := range 500 {
		recs = append(recs, sampleRecord(i))
	}
	b.ResetTimer()
	for i := 0; i < b.N; i++ {
		c := EncodeCarrier("c1", uint64(i), time.Now(), recs)
		b.SetBytes(int64(c.RawBytes))
	}
}
