package fsys

import (
	"context"
	"errors"
	"net/url"
	"os"
	"path/filepath"
	"sort"
	"testing"
	"time"
)

func setup(t *testing.T) (*Source, string) {
	t.Helper()
	dir := t.TempDir()
	for name, body := range map[string]string{
		"index.html":       "<title>home</title>",
		"a/b.html":         "<title>b</title>",
		"a/index.html":     "<title>a</title>",
		"a/data.bin":       "\x00\x01",
		".git/config.html": "secret",
	} {
		p := filepath.Join(dir, name)
		os.MkdirAll(filepath.Dir(p), 0o755)
		os.WriteFile(p, []byte(body), 0o644)
	}
	outside := filepath.Join(t.TempDir(), "outside.html")
	os.WriteFile(outside, []byte("outside"), 0o644)
	os.Symlink(outside, filepath.Join(dir, "escape.html"))
	s, err := Open([]Root{{Dir: dir, Prefix: "http://Www.Example.test/site"}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s, dir
}

func mustURL(s string) *url.URL { u, _ := url.Parse(s); return u }

func TestMatchAndRead(t *testing.T) {
	s, _ := setup(t)
	cases := map[string]string{
		"http://www.example.test/site/":         "index.html",
		"http://www.example.test/site/a/":       "a/index.html",
		"http://www.example.test/site/a/b.html": "a/b.html",
	}
	for u, want := range cases {
		_, rel, ok := s.Match(mustURL(u))
		if !ok || rel != want {
			t.Errorf("%s → %q %v, want %q", u, rel, ok, want)
		}
	}
	for _, u := range []string{
		"http://other.test/site/", "https://www.example.test/site/", "http://www.example.test/elsewhere",
		"http://www.example.test/site/a/../../etc/passwd", "http://www.example.test/site/search?q=x",
	} {
		if _, _, ok := s.Match(mustURL(u)); ok {
			t.Errorf("%s matched", u)
		}
	}
	d, err := s.Read(mustURL("http://www.example.test/site/a/b.html"), 1<<20)
	if err != nil || string(d.Body) != "<title>b</title>" || d.ContentType != "text/html" || d.ModTime.IsZero() {
		t.Fatalf("read: %+v %v", d, err)
	}
	if d, _ := s.Read(mustURL("http://www.example.test/site/index.html"), 5); !d.Truncated || len(d.Body) != 5 {
		t.Errorf("cap not applied: %+v", d)
	}
	if _, err := s.Read(mustURL("http://www.example.test/site/nope.html"), 10); !errors.Is(err, ErrNotFound) {
		t.Errorf("missing file: %v", err)
	}
	if _, err := s.Read(mustURL("http://www.example.test/site/escape.html"), 100); err == nil {
		t.Error("symlink out of the root was followed")
	}
}

func TestWalk(t *testing.T) {
	s, _ := setup(t)
	var got []string
	err := s.Walk(context.Background(), func(u string, mod time.Time) error {
		got = append(got, u)
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	sort.Strings(got)
	want := []string{"http://www.example.test/site/", "http://www.example.test/site/a/", "http://www.example.test/site/a/b.html"}
	// escape.html is a symlink, not a regular file: skipped.
	if len(got) != len(want) {
		t.Fatalf("walk %v, want %v", got, want)
	}
	for i := range want {
		if got[i] != want[i] {
			t.Fatalf("walk %v, want %v", got, want)
		}
	}
}

func TestBadRoots(t *testing.T) {
	if _, err := Open([]Root{{Dir: t.TempDir(), Prefix: "ftp://x/"}}); err == nil {
		t.Error("ftp prefix accepted")
	}
	if _, err := Open([]Root{{Dir: "/nonexistent/dir", Prefix: "http://x/"}}); err == nil {
		t.Error("missing dir accepted")
	}
	if _, err := ParseRoot("nodir"); err == nil {
		t.Error("bad root spec accepted")
	}
}
