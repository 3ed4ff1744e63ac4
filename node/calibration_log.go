package node

import (
	"sync"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/overlay/pb"
)

// CalibrationInfo is one calibration event this node heard (its own
// included): a page that became slow for its crawler, or a crawler that
// released a subnet. Each made every peer that caches the subnet's record
// re-read it, and the subnet be delegated again (GET /v1/calibration, the
// console's node page).
type CalibrationInfo struct {
	At     time.Time `json:"at"`
	Kind   string    `json:"kind"` // slow_page, released
	Subnet uint32    `json:"subnet"`
	Range  string    `json:"range,omitempty"`
	From   string    `json:"from"` // the crawler that reported it
	Mine   bool      `json:"mine"` // reported by this node
	URL    string    `json:"url,omitempty"`
	// ObservedMs and ExpectedMs: the page's fetch time and what its
	// history led to expect (slow_page).
	ObservedMs float64 `json:"observed_ms,omitempty"`
	ExpectedMs float64 `json:"expected_ms,omitempty"`
}

// calibrationKept is how many recent events the node keeps.
const calibrationKept = 32

// calibrationLog keeps the most recent calibration events, newest last.
// Delegation announcements (every decision's record) are not kept: they
// are the network's traffic, not events a volunteer acts on.
type calibrationLog struct {
	mu   sync.Mutex
	ring []CalibrationInfo
	next int
}

func (l *calibrationLog) add(ci CalibrationInfo) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if len(l.ring) < calibrationKept {
		l.ring = append(l.ring, ci)
		return
	}
	l.ring[l.next] = ci
	l.next = (l.next + 1) % calibrationKept
}

// recent returns the events kept, newest first.
func (l *calibrationLog) recent() []CalibrationInfo {
	l.mu.Lock()
	defer l.mu.Unlock()
	out := make([]CalibrationInfo, 0, len(l.ring))
	for i := range len(l.ring) {
		out = append(out, l.ring[(l.next+len(l.ring)-1-i)%len(l.ring)])
	}
	return out
}

// noteCalibration records a calibration notice (overlay.Peer.OnCalibration).
func (n *Node) noteCalibration(cn overlay.CalibrationNotice) {
	ev := cn.Event
	var kind string
	switch ev.Kind {
	case pb.CalibrationKind_SLOW_PAGE:
		kind = "slow_page"
	case pb.CalibrationKind_RELEASED:
		kind = "released"
	default:
		return
	}
	ci := CalibrationInfo{At: cn.Received, Kind: kind, Subnet: ev.Subnet, From: cn.From.String(),
		Mine: cn.From == n.peer.ID(), URL: ev.Url,
		ObservedMs: float64(ev.ObservedNs) / 1e6, ExpectedMs: float64(ev.ExpectedNs) / 1e6}
	if s := hierarchy.NodeID(ev.Subnet); int(s) < n.tree.Len() {
		ci.Range = n.tree.Node(s).String()
	}
	n.calibration.add(ci)
}

// Calibration returns the recent calibration events, newest first.
func (n *Node) Calibration() []CalibrationInfo { return n.calibration.recent() }
