package fetch

import (
	"bufio"
	"bytes"
	"context"
	"log/slog"
	"net"
	"net/http"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
)

// replayServer is a raw HTTP/1.1 server that reads the second request of
// its first connection and closes the connection without answering, as a
// server does whose keep-alive timeout fires as the request arrives; every
// other request is answered (keep-alive, Content-Length). It counts the
// requests it received.
type replayServer struct {
	l        net.Listener
	received atomic.Int64
	mu       sync.Mutex
	conns    []net.Conn
	wg       sync.WaitGroup
}

func newReplayServer(t *testing.T) *replayServer {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &replayServer{l: l}
	s.wg.Add(1)
	go s.accept()
	t.Cleanup(func() {
		l.Close()
		s.mu.Lock()
		for _, c := range s.conns {
			c.Close()
		}
		s.mu.Unlock()
		s.wg.Wait()
	})
	return s
}

func (s *replayServer) accept() {
	defer s.wg.Done()
	for n := 0; ; n++ {
		c, err := s.l.Accept()
		if err != nil {
			return
		}
		s.mu.Lock()
		s.conns = append(s.conns, c)
		s.mu.Unlock()
		s.wg.Add(1)
		go s.serve(c, n == 0)
	}
}

func (s *replayServer) serve(c net.Conn, drop bool) {
	defer s.wg.Done()
	defer c.Close()
	br := bufio.NewReader(c)
	for i := 0; ; i++ {
		req, err := http.ReadRequest(br)
		if err != nil {
			return
		}
		s.received.Add(1)
		if drop && i == 1 {
			return // read, never answered
		}
		if req.URL.Path == "/robots.txt" {
			_, err = c.Write([]byte("HTTP/1.1 404 Not Found\r\nContent-Length: 0\r\n\r\n"))
		} else {
			_, err = c.Write([]byte("HTTP/1.1 200 OK\r\nContent-Type: text/html\r\nContent-Length: 2\r\n\r\nok"))
		}
		if err != nil {
			return
		}
	}
}

// The transport re-sends a GET on its own when a reused connection closes
// unanswered: the server receives a request the crawler did not decide to
// send. Replays counts every such copy.
func TestTransportReplayCounted(t *testing.T) {
	s := newReplayServer(t)
	var logs bytes.Buffer
	f := testFetcher(t, func(c *Config) { c.Logger = slog.New(slog.NewTextHandler(&logs, nil)) })
	base := "http://" + s.l.Addr().String()
	ctx := context.Background()
	// robots.txt, then /a on the same connection (dropped, re-sent on a new
	// one), then /b
	for _, p := range []string{"/a", "/b"} {
		resp, err := f.Fetch(ctx, Request{URL: base + p})
		if err != nil {
			t.Fatal(err)
		}
		if string(resp.Body) != "ok" {
			t.Fatalf("%s: body %q", p, resp.Body)
		}
	}
	const decided = 3 // robots.txt, /a, /b
	received := s.received.Load()
	if received != decided+1 {
		t.Fatalf("server received %d requests, want %d: the dropped request was not re-sent by the transport", received, decided+1)
	}
	if got := f.Replays(); got != received-decided {
		t.Fatalf("Replays() = %d, want %d (received %d − decided %d)", got, received-decided, received, decided)
	}
	if got := counterValue(t, f.m.transportReplays); got != 1 {
		t.Fatalf("micra_fetch_transport_replays_total = %v, want 1", got)
	}
	if !strings.Contains(logs.String(), "url="+base+"/a") || !strings.Contains(logs.String(), "re-sent") {
		t.Fatalf("no log line for the re-sent request to /a:\n%s", logs.String())
	}
}
