package overlay

import (
	"errors"
	"fmt"
	"net/netip"
	"time"

	"github.com/micra-crawler/micra/crawl/netguard"
)

// Guard decides whether this peer may send probe traffic to target. A
// volunteer's node is never a weapon against its own network: by default it
// refuses private, loopback, link-local, multicast and unspecified targets.
type Guard func(target netip.Addr) error

// ErrGuard marks a target refused by the probe guard.
var ErrGuard = errors.New("target refused by guard")

// PublicOnly allows only public unicast targets: the crawler's own fetch
// rules (netguard.ForbiddenAddr), so shared address space, reserved ranges
// and IPv6 forms that embed a private IPv4 address are refused too.
func PublicOnly(a netip.Addr) error {
	if bad, why := netguard.ForbiddenAddr(a); bad {
		return fmt.Errorf("%w: %v is not a public unicast address (%s)", ErrGuard, a.Unmap(), why)
	}
	return nil
}

// LoopbackOnly allows only 127.0.0.0/8 and ::1 (testnets).
func LoopbackOnly(a netip.Addr) error {
	if a.Unmap().IsLoopback() {
		return nil
	}
	return fmt.Errorf("%w: %v is not a loopback address (testnet guard)", ErrGuard, a)
}

// Window is a daily time window (UTC) in which a crawler probes and crawls.
// The zero Window is always open. From > To wraps midnight.
type Window struct {
	From, To time.Duration // offsets since 00:00 UTC
}

// Open reports whether t falls inside the window.
func (w Window) Open(t time.Time) bool {
	if w.From == 0 && w.To == 0 {
		return true
	}
	t = t.UTC()
	d := time.Duration(t.Hour())*time.Hour + time.Duration(t.Minute())*time.Minute + time.Duration(t.Second())*time.Second
	if w.From <= w.To {
		return d >= w.From && d < w.To
	}
	return d >= w.From || d < w.To
}
