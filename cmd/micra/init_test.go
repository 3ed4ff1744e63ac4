package main

import (
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"strings"
	"syscall"
	"testing"

	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/overlay"
)

// micra init: the home (0700), config.toml (0600) listing every setting and
// parsing back to the defaults, the key (0600) whose peer id it prints; a
// second init refuses, --force rewrites the file and keeps the key.
func TestInit(t *testing.T) {
	home := filepath.Join(t.TempDir(), "home")
	out, err := runMicra(t, "init", "--home", home)
	if err != nil {
		t.Fatal(err)
	}
	for path, mode := range map[string]os.FileMode{
		home: 0o700 | os.ModeDir, filepath.Join(home, "data"): 0o700 | os.ModeDir,
		filepath.Join(home, configName): 0o600, filepath.Join(home, "data", "identity.key"): 0o600,
	} {
		if fi, err := os.Stat(path); err != nil || fi.Mode() != mode {
			t.Errorf("%s: %v (%v), want %v", path, fi.Mode(), err, mode)
		}
	}
	sk, err := overlay.LoadOrCreateKey(filepath.Join(home, "data", "identity.key"))
	if err != nil {
		t.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	if !strings.Contains(out, "peer id "+id.String()) || !strings.Contains(out, "micra node --home "+home) {
		t.Errorf("init printed:\n%s\nwant peer id %s and the next command", out, id)
	}
	text, _ := os.ReadFile(filepath.Join(home, configName))
	for _, s := range node.Settings {
		if !strings.Contains(string(text), "\n# "+s.Key+" = "+s.Default+"\n") && s.Key != "data_dir" {
			t.Errorf("config.toml does not list %s at its default", s.Key)
		}
	}
	f, err := node.ReadFile(filepath.Join(home, configName))
	if err != nil || !reflect.DeepEqual(f, node.File{DataDir: filepath.Join(home, "data")}) {
		t.Fatalf("config.toml reads back as %+v (%v)", f, err)
	}

	os.WriteFile(filepath.Join(home, configName), []byte("concurrency = 3\n"), 0o600)
	if _, err := runMicra(t, "init", "--home", home); err == nil || !strings.Contains(err.Error(), "--force") {
		t.Fatalf("a second init: %v", err)
	}
	if b, _ := os.ReadFile(filepath.Join(home, configName)); string(b) != "concurrency = 3\n" {
		t.Fatalf("a refused init changed config.toml:\n%s", b)
	}
	out, err = runMicra(t, "init", "--home", home, "--force", "--testnet")
	if err != nil || !strings.Contains(out, "peer id "+id.String()) {
		t.Fatalf("init --force: %v, printed\n%s\nwant the same peer id %s", err, out, id)
	}
	if f, err = node.ReadFile(filepath.Join(home, configName)); err != nil || !f.Testnet || !slices.Equal(f.Listen, []string{"/ip4/127.0.0.1/tcp/0"}) {
		t.Fatalf("init --testnet wrote %+v (%v)", f, err)
	}
	// (not micra node in this process: cobra would keep this run's context
	// for TestNodeCommand's)
	if _, err := configFile("", filepath.Join(t.TempDir(), "none")); err == nil || !strings.Contains(err.Error(), "micra init --home") {
		t.Fatalf("micra node --home (no config.toml): %v", err)
	}
}

// micra config show prints the file and the environment as TOML that reads
// back to the same settings.
func TestConfigShow(t *testing.T) {
	home := t.TempDir()
	os.WriteFile(filepath.Join(home, configName), []byte("data_dir = \"d\"\nconcurrency = 3\n"), 0o600)
	t.Setenv("MICRA_MIN_DELAY", "2s")
	out, err := runMicra(t, "config", "show", "--home", home)
	if err != nil {
		t.Fatal(err)
	}
	f, err := node.ParseFile("shown.toml", []byte(out))
	want := node.File{DataDir: filepath.Join(home, "d"), Concurrency: 3, MinDelay: "2s"}
	if err != nil || !reflect.DeepEqual(f, want) {
		t.Fatalf("config show:\n%s\nreads back as %+v (%v), want %+v", out, f, err, want)
	}
}

// micra node --home DIR runs the node of the home micra init made: its key
// (the peer id init printed), its data directory.
func TestNodeHome(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	home := filepath.Join(t.TempDir(), "home")
	out, err := runMicra(t, "init", "--home", home, "--testnet")
	if err != nil {
		t.Fatal(err)
	}
	id := regexp.MustCompile(`peer id (\S+)`).FindStringSubmatch(out)
	if id == nil {
		t.Fatalf("init printed no peer id:\n%s", out)
	}
	p := startNode(t, "--home", home, "--crawler-addr", "1.1.1.1", "--concurrency", "1")
	listening, _, _ := p.ready(t)
	if len(listening) == 0 || !strings.HasSuffix(listening[0], "/p2p/"+id[1]) || !strings.Contains(listening[0], "/ip4/127.0.0.1/") {
		t.Fatalf("micra node --home says %q; want a loopback address of peer %s (the home's key)", listening, id[1])
	}
	defer func() {
		if code := p.signal(t, syscall.SIGINT); code != 130 {
			t.Errorf("micra node --home exited %d on SIGINT, want 130\n%s", code, p.stderr)
		}
	}()
	for _, d := range []string{"state", "handoff"} {
		if _, err := os.Stat(filepath.Join(home, "data", d)); err != nil {
			t.Errorf("the home's data directory: %v", err)
		}
	}
}
