package frontier

import (
	"sync"
	"testing"
	"time"
)

// Guard: a target admitted by a redirect while its queued copy
// is being fetched directly — the two commits racing, in either order —
// ends with one history and one schedule entry, counted once.
func TestAdmitRacesDone(t *testing.T) {
	for i := 0; i < 30; i++ {
		db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 5})
		f.Add(items("a.test", "/b"))
		host := take0(t, f)
		it, _, _ := f.Next(host)
		var wg sync.WaitGroup
		wg.Go(func() {
			if _, err := f.AdmitFetched(target("http://a.test/b", time.Now().Add(time.Minute))); err != nil {
				t.Error(err)
			}
		})
		wg.Go(func() {
			h := target("http://a.test/b", time.Now().Add(time.Hour))
			if err := f.Done(it, &h); err != nil {
				t.Error(err)
			}
		})
		for range 4 { // more sources at once
			wg.Go(func() { f.AdmitFetched(target("http://a.test/b", time.Now().Add(2*time.Minute))) })
		}
		wg.Wait()
		if st := f.Stats(); st.Scheduled != 1 || countRevisitKeys(t, db) != 1 || st.Seen != 1 {
			t.Fatalf("round %d: %+v, %d stored; want one schedule entry, seen once", i, st, countRevisitKeys(t, db))
		}
		f.ReleaseHost(host)
		f.Close()
		db.Close()
	}
}

// Guard: a page recovered from another crawler (node's Import:
// Changes 0, a content hash, no schedule when not monitoring) is no
// one-fetch redirect mark: AdmitFetched leaves it alone.
func TestImportedPageNotTakenForAMark(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	then := time.Now().Add(-time.Hour)
	imp := History{URL: "http://a.test/b", Host: "a.test", FirstFetch: then, LastFetch: then, Status: 200, ETag: `"imp"`,
		ContentHash: [16]byte{7}, Fetches: 1}
	if n, err := f.ImportHistory([]History{imp}); n != 1 || err != nil {
		t.Fatal(n, err)
	}
	if ok, err := f.AdmitFetched(target("http://a.test/b", time.Now())); ok || err != nil {
		t.Fatalf("imported page replaced: %v, %v", ok, err)
	}
	if h, _, _ := f.History("http://a.test/b"); h.ETag != `"imp"` {
		t.Fatalf("history %+v", h)
	}
}

// Regression (the defect it caught): a redirect target admitted while its queued copy is being
// withdrawn (between Withdraw's unsee and forget: the hand-off is in
// flight, without the lock) and the hand-off delivered back to this
// crawler. The delivery back finds the target seen (AdmitFetched's mark)
// and queues nothing; forget then deletes the history and schedule
// AdmitFetched wrote, keeping its seen mark and budget count. The page
// ends seen here with no queue entry, no history, no schedule — lost, not
// overlapped (a link admitted in the same window keeps its new queue
// entry, which forget does not touch).
func TestAdmitDuringWithdrawNotLost(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	f.Add(items("a.test", "/b"))
	host := take0(t, f)
	batch := nextAll(t, f, host)
	err := f.Withdraw(batch, func(urls []string) error {
		// another worker: a page redirecting to /b, owned here (ownership
		// flipped back), is processed while the hand-off is in flight
		if ok, err := f.AdmitFetched(target("http://a.test/b", time.Now().Add(time.Hour))); !ok || err != nil {
			t.Errorf("admission during the hand-off: %v, %v", ok, err)
		}
		// the hand-off comes back to this crawler
		_, err := f.Add(items("a.test", "/b"))
		return err
	})
	if err != nil {
		t.Fatal(err)
	}
	f.ReleaseHost(host)
	_, known, _ := f.History("http://a.test/b")
	seen, _ := f.Seen("http://a.test/b")
	st := f.Stats()
	if !known && st.Queued == 0 {
		t.Errorf("/b after the round trip: seen %v, history %v, %d queued, %d scheduled; want it queued or kept with its schedule",
			seen, known, st.Queued, st.Scheduled)
	}
}
