package urlnorm

// Edge cases found by review; each test failed before its fix.

import (
	"net/url"
	"testing"
)

// NormalizeURL starts from u.EscapedPath(). When the raw path holds a
// character Go will not keep unescaped (space, "|", raw UTF-8 …), Go drops
// RawPath and re-escapes the decoded Path, so an escaped "/" (%2F) becomes a
// real "/": /a%2Fb/c d and /a/b/c d — two resources — get one key, and the
// page that is fetched is the wrong one.
func TestEncodedSlashSurvivesRawCharacters(t *testing.T) {
	n := New(DefaultOptions())
	for _, c := range [][2]string{
		{"http://ex.com/a%2Fb/c d", "http://ex.com/a/b/c d"},
		{"http://ex.com/a%2Fb/caf\u00e9", "http://ex.com/a/b/caf\u00e9"},
		{"http://ex.com/a%2Fb/x|y", "http://ex.com/a/b/x|y"},
	} {
		a, errA := n.Normalize(c[0])
		b, errB := n.Normalize(c[1])
		if errA != nil || errB != nil || a == b {
			t.Errorf("Normalize(%q) = %q and Normalize(%q) = %q (%v, %v): distinct paths share one key",
				c[0], a, c[1], b, errA, errB)
		}
	}
	base, _ := url.Parse("http://ex.com/dir/")
	r, err := n.Resolve(base, "a%2Fb/c d")
	if err != nil || r.String() != "http://ex.com/dir/a%2Fb/c%20d" {
		t.Errorf("Resolve(a%%2Fb/c d) = %v, %v; want http://ex.com/dir/a%%2Fb/c%%20d", r, err)
	}
}
