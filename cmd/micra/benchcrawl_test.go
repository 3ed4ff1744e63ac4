package main

import (
	"bytes"
	"context"
	"encoding/json"
	"testing"
	"time"
)

// TestBenchCrawlSmall runs the experiment end to end on a tiny web: both
// crawlers cover it, micra fetches nothing twice, obeys robots.txt and ships
// carriers much smaller than the HTML.
func TestBenchCrawlSmall(t *testing.T) {
	var out bytes.Buffer
	o := &benchCrawlOptions{json: true, hosts: 12, hostsPerIP: 4, pagesPerHost: 15, seed: 3, workers: 8, perIP: 2, rounds: 1, timeout: time.Minute}
	if err := runBenchCrawl(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	var rep benchCrawlReport
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	m, c := rep.Micra, rep.Colly
	if m == nil || c == nil {
		t.Fatalf("missing results: %s", out.String())
	}
	if m.Coverage != 1 || c.Coverage != 1 {
		t.Fatalf("coverage micra %.2f colly %.2f", m.Coverage, c.Coverage)
	}
	if m.DuplicateFetches != 0 || m.RobotsViolations != 0 || m.Errors != 0 {
		t.Fatalf("micra: %+v", m)
	}
	if m.Records != m.Pages || m.CarrierBytes <= 0 || m.CarrierRatio < 20 {
		t.Fatalf("micra carriers: records %d pages %d carrier bytes %d ratio %.1f", m.Records, m.Pages, m.CarrierBytes, m.CarrierRatio)
	}
	if rep.SpeedupRatio <= 0 {
		t.Fatalf("no ratio: %s", out.String())
	}
}
