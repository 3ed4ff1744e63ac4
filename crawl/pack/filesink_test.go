package pack

import (
	"context"
	"errors"
	"path/filepath"
	"slices"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// Regression (the defect it caught): FileSink ignored the error of the
// directory fsync after renaming a carrier into place and acknowledged it
// anyway, so the outbox deleted a carrier whose file name might not survive
// a crash. A failed directory sync must be an error naming the directory,
// and the outbox must keep the carrier and deliver it again.
func TestFileSinkDirSyncFailureNotAcknowledged(t *testing.T) {
	out := t.TempDir()
	errSync := errors.New("injected: directory fsync failed")
	var fails atomic.Int32
	sink := FileSink{Dir: out, syncDir: func(dir string) error {
		if fails.Add(-1) >= 0 {
			return errSync
		}
		return syncDir(dir)
	}}

	fails.Store(1)
	err := sink.Deliver(context.Background(), EncodeCarrier("c1", 1, time.Now(), []Record{sampleRecord(1)}))
	if !errors.Is(err, errSync) || !strings.Contains(err.Error(), out) {
		t.Fatalf("Deliver with a failing directory sync = %v, want the sync error wrapped with the directory %s", err, out)
	}

	// Through the outbox: the carrier stays until a Deliver succeeds.
	db := openDB(t, t.TempDir())
	defer db.Close()
	fails.Store(2)
	ob, ctx, stop := runOutbox(t, db, sink, Options{CrawlerID: "c1", MaxHold: time.Hour,
		RetryMin: 5 * time.Millisecond, RetryMax: 20 * time.Millisecond})
	defer stop()
	r := sampleRecord(2)
	if err := ob.Add(ctx, &r); err != nil {
		t.Fatal(err)
	}
	if err := ob.Flush(); err != nil {
		t.Fatal(err)
	}
	dctx, dcancel := context.WithTimeout(ctx, 20*time.Second)
	defer dcancel()
	if err := ob.Drain(dctx); err != nil {
		t.Fatal(err)
	}
	if st := ob.Stats(); st.DeliveryErrors != 2 || st.CarriersDelivered != 1 || st.PendingCarriers != 0 {
		t.Fatalf("outbox after two failed directory syncs: %+v, want 2 delivery errors, then the carrier delivered once", st)
	}
}

// Regression (the defect it caught): FileSink created its directory (and
// missing parents) without syncing their parents, so after a power cut a
// carrier it had acknowledged could vanish with the directory holding it.
// Each new directory's parent is synced before the carrier is acknowledged,
// and a failure there is an error.
func TestFileSinkNewDirectoryDurable(t *testing.T) {
	root := t.TempDir()
	dir := filepath.Join(root, "a", "b")
	var synced []string
	sink := FileSink{Dir: dir, syncDir: func(d string) error {
		synced = append(synced, d)
		return syncDir(d)
	}}
	if err := sink.Deliver(context.Background(), EncodeCarrier("c1", 1, time.Now(), []Record{sampleRecord(1)})); err != nil {
		t.Fatal(err)
	}
	want := []string{root, filepath.Join(root, "a"), dir}
	if !slices.Equal(synced, want) {
		t.Fatalf("synced %v, want %v (each new directory's parent, then the carrier's directory)", synced, want)
	}
	// a second carrier creates no directory: only its own is synced
	synced = nil
	if err := sink.Deliver(context.Background(), EncodeCarrier("c1", 2, time.Now(), []Record{sampleRecord(2)})); err != nil {
		t.Fatal(err)
	}
	if !slices.Equal(synced, []string{dir}) {
		t.Fatalf("second carrier synced %v, want only %s", synced, dir)
	}

	errSync := errors.New("injected: parent fsync failed")
	other := filepath.Join(root, "c")
	failing := FileSink{Dir: other, syncDir: func(d string) error {
		if d == root {
			return errSync
		}
		return syncDir(d)
	}}
	if err := failing.Deliver(context.Background(), EncodeCarrier("c1", 3, time.Now(), []Record{sampleRecord(3)})); !errors.Is(err, errSync) {
		t.Fatalf("Deliver into a new directory whose parent cannot be synced = %v, want the sync error", err)
	}
}
