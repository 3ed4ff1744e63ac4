package overlay

import (
	"testing"
	"time"
)

// MaxStreams and MaxMemoryMiB go to libp2p's resource manager as LimitVal:
// 0 there means "libp2p's default", -1 "unlimited", -2 "block all". Validate
// checks MaxConns > 0 but lets these through: 0 is silently replaced by a
// default, -2 gives a peer that cannot open or accept a single stream, and a
// negative MaxMemoryMiB a negative byte limit.
func TestValidateResourceLimits(t *testing.T) {
	for _, mod := range []struct {
		name string
		set  func(*Config)
	}{
		{"MaxStreams=0", func(c *Config) { c.MaxStreams = 0 }},
		{"MaxStreams=-2", func(c *Config) { c.MaxStreams = -2 }},
		{"MaxMemoryMiB=0", func(c *Config) { c.MaxMemoryMiB = 0 }},
		{"MaxMemoryMiB=-1", func(c *Config) { c.MaxMemoryMiB = -1 }},
	} {
		c := DefaultConfig()
		mod.set(&c)
		if err := c.Validate(); err == nil {
			t.Errorf("%s: Validate accepted it", mod.name)
		}
	}
}

// ProbeWindow is "a daily time window (UTC)"; a window that is never open
// (From == To ≠ 0, or offsets outside 0..24h) passes Validate and the peer
// answers every probe OUTSIDE_WINDOW forever.
func TestValidateProbeWindow(t *testing.T) {
	for _, w := range []Window{
		{From: 8 * time.Hour, To: 8 * time.Hour},
		{From: 25 * time.Hour, To: 26 * time.Hour},
		{From: -2 * time.Hour, To: -time.Hour},
	} {
		open := false
		for m := time.Duration(0); m < 24*time.Hour; m += time.Minute {
			open = open || w.Open(time.Date(2025, 1, 1, 0, 0, 0, 0, time.UTC).Add(m))
		}
		c := DefaultConfig()
		c.ProbeWindow = w
		if err := c.Validate(); err == nil {
			t.Errorf("ProbeWindow %v..%v (open at some minute of the day: %v): Validate accepted it", w.From, w.To, open)
		}
	}
}
