package urlnorm

import (
	"net/url"
	"testing"
)

// FuzzNormalize checks that normalisation is idempotent and that its output
// parses back to a URL with the same host and path.
func FuzzNormalize(f *testing.F) {
	for _, s := range []string{
		"HTTP://Example.COM:80/a/./b/../c/%7euser/%2f?utm_source=x&b=2&a=1#frag",
		"http://ex.com/a b/ü?q=a b", "http://ex.com/%zz", "http://münchen.de/", "http://[::1]:8080/x",
		"http://u:p@ex.com./x/..", "https://ex.com:443", "http://ex.com/?a=%41&b", "http://ex.com/;x;y?z#",
	} {
		f.Add(s)
	}
	n := New(DefaultOptions())
	f.Fuzz(func(t *testing.T, raw string) {
		out, err := n.Normalize(raw)
		if err != nil {
			return
		}
		again, err := n.Normalize(out)
		if err != nil {
			t.Fatalf("Normalize(%q) = %q, which does not normalise: %v", raw, out, err)
		}
		if again != out {
			t.Fatalf("not idempotent: %q → %q → %q", raw, out, again)
		}
		if _, err := url.Parse(out); err != nil {
			t.Fatalf("output %q does not parse: %v", out, err)
		}
	})
}
