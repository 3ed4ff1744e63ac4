package main

// `micra version` and `micra --version`: what this binary is, for bug
// reports and for telling whether two peers can talk.

import (
	"encoding/hex"
	"encoding/json"
	"fmt"
	"io"
	"runtime"
	"runtime/debug"

	"github.com/spf13/cobra"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// versionInfo is what `micra version --json` prints.
type versionInfo struct {
	Version   string   `json:"version"`            // module version, or "devel"
	Commit    string   `json:"commit,omitempty"`   // VCS revision the binary was built from
	Time      string   `json:"time,omitempty"`     // its commit time
	Modified  bool     `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go        string   `json:"go"`
	Platform  string   `json:"platform"`
	Protocols []string `json:"protocols"`
	Hierarchy string   `json:"hierarchy,omitempty"` // the embedded snapshot's id: peers must share it
}

func buildVersion() versionInfo {
	v := versionInfo{Version: "devel", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
	if bi, ok := debug.ReadBuildInfo(); ok {
		if bi.Main.Version != "" && bi.Main.Version != "(devel)" {
			v.Version = bi.Main.Version
		}
		for _, s := range bi.Settings {
			switch s.Key {
			case "vcs.revision":
				v.Commit = s.Value
			case "vcs.time":
				v.Time = s.Value
			case "vcs.modified":
				v.Modified = s.Value == "true"
			}
		}
	}
	for _, p := range []string{string(overlay.ProtoProbe), string(overlay.ProtoEndorse), string(overlay.ProtoHandoff),
		string(overlay.ProtoSnapshot), string(overlay.ProtoRecover), string(sink.ProtoCarrier), string(sink.ProtoSubscribe)} {
		v.Protocols = append(v.Protocols, p)
	}
	if t, err := hierarchy.Default(); err == nil {
		id := t.ID()
		v.Hierarchy = hex.EncodeToString(id[:8])
	}
	return v
}

func (v versionInfo) short() string {
	s := "micra " + v.Version
	if v.Commit != "" {
		s += " (" + v.Commit[:min(12, len(v.Commit))]
		if v.Modified {
			s += ", modified"
		}
		s += ")"
	}
	return s + " " + v.Go + " " + v.Platform
}

func printVersion(w io.Writer, asJSON bool) error {
	v := buildVersion()
	if asJSON {
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	}
	fmt.Fprintln(w, v.short())
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
	rootCmd.Version = buildVersion().Version
	rootCmd.SetVersionTemplate("{{printf \"%s\" .Version}}\n")
}
