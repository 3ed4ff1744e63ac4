package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestNodeCommand(t *testing.T) {
	// Cobra keeps the first context it gave a subcommand: one for both runs.
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	os.WriteFile(bad, []byte("{\"data_dir\": \"n\",\n \"min_dely\": \"1s\"}"), 0o644)
	resetFlags(t, rootCmd)
	rootCmd.SetArgs([]string{"node", "--config", bad})
	if err := rootCmd.ExecuteContext(ctx); err == nil || !strings.Contains(err.Error(), "bad.json:2:") {
		t.Fatalf("bad config: %v", err)
	}

	// A loopback node runs until its context ends, then closes cleanly.
	cfg := filepath.Join(dir, "node.json")
	os.WriteFile(cfg, []byte(`{"data_dir": "n", "testnet": true, "listen": ["/ip4/127.0.0.1/tcp/0"], "crawler_addr": "1.1.1.1"}`), 0o644)
	resetFlags(t, rootCmd)
	rootCmd.SetArgs([]string{"node", "--config", cfg, "--concurrency", "2"})
	if err := rootCmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("node: %v", err)
	}
	for _, p := range []string{"identity.key", "state", "handoff"} {
		if _, err := os.Stat(filepath.Join(dir, "n", p)); err != nil {
			t.Errorf("data dir: %v", err)
		}
	}
}
