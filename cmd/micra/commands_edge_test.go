package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// Regression (the defect it caught): `micra carriers cat GOOD MISSING` prints nothing at all: a path
// that does not exist aborts the whole command before any carrier is read,
// instead of being reported as "path: reason" while the others are printed.
func TestCarriersCatMissingPathDoesNotHideOthers(t *testing.T) {
	dir := t.TempDir()
	writeCarriers(t, dir)
	os.Remove(filepath.Join(dir, "c1-zz-damaged.mcar"))
	missing := filepath.Join(t.TempDir(), "gone.mcar")
	var out, errw bytes.Buffer
	err := carriersCat(&out, &errw, []string{dir, missing}, false, 2)
	if err == nil {
		t.Fatal("a missing path gave no error")
	}
	if !strings.Contains(out.String(), "http://a.test/gone") || !strings.Contains(errw.String()+err.Error(), "gone.mcar") {
		t.Fatalf("cat DIR MISSING: stdout %q, stderr %q, err %v; want DIR's 3 records printed and the missing path reported", out.String(), errw.String(), err)
	}
}

// Regression (the defect it caught): `micra bench overlay --replicas 0` (or negative) panics in
// slices.Min of an empty spread instead of a flag error.
func TestBenchOverlayZeroReplicasRefused(t *testing.T) {
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	o := &benchOverlayOptions{peers: 2, hosts: 20, train: -1, replicas: 0, policy: "hash", threshold: 50 * time.Millisecond,
		heartbeat: time.Second, failTimeout: 5 * time.Second, timeout: time.Minute, asJSON: true}
	var err error
	func() {
		defer func() {
			if r := recover(); r != nil {
				t.Fatalf("bench overlay --replicas 0 panicked: %v", r)
			}
		}()
		err = runBenchOverlay(ctx, &bytes.Buffer{}, o)
	}()
	if err == nil || !strings.Contains(err.Error(), "--replicas") {
		t.Fatalf("bench overlay --replicas 0: %v, want an error naming --replicas", err)
	}
}

// Regression (the defect it caught): `micra bench crawl --workers 0` starts no worker,
// crawls nothing and succeeds (exit 0) with a report of 0 pages.
func TestBenchCrawlZeroWorkersRefused(t *testing.T) {
	var out bytes.Buffer
	o := &benchCrawlOptions{json: true, hosts: 4, hostsPerIP: 2, pagesPerHost: 3, seed: 3, workers: 0, perIP: 2, rounds: 1,
		skipColly: true, timeout: time.Minute}
	err := runBenchCrawl(context.Background(), &out, o)
	if err == nil {
		t.Fatalf("bench crawl --workers 0 succeeded with report %s", strings.Join(strings.Fields(out.String()), " "))
	}
}

// Regression (the defect it caught): bad numeric flags of `micra crawl` are reported by the Go field of
// an inner package ("fetch: negative PerIPLimit"), not by the flag.
func TestCrawlFlagErrorNamesFlag(t *testing.T) {
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.txt")
	if err := os.WriteFile(seeds, []byte("http://127.0.0.1:9/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &crawlOptions{seeds: seeds, out: filepath.Join(dir, "out"), concurrency: 1, perIP: -1, maxDepth: 1, maxPages: 1,
		minDelay: time.Second, progress: -1, userAgent: "micra-test (+http://example.invalid/)"}
	err := runCrawl(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "--per-ip") {
		t.Fatalf("micra crawl --per-ip -1: %v, want an error naming --per-ip", err)
	}
}
