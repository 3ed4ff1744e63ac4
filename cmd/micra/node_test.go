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

// Regression (the defect it caught): paths in a --config file other than
// data_dir (key_file here) resolved against the working directory, not the
// file's directory. Paths given as flags (--data) still resolve against the
// working directory.
func TestNodeConfigPathsRelativeToFile(t *testing.T) {
	work := t.TempDir()
	conf := filepath.Join(work, "conf")
	if err := os.Mkdir(conf, 0o755); err != nil {
		t.Fatal(err)
	}
	os.WriteFile(filepath.Join(conf, "node.json"), []byte(`{"data_dir": "n", "key_file": "keys/id.key", "testnet": true,
		"listen": ["/ip4/127.0.0.1/tcp/0"], "crawler_addr": "1.1.1.1"}`), 0o644)
	t.Chdir(work)
	ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
	defer cancel()
	resetFlags(t, rootCmd)
	sub, _, err := rootCmd.Find([]string{"node"})
	if err != nil {
		t.Fatal(err)
	}
	sub.SetContext(ctx) // cobra keeps the context an earlier Execute gave the subcommand
	rootCmd.SetArgs([]string{"node", "--config", filepath.Join("conf", "node.json"), "--data", "flagdata", "--concurrency", "1"})
	if err := rootCmd.ExecuteContext(ctx); err != nil {
		t.Fatalf("node: %v", err)
	}
	for _, p := range []string{
		filepath.Join(conf, "keys", "id.key"),    // key_file: relative to the file
		filepath.Join(work, "flagdata", "state"), // --data: relative to the working directory
	} {
		if _, err := os.Stat(p); err != nil {
			t.Errorf("want %s: %v", p, err)
		}
	}
	for _, p := range []string{filepath.Join(work, "keys"), filepath.Join(conf, "n"), filepath.Join(conf, "flagdata")} {
		if _, err := os.Stat(p); err == nil {
			t.Errorf("%s exists: a path resolved against the wrong directory", p)
		}
	}
}
