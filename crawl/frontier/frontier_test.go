package frontier

import (
	"errors"
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"go.uber.org/goleak"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

func open(t *testing.T, dir string, opt Options) (*badger.DB, *Frontier) {
	t.Helper()
	db, err := OpenDB(dir, DBOptions{})
	if err != nil {
		t.Fatal(err)
	}
	f, err := New(db, opt)
	if err != nil {
		db.Close()
		t.Fatal(err)
	}
	return db, f
}

func items(host string, paths ...string) []Item {
	var out []Item
	for _, p := range paths {
		out = append(out, Item{URL: "http://" + host + p, Host: host})
	}
	return out
}

func drainHost(t *testing.T, f *Frontier, host string, hist bool) []string {
	t.Helper()
	var got []string
	for {
		it, ok, err := f.Next(host)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return got
		}
		got = append(got, it.URL)
		var h *History
		if hist {
			h = &History{LastFetch: time.Now(), ETag: `"e"`}
		}
		if err := f.Done(it, h); err != nil {
			t.Fatal(err)
		}
	}
}

func TestBreadthFirstPerHostAndDedup(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	n, err := f.Add(append(items("a.test", "/", "/1", "/1"), items("b.test", "/")...))
	if err != nil || n != 3 {
		t.Fatalf("added %d, %v", n, err)
	}
	if n, _ := f.Add(items("a.test", "/", "/1")); n != 0 {
		t.Fatalf("re-added %d seen URLs", n)
	}
	h, ok, err := f.AcquireHost()
	if err != nil || !ok || h != "a.test" {
		t.Fatalf("acquired %q %v %v, want a.test first (FIFO)", h, ok, err)
	}
	it, _, _ := f.Next(h)
	f.Done(it, nil)
	// Links discovered while the host is active go to the back of its queue.
	f.Add(items("a.test", "/2", "/3"))
	got := drainHost(t, f, h, false)
	if fmt.Sprint(got) != "[http://a.test/1 http://a.test/2 http://a.test/3]" {
		t.Fatalf("order %v", got)
	}
	f.ReleaseHost(h)
	h2, ok, _ := f.AcquireHost()
	if !ok || h2 != "b.test" {
		t.Fatalf("second host %q", h2)
	}
	drainHost(t, f, h2, false)
	f.ReleaseHost(h2)
	if _, ok, _ := f.AcquireHost(); ok {
		t.Fatal("a host is ready although every queue is empty")
	}
	if st := f.Stats(); st.Queued != 0 || st.Done != 5 || st.Seen != 5 {
		t.Fatalf("stats %+v", st)
	}
}

func TestHostBudget(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 3})
	defer db.Close()
	defer f.Close()
	n, _ := f.Add(items("a.test", "/1", "/2", "/3", "/4", "/5"))
	if n != 3 || f.Stats().Rejected != 2 {
		t.Fatalf("admitted %d, stats %+v", n, f.Stats())
	}
}

// A host acquired and half crawled when the process stops is resumed after
// reopening; the URLs marked Done are not returned again.
func TestRestartResumes(t *testing.T) {
	dir := t.TempDir()
	db, f := open(t, dir, Options{})
	var paths []string
	for i := range 10 {
		paths = append(paths, fmt.Sprintf("/%d", i))
	}
	f.Add(items("a.test", paths...))
	f.Add(items("b.test", "/x"))
	h, _, _ := f.AcquireHost()
	for range 4 {
		it, _, _ := f.Next(h)
		f.Done(it, &History{LastFetch: time.Now(), Status: 200})
	}
	it, _, _ := f.Next(h) // in flight, never Done
	_ = it
	f.Close()
	db.Close()

	db, f = open(t, dir, Options{})
	defer db.Close()
	defer f.Close()
	if st := f.Stats(); st.Queued != 7 || st.ReadyHosts != 2 {
		t.Fatalf("after restart %+v", st)
	}
	var all []string
	for {
		h, ok, err := f.AcquireHost()
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			break
		}
		all = append(all, drainHost(t, f, h, false)...)
		f.ReleaseHost(h)
	}
	if len(all) != 7 || all[0] != "http://b.test/x" && all[0] != "http://a.test/4" {
		t.Fatalf("resumed %v", all)
	}
	if seen, _ := f.Seen("http://a.test/0"); !seen {
		t.Fatal("seen-set lost across restart")
	}
	if h, ok, _ := f.History("http://a.test/0"); !ok || h.Status != 200 || h.Fetches != 0 && h.URL != "http://a.test/0" {
		t.Fatalf("history lost: %+v", h)
	}
}

func TestRevisitSchedule(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	f.Add(items("a.test", "/1", "/2"))
	h, _, _ := f.AcquireHost()
	now := time.Now()
	it, _, _ := f.Next(h)
	f.Done(it, &History{LastFetch: now, NextVisit: now.Add(time.Hour)})
	it, _, _ = f.Next(h)
	f.Done(it, &History{LastFetch: now, NextVisit: now.Add(time.Minute)})
	f.ReleaseHost(h)
	if next, ok, _ := f.NextRevisit(); !ok || !next.Equal(now.Add(time.Minute).Truncate(0)) && next.UnixNano() != now.Add(time.Minute).UnixNano() {
		t.Fatalf("next revisit %v", next)
	}
	if n, _ := f.DueRevisits(now.Add(30*time.Minute), 100); n != 1 {
		t.Fatalf("due %d, want 1", n)
	}
	h, ok, _ := f.AcquireHost()
	it, ok2, _ := f.Next(h)
	if !ok || !ok2 || !it.Revisit || it.URL != "http://a.test/2" {
		t.Fatalf("revisit item %+v", it)
	}
	// Rescheduling replaces the old schedule entry.
	f.Done(it, &History{LastFetch: now, NextVisit: now.Add(2 * time.Hour)})
	if st := f.Stats(); st.Scheduled != 2 {
		t.Fatalf("scheduled %d, want 2", st.Scheduled)
	}
	f.ReleaseHost(h)
}

func TestSeenFrontBounded(t *testing.T) {
	s := newSeenFront(1000)
	for i := range 100_000 {
		s.add(HashURL(fmt.Sprint(i)))
	}
	if n := len(s.young) + len(s.old); n > 1000 {
		t.Fatalf("seen front holds %d entries, bound 1000", n)
	}
	if !s.has(HashURL("99999")) {
		t.Fatal("recent entry missing")
	}
}

func TestRobotsStore(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, ok, _ := f.GetRobots("http://a.test"); ok {
		t.Fatal("empty store returned an entry")
	}
	f.PutRobots("http://a.test", []byte("x"))
	if v, ok, _ := f.GetRobots("http://a.test"); !ok || string(v) != "x" {
		t.Fatal("robots entry lost")
	}
}

// Workers crawl hosts while every visit adds links to other hosts (Add and
// Done meet on host metadata): every admitted URL is done exactly once and no
// host is left stranded with work off the ready list.
func TestConcurrentWorkersDrainEverything(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	const hosts, perHost = 20, 30
	var seeds []Item
	for h := range hosts {
		seeds = append(seeds, items(fmt.Sprintf("h%d.test", h), "/0")...)
	}
	f.Add(seeds)
	var mu sync.Mutex
	done := map[string]int{}
	var wg sync.WaitGroup
	for w := range 4 {
		wg.Go(func() {
			idle := 0
			for idle < 50 {
				host, ok, err := f.AcquireHost()
				if err != nil {
					t.Error(err)
					return
				}
				if !ok {
					idle++
					time.Sleep(2 * time.Millisecond)
					continue
				}
				idle = 0
				for {
					it, ok, err := f.Next(host)
					if err != nil || !ok {
						break
					}
					var n int
					fmt.Sscanf(it.URL[len("http://"+host+"/"):], "%d", &n)
					var links []Item
					for k := 1; k <= 3; k++ {
						links = append(links, Item{URL: fmt.Sprintf("http://h%d.test/%d", (n*7+k*w+k)%hosts, (n+k)%perHost), Host: fmt.Sprintf("h%d.test", (n*7+k*w+k)%hosts)})
					}
					if _, err := f.Add(links); err != nil {
						t.Error(err)
					}
					if err := f.Done(it, &History{Status: 200}); err != nil {
						t.Error(err)
					}
					mu.Lock()
					done[it.URL]++
					mu.Unlock()
				}
				if err := f.ReleaseHost(host); err != nil {
					t.Error(err)
				}
			}
		})
	}
	wg.Wait()
	st := f.Stats()
	if st.Queued != 0 || st.ReadyHosts != 0 || st.ActiveHosts != 0 || int64(len(done)) != st.Seen {
		t.Fatalf("stats %+v, %d URLs done", st, len(done))
	}
	for u, n := range done {
		if n != 1 {
			t.Errorf("%s done %d times", u, n)
		}
	}
}

// Withdraw forgets URLs whose host another crawler took over: out of the
// queue, the seen-set and the revisit schedule, marked handed off — and a
// URL that comes back later is admitted afresh. A page fetched before keeps
// its history, unscheduled, for the new owner's recovery.
func TestWithdraw(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, err := f.Add(items("a.test", "/1", "/2", "/3")); err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	h, _, _ := f.AcquireHost()
	it, _, _ := f.Next(h)
	if err := f.Done(it, &History{LastFetch: now, NextVisit: now.Add(time.Hour), ETag: `"e"`, Fetches: 1}); err != nil {
		t.Fatal(err)
	}
	f.ReleaseHost(h)
	if n, _ := f.DueRevisits(now.Add(2*time.Hour), 10); n != 1 {
		t.Fatalf("due %d, want 1", n)
	}
	h, _, _ = f.AcquireHost()
	got := nextAll(t, f, h)
	if len(got) != 3 || got[2].URL != "http://a.test/1" || !got[2].Revisit {
		t.Fatalf("queue %+v, want /2, /3 and the revisit of /1", got)
	}
	var handed []string
	accept := func(urls []string) error { handed = append(handed, urls...); return nil }
	if err := f.Withdraw([]Item{{URL: "http://a.test/9", Host: "a.test"}}, accept); err == nil {
		t.Fatal("Withdraw of an item not returned by Next: no error")
	}
	if err := f.Withdraw([]Item{got[0], got[2]}, accept); err != nil {
		t.Fatal(err)
	}
	if len(handed) != 2 {
		t.Fatalf("handed %v, want the two withdrawn URLs", handed)
	}
	if err := f.Done(got[1], nil); err != nil {
		t.Fatal(err)
	}
	f.ReleaseHost(h)
	if st := f.Stats(); st.Queued != 0 || st.Scheduled != 0 {
		t.Fatalf("after withdrawing two and fetching one: %+v", st)
	}
	for _, u := range []string{"http://a.test/1", "http://a.test/2"} {
		seen, _ := f.Seen(u)
		handed, _ := f.HandedOff(u)
		if seen || !handed {
			t.Fatalf("%s withdrawn: seen %v, handed off %v; want the hand-off mark only", u, seen, handed)
		}
	}
	if _, hist, _ := f.History("http://a.test/2"); hist {
		t.Fatal("the withdrawn URL never fetched has a history")
	}
	if h, hist, _ := f.History("http://a.test/1"); !hist || h.ETag != `"e"` || !h.NextVisit.IsZero() {
		t.Fatalf("the withdrawn page fetched before: history %v %+v; want it kept (validators), off the schedule", hist, h)
	}
	if seen, _ := f.Seen("http://a.test/3"); !seen {
		t.Fatal("the fetched URL left the seen-set")
	}
	// ownership comes back, and the URLs with it
	if n, err := f.Add(items("a.test", "/2", "/1", "/3")); err != nil || n != 2 {
		t.Fatalf("withdrawn URLs handed back: %d admitted, %v; want 2", n, err)
	}
	h, ok, _ := f.AcquireHost()
	if !ok || h != "a.test" {
		t.Fatalf("host with two URLs back not ready: %q %v", h, ok)
	}
	if urls := drainHost(t, f, h, false); len(urls) != 2 {
		t.Fatalf("queue after the return: %v", urls)
	}
	f.ReleaseHost(h)
}

// A page handed off keeps its history off the schedule (Withdraw); when
// its subnet comes back with the history of the crawler that had it
// (ImportHistory, scheduled as monitoring does), the page goes back on the
// schedule, from the fresher of the two fetches; an import off the
// schedule leaves it alone.
func TestImportPutsAHandedOffPageBackOnTheSchedule(t *testing.T) {
	now := time.Now()
	for _, tc := range []struct {
		name        string
		imported    time.Time // the other crawler's last fetch; zero: no import
		scheduled   bool      // the import is on the schedule
		wantETag    string
		wantNextVis time.Time
	}{
		{"fresher import", now, true, `"theirs"`, now.Add(time.Hour)},
		{"older import", now.Add(-2 * time.Hour), true, `"mine"`, now.Add(-time.Hour + time.Hour)},
		{"import off the schedule", now, false, `"mine"`, time.Time{}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			db, f := open(t, t.TempDir(), Options{})
			defer db.Close()
			defer f.Close()
			if _, err := f.Add(items("a.test", "/1")); err != nil {
				t.Fatal(err)
			}
			h, _, _ := f.AcquireHost()
			it, _, _ := f.Next(h)
			mine := now.Add(-time.Hour)
			if err := f.Done(it, &History{LastFetch: mine, NextVisit: mine.Add(time.Hour), Interval: time.Hour, ETag: `"mine"`, Fetches: 1}); err != nil {
				t.Fatal(err)
			}
			f.ReleaseHost(h)
			f.DueRevisits(now.Add(2*time.Hour), 10)
			h, _, _ = f.AcquireHost()
			got := nextAll(t, f, h)
			if err := f.Withdraw(got, func([]string) error { return nil }); err != nil {
				t.Fatal(err)
			}
			f.ReleaseHost(h)
			imp := History{URL: "http://a.test/1", Host: "a.test", LastFetch: tc.imported, ETag: `"theirs"`, Fetches: 1, Interval: time.Hour}
			if tc.scheduled {
				imp.NextVisit = tc.imported.Add(time.Hour)
			}
			if _, err := f.ImportHistory([]History{imp}); err != nil {
				t.Fatal(err)
			}
			hist, ok, _ := f.History("http://a.test/1")
			if !ok || hist.ETag != tc.wantETag || !hist.NextVisit.Equal(tc.wantNextVis) {
				t.Fatalf("history %v %+v; want ETag %s, next visit %v", ok, hist, tc.wantETag, tc.wantNextVis)
			}
			wantScheduled := int64(0)
			if tc.scheduled {
				wantScheduled = 1
			}
			if st := f.Stats(); st.Scheduled != wantScheduled {
				t.Fatalf("%d scheduled, want %d", st.Scheduled, wantScheduled)
			}
			if n, _ := f.DueRevisits(now.Add(3*time.Hour), 10); n != int(wantScheduled) {
				t.Fatalf("%d revisits due, want %d", n, wantScheduled)
			}
		})
	}
}

// KeepHistory stores a page another crawler owns as Withdraw leaves a
// handed-off one: a history, neither seen nor scheduled, that does not
// replace one this crawler has. Its URL is admitted if it comes here, and
// an import on the schedule puts it on the schedule, keeping the depth
// this crawler knows. A page gone at this crawler's fresher fetch stays
// off the schedule.
func TestKeepHistory(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	now := time.Now()
	kept := History{URL: "http://a.test/k", Host: "a.test", Depth: 2, FirstFetch: now.Add(-2 * time.Hour), LastFetch: now.Add(-2 * time.Hour),
		ETag: `"k"`, Fetches: 1, NextVisit: now}
	gone := History{URL: "http://a.test/g", Host: "a.test", LastFetch: now, Status: 404, Fetches: 1}
	if n, err := f.KeepHistory([]History{kept, gone}); n != 2 || err != nil {
		t.Fatalf("kept %d, %v", n, err)
	}
	h, ok, _ := f.History(kept.URL)
	if seen, _ := f.Seen(kept.URL); !ok || seen || !h.NextVisit.IsZero() || h.ETag != `"k"` || f.Stats().Scheduled != 0 {
		t.Fatalf("kept page: history %v %+v, seen %v, %d scheduled; want the history only", ok, h, seen, f.Stats().Scheduled)
	}
	other := kept
	other.ETag = `"other"`
	if n, _ := f.KeepHistory([]History{other}); n != 0 {
		t.Fatalf("KeepHistory replaced a history this crawler has (%d)", n)
	}
	imp := []History{
		{URL: kept.URL, Host: "a.test", FirstFetch: now, LastFetch: now, ETag: `"new"`, Fetches: 1, Interval: time.Hour, NextVisit: now.Add(time.Hour)},
		{URL: gone.URL, Host: "a.test", FirstFetch: now.Add(-time.Hour), LastFetch: now.Add(-time.Hour), Fetches: 1, Interval: time.Hour, NextVisit: now},
	}
	if n, err := f.ImportHistory(imp); n != 1 || err != nil {
		t.Fatalf("imported %d, %v; want the kept page only (the gone one's fetch here is fresher)", n, err)
	}
	h, _, _ = f.History(kept.URL)
	if seen, _ := f.Seen(kept.URL); !seen || h.ETag != `"new"` || h.Depth != 2 || !h.FirstFetch.Equal(kept.FirstFetch) || !h.NextVisit.Equal(now.Add(time.Hour)) {
		t.Fatalf("the kept page imported on the schedule: seen %v, %+v; want the import's validators and schedule, this crawler's depth and first fetch", seen, h)
	}
	if h, _, _ := f.History(gone.URL); !h.NextVisit.IsZero() || h.Status != 404 {
		t.Fatalf("the page gone here at the fresher fetch: %+v; want it left off the schedule", h)
	}
	if st := f.Stats(); st.Scheduled != 1 {
		t.Fatalf("%d scheduled, want 1", st.Scheduled)
	}
}

// A withdrawal whose hand-off comes straight back to this crawler (the
// overlay's owner is this crawler after all, or ownership flipped back)
// loses nothing: the URLs are queued again. A failed hand-off leaves them
// queued and seen. Withdrawn URLs give their place in the host's budget
// back, so they can be admitted again however small the budget.
func TestWithdrawHandedBackOrFailed(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 3})
	defer db.Close()
	defer f.Close()
	if n, err := f.Add(items("a.test", "/1", "/2", "/3")); err != nil || n != 3 {
		t.Fatalf("add: %d %v", n, err)
	}
	// the hand-off fails: everything stays queued and seen
	batch := nextAll(t, f, take0(t, f))
	if err := f.Withdraw(batch, func([]string) error { return errors.New("spool full") }); err == nil {
		t.Fatal("a failed hand-off: Withdraw returned nil")
	}
	f.Rewind("a.test")
	for _, it := range batch {
		if seen, _ := f.Seen(it.URL); !seen {
			t.Fatalf("%s lost its seen mark after a failed hand-off", it.URL)
		}
	}
	if st := f.Stats(); st.Queued != 3 {
		t.Fatalf("after a failed hand-off %d queued, want 3", st.Queued)
	}
	// the hand-off is delivered back to this crawler at once
	var back int
	err := f.Withdraw(batch, func(urls []string) error {
		n, err := f.Add(items("a.test", "/1", "/2", "/3"))
		back = n
		return err
	})
	if err != nil || back != 3 {
		t.Fatalf("hand-off delivered back: %d re-admitted, %v; want all 3", back, err)
	}
	f.ReleaseHost("a.test")
	if urls := drainHost(t, f, take0(t, f), false); len(urls) != 3 {
		t.Fatalf("after the round trip the queue holds %v, want the 3 URLs once each", urls)
	}
	f.ReleaseHost("a.test")
	// the three came back and were fetched: the budget of 3 is spent
	if n, err := f.Add(items("a.test", "/4", "/5", "/6")); err != nil || n != 0 {
		t.Fatalf("budget of 3 spent: %d admitted, %v", n, err)
	}
}

// nextAll takes every queued item of acquired host (without Done).
func nextAll(t *testing.T, f *Frontier, host string) []Item {
	t.Helper()
	var out []Item
	for {
		it, ok, err := f.Next(host)
		if err != nil {
			t.Fatal(err)
		}
		if !ok {
			return out
		}
		out = append(out, it)
	}
}

// take0 acquires the only ready host.
func take0(t *testing.T, f *Frontier) string {
	t.Helper()
	h, ok, err := f.AcquireHost()
	if err != nil || !ok {
		t.Fatalf("no host ready: %v", err)
	}
	return h
}

// Withdrawing pages recovered from another crawler (ImportHistory, which
// does not spend the host's budget) gives back no budget either.
func TestWithdrawKeepsTheBudget(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{MaxPagesPerHost: 3})
	defer db.Close()
	defer f.Close()
	now := time.Now()
	var hs []History
	for i := range 5 {
		hs = append(hs, History{URL: fmt.Sprintf("http://a.test/old%d", i), Host: "a.test", LastFetch: now, NextVisit: now.Add(time.Minute), Fetches: 1})
	}
	if n, err := f.ImportHistory(hs); err != nil || n != 5 {
		t.Fatalf("import: %d %v", n, err)
	}
	if n, err := f.Add(items("a.test", "/1", "/2")); err != nil || n != 2 {
		t.Fatalf("add: %d %v", n, err)
	}
	if n, _ := f.DueRevisits(now.Add(time.Hour), 10); n != 5 {
		t.Fatalf("due %d, want the 5 imported pages", n)
	}
	var revisits []Item
	for _, it := range nextAll(t, f, take0(t, f)) {
		if it.Revisit {
			revisits = append(revisits, it)
		}
	}
	if len(revisits) != 5 {
		t.Fatalf("%d revisits queued, want 5", len(revisits))
	}
	if err := f.Withdraw(revisits, func([]string) error { return nil }); err != nil {
		t.Fatal(err)
	}
	f.Rewind("a.test")
	f.ReleaseHost("a.test")
	if st := f.Stats(); st.Seen != 2 || st.Queued != 2 || st.Scheduled != 0 {
		t.Fatalf("after withdrawing the imported pages: %+v, want 2 seen and queued, none scheduled", st)
	}
	if n, err := f.Add(items("a.test", "/3", "/4", "/5")); err != nil || n != 1 {
		t.Fatalf("budget 3 with 2 admitted: %d more admitted, %v; want 1", n, err)
	}
}
