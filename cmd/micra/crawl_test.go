package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
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

// Regression (the defect it caught): an interrupted `micra crawl` returned
// nil — exit status 0, as if the crawl were complete — and dropped the run's
// error. Interrupted, it must return an error saying so (main maps SIGINT to
// 130) that names the state to resume from.
func TestCrawlInterruptedIsAnError(t *testing.T) {
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.txt")
	if err := os.WriteFile(seeds, []byte("http://127.0.0.1:9/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		cause error
		code  int
		want  string
	}{{interrupted{os.Interrupt}, 130, "interrupted (SIGINT)"}, {interrupted{syscall.SIGTERM}, 143, "interrupted (SIGTERM)"},
		{context.Canceled, 1, "context canceled"}} {
		ctx, cancel := context.WithCancelCause(context.Background())
		cancel(tc.cause)
		o := &crawlOptions{seeds: seeds, out: filepath.Join(dir, "out"), concurrency: 1, perIP: 1, maxDepth: 1, maxPages: 1,
			progress: -1, userAgent: "micra-test (+http://example.invalid/)"}
		err := runCrawl(ctx, o)
		if err == nil || exitCode(err) != tc.code || !strings.Contains(err.Error(), tc.want) ||
			!strings.Contains(err.Error(), filepath.Join(dir, "out", ".state")) {
			t.Errorf("crawl cancelled by %v: %v (exit status %d), want exit status %d and an error saying %q and naming the state",
				tc.cause, err, exitCode(err), tc.code, tc.want)
		}
	}
	if c := exitCode(errors.Join(fmt.Errorf("crawl: %w", interrupted{os.Interrupt}), errors.New("disk full"))); c != 130 {
		t.Errorf("exit status of an interruption joined with a run error: %d, want 130", c)
	}
	if c := exitCode(errors.New("disk full")); c != 1 {
		t.Errorf("exit status of an error: %d, want 1", c)
	}
}

// Regression (the defect it caught): `micra crawl` stopped by SIGINT exited
// 0. The real process, really signalled: it must exit 130 and say it was
// interrupted, with every page fetched before the signal in a carrier file
// (the outbox flushed on the way out), and the same command must then
// finish the crawl with nothing lost.
func TestCrawlSIGINTExitStatus(t *testing.T) {
	const pages, hangFrom = 30, 10
	var served, hanging atomic.Int32
	gate := make(chan struct{})
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var i int
		if _, err := fmt.Sscanf(r.URL.Path, "/p/%d", &i); err != nil || i < 0 || i >= pages {
			http.NotFound(w, r)
			return
		}
		if i >= hangFrom {
			hanging.Add(1)
			select { // held until the test opens the gate, or the crawler gives up
			case <-gate:
			case <-r.Context().Done():
				return
			}
		}
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		fmt.Fprintf(w, "<html><head><title>Page %d</title></head><body><p>page %d of the interrupted crawl</p>", i, i)
		for _, c := range []int{2*i + 1, 2*i + 2} {
			if c < pages {
				fmt.Fprintf(w, `<a href="/p/%d">page %d</a>`, c, c)
			}
		}
		fmt.Fprint(w, "</body></html>")
		if i < hangFrom {
			served.Add(1)
		}
	}))
	defer srv.Close()
	var gateOnce atomic.Bool
	openGate := func() {
		if gateOnce.CompareAndSwap(false, true) {
			close(gate)
		}
	}
	defer openGate() // before srv.Close (deferred earlier, runs later)

	dir := t.TempDir()
	seeds, out := filepath.Join(dir, "seeds.txt"), filepath.Join(dir, "out")
	if err := os.WriteFile(seeds, []byte(srv.URL+"/p/0\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	start := func() (*exec.Cmd, *bytes.Buffer) {
		// --carrier-hold 1h: no carrier is sealed while the crawl runs, so
		// the records found on disk after the interrupt were flushed by it.
		cmd := exec.Command(os.Args[0], "crawl", "--seeds", seeds, "--out", out, "--id", "t", "--allow-private",
			"--min-delay", "0", "--concurrency", "2", "--retries", "0", "--carrier-hold", "1h", "--progress", "1h")
		cmd.Env = append(os.Environ(), mainEnv+"=1")
		var stderr bytes.Buffer
		cmd.Stderr, cmd.Stdout = &stderr, &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd, &stderr
	}
	wait := func(cmd *exec.Cmd, out *bytes.Buffer) int {
		t.Helper()
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err := <-done:
			var ee *exec.ExitError
			if err != nil && !errors.As(err, &ee) {
				t.Fatalf("micra crawl: %v\n%s", err, out)
			}
			return cmd.ProcessState.ExitCode()
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			<-done
			t.Fatalf("micra crawl did not exit\n%s", out)
		}
		return 0
	}
	records := func() map[string]int {
		t.Helper()
		urls := map[string]int{}
		if err := pack.ReadDir(out, func(_ pack.Header, r *pack.Record) error { urls[r.URL]++; return nil }); err != nil &&
			!errors.Is(err, os.ErrNotExist) {
			t.Fatal(err)
		}
		return urls
	}

	first, firstOut := start()
	deadline := time.Now().Add(30 * time.Second)
	for hanging.Load() == 0 {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatalf("the crawl never reached page %d (%d pages served)\n%s", hangFrom, served.Load(), firstOut)
		}
		time.Sleep(5 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGINT); err != nil {
		t.Fatal(err)
	}
	if code := wait(first, firstOut); code != 130 {
		t.Fatalf("micra crawl after SIGINT: exit status %d, want 130\n%s", code, firstOut)
	}
	if msg := firstOut.String(); !strings.Contains(msg, "interrupted (SIGINT)") || !strings.Contains(msg, "run the same command to resume") {
		t.Errorf("micra crawl after SIGINT does not report the interruption:\n%s", msg)
	}
	if got := len(records()); got != int(served.Load()) {
		t.Errorf("after SIGINT the carriers hold %d pages, want the %d fetched before it\n%s", got, served.Load(), firstOut)
	}

	openGate()
	second, secondOut := start()
	if code := wait(second, secondOut); code != 0 {
		t.Fatalf("micra crawl resumed: exit status %d, want 0\n%s", code, secondOut)
	}
	if got := records(); len(got) != pages {
		t.Errorf("after the resumed crawl the carriers hold %d of %d pages: %v", len(got), pages, got)
	}
}

// A one-pass crawl whose every seed the address guard refused crawled
// nothing: it says so, names the flag a user types, and exits non-zero.
func TestCrawlOfRefusedSeedsFails(t *testing.T) {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		fmt.Fprint(w, "<title>never asked</title>")
	}))
	defer srv.Close()
	dir := t.TempDir()
	seeds := filepath.Join(dir, "seeds.txt")
	if err := os.WriteFile(seeds, []byte(srv.URL+"/\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &crawlOptions{seeds: seeds, out: filepath.Join(dir, "out"), concurrency: 1, perIP: 1, maxDepth: 1, maxPages: 10,
		progress: -1, userAgent: "micra-test (+http://example.invalid/)"}
	err := runCrawl(context.Background(), o)
	if err == nil || exitCode(err) != 1 || !strings.Contains(err.Error(), "nothing crawled") ||
		!strings.Contains(err.Error(), "--allow-private") || strings.Contains(err.Error(), "AllowPrivate") {
		t.Fatalf("crawl of a refused loopback seed: %v; want a non-zero exit naming --allow-private", err)
	}
}

// A finished crawl with a refused link (a page linking to a loopback
// address) run again has nothing left to do: that is no failure.
func TestCrawlFinishedWithARefusedLinkIsFine(t *testing.T) {
	dir := t.TempDir()
	root := filepath.Join(dir, "site")
	if err := os.MkdirAll(root, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(root, "index.html"), []byte(`<title>home</title><a href="http://127.0.0.1:9/">local</a>`), 0o644); err != nil {
		t.Fatal(err)
	}
	o := &crawlOptions{out: filepath.Join(dir, "out"), fileRoots: []string{root + "=http://site.example/"}, concurrency: 1,
		perIP: 1, maxDepth: 2, maxPages: 10, progress: -1, userAgent: "micra-test (+http://example.invalid/)"}
	for run := 1; run <= 2; run++ {
		if err := runCrawl(context.Background(), o); err != nil {
			t.Fatalf("run %d: %v", run, err)
		}
	}
}
