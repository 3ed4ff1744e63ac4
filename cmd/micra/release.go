package main

// `micra release init|sign|publish|rotate-key|verify`: the operators' signed
// release repository (node/release; docs/releases.md). This file only parses
// flags and prints.

import (
	"encoding/hex"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"time"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/node/release"
)

func init() {
	cmd := &cobra.Command{
		Use:   "release",
		Short: "operators' signed releases (TUF): init, sign, publish, rotate-key, verify",
		Long: `The network's operators keep a TUF repository of micra releases (docs/releases.md):

  micra release init --repo DIR            keys for root, targets, snapshot, timestamp; root v1
  micra release sign --repo DIR --binary FILE --version vX.Y.Z [--os --arch] [--rollout 2h]
  micra release publish --repo DIR --out PUB   new snapshot + timestamp; PUB/metadata, PUB/targets
  micra release rotate-key --repo DIR --role ROLE   a new key for ROLE in a new root version
  micra release verify --root ROOT.json --from PUB  what a node would accept, and why not

Nodes trust the repository's root (DIR/metadata/1.root.json, given to them as
release_root) and refuse anything its keys did not sign.`,
		Args: cobra.NoArgs,
	}
	now := func() time.Time { return time.Now() }

	var repo string
	var keys, threshold int
	exp := release.DefaultExpiry
	initCmd := &cobra.Command{
		Use:   "init --repo DIR [--root-keys N] [--root-threshold T]",
		Short: "create a release repository: fresh keys for every role and root version 1",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := release.Init(repo, release.InitOptions{
				Keys: map[string]int{"root": keys}, Threshold: map[string]int{"root": threshold}, Expiry: exp,
			}, now)
			if err != nil {
				return err
			}
			w := cmd.OutOrStdout()
			fmt.Fprintf(w, "release repository %s: root v%d, %d root keys (%d to sign)\n", r.Dir(), r.RootVersion(), keys, threshold)
			fmt.Fprintf(w, "  keys      %s (0600; keep the root keys offline: they sign only root versions)\n", filepath.Join(r.Dir(), "keys"))
			fmt.Fprintf(w, "  nodes trust %s: set release_root to a copy of it\n", filepath.Join(r.Dir(), "metadata", "1.root.json"))
			return nil
		},
	}
	initCmd.Flags().IntVar(&keys, "root-keys", 3, "how many root keys")
	initCmd.Flags().IntVar(&threshold, "root-threshold", 2, "how many root keys must sign a root version")
	initCmd.Flags().DurationVar(&exp.Root, "root-expiry", exp.Root, "how long a root version is valid")
	initCmd.Flags().DurationVar(&exp.Targets, "targets-expiry", exp.Targets, "how long a targets version is valid")
	initCmd.Flags().DurationVar(&exp.Snapshot, "snapshot-expiry", exp.Snapshot, "how long a snapshot is valid")
	initCmd.Flags().DurationVar(&exp.Timestamp, "timestamp-expiry", exp.Timestamp, "how long a timestamp is valid (publish at least this often)")

	var t release.Target
	var binary string
	signCmd := &cobra.Command{
		Use:   "sign --repo DIR --binary FILE --version vX.Y.Z [--os OS --arch ARCH] [--rollout DURATION]",
		Short: "add a binary as a platform's release and sign a new targets version",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := release.Open(repo, now)
			if err != nil {
				return err
			}
			tf, err := r.AddTarget(binary, t)
			if err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "signed %s %s: %d bytes, sha256 %s, rollout %v — publish it with micra release publish --repo %s --out DIR\n",
				release.TargetName(t.OS, t.Arch), t.Version, tf.Length, hex.EncodeToString(tf.Hashes["sha256"]), t.Rollout, repo)
			return nil
		},
	}
	signCmd.Flags().StringVar(&binary, "binary", "", "the micra binary to release")
	signCmd.Flags().StringVar(&t.Version, "version", "", "its version (vMAJOR.MINOR.PATCH; newer than the platform's last release)")
	signCmd.Flags().StringVar(&t.OS, "os", runtime.GOOS, "the binary's GOOS")
	signCmd.Flags().StringVar(&t.Arch, "arch", runtime.GOARCH, "the binary's GOARCH")
	signCmd.Flags().DurationVar(&t.Rollout, "rollout", time.Hour, "nodes with auto_update = on install within a random delay up to this")

	var out string
	publishCmd := &cobra.Command{
		Use:   "publish --repo DIR --out PUB",
		Short: "sign a new snapshot and timestamp and write the published repository (metadata/, targets/)",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := release.Open(repo, now)
			if err != nil {
				return err
			}
			if out == "" {
				return fmt.Errorf("--out: the directory to publish to is needed")
			}
			if err := r.Publish(out); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "published %s: root v%d; a node's release_feed or the overlay takes it from there\n", out, r.RootVersion())
			return nil
		},
	}
	publishCmd.Flags().StringVar(&out, "out", "", "the published repository's directory")

	var role string
	rotateCmd := &cobra.Command{
		Use:   "rotate-key --repo DIR --role root|targets|snapshot|timestamp",
		Short: "replace a role's keys: a new root version signed by the old and new root keys",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			r, err := release.Open(repo, now)
			if err != nil {
				return err
			}
			if err := r.RotateKey(role); err != nil {
				return err
			}
			fmt.Fprintf(cmd.OutOrStdout(), "rotated the %s keys: root v%d (the old keys are in keys/retired); publish to hand it to nodes\n", role, r.RootVersion())
			return nil
		},
	}
	rotateCmd.Flags().StringVar(&role, "role", "", "the role whose keys to replace")

	var rootFile, from, running string
	var vOS, vArch string
	verifyCmd := &cobra.Command{
		Use:   "verify --root ROOT.json --from PUB [--running VERSION]",
		Short: "check a published repository as a node would: metadata, then the binary",
		Args:  cobra.NoArgs,
		RunE: func(cmd *cobra.Command, _ []string) error {
			return runReleaseVerify(cmd.OutOrStdout(), rootFile, from, running, vOS, vArch, now())
		},
	}
	verifyCmd.Flags().StringVar(&rootFile, "root", "", "the trusted root (a node's release_root)")
	verifyCmd.Flags().StringVar(&from, "from", "", "the published repository")
	verifyCmd.Flags().StringVar(&running, "running", "", "the version the node runs (older releases are refused)")
	verifyCmd.Flags().StringVar(&vOS, "os", runtime.GOOS, "the node's GOOS")
	verifyCmd.Flags().StringVar(&vArch, "arch", runtime.GOARCH, "the node's GOARCH")

	for _, c := range []*cobra.Command{initCmd, signCmd, publishCmd, rotateCmd} {
		c.Flags().StringVar(&repo, "repo", "", "the release repository's directory (with its keys)")
		_ = c.MarkFlagRequired("repo")
		cmd.AddCommand(c)
	}
	cmd.AddCommand(verifyCmd)
	rootCmd.AddCommand(cmd)
}

func runReleaseVerify(w io.Writer, rootFile, from, running, goos, goarch string, now time.Time) error {
	if rootFile == "" || from == "" {
		return fmt.Errorf("--root and --from are both needed")
	}
	root, err := os.ReadFile(rootFile)
	if err != nil {
		return fmt.Errorf("--root: %w", err)
	}
	b, err := release.ReadBundle(from)
	if err != nil {
		return err
	}
	v := &release.Verifier{Root: root, OS: goos, Arch: goarch, Running: running}
	rel, err := v.Metadata(b, now)
	if err != nil {
		return err
	}
	f, err := os.Open(release.TargetPath(from, rel.SHA256))
	if err != nil {
		return fmt.Errorf("%s %s: %w", rel.Target, rel.Version, err)
	}
	defer f.Close()
	if err := rel.Check(f); err != nil {
		return err
	}
	fmt.Fprintf(w, "verified %s %s: %d bytes, sha256 %s, rollout %v; root v%d; metadata valid until %s\n",
		rel.Target, rel.Version, rel.Length, rel.SHA256, rel.Rollout, rel.RootVersion, rel.Expires.Format(time.RFC3339))
	return nil
}
