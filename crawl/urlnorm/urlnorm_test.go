package urlnorm

import (
	"errors"
	"net/url"
	"strings"
	"testing"
)

func TestNormalize(t *testing.T) {
	n := New(DefaultOptions())
	for in, want := range map[string]string{
		"HTTP://Example.COM:80/a/./b/../c/%7euser/%2f?utm_source=x&b=2&a=1#frag": "http://example.com/a/c/~user/%2F?a=1&b=2",
		"https://ex.com:443":                     "https://ex.com/",
		"https://ex.com:8443/":                   "https://ex.com:8443/",
		"http://ex.com:080/":                     "http://ex.com/",
		"http://ex.com/a b/ü?q=a b":              "http://ex.com/a%20b/%C3%BC?q=a%20b",
		"http://ex.com/%zz":                      "http://ex.com/%25zz",
		"http://ex.com/100%":                     "http://ex.com/100%25",
		"http://ex.com/%41%62%2d%3a":             "http://ex.com/Ab-%3A",
		"http://ex.com/%c3%bc":                   "http://ex.com/%C3%BC",
		"http://münchen.de/":                     "http://xn--mnchen-3ya.de/",
		"http://[::1]:8080/x":                    "http://[::1]:8080/x",
		"http://[0:0::1]/x":                      "http://[::1]/x",
		"http://u:p@ex.com./x/..":                "http://ex.com/",
		"http://ex.com/a/b/../../../c":           "http://ex.com/c",
		"http://ex.com?":                         "http://ex.com/",
		"http://ex.com/?sessionid=1&PHPSESSID=2": "http://ex.com/",
		"http://ex.com/?b=1&a=2&b=0":             "http://ex.com/?a=2&b=1&b=0",
		"http://ex.com/a/./b/.":                  "http://ex.com/a/b/",
		"  http://ex.com/x  ":                    "http://ex.com/x",
	} {
		got, err := n.Normalize(in)
		if err != nil || got != want {
			t.Errorf("Normalize(%q) = %q, %v; want %q", in, got, err, want)
		}
		// Idempotent.
		if again, err := n.Normalize(got); err != nil || again != got {
			t.Errorf("Normalize not idempotent on %q: %q %v", got, again, err)
		}
	}
	// The package-level form keeps every parameter, in order.
	if got, _ := Normalize("http://ex.com/?utm_source=a&z=1&a=2"); got != "http://ex.com/?utm_source=a&z=1&a=2" {
		t.Errorf("default normaliser changed the query: %s", got)
	}
	// a host IDNA maps to nothing (a soft hyphen), or with an empty label
	for _, bad := range []string{"mailto:a@b", "javascript:void(0)", "ftp://x/", "/relative", "http://", "http://ex.com:99999/",
		"http://\u00ad/", "http://\u00ad./x", "http://\u00ad.\u00ad/", "http://\u00ad.example/", "http://x.\u00ad.y/", "http://a..b/"} {
		_, err := n.Normalize(bad)
		if err == nil {
			t.Errorf("Normalize(%q) accepted", bad)
		}
		if !errors.Is(err, ErrInvalidURL) && !errors.Is(err, ErrUnsupportedScheme) {
			t.Errorf("Normalize(%q): error %v is neither ErrInvalidURL nor ErrUnsupportedScheme", bad, err)
		}
	}
}

func TestResolve(t *testing.T) {
	base, _ := url.Parse("http://Ex.com/dir/page.html?x=1")
	for ref, want := range map[string]string{
		"other.html":         "http://ex.com/dir/other.html",
		"../up.html#top":     "http://ex.com/up.html",
		"//cdn.ex.com/a":     "http://cdn.ex.com/a",
		"?y=2":               "http://ex.com/dir/page.html?y=2",
		"/abs/./x/../y":      "http://ex.com/abs/y",
		"HTTPS://EX.COM:443": "https://ex.com/",
	} {
		got, err := Resolve(base, ref)
		if err != nil || got.String() != want {
			t.Errorf("Resolve(%q) = %v, %v; want %s", ref, got, err, want)
		}
	}
	if _, err := Resolve(base, "mailto:x@y"); !errors.Is(err, ErrUnsupportedScheme) {
		t.Errorf("mailto resolved: %v", err)
	}
}

func TestScope(t *testing.T) {
	s := DefaultScope()
	s.MaxDepth = 3
	s.MaxPagesPerHost = 10
	s.MaxURLLength = 100
	mk := func(raw string) *url.URL {
		u, err := New(Options{}).Parse(raw)
		if err != nil {
			t.Fatal(err)
		}
		return u
	}
	for _, c := range []struct {
		url          string
		depth, pages int
		want         ScopeReason
	}{
		{"http://ex.com/a/b", 3, 9, ""},
		{"http://ex.com/a/b", 4, 0, ScopeDepth},
		{"http://ex.com/a/b", 0, 10, ScopeHostFull},
		{"http://ex.com/" + strings.Repeat("x", 100), 0, 0, ScopeURLLength},
		{"http://ex.com/a/b/a/b/a/b/a/b", 0, 0, ScopePathRepeat},
		{"http://ex.com/cal/2024/cal/2024/cal/2024", 0, 0, ""},
		{"http://ex.com/a/a/a/a", 0, 0, ScopePathRepeat},
		{"http://ex.com/1/2/3/4/5/6/7/8/9/10/11/12/13/14/15/16/17/18/19/20/21/22/23/24/25/26/27/28/29/30/31/32/33", 0, 0, ScopeURLLength},
	} {
		err := s.Check(mk(c.url), c.depth, c.pages)
		var se *ScopeError
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%s: unexpected %v", c.url, err)
		case c.want != "" && (!errors.As(err, &se) || se.Reason != c.want):
			t.Errorf("%s: got %v, want %s", c.url, err, c.want)
		}
	}
	s2 := Scope{MaxPathSegments: 4, MaxQueryParams: 2, Hosts: map[string]bool{"ex.com": true}}
	if err := s2.CheckURL(mk("http://ex.com/1/2/3/4/5"), 0); err == nil || err.(*ScopeError).Reason != ScopePathSegments {
		t.Errorf("segments: %v", err)
	}
	if err := s2.CheckURL(mk("http://ex.com/?a=1&b=2&c=3"), 0); err == nil || err.(*ScopeError).Reason != ScopeQueryParams {
		t.Errorf("params: %v", err)
	}
	if err := s2.CheckURL(mk("http://other.com/"), 0); err == nil || err.(*ScopeError).Reason != ScopeHostNotInSeed {
		t.Errorf("hosts: %v", err)
	}
	if HostKey(mk("http://EX.com:8080/x")) != "ex.com:8080" {
		t.Error("HostKey")
	}
}

func BenchmarkNormalize(b *testing.B) {
	n := New(DefaultOptions())
	for i := 0; i < b.N; i++ {
		n.Normalize("HTTP://Example.COM:80/a/./b/../c/%7euser/page.html?utm_source=x&b=2&a=1#frag")
	}
}
