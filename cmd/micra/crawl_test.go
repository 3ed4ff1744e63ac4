package main

import (
	"context"
	"net"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// A --metrics address that cannot be listened on is an error before the
// crawl starts, not a log line in a crawl that runs without its metrics.
func TestCrawlMetricsAddressTaken(t *testing.T) {
	taken, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer taken.Close()
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.txt")
	// A loopback seed without --allow-private: the guard refuses it, so a
	// crawl that wrongly starts ends at once.
	if err := os.WriteFile(seeds, []byte("http://127.0.0.1:9/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &crawlOptions{seeds: seeds, out: filepath.Join(dir, "out"), metrics: taken.Addr().String(),
		concurrency: 1, perIP: 1, maxDepth: 1, maxPages: 1, progress: -1}
	err = runCrawl(context.Background(), o)
	if err == nil || !strings.Contains(err.Error(), "--metrics") {
		t.Fatalf("runCrawl with a taken --metrics address: %v", err)
	}
	if _, statErr := os.Stat(filepath.Join(dir, "out", ".state")); statErr == nil {
		t.Error("state created although the command failed before crawling")
	}
}
