package fsys

import (
	"os"
	"path/filepath"
	"syscall"
	"testing"
	"time"
)

// Read opens the file before checking that it is regular: opening a FIFO
// for reading blocks until a writer appears, so a link to a FIFO under the
// root hangs the worker forever.
func TestReadFIFODoesNotHang(t *testing.T) {
	dir := t.TempDir()
	fifo := filepath.Join(dir, "pipe.html")
	if err := syscall.Mkfifo(fifo, 0o644); err != nil {
		t.Skip("mkfifo:", err)
	}
	s, err := Open([]Root{{Dir: dir, Prefix: "http://ex.test/"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	done := make(chan error, 1)
	go func() {
		_, err := s.Read(mustURL("http://ex.test/pipe.html"), 1<<20)
		done <- err
	}()
	select {
	case err := <-done:
		if err == nil {
			t.Fatal("a FIFO was read as a document")
		}
	case <-time.After(2 * time.Second):
		// Unblock the reader so the goroutine ends, then report.
		if w, err := os.OpenFile(fifo, os.O_WRONLY, 0); err == nil {
			w.Close()
		}
		<-done
		t.Fatal("Read of a FIFO blocked for 2 s (open(2) waits for a writer)")
	}
}

// The prefix is not normalised like the URLs it must match: a default port
// in --file-root (http://host:80/) never matches the normalised
// http://host/... URLs the engine asks about, and Walk emits :80 URLs that
// normalise to URLs no root serves.
func TestPrefixDefaultPortMatches(t *testing.T) {
	dir := t.TempDir()
	os.WriteFile(filepath.Join(dir, "a.html"), []byte("<title>a</title>"), 0o644)
	s, err := Open([]Root{{Dir: dir, Prefix: "http://ex.test:80/docs/"}})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	if _, rel, ok := s.Match(mustURL("http://ex.test/docs/a.html")); !ok || rel != "a.html" {
		t.Fatalf("Match(http://ex.test/docs/a.html) = %q,%v under prefix http://ex.test:80/docs/", rel, ok)
	}
}
