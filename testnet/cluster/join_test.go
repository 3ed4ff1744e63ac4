package cluster

import (
	"crypto/rand"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/BurntSushi/toml"
	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/emu"
)

func peerID(t *testing.T) string {
	t.Helper()
	_, pub, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		t.Fatal(err)
	}
	id, err := peer.IDFromPublicKey(pub)
	if err != nil {
		t.Fatal(err)
	}
	return id.String()
}

// a testnet's State as Up writes it, without processes
func sampleState(t *testing.T, dir string, nodes, places int) State {
	s := State{Policy: "ipmicra", World: filepath.Join(dir, "world.json"), Places: places, NodeArgs: []string{"--balance=release"},
		Sink: &SinkState{Addr: "/ip4/127.0.0.1/tcp/40100/p2p/" + peerID(t)}}
	for i := range nodes {
		id := peerID(t)
		s.Nodes = append(s.Nodes, NodeState{Index: i, PeerID: id, Addrs: []string{
			fmt.Sprintf("/ip4/%s/tcp/%d/p2p/%s", emu.PeerLoopback(i), 40000+i, id)}})
	}
	return s
}

// join.toml is TOML that micra node reads as its configuration: every node
// as a bootstrap peer, the testnet's sink and policy, loopback only; with a
// spare place the joiner is a crawler told to stand there, without one an
// overlay peer only.
func TestJoinConfig(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "my testnet") // a space: the command is quoted
	if err := os.MkdirAll(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name          string
		places        int
		crawler       bool
		commandSuffix string
	}{
		{"spare place", 5, true, fmt.Sprintf(" --emulate '%s' --emulate-peer 3 --balance=release", filepath.Join(dir, "world.json"))},
		{"no spare place", 3, false, " --balance=release"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			s := sampleState(t, dir, 3, tc.places)
			text, err := JoinConfig(s)
			if err != nil {
				t.Fatal(err)
			}
			var raw map[string]any
			md, err := toml.Decode(text, &raw)
			if err != nil {
				t.Fatalf("not TOML: %v\n%s", err, text)
			}
			if len(md.Keys()) == 0 {
				t.Fatalf("no keys:\n%s", text)
			}
			var want []string
			for _, n := range s.Nodes {
				want = append(want, n.Addrs...)
			}
			var boot []string
			for _, b := range raw["bootstrap"].([]any) {
				boot = append(boot, b.(string))
			}
			if !slices.Equal(boot, want) {
				t.Errorf("bootstrap %q, want every node's addresses %q", boot, want)
			}
			if raw["sink"] != s.Sink.Addr || raw["testnet"] != true || raw["policy"] != "ipmicra" {
				t.Errorf("sink %v, testnet %v, policy %v", raw["sink"], raw["testnet"], raw["policy"])
			}
			// micra node reads it (unknown keys would be errors) and takes it
			file := filepath.Join(dir, "join.toml")
			if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
				t.Fatal(err)
			}
			cfg, err := node.LoadFile(file)
			if err != nil {
				t.Fatal(err)
			}
			if err := cfg.Validate(); err != nil {
				t.Errorf("micra node refuses it: %v\n%s", err, text)
			}
			if cfg.DataDir != filepath.Join(dir, "join", "data") || !slices.Equal(cfg.Overlay.Bootstrap, want) ||
				cfg.Sink != s.Sink.Addr || cfg.Policy != "ipmicra" || !cfg.Overlay.LoopbackTestnet || cfg.Crawler != tc.crawler {
				t.Errorf("config: data %s, bootstrap %q, sink %s, policy %s, testnet %v, crawler %v (want %v)",
					cfg.DataDir, cfg.Overlay.Bootstrap, cfg.Sink, cfg.Policy, cfg.Overlay.LoopbackTestnet, cfg.Crawler, tc.crawler)
			}
			// the joiner listens at the first spare place's peer address,
			// which the emulated wire knows
			if l := "/ip4/" + emu.PeerLoopback(3).String() + "/tcp/0"; !slices.Equal(cfg.Overlay.ListenAddrs, []string{l}) {
				t.Errorf("listen %q, want %s", cfg.Overlay.ListenAddrs, l)
			}
			// the command in its comments, and the note on other machines
			cmd := "micra node --config '" + file + "'" + tc.commandSuffix
			if !strings.Contains(text, "#     "+cmd+"\n") {
				t.Errorf("no command %q in\n%s", cmd, text)
			}
			if !strings.Contains(text, "From another machine") {
				t.Errorf("no word on other machines:\n%s", text)
			}
		})
	}
	if _, err := JoinConfig(State{}); err == nil {
		t.Error("a join configuration for no node")
	}
}

func TestShellQuote(t *testing.T) {
	args := []string{"micra", "testnet", "run", "--dir", "/tmp/a b", "--policies=random,micra", "it's", ""}
	line := ShellQuote(args)
	if want := `micra testnet run --dir '/tmp/a b' --policies=random,micra 'it'\''s' ''`; line != want {
		t.Errorf("%s, want %s", line, want)
	}
	// the shell splits the line back into the arguments
	out, err := exec.Command("sh", "-c", "set -- "+line+`; for a in "$@"; do printf '[%s]\n' "$a"; done`).Output()
	if err != nil {
		t.Fatal(err)
	}
	var want strings.Builder
	for _, a := range args {
		fmt.Fprintf(&want, "[%s]\n", a)
	}
	if string(out) != want.String() {
		t.Errorf("the shell reads %q, want %q", out, want.String())
	}
}
