package fetch

import (
	"crypto/tls"
	"net"
	"net/http/httptrace"
	"net/netip"
	"sync"
	"time"
)

// Timing is the anatomy of one request hop, measured with httptrace. Total
// runs from the host-name resolution to the end of the body, without
// politeness waits. On a kept-alive connection Connect and TLS are zero, DNS
// is the (normally cached, near-zero) resolution, and Reused is true.
type Timing struct {
	DNS       time.Duration `json:"dns"`
	Connect   time.Duration `json:"connect"`
	TLS       time.Duration `json:"tls"`
	FirstByte time.Duration `json:"first_byte"` // from the hop's start (its DNS lookup included) to the first response byte
	Total     time.Duration `json:"total"`      // from the hop's start (its DNS lookup included) to the end of the body
	Reused    bool          `json:"reused"`
	// Remote is the address the hop's connection reached.
	Remote netip.Addr `json:"remote"`
}

type hopTimingKey struct{}

// hopTiming collects the trace events of one hop; callbacks may run on
// transport goroutines.
type hopTiming struct {
	mu                  sync.Mutex
	start               time.Time
	preDNS              time.Duration        // resolution before the request started (guard, per-IP key)
	dns                 time.Duration        // resolution inside the dialer
	connStart, connDone time.Time            // of the attempt that connected
	attempts            map[string]time.Time // start of each address's attempt
	tlsStart, tlsDone   time.Time
	firstByte           time.Time
	reused              bool
	remote              netip.Addr
	proto               string
	// writes counts requests written in full. The hop sends one; every
	// other is the transport re-sending it on a new connection after a
	// reused one closed unanswered (net/http shouldRetryRequest).
	writes int
}

// replays returns how many copies of the hop's request the transport sent
// beyond the first.
func (h *hopTiming) replays() int {
	h.mu.Lock()
	defer h.mu.Unlock()
	return max(h.writes-1, 0)
}

func (h *hopTiming) setDNS(d time.Duration) {
	h.mu.Lock()
	h.dns += d
	h.mu.Unlock()
}

func (h *hopTiming) trace() *httptrace.ClientTrace {
	return &httptrace.ClientTrace{
		// Connect is the attempt that connected, alone: a failed attempt on
		// another address (a broken IPv6 route) is no part of the round
		// trip a review takes it for.
		ConnectStart: func(_, addr string) {
			h.mu.Lock()
			if h.attempts == nil {
				h.attempts = map[string]time.Time{}
			}
			h.attempts[addr] = time.Now()
			h.mu.Unlock()
		},
		ConnectDone: func(_, addr string, err error) {
			h.mu.Lock()
			if start, ok := h.attempts[addr]; err == nil && ok && h.connDone.IsZero() {
				h.connStart, h.connDone = start, time.Now()
			}
			h.mu.Unlock()
		},
		TLSHandshakeStart: func() {
			h.mu.Lock()
			h.tlsStart = time.Now()
			h.mu.Unlock()
		},
		TLSHandshakeDone: func(_ tls.ConnectionState, _ error) {
			h.mu.Lock()
			h.tlsDone = time.Now()
			h.mu.Unlock()
		},
		GotConn: func(info httptrace.GotConnInfo) {
			h.mu.Lock()
			h.reused = info.Reused
			if info.Conn != nil {
				if ta, ok := info.Conn.RemoteAddr().(*net.TCPAddr); ok {
					h.remote = ta.AddrPort().Addr().Unmap()
				}
			}
			h.mu.Unlock()
		},
		WroteRequest: func(info httptrace.WroteRequestInfo) {
			if info.Err == nil {
				h.mu.Lock()
				h.writes++
				h.mu.Unlock()
			}
		},
		GotFirstResponseByte: func() {
			h.mu.Lock()
			if h.firstByte.IsZero() {
				h.firstByte = time.Now()
			}
			h.mu.Unlock()
		},
	}
}

func (h *hopTiming) result(end time.Time) Timing {
	h.mu.Lock()
	defer h.mu.Unlock()
	t := Timing{DNS: h.preDNS + h.dns, Total: h.preDNS + end.Sub(h.start), Reused: h.reused}
	if !h.connStart.IsZero() && !h.connDone.IsZero() {
		t.Connect = h.connDone.Sub(h.connStart)
	}
	if !h.tlsStart.IsZero() && !h.tlsDone.IsZero() {
		t.TLS = h.tlsDone.Sub(h.tlsStart)
	}
	if !h.firstByte.IsZero() {
		// from the same start as Total and DNS: the lookup before the
		// request included (FirstByte − DNS − Connect − TLS is then the
		// request's own time)
		t.FirstByte = h.preDNS + h.firstByte.Sub(h.start)
	}
	if t.Reused {
		t.Connect, t.TLS = 0, 0
	}
	return t
}
