package fetch

import (
	"context"
	"net"
	"net/netip"
	"sync"
	"time"
)

// Emulator stands for the network path to each address: the testnet's
// emulated world (testnet/emu) answers with the round trip its latency
// model gives between this crawler's place and the host's.
type Emulator interface {
	RTT(remote netip.Addr) time.Duration
}

// emulatedConn delays the first bytes read after each write by one round
// trip from that write: a response cannot arrive before its request went
// there and back. The connect's round trip is waited in dialControl.
type emulatedConn struct {
	net.Conn
	rtt time.Duration

	mu  sync.Mutex
	due time.Time // when the answer to the pending write may arrive; zero: none pending
}

func newEmulatedConn(c net.Conn, rtt time.Duration) net.Conn {
	if rtt <= 0 {
		return c
	}
	return &emulatedConn{Conn: c, rtt: rtt}
}

func (c *emulatedConn) Write(b []byte) (int, error) {
	c.mu.Lock()
	if c.due.IsZero() {
		c.due = time.Now().Add(c.rtt)
	}
	c.mu.Unlock()
	return c.Conn.Write(b)
}

func (c *emulatedConn) Read(b []byte) (int, error) {
	n, err := c.Conn.Read(b)
	c.mu.Lock()
	due := c.due
	c.due = time.Time{}
	c.mu.Unlock()
	if wait := time.Until(due); !due.IsZero() && wait > 0 {
		time.Sleep(wait) // at most one round trip; the bytes are already here
	}
	return n, err
}

// sleepCtx waits d or until ctx ends (its error).
func sleepCtx(ctx context.Context, d time.Duration) error {
	if d <= 0 {
		return nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return nil
	case <-ctx.Done():
		return ctx.Err()
	}
}
