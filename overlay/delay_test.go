package overlay

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math/rand/v2"
	"net"
	"net/netip"
	"os"
	"testing"
	"time"
)

// echoServer echoes every connection until it closes; got receives what
// each connection sent in all.
func echoServer(t *testing.T) (addr string, got chan []byte) {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { ln.Close() })
	got = make(chan []byte, 4)
	go func() {
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			go func() {
				defer c.Close()
				var all bytes.Buffer
				_, _ = io.Copy(io.MultiWriter(c, &all), c)
				got <- all.Bytes()
			}()
		}
	}()
	return ln.Addr().String(), got
}

// The emulated wire delivers every byte, in order, both ways; an exchange
// costs at least the round trip (a delay only ever makes it later, so the
// bound cannot fail on a busy machine); a read deadline still ends a read;
// and what was written before Close reaches the other side.
func TestDelayConnDeliversInOrderAfterTheRoundTrip(t *testing.T) {
	addr, got := echoServer(t)
	const rtt = 40 * time.Millisecond
	d := delayDialer{delay: func(a netip.Addr) time.Duration {
		if a != netip.MustParseAddr("127.0.0.1") {
			t.Errorf("delay asked for %v", a)
		}
		return rtt
	}}
	ctx := context.Background()
	start := time.Now()
	c, err := d.DialContext(ctx, "tcp", addr)
	if err != nil {
		t.Fatal(err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("connected in %v: the handshake's round trip is %v", took, rtt)
	}

	start = time.Now()
	if _, err := c.Write([]byte("ping")); err != nil {
		t.Fatal(err)
	}
	buf := make([]byte, 4)
	if _, err := io.ReadFull(c, buf); err != nil || string(buf) != "ping" {
		t.Fatalf("echo %q, %v", buf, err)
	}
	if took := time.Since(start); took < rtt {
		t.Errorf("echo in %v: a round trip is %v", took, rtt)
	}

	// bulk: 1 MiB in uneven writes comes back intact
	want := make([]byte, 1<<20)
	r := rand.New(rand.NewPCG(1, 2))
	for i := range want {
		want[i] = byte(r.Uint32())
	}
	go func() {
		for rest := want; len(rest) > 0; {
			n := min(len(rest), 1+r.IntN(9000))
			if _, err := c.Write(rest[:n]); err != nil {
				t.Error(err)
				return
			}
			rest = rest[n:]
		}
	}()
	back := make([]byte, len(want))
	if _, err := io.ReadFull(c, back); err != nil || !bytes.Equal(back, want) {
		t.Fatalf("1 MiB echoed: equal %v, %v", bytes.Equal(back, want), err)
	}

	// a deadline ends a read that nothing answers
	c.SetReadDeadline(time.Now().Add(rtt))
	if _, err := c.Read(buf); !errors.Is(err, os.ErrDeadlineExceeded) {
		t.Fatalf("read past its deadline: %v", err)
	}
	c.SetReadDeadline(time.Time{})

	// written, then closed at once: the other side still gets it
	if _, err := c.Write([]byte("bye")); err != nil {
		t.Fatal(err)
	}
	if err := c.Close(); err != nil {
		t.Fatal(err)
	}
	all := <-got
	if !bytes.HasSuffix(all, []byte("bye")) || len(all) != 4+len(want)+3 {
		t.Errorf("the server got %d bytes ending %q: want every byte written before Close", len(all), all[max(0, len(all)-3):])
	}
	if _, err := c.Write([]byte("late")); err == nil {
		t.Error("write after Close accepted")
	}
}
