package cluster

import (
	"bytes"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/BurntSushi/toml"

	"github.com/micra-crawler/micra/testnet/emu"
)

// joinFile is the part of a node's configuration (node.File, the keys of
// node.Settings) that a node joining a testnet sets.
type joinFile struct {
	DataDir   string   `toml:"data_dir"`
	Testnet   bool     `toml:"testnet"`
	Crawler   *bool    `toml:"crawler,omitempty"`
	Listen    []string `toml:"listen"`
	Policy    string   `toml:"policy,omitempty"`
	Bootstrap []string `toml:"bootstrap,omitempty"`
	Sink      string   `toml:"sink,omitempty"`
	Network   string   `toml:"network,omitempty"`
}

// JoinConfig is DIR/join.toml: the configuration file of a node that joins
// the running testnet s, behind comments that say how to start it. Its
// bootstrap peers are every node's addresses, its sink the testnet's, its
// policy the testnet's. While the world has a spare place (Options.Spare)
// the joiner is a crawler standing at the first one (`micra node --config
// DIR/join.toml --emulate DIR/world.json --emulate-peer P`), listening on
// that place's peer address so the emulated wire knows it; otherwise it
// joins as an overlay peer only (crawler = false): a crawler outside the
// world would probe the synthetic web's loopback addresses at no modelled
// latency and win every delegation.
func JoinConfig(s State) (string, error) {
	if len(s.Nodes) == 0 || s.World == "" {
		return "", errors.New("cluster: join: the testnet has no node or no world")
	}
	dir := filepath.Dir(s.World)
	place := len(s.Nodes) // the spare places follow the nodes'
	crawler := place < s.Places
	f := joinFile{DataDir: "join/data", Testnet: true, Policy: s.Policy,
		Listen: []string{"/ip4/" + emu.PeerLoopback(place).String() + "/tcp/0"}}
	for _, n := range s.Nodes {
		f.Bootstrap = append(f.Bootstrap, n.Addrs...)
	}
	if len(f.Bootstrap) == 0 {
		return "", errors.New("cluster: join: no node has an address")
	}
	if s.Sink != nil {
		f.Sink = s.Sink.Addr
	}
	f.Network = s.Network
	if !crawler {
		no := false
		f.Crawler = &no
	}
	var b bytes.Buffer
	c := func(format string, a ...any) {
		b.WriteString(strings.TrimRight("# "+fmt.Sprintf(format, a...), " ") + "\n")
	}
	c("Joining the micra testnet in %s (%d nodes, policy %s).", dir, len(s.Nodes), s.Policy)
	c("Written by `micra testnet up`, removed by `micra testnet down`: the addresses below")
	c("are this run's. data_dir is relative to this file's directory.")
	c("")
	args := []string{"micra", "node", "--config", filepath.Join(dir, "join.toml")}
	if crawler {
		args = append(args, "--emulate", s.World, "--emulate-peer", fmt.Sprint(place))
	}
	args = append(args, s.NodeArgs...)
	c("On this machine:")
	c("    %s", ShellQuote(args))
	if crawler {
		c("The node is a crawler at the world's spare place %d (its address, position and", place)
		c("capacity), and its probes, fetches and links to the nodes pay the world's round trips.")
		switch left := s.Places - place - 1; {
		case left == 1:
			c("Spare place %d is left: for a further node, copy this file and change", place+1)
		case left > 1:
			c("Spare places %d…%d are left: for each further node, copy this file and change", place+1, s.Places-1)
		}
		if place+1 < s.Places {
			c("data_dir, listen (/ip4/%s/tcp/0 for place %d, …) and --emulate-peer.", emu.PeerLoopback(place+1), place+1)
		}
	} else {
		c("The world keeps no spare place, so the node joins as an overlay peer only")
		c("(crawler = false: DHT, gossip). To join crawlers, start the testnet with")
		c("`micra testnet up --spare K`: the world then has K places for them.")
	}
	if s.Network != "" {
		c("The testnet admits members only: the joiner's certificate, signed with")
		c("%s, is join/data/membership.cert (`micra admit`, docs/SECURITY.md).", filepath.Join(dir, "network.key"))
	}
	c("")
	c("From another machine: not as it is. Every address here is on loopback, and")
	c("replacing 127.x.y.z by this host's address is not enough: a testnet node fetches")
	c("loopback and private addresses, so `micra node` with testnet set listens on")
	c("loopback only (nothing else is listening), and the synthetic web is served on")
	c("this machine's loopback. A network that takes members from other machines is")
	c("made of nodes without testnet listening on reachable addresses (`micra init`,")
	c("docs/node.md); they join one another with these keys: bootstrap, sink, policy.")
	b.WriteString("\n")
	// one bootstrap peer a line: the encoder writes an array on one
	boot := f.Bootstrap
	f.Bootstrap = nil
	if err := toml.NewEncoder(&b).Encode(f); err != nil {
		return "", fmt.Errorf("cluster: join: %w", err)
	}
	b.WriteString("bootstrap = [\n")
	for _, a := range boot {
		var v bytes.Buffer
		if err := toml.NewEncoder(&v).Encode(map[string]string{"v": a}); err != nil {
			return "", fmt.Errorf("cluster: join: %w", err)
		}
		fmt.Fprintf(&b, "  %s,\n", strings.TrimSpace(strings.TrimPrefix(v.String(), "v = ")))
	}
	b.WriteString("]\n")
	return b.String(), nil
}

// writeJoin writes DIR/join.toml (JoinConfig) and names it in the State.
func (t *Testnet) writeJoin() error {
	t.State.NodeArgs = t.o.NodeArgs
	if t.key != nil {
		data := filepath.Join(t.o.Dir, "join", "data")
		if err := os.MkdirAll(data, 0o700); err != nil {
			return err
		}
		if err := t.key.Admit(data, false); err != nil {
			return err
		}
	}
	text, err := JoinConfig(t.State)
	if err != nil {
		return err
	}
	file := filepath.Join(t.o.Dir, "join.toml")
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		return err
	}
	t.State.Join = file
	return nil
}

// ShellQuote joins args into one line a POSIX shell reads back as args:
// each argument with anything but letters, digits and -_./=:,@+% in single
// quotes.
func ShellQuote(args []string) string {
	q := make([]string, len(args))
	for i, a := range args {
		safe := a != ""
		for _, r := range a {
			if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || strings.ContainsRune("-_./=:,@+%", r)) {
				safe = false
				break
			}
		}
		if safe {
			q[i] = a
		} else {
			q[i] = "'" + strings.ReplaceAll(a, "'", `'\''`) + "'"
		}
	}
	return strings.Join(q, " ")
}
