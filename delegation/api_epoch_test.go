package delegation

import (
	"math"
	"testing"
	"time"
)

// Epochs are a hybrid logical clock: the later of the predecessor's + 1
// and the decision's time in milliseconds, never above EpochCeiling, and
// never wrapping.
func TestNextEpoch(t *testing.T) {
	at := time.UnixMilli(1_700_000_000_000)
	for _, c := range []struct {
		prev uint64
		at   time.Time
		want uint64
	}{
		{0, time.Time{}, 1},                        // no clock: a counter
		{41, time.Time{}, 42},                      //
		{0, at, 1_700_000_000_000},                 // the clock
		{7, at, 1_700_000_000_000},                 // an old counter epoch is passed
		{1_700_000_000_000, at, 1_700_000_000_001}, // two decisions in one millisecond
		{math.MaxUint64, at, math.MaxUint64},       // no wrap to 0
	} {
		if got := NextEpoch(c.prev, c.at); got != c.want {
			t.Errorf("NextEpoch(%d, %v) = %d, want %d", c.prev, c.at.UnixMilli(), got, c.want)
		}
	}
	if c := EpochCeiling(at); c != 1_700_000_000_000+EpochSlack || NextEpoch(1_700_000_000_000, at) > c {
		t.Errorf("EpochCeiling = %d", c)
	}
	if EpochCeiling(at) >= math.MaxUint64/2 || EpochCeiling(time.Time{}) != EpochSlack {
		t.Error("ceiling out of range")
	}
}
