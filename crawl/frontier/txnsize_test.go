package frontier

import (
	"errors"
	"fmt"
	"strings"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// longItems returns n items with ~900-byte URLs over hosts hosts: together
// more than one Badger transaction of OpenDB's store holds.
func longItems(n, hosts int) []Item {
	pad := strings.Repeat("x", 900)
	out := make([]Item, n)
	for i := range out {
		host := fmt.Sprintf("h%02d.test", i%hosts)
		out[i] = Item{URL: fmt.Sprintf("http://%s/%s/%d", host, pad, i), Host: host}
	}
	return out
}

// Add, Readmit, ImportHistory, ScheduleUnscheduled and DueRevisits split a
// batch Badger refuses as one transaction (ErrTxnTooBig) instead of
// failing it.
func TestBatchesBeyondOneTransaction(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	its := longItems(addChunk, 16)
	hashes := make([]Hash, len(its))
	for i, it := range its {
		hashes[i] = HashURL(it.URL)
	}
	f.mu.Lock()
	_, err := f.addTxn(its, hashes)
	f.mu.Unlock()
	if !errors.Is(err, badger.ErrTxnTooBig) {
		t.Fatalf("one transaction of %d long URLs: %v, want ErrTxnTooBig (the test needs a batch Badger refuses)", len(its), err)
	}
	if n, err := f.Add(its); err != nil || n != len(its) {
		t.Fatalf("Add: %d, %v; want %d admitted", n, err, len(its))
	}

	// refuse them all, then readmit them in one call
	for range 16 {
		host := take0(t, f)
		for {
			batch := nextAll(t, f, host)
			if len(batch) == 0 {
				break
			}
			for _, it := range batch {
				if err := f.Refuse(it); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := f.ReleaseHost(host); err != nil {
			t.Fatal(err)
		}
	}
	var refused []Item
	if err := f.EachRefused(func(it Item) error { refused = append(refused, it); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Readmit(refused); err != nil || n != len(its) || f.Stats().Refused != 0 {
		t.Fatalf("Readmit of %d refused: %d, %v, stats %+v", len(refused), n, err, f.Stats())
	}

	// fetch them all without a revisit date, schedule them, then queue the
	// due revisits
	fetched := time.Now().Add(-time.Hour)
	for range 16 {
		host := take0(t, f)
		for {
			batch := nextAll(t, f, host)
			if len(batch) == 0 {
				break
			}
			for _, it := range batch {
				if err := f.Done(it, &History{LastFetch: fetched, Status: 200, Fetches: 1, Changes: 1, ContentHash: [16]byte{1}, ETag: `"e"`}); err != nil {
					t.Fatal(err)
				}
			}
		}
		if err := f.ReleaseHost(host); err != nil {
			t.Fatal(err)
		}
	}
	if n, err := f.ScheduleUnscheduled(time.Minute); err != nil || n != len(its) {
		t.Fatalf("ScheduleUnscheduled: %d, %v; want %d", n, err, len(its))
	}
	if n, err := f.DueRevisits(time.Now(), 1000); err != nil || n != 1000 {
		t.Fatalf("DueRevisits: %d, %v; want 1000", n, err)
	}

	hs := make([]History, 600)
	now := time.Now()
	for i, it := range longItems(len(hs), 8) {
		hs[i] = History{URL: it.URL + "/imported", Host: it.Host, LastFetch: now, NextVisit: now.Add(time.Hour), ETag: `"e"`}
	}
	if n, err := f.ImportHistory(hs); err != nil || n != len(hs) {
		t.Fatalf("ImportHistory: %d, %v; want %d", n, err, len(hs))
	}
	if h, ok, err := f.History(hs[599].URL); err != nil || !ok || h.ETag != `"e"` {
		t.Fatalf("an imported page: %+v %v %v", h, ok, err)
	}
}
