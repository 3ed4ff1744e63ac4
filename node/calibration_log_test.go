package node

import (
	"testing"
	"time"
)

// The log keeps the last calibrationKept events, newest first.
func TestCalibrationLogKeepsTheNewest(t *testing.T) {
	var l calibrationLog
	if got := l.recent(); len(got) != 0 {
		t.Fatalf("empty log: %v", got)
	}
	t0 := time.Unix(1_790_000_000, 0)
	for i := range calibrationKept + 5 {
		l.add(CalibrationInfo{At: t0.Add(time.Duration(i) * time.Second), Subnet: uint32(i)})
	}
	got := l.recent()
	if len(got) != calibrationKept {
		t.Fatalf("%d kept, want %d", len(got), calibrationKept)
	}
	for i, e := range got {
		if want := uint32(calibrationKept + 4 - i); e.Subnet != want {
			t.Fatalf("event %d is subnet %d, want %d (newest first)", i, e.Subnet, want)
		}
	}
}
