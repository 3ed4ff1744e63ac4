// Package fsys owns crawling from the file system, as UCYMicra let a host
// administrator choose: a crawler running on the web server reads its
// document root directly (configured directory → URL prefix) instead of
// fetching it over HTTP, and uses modification times for change detection.
// The crawl engine routes every URL under a configured prefix here and
// produces the same records as for HTTP.
//
// Reads go through os.Root, so neither ".." segments nor symbolic links can
// escape the configured directory.
package fsys

import (
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"mime"
	"net/url"
	"os"
	"path"
	"path/filepath"
	"strings"
	"syscall"
	"time"

	"github.com/micra-crawler/micra/crawl/urlnorm"
)

// Root maps a directory to the URL prefix it is served under.
type Root struct {
	Dir    string // document root on disk
	Prefix string // absolute http(s) URL prefix, e.g. "http://www.example.org/docs/"
	// Index is the file served for a URL ending in "/" (default "index.html").
	Index string
}

// ParseRoot parses "dir=prefix" as given on the command line.
func ParseRoot(s string) (Root, error) {
	dir, prefix, ok := strings.Cut(s, "=")
	if !ok || dir == "" || prefix == "" {
		return Root{}, fmt.Errorf("fsys: %q: want DIR=URL-PREFIX", s)
	}
	return Root{Dir: dir, Prefix: prefix}, nil
}

// Doc is one file read for a URL.
type Doc struct {
	Path        string // path inside the root
	Body        []byte
	Size        int64
	ModTime     time.Time
	ContentType string
	Truncated   bool
}

// ErrNotFound is returned (wrapped) when the file of a URL does not exist.
var ErrNotFound = errors.New("fsys: no such file")

type root struct {
	Root
	prefix *url.URL
	fs     *os.Root
}

// Source serves URLs from one or more roots. Safe for concurrent use.
type Source struct {
	roots []root
}

// Open validates the roots and opens their directories.
func Open(roots []Root) (*Source, error) {
	s := &Source{}
	for _, r := range roots {
		u, err := url.Parse(r.Prefix)
		if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
			s.Close()
			return nil, fmt.Errorf("fsys: prefix %q is not an absolute http(s) URL", r.Prefix)
		}
		// the normal form the crawl's URLs have (default port dropped,
		// host lower-cased and IDNA-encoded), or no URL would ever match
		nu, err := urlnorm.New(urlnorm.Options{}).NormalizeURL(u)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("fsys: prefix %q: %w", r.Prefix, err)
		}
		u = nu
		if !strings.HasSuffix(u.Path, "/") {
			u.Path += "/"
		}
		if r.Index == "" {
			r.Index = "index.html"
		}
		fr, err := os.OpenRoot(r.Dir)
		if err != nil {
			s.Close()
			return nil, fmt.Errorf("fsys: root %s: %w", r.Dir, err)
		}
		r.Prefix = u.String()
		s.roots = append(s.roots, root{Root: r, prefix: u, fs: fr})
	}
	return s, nil
}

// Close closes the root directories.
func (s *Source) Close() error {
	for _, r := range s.roots {
		if r.fs != nil {
			r.fs.Close()
		}
	}
	return nil
}

// Roots returns the configured roots (prefixes normalised).
func (s *Source) Roots() []Root {
	out := make([]Root, len(s.roots))
	for i, r := range s.roots {
		out[i] = r.Root
	}
	return out
}

// Match reports whether u is served from the file system, and by which root
// and relative file path.
func (s *Source) Match(u *url.URL) (int, string, bool) {
	if s == nil {
		return 0, "", false
	}
	for i, r := range s.roots {
		if !strings.EqualFold(u.Scheme, r.prefix.Scheme) || !strings.EqualFold(u.Host, r.prefix.Host) {
			continue
		}
		p := u.Path
		if p == "" {
			p = "/"
		}
		if !strings.HasPrefix(p, r.prefix.Path) {
			continue
		}
		if u.RawQuery != "" {
			return 0, "", false // a query asks the server for something dynamic
		}
		rel := strings.TrimPrefix(p, r.prefix.Path)
		if rel == "" || strings.HasSuffix(rel, "/") {
			rel += r.Index
		}
		clean := path.Clean("/" + rel)[1:]
		if clean != rel || strings.HasPrefix(clean, "../") || clean == ".." {
			return 0, "", false // dot segments: never map outside the root
		}
		return i, clean, true
	}
	return 0, "", false
}

// Canonical returns the one URL of a file under a root: a directory's
// index file is named by its directory ("dir/index.html" → "dir/"), as
// Walk names it and as a web server's canonical form has it, so a crawl
// that meets both forms reads and ships the file once. Any other URL is
// returned as it is.
func (s *Source) Canonical(u *url.URL) *url.URL {
	i, rel, ok := s.Match(u)
	if !ok || strings.HasSuffix(u.Path, "/") || path.Base(rel) != s.roots[i].Index ||
		!strings.HasSuffix(u.Path, "/"+s.roots[i].Index) {
		return u
	}
	c := *u
	c.Path = strings.TrimSuffix(u.Path, s.roots[i].Index)
	c.RawPath = ""
	return &c
}

// Stat returns the modification time of the file behind u.
func (s *Source) Stat(u *url.URL) (time.Time, error) {
	i, rel, ok := s.Match(u)
	if !ok {
		return time.Time{}, fmt.Errorf("fsys: %s is not under a file root", u)
	}
	fi, err := s.roots[i].fs.Stat(rel)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return time.Time{}, fmt.Errorf("%w: %s", ErrNotFound, u)
		}
		return time.Time{}, err
	}
	if !fi.Mode().IsRegular() {
		return time.Time{}, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, u)
	}
	return fi.ModTime(), nil
}

// Read reads the file behind u, at most maxBytes of it.
func (s *Source) Read(u *url.URL, maxBytes int64) (Doc, error) {
	i, rel, ok := s.Match(u)
	if !ok {
		return Doc{}, fmt.Errorf("fsys: %s is not under a file root", u)
	}
	// non-blocking: opening a FIFO would wait for a writer (the regular-file
	// check below comes after the open); a regular file reads as usual
	f, err := s.roots[i].fs.OpenFile(rel, os.O_RDONLY|syscall.O_NONBLOCK, 0)
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return Doc{}, fmt.Errorf("%w: %s", ErrNotFound, u)
		}
		return Doc{}, err
	}
	defer f.Close()
	fi, err := f.Stat()
	if err != nil {
		return Doc{}, err
	}
	if !fi.Mode().IsRegular() {
		return Doc{}, fmt.Errorf("%w: %s is not a regular file", ErrNotFound, u)
	}
	d := Doc{Path: rel, Size: fi.Size(), ModTime: fi.ModTime(), ContentType: ContentType(rel)}
	d.Body, err = io.ReadAll(io.LimitReader(f, maxBytes+1))
	if err != nil {
		return Doc{}, err
	}
	if int64(len(d.Body)) > maxBytes {
		d.Body, d.Truncated = d.Body[:maxBytes], true
	}
	return d, nil
}

// ContentType guesses the media type of a file from its extension.
func ContentType(name string) string {
	switch strings.ToLower(filepath.Ext(name)) {
	case ".html", ".htm", ".shtml":
		return "text/html"
	case ".xhtml":
		return "application/xhtml+xml"
	}
	t := mime.TypeByExtension(filepath.Ext(name))
	if t == "" {
		return "application/octet-stream"
	}
	mt, _, _ := strings.Cut(t, ";")
	return mt
}

// IsHTML reports whether a media type is processed as HTML.
func IsHTML(ct string) bool { return ct == "text/html" || ct == "application/xhtml+xml" }

// Walk calls fn with the URL and modification time of every HTML file under
// every root (hidden files and directories skipped), so a file crawl visits
// documents no link points to.
func (s *Source) Walk(ctx context.Context, fn func(u string, mod time.Time) error) error {
	for _, r := range s.roots {
		err := fs.WalkDir(r.fs.FS(), ".", func(p string, d fs.DirEntry, err error) error {
			if err != nil {
				return err
			}
			if ctxErr := ctx.Err(); ctxErr != nil {
				return ctxErr
			}
			if strings.HasPrefix(d.Name(), ".") && p != "." {
				if d.IsDir() {
					return fs.SkipDir
				}
				return nil
			}
			if d.IsDir() || !d.Type().IsRegular() || !IsHTML(ContentType(p)) {
				return nil
			}
			fi, err := d.Info()
			if err != nil {
				return err
			}
			rel := p
			if path.Base(rel) == r.Index {
				rel = strings.TrimSuffix(rel, r.Index)
			}
			u := *r.prefix
			u.Path = r.prefix.Path + rel
			return fn(u.String(), fi.ModTime())
		})
		if err != nil {
			return fmt.Errorf("fsys: walk %s: %w", r.Dir, err)
		}
	}
	return nil
}
