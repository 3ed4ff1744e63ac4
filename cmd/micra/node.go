package main

// `micra node`: one crawler peer of the overlay, until interrupted.

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"path/filepath"
	"runtime/debug"
	"strings"

	"github.com/spf13/cobra"

	hierarchydata "github.com/micra-crawler/micra/data/hierarchy"
	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/upgrade"
)

type nodeOptions struct {
	config, home string
	settings     *settingFlags // one flag per setting (settings.go)
	emulate      string
	emulatePeer  int
}

func init() {
	o := &nodeOptions{}
	cmd := &cobra.Command{
		Use:   "node [--home DIR | --config FILE] [--data-dir DIR] [--listen MULTIADDR] [--bootstrap MULTIADDR/p2p/ID] [--seeds URL] [--SETTING VALUE…]",
		Short: "run one micra peer: overlay (DHT, gossip, hand-offs) + crawler of the subnets delegated to it",
		Long: `Runs one micra node until interrupted (Ctrl-C / SIGTERM): a libp2p peer of the
overlay that takes part in delegation and, with the crawler role (default), crawls
the subnets delegated to it, hands every other URL to its owner and accepts the URLs
others hand to it. Everything lives under the data directory (identity key, crawl
state, hand-off spool, carriers), so a restarted node resumes.

Every setting (docs/node.md, "Configuration") is a key of the configuration file,
an environment variable MICRA_<KEY> and a flag --<key-with-dashes>; flags override
the environment, which overrides the file. The file is the home's config.toml
(--home DIR, else $MICRA_HOME, else ~/.micra if it exists; micra init creates one),
or --config FILE (TOML, or JSON). Unknown keys are errors; relative paths in a file
are relative to its directory, on the command line and in the environment to the
working directory. micra config show prints the file and environment in effect.`,
		Args: cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error { return runNode(cmd, o) },
	}
	f := cmd.Flags()
	f.StringVar(&o.home, "home", "", "micra home: read DIR/config.toml (default $"+homeEnv+", else ~/.micra if it exists)")
	f.StringVar(&o.config, "config", "", "configuration file (TOML, or JSON) instead of the home's config.toml")
	o.settings = addSettingFlags(f)
	f.StringVar(&o.emulate, "emulate", "", "testnet only: stand in this emulated world (the world.json that micra testnet up writes)")
	f.IntVar(&o.emulatePeer, "emulate-peer", 0, "with --emulate: this node is the world's crawler number N")
	rootCmd.AddCommand(cmd)
}

func runNode(cmd *cobra.Command, o *nodeOptions) error {
	cfg, err := o.nodeConfig(cmd.ErrOrStderr())
	if err != nil {
		return err
	}
	cfg.Logger = slog.Default()
	cfg.Release.Supervised = os.Getenv(upgrade.EnvSupervised) != ""
	if cfg.Release.AutoUpdate == node.AutoUpdateOn && !cfg.Release.Supervised {
		// this process supervises; the node runs in a child on the binary
		// at the executable's path, which a release replaces
		return superviseNode(cmd.Context(), cfg)
	}
	if limit := cfg.ProcessMemoryLimit(os.Getenv("GOMEMLIMIT")); limit > 0 {
		debug.SetMemoryLimit(limit) // the memory_limit setting (docs/node.md, "Memory")
	}
	// the pages every subcommand's package initialisers touched; the node
	// faults back those it uses (trim_linux.go)
	if _, err := releaseStartupPages(); err != nil {
		cfg.Logger.Debug("releasing the startup pages", "err", err)
	}
	ctx := cmd.Context()
	if o.emulate != "" {
		if !cfg.Overlay.LoopbackTestnet {
			return errors.New("node: --emulate is for loopback testnets (add --testnet)")
		}
		if err := applyEmulation(ctx, &cfg, o.emulate, o.emulatePeer); err != nil {
			return err
		}
	}
	embedded := cfg.Hierarchy == nil && cfg.HierarchyFile == ""
	n, err := node.Open(ctx, cfg)
	if err != nil {
		return err
	}
	if embedded {
		// decoded: the compressed snapshot's 4.4 MB are never read again
		if _, err := releaseStartupPages(hierarchydata.DefaultSnapshot); err != nil {
			cfg.Logger.Debug("releasing the snapshot's pages", "err", err)
		}
	}
	var addrs []string
	for _, a := range n.Peer().Host().Addrs() {
		addrs = append(addrs, fmt.Sprintf("%s/p2p/%s", a, n.Peer().ID()))
		fmt.Printf("listening %s\n", addrs[len(addrs)-1])
	}
	done := make(chan struct{})
	go func() {
		select { // the line a script waits for: the node has joined
		case <-n.Ready():
			fmt.Printf("ready peer=%s addrs=%s\n", n.Peer().ID(), strings.Join(addrs, ","))
		case <-done:
		}
	}()
	runErr := n.Run(ctx)
	close(done)
	// Close announces the leave (peers re-route at once) and flushes the
	// stores; the engine flushed its outbox as Run returned.
	closeErr := n.Close()
	if errors.Is(runErr, node.ErrRestart) && closeErr == nil {
		return exitStatus{code: upgrade.ExitRestart, err: runErr}
	}
	if runErr != nil && !errors.Is(runErr, context.Canceled) {
		return errors.Join(runErr, closeErr)
	}
	var in interrupted
	if errors.As(context.Cause(ctx), &in) {
		// stopped by a signal: say so and exit 128+signal (main)
		return errors.Join(fmt.Errorf("node: %w; state kept in %s — run the same command to resume", in, cfg.DataDir), closeErr)
	}
	return closeErr
}

// superviseNode runs the node as a child process under an
// upgrade.Supervisor: it restarts it on each release it installs and rolls
// back one that does not become healthy (docs/releases.md).
func superviseNode(ctx context.Context, cfg node.Config) error {
	exe, err := os.Executable()
	if err == nil {
		exe, err = filepath.EvalSymlinks(exe)
	}
	if err != nil {
		return fmt.Errorf("node: auto_update = on: the executable to supervise: %w", err)
	}
	s := &upgrade.Supervisor{Exe: exe, Args: os.Args[1:], Env: os.Environ(), Dir: filepath.Join(cfg.DataDir, "release"), Log: cfg.Logger}
	cfg.Logger.Info("supervising the node (auto_update = on)", "exe", exe)
	code, err := s.Run(ctx)
	if err != nil {
		return err
	}
	var in interrupted
	if errors.As(context.Cause(ctx), &in) {
		return fmt.Errorf("node: %w; state kept in %s — run the same command to resume", in, cfg.DataDir)
	}
	if code == 0 {
		return nil
	}
	return exitStatus{code: code, err: fmt.Errorf("node exited with status %d", code)}
}

// exitStatus is an error with the process status micra exits with.
type exitStatus struct {
	code int
	err  error
}

func (e exitStatus) Error() string { return e.err.Error() }
func (e exitStatus) Unwrap() error { return e.err }
func (e exitStatus) ExitCode() int { return e.code }
