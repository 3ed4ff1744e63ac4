package overlay

import (
	"context"
	"errors"
	"net"
	"net/netip"
	"os"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/p2p/transport/tcp"
	ma "github.com/multiformats/go-multiaddr"
)

// An emulated wire (Config.WireDelay): a testnet on one machine places its
// peers in a modelled world, and the round trips between two peers cost
// what the model says. The peer that dials delays both directions of the
// connection by half the round trip each, so every exchange over it — a
// DHT query, a hand-off, a gossip message and its answer — pays one round
// trip whichever side speaks first; the listening side does nothing.

// wireDialer is the TCP transport's dialer with the emulated delay.
func wireDialer(delay func(netip.Addr) time.Duration) tcp.DialerForAddr {
	return func(raddr ma.Multiaddr) (tcp.ContextDialer, error) {
		return delayDialer{delay: delay}, nil
	}
}

type delayDialer struct {
	delay func(netip.Addr) time.Duration
	d     net.Dialer
}

func (dd delayDialer) DialContext(ctx context.Context, network, address string) (net.Conn, error) {
	ap, err := netip.ParseAddrPort(address)
	if err != nil {
		return dd.d.DialContext(ctx, network, address)
	}
	rtt := dd.delay(ap.Addr().Unmap())
	if rtt <= 0 {
		return dd.d.DialContext(ctx, network, address)
	}
	// the handshake's round trip first
	select {
	case <-time.After(rtt):
	case <-ctx.Done():
		return nil, ctx.Err()
	}
	c, err := dd.d.DialContext(ctx, network, address)
	if err != nil {
		return nil, err
	}
	return newDelayConn(c, rtt/2), nil
}

// delayConn delivers what is read d after it arrived and sends what is
// written d after it was written, in order, without limiting bandwidth.
type delayConn struct {
	net.Conn
	d time.Duration

	rmu      sync.Mutex
	rcond    *sync.Cond
	rq       []chunk // arrived, not yet read
	rerr     error   // the socket's read error, after rq
	rdl      time.Time
	rdlTimer *time.Timer

	wmu    sync.Mutex
	wq     chan chunk
	werr   error
	closed chan struct{}
	once   sync.Once
	sent   chan struct{} // closed when the writer has stopped
}

type chunk struct {
	b    []byte
	at   time.Time // when it may be delivered
	last bool      // Close's marker: everything before it is sent
}

func newDelayConn(c net.Conn, d time.Duration) *delayConn {
	dc := &delayConn{Conn: c, d: d, wq: make(chan chunk, 256), closed: make(chan struct{}), sent: make(chan struct{})}
	dc.rcond = sync.NewCond(&dc.rmu)
	go dc.readLoop()
	go dc.writeLoop()
	return dc
}

func (c *delayConn) readLoop() {
	for {
		buf := make([]byte, 32<<10)
		n, err := c.Conn.Read(buf)
		c.rmu.Lock()
		if n > 0 {
			c.rq = append(c.rq, chunk{b: buf[:n], at: time.Now().Add(c.d)})
		}
		if err != nil {
			c.rerr = err
		}
		c.rcond.Broadcast()
		c.rmu.Unlock()
		if err != nil {
			return
		}
	}
}

// Read waits for the oldest chunk's delivery time (or the read deadline).
func (c *delayConn) Read(p []byte) (int, error) {
	c.rmu.Lock()
	defer c.rmu.Unlock()
	for {
		now := time.Now()
		if !c.rdl.IsZero() && !now.Before(c.rdl) {
			return 0, os.ErrDeadlineExceeded
		}
		if len(c.rq) > 0 {
			h := &c.rq[0]
			if wait := h.at.Sub(now); wait > 0 {
				c.wakeAt(wait)
				c.rcond.Wait()
				continue
			}
			n := copy(p, h.b)
			if h.b = h.b[n:]; len(h.b) == 0 {
				c.rq = c.rq[1:]
			}
			return n, nil
		}
		if c.rerr != nil {
			return 0, c.rerr
		}
		c.rcond.Wait()
	}
}

// wakeAt wakes the readers after wait (a chunk's delivery time).
func (c *delayConn) wakeAt(wait time.Duration) {
	time.AfterFunc(wait, func() {
		c.rmu.Lock()
		c.rcond.Broadcast()
		c.rmu.Unlock()
	})
}

func (c *delayConn) SetReadDeadline(t time.Time) error {
	c.rmu.Lock()
	c.rdl = t
	if c.rdlTimer != nil {
		c.rdlTimer.Stop()
	}
	if !t.IsZero() {
		c.rdlTimer = time.AfterFunc(time.Until(t), func() {
			c.rmu.Lock()
			c.rcond.Broadcast()
			c.rmu.Unlock()
		})
	}
	c.rcond.Broadcast()
	c.rmu.Unlock()
	return nil
}

func (c *delayConn) SetDeadline(t time.Time) error {
	_ = c.SetReadDeadline(t)
	return c.Conn.SetWriteDeadline(t)
}

// Write queues a copy of p for sending after the delay; it fails once an
// earlier send failed or the connection closed.
func (c *delayConn) Write(p []byte) (int, error) {
	c.wmu.Lock()
	err := c.werr
	c.wmu.Unlock()
	if err != nil {
		return 0, err
	}
	select {
	case <-c.closed:
		return 0, net.ErrClosed
	default:
	}
	b := append([]byte(nil), p...)
	select {
	case c.wq <- chunk{b: b, at: time.Now().Add(c.d)}:
		return len(p), nil
	case <-c.closed:
		return 0, net.ErrClosed
	}
}

func (c *delayConn) writeLoop() {
	defer close(c.sent)
	for {
		var ch chunk
		select {
		case ch = <-c.wq:
		case <-c.closed:
			return
		}
		if ch.last {
			return
		}
		if wait := time.Until(ch.at); wait > 0 {
			t := time.NewTimer(wait)
			select {
			case <-t.C:
			case <-c.closed:
				t.Stop()
				return
			}
		}
		if _, err := c.Conn.Write(ch.b); err != nil {
			c.wmu.Lock()
			c.werr = err
			c.wmu.Unlock()
			return
		}
	}
}

// Close sends what was written before it (within the delay and a margin,
// as a wire would deliver it), then closes the socket.
func (c *delayConn) Close() error {
	c.once.Do(func() {
		limit := time.NewTimer(c.d + time.Second)
		defer limit.Stop()
		select {
		case c.wq <- chunk{last: true}:
			select {
			case <-c.sent:
			case <-limit.C:
			}
		case <-c.sent: // the writer stopped already (a send failed)
		case <-limit.C:
		}
		close(c.closed)
	})
	err := c.Conn.Close()
	<-c.sent
	if errors.Is(err, net.ErrClosed) {
		return nil
	}
	return err
}
