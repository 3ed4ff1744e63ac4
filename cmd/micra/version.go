package main

// `micra version` and `micra --version`: what this binary is, for bug
// reports and for telling whether two peers can talk.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node"
)

// versionInfo is what `micra version --json` prints: the build (shared with
// a node's control API, node.BuildInfo) and the embedded hierarchy.
type versionInfo struct {
	node.BuildInfo
	Hierarchy string `json:"hierarchy,omitempty"` // the embedded snapshot's id: peers must share it
}

func buildVersion() versionInfo {
	v := versionInfo{BuildInfo: node.Build()}
	if t, err := hierarchy.Default(); err == nil {
		id := t.ID()
		v.Hierarchy = hex.EncodeToString(id[:8])
	}
	return v
}

func printVersion(w io.Writer, asJSON bool) error {
	v := buildVersion()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintln(w, v.Short())
	if v.Time != "" {
		fmt.Fprintf(w, "  committed  %s\n", v.Time)
	}
	if v.Hierarchy != "" {
		fmt.Fprintf(w, "  hierarchy  %s (embedded snapshot; peers must share it)\n", v.Hierarchy)
	}
	for _, p := range v.Protocols {
		fmt.Fprintf(w, "  protocol   %s\n", p)
	}
	return nil
}

func init() {
	var asJSON bool
	cmd := &cobra.Command{
		Use:   "version",
		Short: "print micra's version, commit, Go version, platform, protocols and embedded hierarchy",
		Args:  cobra.NoArgs,
		RunE:  func(cmd *cobra.Command, _ []string) error { return printVersion(cmd.OutOrStdout(), asJSON) },
	}
	cmd.Flags().BoolVar(&asJSON, "json", false, "print it as JSON")
	rootCmd.AddCommand(cmd)
	// the version alone: decoding the embedded hierarchy for its id (31 MB
	// allocated, 17 MB kept) belongs to `micra version`, not to every
	// command's start
	rootCmd.Version = node.Build().Version
	rootCmd.SetVersionTemplate("{{printf \"%s\" .Version}}\n")
}
