package crawl

import (
	"context"
	"net/netip"
	"net/url"
	"slices"
	"sync"
	"testing"

	"github.com/micra-crawler/micra/crawl/pack"
)

// hostRouter owns the URLs of host mine and hands the others off,
// recording them.
type hostRouter struct {
	mine   string
	mu     sync.Mutex
	handed []string
}

func (r *hostRouter) Route(_ context.Context, u *url.URL, _ netip.Addr) (Route, error) {
	return Route{Mine: u.Hostname() == r.mine, Owner: u.Hostname()}, nil
}
func (r *hostRouter) Handoff(_ context.Context, urls []Routed) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	for _, u := range urls {
		r.handed = append(r.handed, u.URL)
	}
	return nil
}
func (r *hostRouter) NeedsIP() bool { return false }

// The links of a page recovered from elsewhere are routed as a fetched
// page's: this crawler's queued (those it has seen dropped), the others
// handed off once, whatever page links to them again.
func TestAddLinksRoutesARecoveredPagesLinks(t *testing.T) {
	r := &hostRouter{mine: "a.test"}
	eng, err := New(Config{StateDir: t.TempDir(), Router: r, Receiver: pack.FileSink{Dir: t.TempDir()}, Progress: -1, Logger: testLogger(t)})
	if err != nil {
		t.Fatal(err)
	}
	defer eng.Close()
	ctx := context.Background()
	if err := eng.Accept(ctx, []string{"http://a.test/known"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddLinks(ctx, "http://a.test/", []string{"http://a.test/1", "http://a.test/known", "http://b.test/x", "ftp://a.test/no"}); err != nil {
		t.Fatal(err)
	}
	if err := eng.AddLinks(ctx, "http://a.test/1", []string{"http://a.test/1", "http://b.test/x"}); err != nil {
		t.Fatal(err)
	}
	if q := eng.Frontier().Stats().Queued; q != 2 {
		t.Errorf("%d URLs queued, want /known and /1", q)
	}
	for _, u := range []string{"http://a.test/1", "http://a.test/known"} {
		if seen, _ := eng.Frontier().Seen(u); !seen {
			t.Errorf("%s not queued", u)
		}
	}
	if !slices.Equal(r.handed, []string{"http://b.test/x"}) {
		t.Errorf("handed off %v, want b.test/x once", r.handed)
	}
}
