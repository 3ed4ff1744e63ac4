package world

import (
	"strings"
	"testing"

	"github.com/micra-crawler/micra/data/geo"
)

// A UTF-8 BOM is meant to be accepted (header strips "\ufeff"), but when the
// header's first field is quoted — as R's write.csv(fileEncoding="UTF-8-BOM"),
// pandas QUOTE_ALL or Excel-with-quotes write it — encoding/csv sees the BOM
// as the start of an unquoted field and fails with a bare-quote error.
func TestCSVByteOrderMarkBeforeQuotedHeader(t *testing.T) {
	in := "\ufeff\"id\",\"lat\",\"lon\",\"name\"\r\n\"ams\",52.37,4.90,\"Amsterdam\"\r\n"
	sites, err := LoadSites(strings.NewReader(in), "sites.csv")
	if err != nil {
		t.Fatalf("BOM + quoted header: %v", err)
	}
	if len(sites) != 1 || sites[0].ID != "ams" {
		t.Fatalf("sites %+v", sites)
	}
	rtt := "\ufeff\"src\",\"dst\",\"rtt_ms\"\r\n\"ams\",\"ams\",1\r\n"
	if _, err := LoadRTT(strings.NewReader(rtt), "rtt.csv", sites); err != nil {
		t.Fatalf("BOM + quoted header: %v", err)
	}
}

// Within must visit no point for a negative radius; chord2FromKm squares
// 2·sin(ang/2), so −100 km behaves as +100 km (Search likewise when fn
// returns a negative radius).
func TestWithinNegativeRadiusFindsNothing(t *testing.T) {
	ix := NewIndex([]geo.Point{{Lat: 0, Lon: 0}, {Lat: 0, Lon: 0.5}})
	var got []int
	ix.Within(geo.Point{Lat: 0, Lon: 0}, -100, func(i int, _ float64) { got = append(got, i) })
	if len(got) != 0 {
		t.Fatalf("Within(radius −100 km) visited %v (points 0 and 55 km away)", got)
	}
}
