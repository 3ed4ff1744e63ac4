package fetch

import (
	"context"
	"crypto/tls"
	"crypto/x509"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/netip"
	"strconv"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// concurrencyServer counts requests in flight, per Host and in total.
type concurrencyServer struct {
	mu        sync.Mutex
	perHost   map[string]int
	maxHost   map[string]int
	total     int
	maxTotal  int
	starts    map[string][]time.Time
	sleep     time.Duration
	completed atomic.Int64
}

func (c *concurrencyServer) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	if r.URL.Path == "/robots.txt" {
		http.NotFound(w, r)
		return
	}
	h := strings.Split(r.Host, ":")[0]
	c.mu.Lock()
	c.perHost[h]++
	c.total++
	c.maxHost[h] = max(c.maxHost[h], c.perHost[h])
	c.maxTotal = max(c.maxTotal, c.total)
	c.starts[h] = append(c.starts[h], time.Now())
	c.mu.Unlock()
	time.Sleep(c.sleep)
	c.mu.Lock()
	c.perHost[h]--
	c.total--
	c.mu.Unlock()
	c.completed.Add(1)
	w.Header().Set("Content-Type", "text/html")
	io.WriteString(w, "ok")
}

func TestPolitenessPerHostAndPerIP(t *testing.T) {
	cs := &concurrencyServer{perHost: map[string]int{}, maxHost: map[string]int{}, starts: map[string][]time.Time{}, sleep: 10 * time.Millisecond}
	srv := serve(t, cs)
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	// Six hosts share one IP address.
	res := mapResolver{}
	var hosts []string
	for i := 0; i < 6; i++ {
		h := "h" + strconv.Itoa(i) + ".test"
		hosts = append(hosts, h)
		res[h] = netip.MustParseAddr("127.0.0.1")
	}
	f := testFetcher(t, func(c *Config) { c.Resolver = res; c.PerIPLimit = 3 })
	var wg sync.WaitGroup
	for _, h := range hosts {
		for j := 0; j < 5; j++ {
			wg.Add(1)
			go func(u string) {
				defer wg.Done()
				if _, err := f.Fetch(context.Background(), Request{URL: u}); err != nil {
					t.Error(err)
				}
			}("http://" + h + ":" + strconv.Itoa(port) + "/p" + strconv.Itoa(j))
		}
	}
	wg.Wait()
	cs.mu.Lock()
	defer cs.mu.Unlock()
	for h, m := range cs.maxHost {
		if m != 1 {
			t.Errorf("host %s had %d requests in flight", h, m)
		}
	}
	if cs.maxTotal > 3 || cs.maxTotal < 2 {
		t.Errorf("IP had %d requests in flight, want 2..3 (limit 3)", cs.maxTotal)
	}
	if cs.completed.Load() != 30 {
		t.Errorf("completed %d", cs.completed.Load())
	}
}

func TestPolitenessDelay(t *testing.T) {
	cs := &concurrencyServer{perHost: map[string]int{}, maxHost: map[string]int{}, starts: map[string][]time.Time{}, sleep: 20 * time.Millisecond}
	srv := serve(t, cs)
	// Floor 50 ms; factor 5 × ~20 ms response ≈ 100 ms dominates.
	f := testFetcher(t, func(c *Config) { c.MinDelay = 50 * time.Millisecond; c.DelayFactor = 5 })
	for i := 0; i < 3; i++ {
		if _, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/p" + strconv.Itoa(i)}); err != nil {
			t.Fatal(err)
		}
	}
	cs.mu.Lock()
	defer cs.mu.Unlock()
	starts := cs.starts["127.0.0.1"]
	for i := 1; i < len(starts); i++ {
		if gap := starts[i].Sub(starts[i-1]); gap < 20*time.Millisecond+95*time.Millisecond {
			t.Fatalf("gap %v between requests: want ≥ response time + 5×response time", gap)
		}
	}
	if ready := f.HostReadyAt(srv.URL + "/x"); !ready.After(time.Now()) {
		t.Fatalf("HostReadyAt %v not in the future right after a request", ready)
	}
}

func TestHTTP2TimingAndHead(t *testing.T) {
	srv := httptest.NewUnstartedServer(noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Last-Modified", "Mon, 02 Jan 2006 15:04:05 GMT")
		if r.Header.Get("If-Modified-Since") == "Mon, 02 Jan 2006 15:04:05 GMT" {
			w.WriteHeader(http.StatusNotModified)
			return
		}
		io.WriteString(w, "<p>h2</p>")
	}))
	srv.EnableHTTP2 = true
	srv.StartTLS()
	t.Cleanup(srv.Close)
	pool := x509.NewCertPool()
	pool.AddCert(srv.Certificate())
	f := testFetcher(t, func(c *Config) { c.TLSConfig = &tls.Config{RootCAs: pool} })
	ctx := context.Background()
	resp, err := f.Fetch(ctx, Request{URL: srv.URL + "/"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Proto != "HTTP/2.0" || string(resp.Body) != "<p>h2</p>" {
		t.Fatalf("proto %s body %q", resp.Proto, resp.Body)
	}
	// The robots.txt request opened the connection; this one reused it.
	if !resp.Timing.Reused || resp.Timing.FirstByte <= 0 || resp.Timing.Total < resp.Timing.FirstByte {
		t.Fatalf("timing %+v", resp.Timing)
	}
	f.Close()
	f2 := testFetcher(t, func(c *Config) { c.TLSConfig = &tls.Config{RootCAs: pool} })
	if _, err := f2.Robots(ctx, mustParse(t, srv.URL)); err != nil {
		t.Fatal(err)
	}
	f2.Close() // drop the connection: the HEAD below dials afresh
	resp, err = f2.Fetch(ctx, Request{URL: srv.URL + "/", Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Timing.Reused || resp.Timing.Connect <= 0 || resp.Timing.TLS <= 0 || resp.Body != nil || resp.Status != 200 {
		t.Fatalf("HEAD on fresh connection: %+v", resp)
	}
	resp, err = f2.Fetch(ctx, Request{URL: srv.URL + "/", LastModified: resp.LastModified})
	if err != nil || !resp.NotModified {
		t.Fatalf("conditional GET: %+v %v", resp, err)
	}
}

// slowResolver answers after a delay, to make DNS time visible.
type slowResolver struct {
	mapResolver
	delay time.Duration
	calls atomic.Int64
}

func (s *slowResolver) LookupNetIP(ctx context.Context, network, host string) ([]netip.Addr, error) {
	s.calls.Add(1)
	time.Sleep(s.delay)
	return s.mapResolver.LookupNetIP(ctx, network, host)
}

func TestTimingDNSAndCache(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "ok")
	}))
	port := srv.Listener.Addr().(*net.TCPAddr).Port
	res := &slowResolver{mapResolver: mapResolver{"slow.test": netip.MustParseAddr("127.0.0.1")}, delay: 30 * time.Millisecond}
	f := testFetcher(t, func(c *Config) { c.Resolver = res })
	f.Close()
	u := "http://slow.test:" + strconv.Itoa(port)
	// robots.txt pays the lookup; drop its connection so the page dials again.
	if _, err := f.Robots(context.Background(), mustParse(t, u)); err != nil {
		t.Fatal(err)
	}
	resp, err := f.Fetch(context.Background(), Request{URL: u + "/a", Method: "HEAD"})
	if err != nil {
		t.Fatal(err)
	}
	if !resp.Timing.Reused || resp.Timing.DNS > 5*time.Millisecond {
		t.Fatalf("kept-alive HEAD: %+v", resp.Timing)
	}
	if res.calls.Load() != 1 {
		t.Fatalf("resolver called %d times, want 1 (cache)", res.calls.Load())
	}
	// A fresh fetcher pays DNS on its first request.
	f2 := testFetcher(t, func(c *Config) { c.Resolver = res })
	e, err := f2.Robots(context.Background(), mustParse(t, u))
	if err != nil || e.Status != RobotsAllowAll {
		t.Fatalf("robots: %+v %v", e, err)
	}
	f2.Close()
	f2.dns.mu.Lock()
	f2.dns.entries = map[string]dnsEntry{}
	f2.dns.mu.Unlock()
	resp, err = f2.Fetch(context.Background(), Request{URL: u + "/b"})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Timing.Reused || resp.Timing.DNS < 25*time.Millisecond || resp.Timing.Connect <= 0 || resp.Timing.Total < resp.Timing.DNS {
		t.Fatalf("fresh GET timing %+v", resp.Timing)
	}
}
