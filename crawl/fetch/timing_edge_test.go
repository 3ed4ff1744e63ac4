package fetch

import (
	"context"
	"errors"
	"io"
	"net"
	"net/http"
	"net/netip"
	"strconv"
	"testing"
	"time"
)

// FirstByte is measured from ht.start, after the hop's pre-resolution,
// while DNS includes that resolution (and Total adds it): a page hop that
// paid DNS reports FirstByte < DNS, and consumers computing the request's
// own time as FirstByte-DNS-Connect-TLS (node/router.go) get it wrong.
func TestFirstByteIncludesPreDNS(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "ok")
	}))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := &slowResolver{mapResolver: mapResolver{"slow.test": netip.MustParseAddr("127.0.0.1")}, delay: 50 * time.Millisecond}
	f := testFetcher(t, func(c *Config) { c.Resolver = res })
	u := "http://slow.test:" + strconv.Itoa(port)
	if _, err := f.Robots(context.Background(), mustParse(t, u)); err != nil {
		t.Fatal(err)
	}
	f.dns.mu.Lock()
	f.dns.entries = map[string]dnsEntry{} // DNS entry expired (as after DNSTTL)
	f.dns.mu.Unlock()
	resp, err := f.Fetch(context.Background(), Request{URL: u + "/page"})
	if err != nil {
		t.Fatal(err)
	}
	tm := resp.Timing
	if tm.FirstByte < tm.DNS+tm.Connect+tm.TLS {
		t.Fatalf("FirstByte %v < DNS %v + Connect %v + TLS %v (Total %v): phases before the first byte exceed it",
			tm.FirstByte, tm.DNS, tm.Connect, tm.TLS, tm.Total)
	}
}

// With several addresses, Connect runs from the FIRST attempt's start to the
// successful attempt's end: failed attempts (refused, timed out) are added
// to what node/router.go uses as the host's round trip for Review.
func TestConnectExcludesFailedAttempts(t *testing.T) {
	h := &hopTiming{}
	tr := h.trace()
	h.start = time.Now()
	tr.ConnectStart("tcp", "[2001:db8::1]:80")
	time.Sleep(40 * time.Millisecond) // e.g. an unreachable IPv6 address
	tr.ConnectDone("tcp", "[2001:db8::1]:80", errors.New("connect: connection timed out"))
	tr.ConnectStart("tcp", "192.0.2.1:80")
	tr.ConnectDone("tcp", "192.0.2.1:80", nil) // the connection actually used
	tm := h.result(time.Now())
	if tm.Connect >= 40*time.Millisecond {
		t.Fatalf("Connect %v includes the failed attempt to another address", tm.Connect)
	}
}
