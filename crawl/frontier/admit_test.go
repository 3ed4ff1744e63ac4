package frontier

import (
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
)

// countRevisitKeys counts the stored revisit schedule entries.
func countRevisitKeys(t *testing.T, db *badger.DB) int {
	t.Helper()
	n := 0
	if err := db.View(func(txn *badger.Txn) error {
		n = int(countPrefix(txn, pRevisit))
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	return n
}

func target(u string, next time.Time) History {
	now := time.Now()
	return History{URL: u, Host: "a.test", Depth: 1, FirstFetch: now, LastFetch: now, LastChange: now, Status: 200,
		ETag: `"t"`, ContentHash: [16]byte{1}, Fetches: 1, Changes: 1, Interval: time.Hour, NextVisit: next}
}

// A redirect target admitted as fetched is seen, counted in its host's
// budget and scheduled once, however many sources lead to it; the
// schedule survives a restart.
func TestAdmitFetchedSchedulesOnce(t *testing.T) {
	dir := t.TempDir()
	db, f := open(t, dir, Options{MaxPagesPerHost: 3})
	next := time.Now().Add(time.Minute)
	for i, want := range []bool{true, false, false} { // three sources
		if ok, err := f.AdmitFetched(target("http://a.test/b", next.Add(time.Duration(i)*time.Second))); err != nil || ok != want {
			t.Fatalf("admission %d: %v, %v; want %v", i, ok, err, want)
		}
	}
	if n, _ := f.Add(items("a.test", "/b")); n != 0 {
		t.Fatal("a link to the admitted target was queued")
	}
	if st := f.Stats(); st.Seen != 1 || st.Scheduled != 1 || st.Queued != 0 {
		t.Fatalf("%+v, want 1 seen and scheduled, nothing queued", st)
	}
	h, ok, err := f.History("http://a.test/b")
	if err != nil || !ok || h.ETag != `"t"` || !h.NextVisit.Equal(next) {
		t.Fatalf("history %+v %v %v; want the first admission's", h, ok, err)
	}
	f.Close()
	db.Close()
	db, f = open(t, dir, Options{MaxPagesPerHost: 3})
	defer db.Close()
	defer f.Close()
	if st := f.Stats(); st.Scheduled != 1 || countRevisitKeys(t, db) != 1 {
		t.Fatalf("after a restart: %d scheduled, %d stored", st.Scheduled, countRevisitKeys(t, db))
	}
	if n, err := f.DueRevisits(next.Add(time.Hour), 10); err != nil || n != 1 {
		t.Fatalf("due %d, %v", n, err)
	}
	it, ok, _ := f.Next(take0(t, f))
	if !ok || it.URL != "http://a.test/b" || !it.Revisit || it.Depth != 1 {
		t.Fatalf("queued revisit %+v", it)
	}
	// the budget of 3 holds /b and two more
	if n, _ := f.Add(items("a.test", "/1", "/2", "/3")); n != 2 {
		t.Fatalf("%d admitted after the target, want 2", n)
	}
}

// A target whose host's budget is spent is refused: nothing is stored.
func TestAdmitFetchedWithinTheBudget(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 1})
	defer db.Close()
	defer f.Close()
	f.Add(items("a.test", "/"))
	if ok, err := f.AdmitFetched(target("http://a.test/b", time.Now())); ok || err != nil {
		t.Fatalf("admitted %v, %v past the budget", ok, err)
	}
	seen, _ := f.Seen("http://a.test/b")
	_, known, _ := f.History("http://a.test/b")
	if st := f.Stats(); seen || known || st.Rejected != 1 || st.Scheduled != 0 {
		t.Fatalf("refused target: seen %v, history %v, %+v", seen, known, st)
	}
}

// A target queued already (a sibling link) is not counted twice; its
// queued copy is then known as fetched. Its own fetch finishing later
// (Done) replaces the schedule entry instead of adding one.
func TestAdmitFetchedQueuedTarget(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 2})
	defer db.Close()
	defer f.Close()
	f.Add(items("a.test", "/b"))
	host := take0(t, f)
	it, _, _ := f.Next(host)
	if ok, err := f.AdmitFetched(target("http://a.test/b", time.Now().Add(time.Minute))); !ok || err != nil {
		t.Fatalf("admitted %v, %v", ok, err)
	}
	if st := f.Stats(); st.Seen != 1 {
		t.Fatalf("seen %d, want the queued target counted once", st.Seen)
	}
	direct := target("http://a.test/b", time.Now().Add(time.Hour))
	if err := f.Done(it, &direct); err != nil {
		t.Fatal(err)
	}
	if st := f.Stats(); st.Scheduled != 1 || countRevisitKeys(t, db) != 1 {
		t.Fatalf("%d scheduled, %d stored; want one entry", st.Scheduled, countRevisitKeys(t, db))
	}
	f.ReleaseHost(host)
	if n, _ := f.Add(items("a.test", "/1", "/2")); n != 1 {
		t.Fatalf("%d admitted, want 1 (budget 2, /b counted once)", n)
	}
}

// State from before: a redirect target's one-fetch mark (no content, no
// schedule, a seen mark outside the budget) is replaced by the target's
// full history and schedule; a page with content is left alone.
func TestAdmitFetchedReplacesOldMark(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 1})
	defer db.Close()
	defer f.Close()
	then := time.Now().Add(-time.Hour)
	old := History{URL: "http://a.test/b", Host: "a.test", FirstFetch: then, LastFetch: then, Status: 200, Fetches: 1}
	withContent := History{URL: "http://a.test/c", Host: "a.test", LastFetch: then, Status: 200, Fetches: 1, Changes: 1, ContentHash: [16]byte{9}}
	if err := f.update(func(txn *badger.Txn) error { // as MarkFetched stored them
		for _, h := range []History{old, withContent} {
			k := HashURL(h.URL)
			if err := markSeenUncounted(txn, k); err != nil {
				return err
			}
			if err := txn.Set(cat(pPage, k[:]), h.encode()); err != nil {
				return err
			}
		}
		return nil
	}); err != nil {
		t.Fatal(err)
	}
	if ok, err := f.AdmitFetched(target("http://a.test/b", time.Now())); !ok || err != nil {
		t.Fatalf("old mark: admitted %v, %v; want it replaced", ok, err)
	}
	if ok, err := f.AdmitFetched(target("http://a.test/c", time.Now())); ok || err != nil {
		t.Fatalf("page with content: admitted %v, %v; want it left alone", ok, err)
	}
	h, _, _ := f.History("http://a.test/b")
	if h.ETag != `"t"` || h.NextVisit.IsZero() || f.Stats().Scheduled != 1 {
		t.Fatalf("replaced mark %+v, %d scheduled", h, f.Stats().Scheduled)
	}
	if n, _ := f.Add(items("a.test", "/1")); n != 1 {
		t.Fatal("the replaced mark took the host's budget")
	}
}
