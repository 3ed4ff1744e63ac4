package crawl

import (
	"context"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/frontier"
	"github.com/micra-crawler/micra/crawl/urlnorm"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// arrivingRouter owns every host, but the history of host `arriving` is
// still on its way from its previous owner: Recheck says Wait until, at the
// third such answer, it imports that history (the first half of the
// host's pages, fetched by the previous owner) and the host is ready.
type arrivingRouter struct {
	splitRouter
	web      *synthweb.Web
	arriving string
	eng      *Engine

	mu    sync.Mutex
	waits int
	done  bool
	err   error
}

func (r *arrivingRouter) Recheck(_ context.Context, u *url.URL, ip netip.Addr) (Route, error) {
	rt := Route{Addr: ip, Mine: true}
	if u.Hostname() != r.arriving {
		return rt, nil
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.done {
		return rt, nil
	}
	if r.waits++; r.waits == 3 {
		var hs []frontier.History
		then := time.Now().Add(-time.Minute)
		for p := range 5 {
			pu := r.web.PageURL(1, p)
			hs = append(hs, frontier.History{URL: pu, Host: urlnorm.HostKey(mustParse(pu)), FirstFetch: then, LastFetch: then, Status: 200, Fetches: 1})
		}
		_, r.err = r.eng.Frontier().ImportHistory(hs)
		r.done = true
		return rt, nil
	}
	rt.Wait = time.Now().Add(5 * time.Millisecond)
	return rt, nil
}

// A host whose history is still arriving rests instead of being fetched
// (Route.Wait), and once the history is in, the pages it holds are not
// fetched here: the previous owner fetched them. Nothing is lost: the
// rest of the host's pages are fetched, once each.
func TestArrivingHostWaitsForItsHistory(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 2, HostsPerIP: 1, PagesPerHost: 10})
	hosts := web.Hosts()
	r := &arrivingRouter{web: web, arriving: hosts[1]}
	r.own = map[string]bool{hosts[0]: true, hosts[1]: true}
	eng := crawlQueued(t, web, r, 2, func(e *Engine) { r.eng = e })
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.err != nil {
		t.Fatal(r.err)
	}
	if !r.done {
		t.Fatal("the arriving host was never re-checked three times")
	}
	ws := web.Stats()
	if ws.UniquePages != 15 || ws.DuplicateFetches != 0 {
		t.Fatalf("server: %d distinct pages, %d fetched twice; want 15 (10 + the 5 the history did not hold), none twice", ws.UniquePages, ws.DuplicateFetches)
	}
	if st := eng.Stats(); st.Fetched != 15 {
		t.Fatalf("fetched %d, want 15", st.Fetched)
	}
}

// WaitHostsIdle returns only once no worker visits a matching host; hosts
// it does not match do not hold it.
func TestWaitHostsIdle(t *testing.T) {
	e := &Engine{busy: newBusyHosts()}
	e.busy.enter("a.test:80")
	e.busy.enter("b.test:80")
	e.busy.enter("a.test:80") // two workers
	isA := func(h string) bool { return h == "a.test:80" }
	done := make(chan error, 1)
	go func() { done <- e.WaitHostsIdle(context.Background(), isA) }()
	e.busy.leave("a.test:80")
	select {
	case err := <-done:
		t.Fatalf("returned (%v) while a worker still visits the host", err)
	case <-time.After(20 * time.Millisecond):
	}
	e.busy.leave("a.test:80")
	if err := <-done; err != nil {
		t.Fatal(err)
	}
	// b is still busy, but not asked about
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if err := e.WaitHostsIdle(ctx, isA); err != nil {
		t.Fatalf("no matching host busy: %v", err)
	}
	if err := e.WaitHostsIdle(ctx, func(h string) bool { return h == "b.test:80" }); err != context.Canceled {
		t.Fatalf("busy host, cancelled: %v, want context.Canceled", err)
	}
}
