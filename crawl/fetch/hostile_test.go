package fetch

// The hostile-server suite: every limit of the fetcher is driven by a real
// loopback server that misbehaves, and each test proves the limit fires with
// the right Reason (and, where it matters, that the fetcher stopped early).

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"log/slog"
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

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"github.com/prometheus/client_golang/prometheus"
	dto "github.com/prometheus/client_model/go"
)

// noRobots wraps h so that /robots.txt is 404 (allow all).
func noRobots(h http.HandlerFunc) http.Handler {
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			http.NotFound(w, r)
			return
		}
		h(w, r)
	})
}

func serve(t *testing.T, h http.Handler) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(h)
	t.Cleanup(srv.Close)
	return srv
}

func bomb(t *testing.T, encoding string, size int) []byte {
	t.Helper()
	var buf bytes.Buffer
	var w io.WriteCloser
	switch encoding {
	case "gzip":
		w, _ = gzip.NewWriterLevel(&buf, gzip.BestCompression)
	case "br":
		w = brotli.NewWriterLevel(&buf, 5)
	case "zstd":
		w, _ = zstd.NewWriter(&buf, zstd.WithEncoderLevel(zstd.SpeedDefault))
	}
	zero := make([]byte, 1<<20)
	for i := 0; i < size>>20; i++ {
		w.Write(zero)
	}
	w.Close()
	return buf.Bytes()
}

func TestHostileCompressionBombs(t *testing.T) {
	const decoded = 64 << 20 // 64 MiB of zeros
	for _, enc := range []string{"gzip", "br", "zstd"} {
		t.Run(enc, func(t *testing.T) {
			payload := bomb(t, enc, decoded)
			srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.Header().Set("Content-Encoding", enc)
				w.Write(payload)
			}))
			reg := prometheus.NewRegistry()
			f := testFetcher(t, func(c *Config) { c.MaxBodyBytes = 1 << 20; c.Registerer = reg })
			_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/bomb"})
			wantReason(t, err, ReasonBodyTooLarge)
			if got := counterValue(t, f.m.errors.WithLabelValues(string(ReasonBodyTooLarge))); got != 1 {
				t.Fatalf("body_too_large counter = %v, want 1", got)
			}
			t.Logf("%s bomb: %d bytes on the wire for %d decoded; refused at 1 MiB", enc, len(payload), decoded)
		})
	}
}

func TestHostileDoubleEncodedBomb(t *testing.T) {
	inner := bomb(t, "gzip", 16<<20)
	var outer bytes.Buffer
	bw := brotli.NewWriterLevel(&outer, 5)
	bw.Write(inner)
	bw.Close()
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Encoding", "gzip, br")
		w.Write(outer.Bytes())
	}))
	f := testFetcher(t, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonBodyTooLarge)
}

// TestHostileHeaderDrip: a raw server that trickles header lines forever.
func TestHostileHeaderDrip(t *testing.T) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var wg sync.WaitGroup
	defer wg.Wait()
	defer l.Close()
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := l.Accept()
			if err != nil {
				return
			}
			wg.Add(1)
			go func(c net.Conn) {
				defer wg.Done()
				defer c.Close()
				buf := make([]byte, 4096)
				c.Read(buf) // the request
				if bytes.Contains(buf, []byte("GET /robots.txt")) {
					io.WriteString(c, "HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\nConnection: close\r\n\r\n")
					return
				}
				io.WriteString(c, "HTTP/1.1 200 OK\r\n")
				for i := 0; i < 2000; i++ {
					if _, err := fmt.Fprintf(c, "X-Drip-%d: %s\r\n", i, strings.Repeat("d", 50)); err != nil {
						return
					}
					time.Sleep(5 * time.Millisecond)
				}
			}(c)
		}
	}()
	base := "http://" + l.Addr().String()
	// Small header cap: the cap fires first.
	f := testFetcher(t, func(c *Config) { c.MaxHeaderBytes = 2 << 10; c.Timeout = 5 * time.Second })
	_, err = f.Fetch(context.Background(), Request{URL: base + "/a"})
	wantReason(t, err, ReasonHeaderTooLarge)
	// Large cap: the total time per request fires.
	f2 := testFetcher(t, func(c *Config) { c.MaxHeaderBytes = 1 << 20; c.Timeout = 300 * time.Millisecond })
	_, err = f2.Fetch(context.Background(), Request{URL: base + "/b"})
	wantReason(t, err, ReasonTimeout)
}

func TestHostileEndlessBody(t *testing.T) {
	var sent atomic.Int64
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		chunk := bytes.Repeat([]byte("<p>endless</p>"), 1024)
		for {
			n, err := w.Write(chunk)
			sent.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	f := testFetcher(t, func(c *Config) { c.MaxBodyBytes = 512 << 10 })
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonBodyTooLarge)
}

// dripServer answers 200 and then drips its body a byte every 20 ms until
// the client goes.
func dripServer(t *testing.T) *httptest.Server {
	t.Helper()
	return serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.WriteHeader(http.StatusOK)
		for {
			if _, err := w.Write([]byte("x")); err != nil {
				return
			}
			w.(http.Flusher).Flush()
			select {
			case <-time.After(20 * time.Millisecond):
			case <-r.Context().Done():
				return
			}
		}
	}))
}

func TestHostileSlowDrip(t *testing.T) {
	srv := dripServer(t)
	f := testFetcher(t, func(c *Config) { c.SlowBodyDeadline = 200 * time.Millisecond })
	// the drip never ends: the fetch returns only because the slow-body
	// deadline cut it, which its reason says
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonSlowBody)
}

// A body that drips past SlowBodyDeadline fails after the server answered:
// the error and the "fetch limit" log line carry the status received, not 0.
func TestHostileSlowDripStatus(t *testing.T) {
	srv := dripServer(t)
	var logs bytes.Buffer
	f := testFetcher(t, func(c *Config) {
		c.SlowBodyDeadline = 100 * time.Millisecond
		c.Logger = slog.New(slog.NewTextHandler(&logs, nil))
	})
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/drip"})
	wantReason(t, err, ReasonSlowBody)
	var fe *Error
	if errors.As(err, &fe); fe.Status != http.StatusOK {
		t.Fatalf("slow_body error carries status %d, want 200 (%v)", fe.Status, err)
	}
	if !strings.Contains(logs.String(), "status=200") {
		t.Fatalf("fetch limit log line without status=200:\n%s", logs.String())
	}
}

// A body cut off by the slow-body deadline says that URL drips, not that
// the server is loaded: the host's rest follows the time to the first
// byte, not the deadline (×DelayFactor: 10 × 400 ms would hold the host's
// other URLs for 4 s; the bound below fails only if the first byte took
// 200 ms on loopback).
func TestSlowBodyRestFollowsFirstByte(t *testing.T) {
	srv := dripServer(t)
	const deadline = 400 * time.Millisecond
	f := testFetcher(t, func(c *Config) {
		c.SlowBodyDeadline, c.DelayFactor, c.MaxDelay = deadline, 10, time.Hour
	})
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/drip"})
	wantReason(t, err, ReasonSlowBody)
	if rest := time.Until(f.HostReadyAt(srv.URL + "/other")); rest >= 10*deadline/2 {
		t.Fatalf("host rests %v after a dripping URL: want the rest of its time to first byte, not of the deadline", rest)
	}
}

func TestHostileHangBeforeHeaders(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		select {
		case <-time.After(10 * time.Second):
		case <-r.Context().Done():
		}
	}))
	f := testFetcher(t, func(c *Config) { c.Timeout = 200 * time.Millisecond })
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonTimeout)
}

func TestHostileRedirects(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		switch {
		case r.URL.Path == "/a":
			http.Redirect(w, r, "/b", http.StatusFound)
		case r.URL.Path == "/b":
			http.Redirect(w, r, "/a#frag", http.StatusMovedPermanently)
		case r.URL.Path == "/chain/100":
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "end")
		case strings.HasPrefix(r.URL.Path, "/chain/"):
			var n int
			fmt.Sscanf(r.URL.Path, "/chain/%d", &n)
			http.Redirect(w, r, fmt.Sprintf("/chain/%d", n+1), http.StatusTemporaryRedirect)
		case r.URL.Path == "/nolocation":
			w.WriteHeader(http.StatusFound)
		case r.URL.Path == "/toftp":
			http.Redirect(w, r, "ftp://example.org/", http.StatusFound)
		case r.URL.Path == "/three":
			http.Redirect(w, r, "/chain/98", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "ok")
		}
	}))
	f := testFetcher(t, nil)
	ctx := context.Background()
	_, err := f.Fetch(ctx, Request{URL: srv.URL + "/a"})
	wantReason(t, err, ReasonRedirectLoop)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/chain/0"})
	wantReason(t, err, ReasonRedirectLimit)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/nolocation"})
	wantReason(t, err, ReasonBadRedirect)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/toftp"})
	wantReason(t, err, ReasonBadRedirect)
	// Exactly MaxRedirects (5) hops are followed; one more is refused.
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/chain/94"})
	wantReason(t, err, ReasonRedirectLimit)
	resp, err := f.Fetch(ctx, Request{URL: srv.URL + "/chain/95"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Redirects) != 5 || resp.FinalURL != srv.URL+"/chain/100" || string(resp.Body) != "end" {
		t.Fatalf("redirects %v final %s", resp.Redirects, resp.FinalURL)
	}
	// A 303 turns the method into GET; the chain is recorded in order.
	resp, err = f.Fetch(ctx, Request{URL: srv.URL + "/three"})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Redirects) != 3 || resp.Redirects[0] != srv.URL+"/three" {
		t.Fatalf("redirects %v", resp.Redirects)
	}
	// MaxRedirects < 0: the 3xx itself is returned.
	f2 := testFetcher(t, func(c *Config) { c.MaxRedirects = -1 })
	resp, err = f2.Fetch(ctx, Request{URL: srv.URL + "/a"})
	if err != nil || resp.Status != 302 || resp.Location != "/b" {
		t.Fatalf("unfollowed redirect: %+v %v", resp, err)
	}
}

func TestHostileHugeHeaders(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		for i := 0; i < 200; i++ {
			w.Header().Set(fmt.Sprintf("X-Junk-%d", i), strings.Repeat("j", 1000))
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "ok")
	}))
	f := testFetcher(t, func(c *Config) { c.MaxHeaderBytes = 32 << 10 })
	_, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonHeaderTooLarge)
}

func TestHostileContentTypeEncodingCharset(t *testing.T) {
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/png":
			w.Header().Set("Content-Type", "image/png")
			w.Write(bytes.Repeat([]byte{0x89}, 1<<20))
		case "/sniffed-png":
			w.Header()["Content-Type"] = nil
			w.Write([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"))
		case "/compress":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "compress")
			io.WriteString(w, "whatever")
		case "/corrupt-gzip":
			w.Header().Set("Content-Type", "text/html")
			w.Header().Set("Content-Encoding", "gzip")
			w.Write([]byte{0x1f, 0x8b, 8, 0, 0, 0, 0, 0, 0, 0xff, 0xde, 0xad, 0xbe, 0xef, 0xde, 0xad})
		case "/unknown-charset":
			w.Header().Set("Content-Type", "text/html; charset=x-klingon-9")
			io.WriteString(w, "<p>qapla'</p>")
		case "/latin1":
			w.Header().Set("Content-Type", "text/html; charset=iso-8859-1")
			w.Write([]byte("<p>caf\xe9 na\xefve</p>"))
		case "/meta-charset":
			w.Header().Set("Content-Type", "text/html")
			w.Write([]byte("<html><head><meta charset=\"windows-1251\"></head><body>\xcf\xf0\xe8\xe2\xe5\xf2</body></html>"))
		case "/bad-utf8":
			w.Header().Set("Content-Type", "text/html; charset=utf-8")
			w.Write([]byte("<p>ok \xff\xfe broken</p>"))
		}
	}))
	ctx := context.Background()
	f := testFetcher(t, nil)
	_, err := f.Fetch(ctx, Request{URL: srv.URL + "/png"})
	wantReason(t, err, ReasonContentType)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/sniffed-png"})
	wantReason(t, err, ReasonContentType)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/compress"})
	wantReason(t, err, ReasonContentEncoding)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/corrupt-gzip"})
	wantReason(t, err, ReasonContentEncoding)
	_, err = f.Fetch(ctx, Request{URL: srv.URL + "/unknown-charset"})
	wantReason(t, err, ReasonCharset)

	for path, want := range map[string]string{
		"/latin1":       "<p>café naïve</p>",
		"/bad-utf8":     "<p>ok \uFFFD broken</p>",
		"/meta-charset": "Привет",
	} {
		resp, err := f.Fetch(ctx, Request{URL: srv.URL + path})
		if err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		if !strings.Contains(string(resp.Body), want) {
			t.Fatalf("%s: body %q does not contain %q (charset %s)", path, resp.Body, want, resp.Charset)
		}
	}
	if got := counterValue(t, f.m.charsetRepaired); got != 1 {
		t.Fatalf("charset repaired = %v", got)
	}
	if got := counterValue(t, f.m.charsetConverted); got != 2 {
		t.Fatalf("charset converted = %v", got)
	}
}

// fakeClock is a settable clock for back-off and TTL tests.
type fakeClock struct {
	mu  sync.Mutex
	now time.Time
}

func (c *fakeClock) Now() time.Time {
	c.mu.Lock()
	defer c.mu.Unlock()
	return c.now
}

func (c *fakeClock) Advance(d time.Duration) {
	c.mu.Lock()
	c.now = c.now.Add(d)
	c.mu.Unlock()
}

func TestHostile429Storm(t *testing.T) {
	var hits atomic.Int64
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		switch r.URL.Path {
		case "/storm": // 429 forever, no Retry-After
			w.WriteHeader(http.StatusTooManyRequests)
		case "/ra":
			w.Header().Set("Retry-After", "120")
			w.WriteHeader(http.StatusServiceUnavailable)
		case "/huge":
			w.Header().Set("Retry-After", "99999999")
			w.WriteHeader(http.StatusTooManyRequests)
		case "/date":
			w.Header().Set("Retry-After", time.Date(2030, 1, 1, 0, 1, 0, 0, time.UTC).Format(http.TimeFormat))
			w.WriteHeader(http.StatusTooManyRequests)
		default:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "fine")
		}
	}))
	clk := &fakeClock{now: time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)}
	f := testFetcher(t, func(c *Config) { c.Now = clk.Now; c.MaxBackoff = 10 * time.Second })
	ctx := context.Background()

	// Exponential back-off without Retry-After, capped at MaxBackoff.
	want := []time.Duration{1, 2, 4, 8, 10, 10}
	for i, w := range want {
		_, err := f.Fetch(ctx, Request{URL: srv.URL + "/storm"})
		wantReason(t, err, ReasonRetryLater)
		fe := err.(*Error)
		if fe.RetryAfter != w*time.Second || fe.Status != 429 {
			t.Fatalf("storm %d: back-off %v status %d, want %v", i, fe.RetryAfter, fe.Status, w*time.Second)
		}
		if ready := f.HostReadyAt(srv.URL); !ready.Equal(clk.Now().Add(fe.RetryAfter)) {
			t.Fatalf("HostReadyAt %v, want now+%v", ready, fe.RetryAfter)
		}
		clk.Advance(fe.RetryAfter)
	}
	// While backed off, Fetch waits instead of sending: the server sees
	// nothing before the caller gives up.
	_, err := f.Fetch(ctx, Request{URL: srv.URL + "/ra"})
	wantReason(t, err, ReasonRetryLater)
	if ra := err.(*Error).RetryAfter; ra != 10*time.Second { // 120 s capped at MaxBackoff
		t.Fatalf("Retry-After 120 with cap 10s gave %v", ra)
	}
	before := hits.Load()
	short, cancel := context.WithTimeout(ctx, 100*time.Millisecond)
	_, err = f.Fetch(short, Request{URL: srv.URL + "/ok"})
	cancel()
	wantReason(t, err, ReasonCanceled)
	if hits.Load() != before {
		t.Fatalf("request sent to a backed-off host")
	}
	clk.Advance(10 * time.Second)
	if _, err := f.Fetch(ctx, Request{URL: srv.URL + "/ok"}); err != nil {
		t.Fatalf("after back-off: %v", err)
	}
	// HTTP-date form: 2030-01-01 00:01:00 is 60 s after the clock's start,
	// and the clock is now 35+10+10 s later; capped at 10 s anyway, so use
	// a fetcher with a larger cap.
	f2 := testFetcher(t, func(c *Config) { c.Now = clk.Now; c.MaxBackoff = time.Hour })
	_, err = f2.Fetch(ctx, Request{URL: srv.URL + "/date"})
	wantReason(t, err, ReasonRetryLater)
	if ra := err.(*Error).RetryAfter; ra != 60*time.Second-clk.Now().Sub(time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)) {
		t.Fatalf("HTTP-date Retry-After gave %v", ra)
	}
	clk.Advance(time.Hour)
	_, err = f2.Fetch(ctx, Request{URL: srv.URL + "/huge"})
	if ra := err.(*Error).RetryAfter; ra != time.Hour {
		t.Fatalf("huge Retry-After gave %v, want the 1h cap", ra)
	}
	if got := counterValue(t, f.m.backoffs); got != 7 {
		t.Fatalf("backoffs counter %v, want 7", got)
	}
}

func TestRetryAfterParsing(t *testing.T) {
	now := time.Date(2030, 1, 1, 0, 0, 0, 0, time.UTC)
	for v, want := range map[string]time.Duration{
		"":                              -1,
		"junk":                          -1,
		"-5":                            -1,
		"0":                             0,
		"30":                            30 * time.Second,
		"Tue, 01 Jan 2030 00:00:42 GMT": 42 * time.Second,
		"Mon, 31 Dec 2029 23:00:00 GMT": 0,
	} {
		if got := parseRetryAfter(v, now); got != want {
			t.Errorf("parseRetryAfter(%q) = %v, want %v", v, got, want)
		}
	}
}

// listenOn starts an httptest server on a specific loopback address.
func listenOn(t *testing.T, addr string, h http.Handler) *httptest.Server {
	t.Helper()
	l, err := net.Listen("tcp", addr)
	if err != nil {
		t.Skipf("cannot listen on %s: %v", addr, err)
	}
	srv := httptest.NewUnstartedServer(h)
	srv.Listener.Close()
	srv.Listener = l
	srv.Start()
	t.Cleanup(srv.Close)
	return srv
}

// mapResolver resolves names from a fixed table.
type mapResolver map[string]netip.Addr

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "no such host", Name: host, IsNotFound: true}
}

func TestGuard(t *testing.T) {
	var targetHits atomic.Int64
	target := listenOn(t, "127.0.0.1:0", noRobots(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "secret")
	}))
	// The "public" server: 127.0.0.2 stands for a public address through
	// AllowPrefixes; it redirects into the forbidden loopback one.
	public := listenOn(t, "127.0.0.2:0", noRobots(func(w http.ResponseWriter, r *http.Request) {
		switch r.URL.Path {
		case "/to-loopback":
			http.Redirect(w, r, target.URL+"/admin", http.StatusFound)
		case "/to-name":
			http.Redirect(w, r, "http://intranet.example:"+target.Listener.Addr().(*net.TCPAddr).AddrPort().String()[len("127.0.0.1:"):]+"/admin", http.StatusFound)
		default:
			w.Header().Set("Content-Type", "text/html")
			io.WriteString(w, "public")
		}
	}))
	res := mapResolver{
		"intranet.example": netip.MustParseAddr("127.0.0.1"),
		"public.example":   netip.MustParseAddr("127.0.0.2"),
	}
	f := testFetcher(t, func(c *Config) {
		c.AllowPrivate = false
		c.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
		c.Resolver = res
	})
	ctx := context.Background()
	// Direct loopback literal.
	_, err := f.Fetch(ctx, Request{URL: target.URL + "/admin"})
	wantReason(t, err, ReasonGuard)
	// A name that resolves to loopback: refused after DNS.
	port := target.Listener.Addr().(*net.TCPAddr).Port
	_, err = f.Fetch(ctx, Request{URL: fmt.Sprintf("http://intranet.example:%d/admin", port)})
	wantReason(t, err, ReasonGuard)
	// Allowed "public" server works.
	if _, err := f.Fetch(ctx, Request{URL: public.URL + "/"}); err != nil {
		t.Fatalf("allowed prefix refused: %v", err)
	}
	// Redirect into loopback, by literal and by name.
	_, err = f.Fetch(ctx, Request{URL: public.URL + "/to-loopback"})
	wantReason(t, err, ReasonGuard)
	_, err = f.Fetch(ctx, Request{URL: public.URL + "/to-name"})
	wantReason(t, err, ReasonGuard)
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("guarded server received %d requests", n)
	}
	// Bad ports are refused even on an allowed address, before any dial.
	_, err = f.Fetch(ctx, Request{URL: "http://127.0.0.2:25/"})
	wantReason(t, err, ReasonGuard)
	if !strings.Contains(err.Error(), "bad-port") {
		t.Fatalf("bad port error: %v", err)
	}
	// The dialer's Control hook refuses on its own (defence in depth).
	if err := f.dialControl(context.Background(), "tcp4", "127.0.0.1:80", nil); err == nil {
		t.Fatal("dialControl accepted loopback")
	}
}

func TestForbiddenAddr(t *testing.T) {
	for s, want := range map[string]bool{
		"127.0.0.1": true, "10.1.2.3": true, "172.16.0.1": true, "192.168.1.1": true,
		"169.254.169.254": true, "224.0.0.1": true, "0.0.0.0": true, "100.64.0.1": true,
		"192.0.2.1": true, "198.18.0.1": true, "240.0.0.1": true, "255.255.255.255": true,
		"::1": true, "fe80::1": true, "fc00::1": true, "ff02::1": true, "::": true,
		"::ffff:127.0.0.1": true, "2002:7f00:1::": true, "64:ff9b::a00:1": true, "2001:db8::1": true,
		"8.8.8.8": false, "1.1.1.1": false, "2606:4700:4700::1111": false, "64:ff9b::808:808": false,
		"2002:808:808::": false,
		// IPv4-compatible (deprecated, ::/96), IPv4-translated (SIIT) and the
		// rest of 0000::/8: embed loopback and private addresses, never a web server.
		"::7f00:1": true, "::ffff:0:7f00:1": true, "::a00:1": true, "::2": true, "4000::1": true,
	} {
		if got, why := ForbiddenAddr(netip.MustParseAddr(s)); got != want {
			t.Errorf("ForbiddenAddr(%s) = %v (%s), want %v", s, got, why, want)
		}
	}
}

// counterValue reads a counter's value.
func counterValue(t *testing.T, c prometheus.Counter) float64 {
	t.Helper()
	var m dto.Metric
	if err := c.Write(&m); err != nil {
		t.Fatal(err)
	}
	return m.GetCounter().GetValue()
}

func TestHostileDeclaredHugeBody(t *testing.T) {
	var wrote atomic.Int64
	srv := serve(t, noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Header().Set("Content-Length", strconv.Itoa(1<<30))
		chunk := make([]byte, 64<<10)
		for i := 0; i < 1<<14; i++ {
			n, err := w.Write(chunk)
			wrote.Add(int64(n))
			if err != nil {
				return
			}
		}
	}))
	f := testFetcher(t, func(c *Config) { c.MaxBodyBytes = 1 << 20 })
	resp, err := f.Fetch(context.Background(), Request{URL: srv.URL + "/"})
	wantReason(t, err, ReasonBodyTooLarge)
	if resp != nil {
		t.Fatal("response returned with error")
	}
}

// TestHostileHugeRobots: a robots.txt far above 500 KiB is truncated, not
// refused; the rules in the parsed part apply, the rest is ignored.
func TestHostileHugeRobots(t *testing.T) {
	var body strings.Builder
	body.WriteString("User-agent: *\nDisallow: /private\n")
	for i := 0; body.Len() < 2<<20; i++ {
		fmt.Fprintf(&body, "Disallow: /junk/%d\n", i)
	}
	body.WriteString("Disallow: /public\n") // beyond 500 KiB: ignored
	srv := serve(t, http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/robots.txt" {
			io.WriteString(w, body.String())
			return
		}
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "ok")
	}))
	f := testFetcher(t, nil)
	ctx := context.Background()
	_, err := f.Fetch(ctx, Request{URL: srv.URL + "/private/a"})
	wantReason(t, err, ReasonRobots)
	if _, err := f.Fetch(ctx, Request{URL: srv.URL + "/public"}); err != nil {
		t.Fatalf("rule past 500 KiB applied: %v", err)
	}
	e, err := f.Robots(ctx, mustParse(t, srv.URL))
	if err != nil || len(e.Body) != maxRobotsBytes {
		t.Fatalf("robots body %d bytes, want truncated to %d (%v)", len(e.Body), maxRobotsBytes, err)
	}
}

// flipResolver answers a name with its allowed address and its forbidden
// one in turn (DNS rebinding: a short TTL and a new answer each time).
type flipResolver struct {
	allowed, forbidden netip.Addr
	calls              atomic.Int64
}

func (r *flipResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if r.calls.Add(1)%2 == 1 {
		return []netip.Addr{r.allowed}, nil
	}
	return []netip.Addr{r.forbidden}, nil
}

// The guard holds through DNS rebinding: the address a fetch checked is the
// one it connects to (the hop is pinned), so a name that answers a public
// address at the check and a loopback one a moment later never reaches the
// loopback server; a fetch that resolves it to the loopback address is
// refused.
func TestGuardHoldsThroughDNSRebinding(t *testing.T) {
	var targetHits atomic.Int64
	target := listenOn(t, "127.0.0.1:0", noRobots(func(w http.ResponseWriter, r *http.Request) {
		targetHits.Add(1)
		io.WriteString(w, "secret")
	}))
	port := target.Listener.Addr().(*net.TCPAddr).Port
	// the "public" server listens on 127.0.0.2 at the same port, so either
	// answer of the name names a listening server
	public := listenOn(t, fmt.Sprintf("127.0.0.2:%d", port), noRobots(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		io.WriteString(w, "public")
	}))
	_ = public
	res := &flipResolver{allowed: netip.MustParseAddr("127.0.0.2"), forbidden: netip.MustParseAddr("127.0.0.1")}
	now := time.Unix(1_800_000_000, 0)
	f := testFetcher(t, func(c *Config) {
		c.AllowPrivate = false
		c.AllowPrefixes = []netip.Prefix{netip.MustParsePrefix("127.0.0.2/32")}
		c.Resolver = res
		c.DNSTTL = time.Second
		c.Now = func() time.Time { return now }
	})
	url := fmt.Sprintf("http://rebind.example:%d/page", port)
	ctx := context.Background()
	served, refused := 0, 0
	for i := range 4 {
		resp, err := f.Fetch(ctx, Request{URL: url})
		switch {
		case err == nil && string(resp.Body) != "public":
			t.Fatalf("fetch %d: body %q from the wrong server", i, resp.Body)
		case err == nil:
			served++
		default:
			wantReason(t, err, ReasonGuard)
			refused++
		}
		now = now.Add(2 * time.Second) // past the TTL: the next fetch resolves again
	}
	if res.calls.Load() < 3 {
		t.Fatalf("the name was resolved %d times: the test did not rebind", res.calls.Load())
	}
	if n := targetHits.Load(); n != 0 {
		t.Fatalf("the loopback server got %d requests through a rebound name", n)
	}
	if served == 0 || refused == 0 {
		t.Fatalf("%d fetches served by the public server, %d refused: want both", served, refused)
	}
}
