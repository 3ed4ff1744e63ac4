package main

import (
	"crypto/sha256"
	"os"
	"strconv"
	"strings"
	"testing"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
	"github.com/micra-crawler/micra/hierarchy"
)

// rssFileKB is this process's file-backed resident set (RssFile) in kB.
func rssFileKB(t *testing.T) int {
	t.Helper()
	b, err := os.ReadFile("/proc/self/status")
	if err != nil {
		t.Fatal(err)
	}
	for _, l := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(l, "RssFile:"); ok {
			n, err := strconv.Atoi(strings.TrimSuffix(strings.TrimSpace(rest), " kB"))
			if err != nil {
				t.Fatal(err)
			}
			return n
		}
	}
	t.Fatal("no RssFile in /proc/self/status")
	return 0
}

// TestReleaseStartupPages: the executable's read-only pages and an
// embedded file's leave the resident set, and everything reads the same
// afterwards (the pages come back from the file).
func TestReleaseStartupPages(t *testing.T) {
	snap := hierarchydata.DefaultSnapshot
	before := sha256.Sum256(snap) // every page of the snapshot resident
	rss := rssFileKB(t)
	n, err := releaseStartupPages(snap)
	if err != nil {
		t.Fatal(err)
	}
	after := rssFileKB(t)
	t.Logf("released %d MB of address space: RssFile %d -> %d kB", n>>20, rss, after)
	if n < int64(len(snap))/2 || after > rss-len(snap)/1024/2 {
		t.Fatalf("released %d bytes: RssFile %d -> %d kB, want at least the snapshot's %d kB less", n, rss, after, len(snap)/1024)
	}
	if sha256.Sum256(snap) != before {
		t.Fatal("the snapshot reads differently after its pages were released")
	}
	// code and read-only data fault back in: decoding runs through both
	tr, err := hierarchy.DecodeFile(snap)
	if err != nil || tr.Len() < 1000 {
		t.Fatalf("decode after release: %v", err)
	}
	// the heap is not the executable's: left alone (it would read zeros)
	heap := make([]byte, 4*os.Getpagesize())
	for i := range heap {
		heap[i] = byte(i%251 + 1)
	}
	sum := sha256.Sum256(heap)
	if _, err := releaseStartupPages(nil, []byte{}, heap); err != nil {
		t.Fatalf("empty and heap slices: %v", err)
	}
	if sha256.Sum256(heap) != sum {
		t.Fatal("a heap slice was released")
	}
}
