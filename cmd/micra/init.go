package main

// `micra init`: a node's home (config.toml, data directory, identity key);
// `micra config show`: the configuration in effect.

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/overlay"
)

type initOptions struct {
	home           string
	testnet, force bool
}

func init() {
	o := &initOptions{}
	cmd := &cobra.Command{
		Use:   "init [--home DIR] [--testnet] [--force]",
		Short: "create a node's home: config.toml listing every setting, the data directory, the identity key",
		Long: `Creates a micra home (--home DIR, else $MICRA_HOME, else ~/.micra; mode 0700):

  config.toml          every setting of micra node, commented out at its default
                       under its meaning, and data_dir = "data"
  data/identity.key    the peer's Ed25519 key (0600): its peer id names it

and prints the peer id and the command that starts the node. An existing
config.toml is kept unless --force; the identity key is never overwritten.
--testnet writes the configuration of a loopback testnet node (testnet = true,
listening on 127.0.0.1).`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runInit(cmd.OutOrStdout(), o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.home, "home", "", "the home to create (default $"+homeEnv+", else ~/.micra)")
	f.BoolVar(&o.testnet, "testnet", false, "a loopback testnet node's configuration")
	f.BoolVar(&o.force, "force", false, "rewrite an existing config.toml (the identity key is kept)")
	rootCmd.AddCommand(cmd)

	var show struct{ home, config string }
	cfgCmd := &cobra.Command{
		Use:   "config",
		Short: "the node's configuration (micra config show)",
		Args:  cobra.NoArgs,
	}
	showCmd := &cobra.Command{
		Use:   "show [--home DIR | --config FILE]",
		Short: "print the configuration micra node would run with (file, then environment) as TOML",
		Long: `Prints the settings micra node reads — the home's config.toml (or --config FILE),
then the MICRA_<KEY> environment variables — as a config.toml: the settings that
are set as keys, the others commented out at their default. Flags of micra node
would override them in turn.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runConfigShow(cmd.OutOrStdout(), cmd.ErrOrStderr(), show.config, show.home)
		},
	}
	showCmd.Flags().StringVar(&show.home, "home", "", "the home whose config.toml to read (default $"+homeEnv+", else ~/.micra)")
	showCmd.Flags().StringVar(&show.config, "config", "", "a configuration file (TOML, or JSON) instead of the home's")
	cfgCmd.AddCommand(showCmd)
	rootCmd.AddCommand(cfgCmd)
}

const configHeader = `# micra node configuration (written by micra init).
#
# Every setting is listed under its meaning, commented out at its default:
# uncomment a line to change it. Settings are top-level keys (the groups are
# comments). Each one is also an environment variable, MICRA_ and the key in
# capitals (MICRA_MIN_DELAY=2s; a list comma-separated), and a flag of micra
# node, the key with dashes (--min-delay 2s; a list flag repeated). Flags
# override the environment, which overrides this file. Relative paths are
# relative to this file's directory. micra config show prints what is in
# effect.
`

func runInit(w io.Writer, o *initOptions) error {
	home := o.home
	if home == "" {
		var err error
		if home, _, err = defaultHome(); err != nil {
			return err
		}
	}
	home, err := filepath.Abs(home)
	if err != nil {
		return err
	}
	cfgPath := filepath.Join(home, configName)
	if _, err := os.Stat(cfgPath); err == nil && !o.force {
		return fmt.Errorf("init: %s exists: micra init --force rewrites it (the identity key is kept)", cfgPath)
	} else if err != nil && !errors.Is(err, fs.ErrNotExist) {
		return fmt.Errorf("init: %w", err)
	}
	f := node.File{DataDir: "data"}
	if o.testnet {
		f.Testnet = true
		f.Listen = []string{"/ip4/127.0.0.1/tcp/0"}
	}
	data := filepath.Join(home, f.DataDir)
	if err := os.MkdirAll(data, 0o700); err != nil { // home too, 0700
		return fmt.Errorf("init: %w", err)
	}
	keyFile := filepath.Join(data, "identity.key")
	sk, err := overlay.LoadOrCreateKey(keyFile) // an existing key is kept
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		return fmt.Errorf("init: %w", err)
	}
	var buf bytes.Buffer
	buf.WriteString(configHeader)
	if o.testnet {
		buf.WriteString("#\n# A loopback testnet node: listening on 127.0.0.1 (port 0: a free port each\n# start), probes and fetches to loopback allowed.\n")
	}
	if err := node.WriteTOML(&buf, f); err != nil {
		return err
	}
	if err := overlay.WriteFileAtomic(cfgPath, buf.Bytes(), 0o600); err != nil {
		return fmt.Errorf("init: %w", err)
	}
	next := "micra node"
	if def, _, err := defaultHome(); err != nil || filepath.Clean(def) != home {
		next += " --home " + home
	}
	fmt.Fprintf(w, "initialized micra home %s\n", home)
	fmt.Fprintf(w, "  config    %s (every setting, commented out at its default)\n", cfgPath)
	fmt.Fprintf(w, "  identity  %s\n", keyFile)
	fmt.Fprintf(w, "peer id %s\n", id)
	if o.testnet {
		fmt.Fprintf(w, "next: %s [--bootstrap ADDR/p2p/ID of a running node]\n", next)
	} else {
		fmt.Fprintf(w, "next: set bootstrap and crawler_addr in %s (or as flags), then run: %s\n", cfgPath, next)
	}
	return nil
}

func runConfigShow(w, warn io.Writer, config, home string) error {
	path, err := configFile(config, home)
	if err != nil {
		return err
	}
	f, err := loadSettings(config, home, nil, warn)
	if err != nil {
		return err
	}
	from := "no configuration file"
	if path != "" {
		from = path
	}
	fmt.Fprintf(w, "# the configuration in effect: %s, then the environment (MICRA_<KEY>)\n", from)
	return node.WriteTOML(w, f)
}
