package console

import (
	_ "embed"
	"io/fs"
	"strings"
)

//go:embed ATTRIBUTION.md
var attribution string

// Attribution names the third-party files the console embeds (node/console/
// ATTRIBUTION.md), for `micra licenses`.
func Attribution() string { return attribution }

// Licences are the licence texts of the vendored libraries, as
// (file name, text), from assets/vendor/LICENSE-*.
func Licences() [][2]string {
	var out [][2]string
	names, _ := fs.Glob(assets, "assets/vendor/LICENSE-*")
	for _, n := range names {
		b, err := fs.ReadFile(assets, n)
		if err == nil {
			out = append(out, [2]string{n[strings.LastIndex(n, "/")+1:], string(b)})
		}
	}
	return out
}
