package crawl

import (
	"context"
	"encoding/json"
	"fmt"
	"net"
	"net/netip"
	"os"
	"os/exec"
	"path/filepath"
	"syscall"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/testnet/synthweb"
)

// childEnv names the file with the child crawler's configuration: set, the
// test binary runs one crawl (runChild) instead of the tests.
const childEnv = "MICRA_CRAWL_CHILD_CONFIG"

type childConfig struct {
	State, Out  string
	Seeds       []string
	Hosts       map[string]string // synthetic name → loopback address
	Concurrency int
}

type mapResolver map[string]string

func (m mapResolver) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if a, ok := m[host]; ok {
		return []netip.Addr{netip.MustParseAddr(a)}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return nil, &net.DNSError{Err: "unknown test host", Name: host, IsNotFound: true}
}

func runChild() int {
	var cfg childConfig
	b, err := os.ReadFile(os.Getenv(childEnv))
	if err == nil {
		err = json.Unmarshal(b, &cfg)
	}
	if err != nil {
		fmt.Fprintln(os.Stderr, "child config:", err)
		return 2
	}
	eng, err := New(Config{CrawlerID: "kill9", StateDir: cfg.State, Seeds: cfg.Seeds,
		Fetch: synthFetchConfig(mapResolver(cfg.Hosts)), Concurrency: cfg.Concurrency,
		Receiver: pack.FileSink{Dir: cfg.Out}, StopWhenIdle: true, Progress: -1, Logger: quiet})
	if err != nil {
		fmt.Fprintln(os.Stderr, "child:", err)
		return 2
	}
	err = eng.Run(context.Background())
	eng.Close()
	if err != nil {
		fmt.Fprintln(os.Stderr, "child run:", err)
		return 1
	}
	return 0
}

// A crawler killed with SIGKILL in the middle of a crawl and restarted on the
// same state completes the crawl, fetching again at most the URLs that were
// in flight: the overlap (pages fetched twice, counted by the server) is
// reported and bounded by the concurrency.
func TestKill9ResumeOverlap(t *testing.T) {
	if testing.Short() {
		t.Skip("spawns crawler processes")
	}
	web := startWeb(t, synthweb.Config{Hosts: 30, HostsPerIP: 3, PagesPerHost: 40, Latency: 3 * time.Millisecond})
	dir := t.TempDir()
	cfg := childConfig{State: filepath.Join(dir, "state"), Out: filepath.Join(dir, "out"), Seeds: web.Seeds(),
		Hosts: map[string]string{}, Concurrency: 12}
	for _, h := range web.Hosts() {
		a, _ := web.LookupNetIP(context.Background(), "ip", h)
		cfg.Hosts[h] = a[0].String()
	}
	cfgPath := filepath.Join(dir, "child.json")
	b, _ := json.Marshal(cfg)
	os.WriteFile(cfgPath, b, 0o644)
	start := func() *exec.Cmd {
		cmd := exec.Command(os.Args[0], "-test.run=^$")
		cmd.Env = append(os.Environ(), childEnv+"="+cfgPath)
		cmd.Stderr = os.Stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		return cmd
	}
	total := int64(web.TotalPages())

	first := start()
	deadline := time.Now().Add(60 * time.Second)
	for web.Stats().PageFetches < total*2/5 {
		if time.Now().After(deadline) {
			first.Process.Kill()
			first.Wait()
			t.Fatalf("first crawler too slow: %+v", web.Stats())
		}
		time.Sleep(2 * time.Millisecond)
	}
	if err := first.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	first.Wait()
	atKill := web.Stats()

	second := start()
	done := make(chan error, 1)
	go func() { done <- second.Wait() }()
	select {
	case err := <-done:
		if err != nil {
			t.Fatalf("restarted crawler: %v", err)
		}
	case <-time.After(90 * time.Second):
		second.Process.Kill()
		<-done
		t.Fatal("restarted crawler did not finish")
	}
	end := web.Stats()
	overlap := end.DuplicateFetches
	t.Logf("kill -9 after %d of %d pages; restart fetched %d more; overlap (pages fetched twice) = %d (%.2f%% of pages), concurrency %d",
		atKill.PageFetches, total, end.PageFetches-atKill.PageFetches, overlap, 100*float64(overlap)/float64(total), cfg.Concurrency)
	if end.UniquePages != total {
		t.Errorf("coverage: %d of %d pages fetched", end.UniquePages, total)
	}
	if overlap > int64(cfg.Concurrency) {
		t.Errorf("overlap %d exceeds the %d URLs that can be in flight", overlap, cfg.Concurrency)
	}
	// Every page has a record, and no record is lost across the kill.
	urls := map[string]int{}
	if err := pack.ReadDir(cfg.Out, func(_ pack.Header, r *pack.Record) error { urls[r.URL]++; return nil }); err != nil {
		t.Fatal(err)
	}
	if int64(len(urls)) != total {
		t.Errorf("records for %d distinct pages, want %d", len(urls), total)
	}
	// At-least-once, and no more: a record repeats only for a page fetched
	// twice (its record was stored, the kill came before its URL was done);
	// a carrier delivered again after the kill keeps its name and replaces
	// its file.
	repeated := int64(0)
	for _, n := range urls {
		repeated += int64(n - 1)
	}
	if repeated > overlap {
		t.Errorf("%d repeated records for %d pages fetched twice", repeated, overlap)
	}
}
