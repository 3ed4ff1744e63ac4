package crawl

import (
	"fmt"
	"net/http"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/extract"
	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Regression (the defect it caught): a redirect target whose history is "gone" (404 on an earlier
// visit of its own: unscheduled) keeps that history when a source is
// found redirecting to it and it answers 200. AdmitFetched treats any
// history but the old one-fetch mark as "known", so the target stays
// unscheduled with Status 404: once the source goes away, the live target
// is never monitored again — the failure mode the change set out to fix.
func TestGoneTargetRescheduledWhenSourceLeadsToIt(t *testing.T) {
	oldBody := `<title>b</title><p>old</p>`
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/a":
			http.Redirect(w, r, "/b", http.StatusMovedPermanently)
		case "/b":
			w.Header().Set("ETag", `"b2"`)
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>b</title><p>back again</p>`)
		}
	})
	a, b := srv.URL+"/a", srv.URL+"/b"
	host := urlnorm.HostKey(mustParse(a))
	then := time.Now().Add(-time.Hour)
	db := openDB(t)
	fr, err := frontier.New(db, frontier.Options{Logger: quiet})
	if err != nil {
		t.Fatal(err)
	}
	old := extract.ContentHash([]byte(oldBody))
	if n, err := fr.ImportHistory([]frontier.History{
		// /a: redirects to /b, due now
		{URL: a, Host: host, FirstFetch: then, LastFetch: then, LastChange: then, Status: 200, Fetches: 1, Changes: 1,
			ContentHash: old, Interval: time.Hour, NextVisit: then.Add(time.Minute)},
		// /b: went 404 on its own revisit (a gone record, off the schedule)
		{URL: b, Host: host, FirstFetch: then, LastFetch: then, LastChange: then, Status: 404, Fetches: 2, Changes: 1,
			ContentHash: old},
	}); err != nil || n != 2 {
		t.Fatalf("import: %d, %v", n, err)
	}
	fr.Close()
	eng, stop := revisitRun(t, Config{DB: db, Fetch: revisitFetch(), Concurrency: 1, Receiver: pack.FileSink{Dir: t.TempDir()},
		Progress: -1, Logger: testLogger(t), Monitor: Monitor{Enabled: true, Sleep: time.Hour}})
	waitFor(t, 10*time.Second, "the revisit of /a done", func() bool {
		h, _, _ := eng.front.History(a)
		return h.Fetches >= 2
	})
	h, _, _ := eng.front.History(b)
	st := eng.Stats()
	stop()
	if h.Status != 200 || h.NextVisit.IsZero() {
		t.Errorf("/b answered 200 through /a's redirect (server %v, %d changed), but its history stays status %d, next visit %v, ETag %q: never monitored again once /a goes",
			hits(), st.Changed, h.Status, h.NextVisit, h.ETag)
	}
}

// Regression (the defect it caught): in process, the links of the target's page are queued (and
// counted in the host's budget) before the target itself is admitted. With
// one place left, a not-yet-fetched link takes it and the page just
// fetched through the redirect is refused: the link is then fetched as
// well (4 pages fetched on a budget of 3) and the target is not
// monitored.
func TestTargetAdmittedBeforeItsLinks(t *testing.T) {
	srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		switch r.URL.Path {
		case "/robots.txt":
			http.NotFound(w, r)
		case "/":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>home</title><a href="/a">a</a>`)
		case "/a":
			http.Redirect(w, r, "/b", http.StatusMovedPermanently)
		case "/b":
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>b</title><a href="/c">c</a>`)
		default:
			w.Header().Set("Content-Type", "text/html")
			fmt.Fprint(w, `<title>c</title>`)
		}
	})
	eng := runToIdle(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/"}, Fetch: revisitFetch(), Concurrency: 1,
		Scope: urlnorm.Scope{MaxPagesPerHost: 3}, Receiver: pack.FileSink{Dir: t.TempDir()}, StopWhenIdle: true,
		Progress: -1, Logger: testLogger(t), Monitor: Monitor{Enabled: true, Sleep: time.Hour}})
	_, known, _ := eng.front.History(srv.URL + "/b")
	if h := hits(); !known || h["/c"] != 0 {
		t.Errorf("budget 3 (/, /a, and /b fetched through it): /b admitted %v, server %v; want /b admitted and /c refused", known, h)
	}
}

// Regression (the defect it caught): a refused redirect target is refused again — and counted again in
// out_of_scope_total / urls_rejected_total — on every revisit of its
// source, unchanged ones included (which re-examine no links), so the
// counters grow with the revisit rate instead of counting refusals.
func TestRefusedTargetNotRecountedOnUnchangedRevisits(t *testing.T) {
	other, _ := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
		w.Header().Set("Content-Type", "text/html")
		fmt.Fprint(w, `<title>elsewhere</title>`)
	})
	for _, tc := range []struct {
		name      string
		target    string
		sameHosts bool
		scope     urlnorm.Scope
	}{
		{name: "out of scope", target: other.URL + "/b", sameHosts: true},
		{name: "over budget", target: "/b", scope: urlnorm.Scope{MaxPagesPerHost: 1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			srv, hits := countingServer(t, func(w http.ResponseWriter, r *http.Request, _ int) {
				switch r.URL.Path {
				case "/robots.txt":
					http.NotFound(w, r)
				case "/a":
					target := tc.target
					if target[0] == '/' {
						target = "http://" + r.Host + target
					}
					http.Redirect(w, r, target, http.StatusMovedPermanently)
				default:
					w.Header().Set("Content-Type", "text/html")
					fmt.Fprint(w, `<title>target</title>`)
				}
			})
			eng, stop := revisitRun(t, Config{StateDir: t.TempDir(), Seeds: []string{srv.URL + "/a"}, Fetch: revisitFetch(), Concurrency: 1,
				SameHostsAsSeeds: tc.sameHosts, Scope: tc.scope, Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t),
				Monitor: Monitor{Enabled: true, Sleep: 20 * time.Millisecond, MinInterval: 10 * time.Millisecond, MaxInterval: 20 * time.Millisecond}})
			waitFor(t, 10*time.Second, "four unchanged revisits of /a", func() bool { return eng.Stats().Unchanged >= 4 })
			st, fst := eng.Stats(), eng.front.Stats()
			stop()
			if st.OutOfScope+fst.Rejected > 1 {
				t.Errorf("one target refused, counted %d times out of scope and %d times rejected over %d unchanged revisits (server %v)",
					st.OutOfScope, fst.Rejected, st.Unchanged, hits())
			}
		})
	}
}
