package fetch

import (
	"context"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"sync/atomic"
	"testing"
)

// multiResolver resolves every name to the same addresses, in order, and
// counts its answers.
type multiResolver struct {
	addrs []netip.Addr
	n     atomic.Int32
}

func (m *multiResolver) LookupNetIP(context.Context, string, string) ([]netip.Addr, error) {
	m.n.Add(1)
	return m.addrs, nil
}

// TestPinnedAddressIsDialled: a request pinned to one of its host's
// addresses (the one the crawler routed by) reaches that address, although
// the resolver lists another first; a pinned address that does not answer
// falls back to the host's others; the guard still applies to the pin.
func TestPinnedAddressIsDialled(t *testing.T) {
	srv := func(ip string) (*int32, int) {
		var hits int32
		s := listenOn(t, ip+":0", noRobots(func(w http.ResponseWriter, r *http.Request) {
			atomic.AddInt32(&hits, 1)
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "<p>"+ip)
		}))
		return &hits, s.Listener.Addr().(*net.TCPAddr).Port
	}
	hits1, port := srv("127.0.0.1")
	// the same port on 127.0.0.3, with a server of its own
	l, err := net.Listen("tcp", fmt.Sprintf("127.0.0.3:%d", port))
	if err != nil {
		t.Skipf("127.0.0.3:%d not available: %v", port, err)
	}
	var hits3 int32
	s3 := &http.Server{Handler: noRobots(func(w http.ResponseWriter, r *http.Request) {
		atomic.AddInt32(&hits3, 1)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "<p>127.0.0.3")
	})}
	go s3.Serve(l)
	t.Cleanup(func() { s3.Close() })

	res := &multiResolver{addrs: []netip.Addr{netip.MustParseAddr("127.0.0.1"), netip.MustParseAddr("127.0.0.3"), netip.MustParseAddr("127.0.0.4")}}
	f := testFetcher(t, func(c *Config) { c.Resolver = res })
	ctx := context.Background()
	u := fmt.Sprintf("http://site.test:%d/p", port)

	resp, err := f.Fetch(ctx, Request{URL: u, Addr: netip.MustParseAddr("127.0.0.3")})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Timing.Remote != netip.MustParseAddr("127.0.0.3") || atomic.LoadInt32(&hits3) == 0 || atomic.LoadInt32(hits1) != 0 {
		t.Fatalf("pinned to 127.0.0.3: reached %v (hits .1 %d, .3 %d)", resp.Timing.Remote, atomic.LoadInt32(hits1), atomic.LoadInt32(&hits3))
	}

	// 127.0.0.4 answers nothing on that port: the host's other addresses
	// are tried (a fresh fetcher: no kept-alive connection to reuse)
	f2 := testFetcher(t, func(c *Config) { c.Resolver = res })
	resp, err = f2.Fetch(ctx, Request{URL: u + "2", Addr: netip.MustParseAddr("127.0.0.4")})
	if err != nil {
		t.Fatalf("pinned to an address that does not answer: %v", err)
	}
	if resp.Timing.Remote == netip.MustParseAddr("127.0.0.4") || !resp.Timing.Remote.IsValid() {
		t.Fatalf("fallback reached %v", resp.Timing.Remote)
	}

	// the guard applies to a pinned address as to any
	f3 := testFetcher(t, func(c *Config) { c.Resolver = res; c.AllowPrivate = false })
	_, err = f3.Fetch(ctx, Request{URL: u, Addr: netip.MustParseAddr("127.0.0.3")})
	wantReason(t, err, ReasonGuard)
}
