package node

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// DefaultMemoryLimit is the soft memory limit `micra node` sets when neither
// the memory_limit setting nor GOMEMLIMIT gives one: above what a node keeps
// live crawling at scale (≈ 125 MB: the frontier's ≈ 90 MB at 1–3 M queued
// URLs, the hierarchy, the overlay), so the collector never runs without
// pause, and below the twice-the-live-heap GOGC alone lets the heap reach
// (docs/node.md, "Memory").
const DefaultMemoryLimit = 192 << 20

// TestnetMemoryLimit is the default on a loopback testnet, whose nodes
// share one machine and crawl a small synthetic web: `make run`'s nodes keep
// 30–36 MB live (docs/node.md, "Memory").
const TestnetMemoryLimit = 56 << 20

// ProcessMemoryLimit is the soft memory limit `micra node` sets for c with
// runtime/debug.SetMemoryLimit: c.MemoryLimit, or when it is 0 the
// runtime's own when gomemlimit (the GOMEMLIMIT variable) is set (0: set
// nothing), else DefaultMemoryLimit (TestnetMemoryLimit on a loopback
// testnet).
func (c Config) ProcessMemoryLimit(gomemlimit string) int64 {
	switch {
	case c.MemoryLimit != 0:
		return c.MemoryLimit
	case gomemlimit != "":
		return 0
	case c.Overlay.LoopbackTestnet:
		return TestnetMemoryLimit
	}
	return DefaultMemoryLimit
}

// NoMemoryLimit is Config.MemoryLimit for memory_limit = "off": no limit,
// whatever GOMEMLIMIT says.
const NoMemoryLimit = math.MaxInt64

// ParseMemoryLimit reads a memory limit as GOMEMLIMIT writes one: a whole
// number of bytes with an optional unit (B, KiB, MiB, GiB, TiB), or "off".
func ParseMemoryLimit(s string) (int64, error) {
	s = strings.TrimSpace(s)
	if strings.EqualFold(s, "off") {
		return NoMemoryLimit, nil
	}
	num, mul := s, int64(1)
	for _, u := range []struct {
		suffix string
		mul    int64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}, {"B", 1}} {
		if n, ok := strings.CutSuffix(s, u.suffix); ok {
			num, mul = strings.TrimSpace(n), u.mul
			break
		}
	}
	n, err := strconv.ParseInt(num, 10, 64)
	if err != nil || n <= 0 || n > math.MaxInt64/mul {
		return 0, fmt.Errorf("%q is not a memory size (e.g. \"64MiB\", \"1GiB\", or \"off\")", s)
	}
	if n*mul < minMemoryLimit {
		return 0, fmt.Errorf("%q is below %d MiB: the node's own data does not fit", s, minMemoryLimit>>20)
	}
	return n * mul, nil
}

// minMemoryLimit refuses limits under which the collector would run without
// pause: a crawling node keeps about 40 MB live (docs/node.md, "Memory").
const minMemoryLimit = 32 << 20

func checkMemoryLimit(s string) error {
	_, err := ParseMemoryLimit(s)
	return err
}
