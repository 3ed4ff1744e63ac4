package crawl

import (
	"context"
	"os"
	"path/filepath"
	"sync"
	"testing"

	"github.com/micra-crawler/micra/crawl/fsys"
	"github.com/micra-crawler/micra/crawl/pack"
)

// A file crawl gives one URL per file: a directory's index page linked as
// "sub/" and as "sub/index.html" (and found by the walk) is read and
// shipped once, under the directory's URL.
func TestFileRootIndexPageOnce(t *testing.T) {
	root := t.TempDir()
	for name, body := range map[string]string{
		"index.html":     `<title>home</title><a href="sub/">sub</a> <a href="sub/index.html">sub again</a> <a href="sub/page.html">page</a>`,
		"sub/index.html": `<title>sub</title><a href="./index.html">self</a> <a href="../index.html">home</a>`,
		"sub/page.html":  `<title>page</title><a href="index.html">up</a>`,
	} {
		p := filepath.Join(root, name)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(p, []byte(body), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	var mu sync.Mutex
	records := map[string]int{}
	runToIdle(t, Config{StateDir: t.TempDir(), FileOnly: true, Concurrency: 1, StopWhenIdle: true, Progress: -1,
		FileRoots: []fsys.Root{{Dir: root, Prefix: "http://docs.example.test/"}}, Logger: testLogger(t),
		OnRecord: func(_ context.Context, r *pack.Record) error {
			mu.Lock()
			records[r.URL]++
			mu.Unlock()
			return nil
		}})
	want := map[string]int{"http://docs.example.test/": 1, "http://docs.example.test/sub/": 1, "http://docs.example.test/sub/page.html": 1}
	if len(records) != len(want) {
		t.Fatalf("records %v, want one per file: %v", records, want)
	}
	for u, n := range want {
		if records[u] != n {
			t.Fatalf("records %v, want one per file: %v", records, want)
		}
	}
}
