package main

import (
	"bytes"
	"context"
	"encoding/json"
	"strings"
	"testing"
	"time"
)

// `micra bench crawl --json` prints the report's fields; the text form
// prints the header, a row per crawler, the ratio and each crawler's mode.
func TestBenchCrawlPrints(t *testing.T) {
	var out bytes.Buffer
	o := &benchCrawlOptions{json: true, hosts: 4, hostsPerIP: 2, pagesPerHost: 5, seed: 3, workers: 4, perIP: 2, rounds: 1, timeout: time.Minute}
	if err := runBenchCrawl(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	var rep map[string]any
	if err := json.Unmarshal(out.Bytes(), &rep); err != nil {
		t.Fatalf("%v: %s", err, out.String())
	}
	for _, k := range []string{"web", "rounds", "workers", "colly_per_host", "per_ip", "gomaxprocs", "colly", "micra", "speedup_ratio"} {
		if _, ok := rep[k]; !ok {
			t.Errorf("JSON has no %q: %s", k, out.String())
		}
	}
	micra, _ := rep["micra"].(map[string]any)
	for _, k := range []string{"crawler", "mode", "pages", "seconds", "pages_per_sec", "fetches", "fetches_per_sec", "duplicate_fetches",
		"duplicate_percent", "robots_violations", "bytes_fetched", "wire_bytes", "carrier_bytes", "carrier_ratio", "records", "errors",
		"coverage", "round_pages_per_sec"} {
		if _, ok := micra[k]; !ok {
			t.Errorf("JSON micra has no %q: %s", k, out.String())
		}
	}

	out.Reset()
	o.json = false
	if err := runBenchCrawl(context.Background(), &out, o); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"synthetic web: 4 hosts on 2 loopback addresses, 20 pages (5 per host)",
		"limits: Colly: global parallelism 4; micra: 4 host workers, 1 request per host, 2 per address",
		"1 round(s) per crawler", "crawler    pages", "\ncolly ", "\nmicra ", "micra/Colly pages/s ratio: ",
		"colly: colly/v2", "micra: engine: package crawl"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("text output lacks %q:\n%s", want, out.String())
		}
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
