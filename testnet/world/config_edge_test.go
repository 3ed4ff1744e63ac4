package world

import (
	"math"
	"net/netip"
	"testing"

	"github.com/micra-crawler/micra/data/geo"
)

// withDefaults replaces `v <= 0` only: a NaN parameter (false for every
// comparison) is kept, New returns no error and every RTT is NaN.
func TestWorldNaNParameterRefused(t *testing.T) {
	for name, c := range map[string]Config{
		"AccessMedianMs": {Seed: 1, AccessMedianMs: math.NaN()},
		"StretchMedian":  {Seed: 1, StretchMedian: math.NaN()},
		"FibreKmPerMs":   {Seed: 1, FibreKmPerMs: math.NaN()},
		"JitterFrac":     {Seed: 1, JitterFrac: math.NaN()},
	} {
		m, err := New(nil, c)
		if err != nil {
			continue // refused: fixed
		}
		a := m.EndpointAt(netip.MustParseAddr("192.0.2.10"), geo.Point{Lat: 10, Lon: 10})
		b := m.EndpointAt(netip.MustParseAddr("198.51.100.10"), geo.Point{Lat: 40, Lon: 20})
		t.Errorf("%s = NaN accepted: FloorRTT %v, MeanRTT %v", name, m.FloorRTT(&a, &b), m.MeanRTT(&a, &b))
	}
}

// The stretch quantiles must be ordered; New neither refuses nor reports
// P10 > median: setting only StretchMedian 1.3 (P10 default 1.5) gives a
// zero spread below the median, silently — the p10 drawn is 1.3, not 1.5.
func TestWorldStretchQuantilesOrdered(t *testing.T) {
	m, err := New(nil, Config{Seed: 1, StretchMedian: 1.3})
	if err != nil {
		return // refused: fixed
	}
	if p10 := m.StretchQuantile(0.1); math.Abs(p10-m.Config().StretchP10) > 0.01 {
		t.Errorf("StretchMedian 1.3 with StretchP10 %v accepted: the model's p10 is %.3f", m.Config().StretchP10, p10)
	}
}
