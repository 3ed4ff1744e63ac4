package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
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

// --micra pipeline selected an in-memory copy of the crawler that is gone:
// the command refuses it by the flag's name instead of running something
// else; --micra engine still runs.
func TestBenchCrawlPipelineRefused(t *testing.T) {
	_, err := runMicra(t, "bench", "crawl", "--micra", "pipeline", "--skip-colly", "--hosts", "2", "--pages-per-host", "2", "--rounds", "1")
	if err == nil || !strings.Contains(err.Error(), "--micra") || !strings.Contains(err.Error(), "pipeline") {
		t.Fatalf("bench crawl --micra pipeline: %v, want an error naming --micra", err)
	}
	out, err := runMicra(t, "bench", "crawl", "--micra", "engine", "--skip-colly", "--hosts", "2", "--hosts-per-ip", "2", "--pages-per-host", "2", "--rounds", "1")
	if err != nil || !strings.Contains(out, "micra: engine: package crawl") {
		t.Fatalf("bench crawl --micra engine: %v\n%s", err, out)
	}
}
