package node

import (
	"runtime"
	"runtime/debug"

	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// BuildInfo is what this binary is: its version, the commit it was built
// from, the Go release and platform, and the protocols it speaks. `micra
// version` prints it; a running node reports it on its control API
// (GET /v1/id).
type BuildInfo struct {
	Version   string   `json:"version"`            // module version, or "devel"
	Commit    string   `json:"commit,omitempty"`   // VCS revision the binary was built from
	Time      string   `json:"time,omitempty"`     // its commit time
	Modified  bool     `json:"modified,omitempty"` // built from a tree with uncommitted changes
	Go        string   `json:"go"`
	Platform  string   `json:"platform"`
	Protocols []string `json:"protocols"`
}

// linkVersion is the release version stamped at link time by whoever
// builds a release (go build -ldflags "-X
// github.com/micra-crawler/micra/node.linkVersion=v1.2.3"): a build from a
// checkout has no module version, and signed releases compare versions.
var linkVersion string

// Build reads the binary's build information.
func Build() BuildInfo {
	v := BuildInfo{Version: "devel", Go: runtime.Version(), Platform: runtime.GOOS + "/" + runtime.GOARCH}
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
	if linkVersion != "" {
		v.Version = linkVersion
	}
	for _, p := range []string{string(overlay.ProtoProbe), string(overlay.ProtoEndorse), string(overlay.ProtoHandoff),
		string(overlay.ProtoSnapshot), string(overlay.ProtoRecover), string(overlay.ProtoOwned),
		string(overlay.ProtoSWIM), string(overlay.ProtoSWIMSync), string(overlay.ProtoRelease), string(sink.ProtoCarrier), string(sink.ProtoSubscribe)} {
		v.Protocols = append(v.Protocols, p)
	}
	return v
}

// Short is the one-line form: "micra VERSION (COMMIT[, modified]) GO PLATFORM".
func (v BuildInfo) Short() string {
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
