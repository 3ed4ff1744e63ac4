package fetch

import (
	"context"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"sync/atomic"
	"testing"
	"time"
)

// fixedRTT emulates every address at one round trip and counts the asks.
type fixedRTT struct {
	rtt  time.Duration
	asks atomic.Int32
}

func (e *fixedRTT) RTT(netip.Addr) time.Duration { e.asks.Add(1); return e.rtt }

// TestEmulatedRoundTrips: with an Emulator, a fetch on a new connection
// pays one round trip to connect (inside Timing.Connect, which reviews read
// as the host's RTT) and one for its response; a fetch on the kept-alive
// connection pays only the second. Sleeps only lengthen a fetch, so the
// lower bounds cannot fail on a slow machine.
func TestEmulatedRoundTrips(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		w.Header().Set("Content-Type", "text/html")
		_, _ = w.Write([]byte("<html><body>hi</body></html>"))
	}))
	defer srv.Close()
	const rtt = 40 * time.Millisecond
	em := &fixedRTT{rtt: rtt}
	f := testFetcher(t, func(c *Config) { c.Emulator = em })

	resp, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/a"})
	if err != nil {
		t.Fatal(err)
	}
	tm := resp.Timing
	if tm.Reused {
		// robots.txt opened the connection: the page rides on it
		if tm.FirstByte < rtt {
			t.Errorf("first byte %v on a kept-alive connection: want at least one round trip (%v)", tm.FirstByte, rtt)
		}
	} else if tm.Connect < rtt || tm.FirstByte < 2*rtt {
		t.Errorf("connect %v, first byte %v: want ≥ %v and ≥ %v", tm.Connect, tm.FirstByte, rtt, 2*rtt)
	}
	if em.asks.Load() == 0 {
		t.Fatal("the emulator was never asked")
	}

}
