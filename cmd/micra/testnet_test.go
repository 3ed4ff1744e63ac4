package main

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"testing"

	"github.com/micra-crawler/micra/testnet/cluster"
)

// TestTestnetRun runs `micra testnet run` as a user does: real node
// processes, a sink and the synthetic web in an emulated world. Every page
// reaches the sink once (coverage 1, overlap 0, nothing fetched twice),
// hosts go to their nearest crawlers, and the testnet leaves no state behind.
func TestTestnetRun(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a testnet")
	}
	dir := filepath.Join(t.TempDir(), "tn")
	cmd := exec.Command(os.Args[0], "testnet", "run", "--dir", dir, "-n", "3", "--hosts", "24", "--pages-per-host", "5", "--json", "--timeout", "3m")
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	var stdout, stderr bytes.Buffer
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	if err := cmd.Run(); err != nil {
		t.Fatalf("testnet run: %v\n%s", err, stderr.String())
	}
	var r struct {
		cluster.Result
		Sink *cluster.SinkSample `json:"sink"`
	}
	if err := json.Unmarshal(stdout.Bytes(), &r); err != nil {
		t.Fatalf("%v: %s", err, stdout.String())
	}
	if !r.Complete || r.Pages != 24*5 || r.TotalPages != 24*5 {
		t.Errorf("pages at the sink %d of %d (complete %v)", r.Pages, r.TotalPages, r.Complete)
	}
	if r.Overlap != 0 || r.DuplicateFetches != 0 {
		t.Errorf("overlap %d, fetched twice %d: want 0", r.Overlap, r.DuplicateFetches)
	}
	if r.RobotsFetches > 24 {
		t.Errorf("robots.txt fetched %d times for 24 hosts", r.RobotsFetches)
	}
	// location-aware: on this world the simulator puts every host at its
	// nearest crawler; hashing or random owners would put about a third
	if len(r.PagesPerCrawler) < 2 || r.OptimalPct < 60 {
		t.Errorf("pages per crawler %v, %.0f %% of hosts at their nearest crawler: want the crawl spread by nearness", r.PagesPerCrawler, r.OptimalPct)
	}
	if r.Sink == nil || len(r.Sink.First) != 3 || r.Sink.Query == "" || r.Sink.Search.Total == 0 {
		t.Errorf("sink sample %+v: want 3 records and a search with hits", r.Sink)
	}
	if _, err := os.Stat(cluster.StateFile(dir)); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("testnet.json left behind: %v", err)
	}
	t.Logf("%+v\n%s", r.Result, stderr.String())
}
