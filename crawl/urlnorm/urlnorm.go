// Package urlnorm owns micra's canonical form of a URL and its crawl-scope
// rules.
//
// Normalisation (Normalizer.Normalize, Normalizer.Resolve) turns every URL a
// crawler meets into one canonical string so that the seen-set and the
// frontier never hold two spellings of the same resource:
//
//   - only http and https are accepted; scheme and host are lower-cased,
//     internationalised host names are converted to their ASCII (punycode)
//     form and a trailing dot is removed;
//   - the default port (80 for http, 443 for https) is removed;
//   - user information ("user:pass@") is dropped — a crawler never sends it;
//   - dot segments are removed (RFC 3986 §5.2.4) and an empty path becomes "/";
//   - percent-encoding is put in normal form: escapes of unreserved characters
//     are decoded, the remaining escapes use upper-case hex, characters that
//     must be escaped are escaped and a stray "%" becomes "%25";
//   - the fragment is removed;
//   - optionally, query parameters are dropped by name or prefix (tracking
//     parameters such as utm_*, session ids), sorted, and an empty query is
//     removed (Options).
//
// Scope (scope.go) says which normalised URLs a crawl may visit at all: maximum
// depth from the seeds, maximum pages per host, URL length and the
// path-repetition traps that calendar and relative-link loops produce.
package urlnorm

import (
	"errors"
	"fmt"
	"net"
	"net/url"
	"sort"
	"strconv"
	"strings"

	"golang.org/x/net/idna"
)

// ErrUnsupportedScheme is returned (wrapped) for URLs whose scheme is not http
// or https, such as mailto:, javascript: or ftp:.
var ErrUnsupportedScheme = errors.New("unsupported scheme")

// ErrInvalidURL is returned (wrapped) for URLs that cannot be parsed or have no
// usable host.
var ErrInvalidURL = errors.New("invalid URL")

// Options controls the optional query-parameter rules. The zero value keeps
// every query parameter in its original order.
type Options struct {
	// DropParams lists query parameter names removed from every URL, compared
	// case-insensitively (for example "sessionid", "phpsessid", "sid").
	DropParams []string
	// DropParamPrefixes lists name prefixes removed from every URL, compared
	// case-insensitively (for example "utm_").
	DropParamPrefixes []string
	// SortQuery sorts the remaining parameters by name (stable, so repeated
	// names keep their relative order). Servers rarely depend on order, and
	// sorting merges URLs that differ only in it.
	SortQuery bool
}

// DefaultOptions drops common tracking and session parameters and sorts the
// query, the choice of most large crawlers.
func DefaultOptions() Options {
	return Options{
		DropParams:        []string{"sessionid", "phpsessid", "jsessionid", "sid", "gclid", "fbclid", "msclkid"},
		DropParamPrefixes: []string{"utm_"},
		SortQuery:         true,
	}
}

// Normalizer normalises URLs under a fixed set of Options. It is safe for
// concurrent use.
type Normalizer struct {
	opts     Options
	drop     map[string]bool
	prefixes []string
}

// New returns a Normalizer with the given options.
func New(opts Options) *Normalizer {
	n := &Normalizer{opts: opts, drop: make(map[string]bool)}
	for _, p := range opts.DropParams {
		n.drop[strings.ToLower(p)] = true
	}
	for _, p := range opts.DropParamPrefixes {
		n.prefixes = append(n.prefixes, strings.ToLower(p))
	}
	return n
}

// defaultNormalizer keeps every query parameter: Normalize and Resolve at
// package level are the conservative form.
var defaultNormalizer = New(Options{})

// Normalize returns the canonical form of raw using no query-parameter rules.
func Normalize(raw string) (string, error) { return defaultNormalizer.Normalize(raw) }

// Resolve resolves ref against base and normalises the result using no
// query-parameter rules.
func Resolve(base *url.URL, ref string) (*url.URL, error) {
	return defaultNormalizer.Resolve(base, ref)
}

// Normalize returns the canonical string form of raw.
func (n *Normalizer) Normalize(raw string) (string, error) {
	u, err := n.Parse(raw)
	if err != nil {
		return "", err
	}
	return u.String(), nil
}

// Parse parses raw and returns it normalised.
func (n *Normalizer) Parse(raw string) (*url.URL, error) {
	u, err := url.Parse(fixStrayPercent(strings.TrimSpace(raw)))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, raw, err)
	}
	return n.NormalizeURL(u)
}

// Resolve resolves the reference ref (as found in an href) against base and
// returns the normalised absolute URL.
func (n *Normalizer) Resolve(base *url.URL, ref string) (*url.URL, error) {
	r, err := url.Parse(fixStrayPercent(strings.TrimSpace(ref)))
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, ref, err)
	}
	KeepRawPath(r) // (ResolveReference works on EscapedPath)
	return n.NormalizeURL(base.ResolveReference(r))
}

// NormalizeURL returns a normalised copy of u; u itself is not modified.
func (n *Normalizer) NormalizeURL(u *url.URL) (*url.URL, error) {
	scheme := strings.ToLower(u.Scheme)
	if scheme != "http" && scheme != "https" {
		if scheme == "" {
			return nil, fmt.Errorf("%w: %q: not absolute", ErrInvalidURL, u.String())
		}
		return nil, fmt.Errorf("%w: %q", ErrUnsupportedScheme, scheme)
	}
	if u.Opaque != "" {
		return nil, fmt.Errorf("%w: %q: opaque URL", ErrInvalidURL, u.String())
	}
	host, err := normalizeHost(u.Hostname())
	if err != nil {
		return nil, fmt.Errorf("%w: %q: %v", ErrInvalidURL, u.String(), err)
	}
	port := u.Port()
	if port != "" {
		p, err := strconv.Atoi(port)
		if err != nil || p < 1 || p > 65535 {
			return nil, fmt.Errorf("%w: %q: bad port %q", ErrInvalidURL, u.String(), port)
		}
		port = strconv.Itoa(p) // drops leading zeros
		if (scheme == "http" && p == 80) || (scheme == "https" && p == 443) {
			port = ""
		}
	}
	hostport := host
	if strings.Contains(host, ":") { // IPv6 literal
		hostport = "[" + host + "]"
	}
	if port != "" {
		hostport += ":" + port
	}

	rawPath := rawPathOf(u)
	p := removeDotSegments(normalizeEscapes(rawPath, pathChar))
	if p == "" {
		p = "/"
	}
	out := &url.URL{Scheme: scheme, Host: hostport}
	setEscapedPath(out, p)

	if u.RawQuery != "" || u.ForceQuery {
		out.RawQuery = n.normalizeQuery(u.RawQuery)
	}
	return out, nil
}

// HostKey returns the politeness key of a normalised URL: lower-case host and
// non-default port. Two URLs with the same HostKey are the same web server
// for the purposes of "one request in flight per host".
func HostKey(u *url.URL) string {
	return strings.ToLower(u.Host)
}

func normalizeHost(h string) (string, error) {
	if h == "" {
		return "", errors.New("empty host")
	}
	if strings.Contains(h, ":") { // IPv6 literal (brackets already stripped)
		ip := net.ParseIP(h)
		if ip == nil {
			return "", fmt.Errorf("bad IPv6 literal %q", h)
		}
		return ip.String(), nil
	}
	h = strings.TrimRight(h, ".")
	if h == "" {
		return "", errors.New("empty host")
	}
	// Hosts may arrive percent-encoded (RFC 3986 allows it for reg-names).
	if strings.Contains(h, "%") {
		d, err := url.PathUnescape(h)
		if err != nil {
			return "", fmt.Errorf("bad host escape %q", h)
		}
		h = d
	}
	a, err := idna.Lookup.ToASCII(h)
	if err != nil {
		// Lenient fallback: underscores and similar are common in real host
		// names that strict IDNA rejects; keep ASCII hosts as they are.
		if !isASCII(h) {
			return "", fmt.Errorf("bad host %q: %v", h, err)
		}
		a = h
	}
	// IDNA maps some characters to nothing (a soft hyphen): what is left
	// must still name a host, without an empty label
	if a = strings.TrimRight(a, "."); a == "" {
		return "", fmt.Errorf("empty host (%q)", h)
	}
	if strings.HasPrefix(a, ".") || strings.Contains(a, "..") {
		return "", fmt.Errorf("bad host %q: an empty label", h)
	}
	return strings.ToLower(a), nil
}

func isASCII(s string) bool {
	for i := 0; i < len(s); i++ {
		if s[i] >= 0x80 {
			return false
		}
	}
	return true
}

// setEscapedPath stores an already escaped path in u so that u.String()
// reproduces it exactly.
// rawPathOf is u's path as written: RawPath when it is a spelling of Path.
// EscapedPath gives it up when it holds a character Go would escape (a
// space, "|", raw UTF-8) and escapes the decoded Path instead, which turns
// an escaped "/" (%2F) into a real one: /a%2Fb/c d and /a/b/c d, two
// resources, would share one key.
func rawPathOf(u *url.URL) string {
	if u.RawPath != "" {
		if d, err := url.PathUnescape(u.RawPath); err == nil && d == u.Path {
			return u.RawPath
		}
	}
	return u.EscapedPath()
}

// KeepRawPath makes u's EscapedPath (and so String and ResolveReference)
// its path as written, escaped validly, where Go would otherwise escape the
// decoded path and lose an escaped "/" (rawPathOf).
func KeepRawPath(u *url.URL) {
	if raw := rawPathOf(u); raw != u.EscapedPath() {
		setEscapedPath(u, normalizeEscapes(raw, pathChar))
	}
}

func setEscapedPath(u *url.URL, escaped string) {
	dec, err := url.PathUnescape(escaped)
	if err != nil {
		dec = escaped
	}
	u.Path = dec
	u.RawPath = escaped
	if u.EscapedPath() != escaped { // url decided the escaping differs: force RawPath
		u.RawPath = escaped
	}
}

type charClass int

const (
	pathChar charClass = iota
	queryChar
)

func isUnreserved(c byte) bool {
	return 'a' <= c && c <= 'z' || 'A' <= c && c <= 'Z' || '0' <= c && c <= '9' ||
		c == '-' || c == '.' || c == '_' || c == '~'
}

func isSubDelim(c byte) bool {
	switch c {
	case '!', '$', '&', '\'', '(', ')', '*', '+', ',', ';', '=':
		return true
	}
	return false
}

// allowedRaw reports whether c may appear unescaped in the given component.
func allowedRaw(c byte, class charClass) bool {
	if isUnreserved(c) || isSubDelim(c) || c == ':' || c == '@' || c == '/' {
		return true
	}
	return class == queryChar && c == '?'
}

func unhex(c byte) (byte, bool) {
	switch {
	case '0' <= c && c <= '9':
		return c - '0', true
	case 'a' <= c && c <= 'f':
		return c - 'a' + 10, true
	case 'A' <= c && c <= 'F':
		return c - 'A' + 10, true
	}
	return 0, false
}

const upperHex = "0123456789ABCDEF"

// normalizeEscapes rewrites s into percent-encoding normal form.
func normalizeEscapes(s string, class charClass) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); i++ {
		c := s[i]
		if c == '%' && i+2 < len(s) {
			hi, ok1 := unhex(s[i+1])
			lo, ok2 := unhex(s[i+2])
			if ok1 && ok2 {
				v := hi<<4 | lo
				if isUnreserved(v) {
					b.WriteByte(v)
				} else {
					b.WriteByte('%')
					b.WriteByte(upperHex[v>>4])
					b.WriteByte(upperHex[v&15])
				}
				i += 2
				continue
			}
		}
		if c != '%' && allowedRaw(c, class) {
			b.WriteByte(c)
			continue
		}
		b.WriteByte('%')
		b.WriteByte(upperHex[c>>4])
		b.WriteByte(upperHex[c&15])
	}
	return b.String()
}

// fixStrayPercent escapes a "%" that does not start a valid escape, as
// browsers do, so that "100%.html" is a URL rather than a parse error.
func fixStrayPercent(s string) string {
	if !strings.Contains(s, "%") {
		return s
	}
	var b strings.Builder
	for i := 0; i < len(s); i++ {
		if s[i] == '%' {
			if i+2 < len(s) {
				_, ok1 := unhex(s[i+1])
				_, ok2 := unhex(s[i+2])
				if ok1 && ok2 {
					b.WriteByte('%')
					continue
				}
			}
			b.WriteString("%25")
			continue
		}
		b.WriteByte(s[i])
	}
	return b.String()
}

// removeDotSegments implements RFC 3986 §5.2.4 on an escaped path.
func removeDotSegments(p string) string {
	if !strings.Contains(p, ".") {
		return p
	}
	in := p
	var out []string
	for len(in) > 0 {
		switch {
		case strings.HasPrefix(in, "../"):
			in = in[3:]
		case strings.HasPrefix(in, "./"):
			in = in[2:]
		case strings.HasPrefix(in, "/./"):
			in = in[2:]
		case in == "/.":
			in = "/"
		case strings.HasPrefix(in, "/../"):
			in = in[3:]
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "/..":
			in = "/"
			if len(out) > 0 {
				out = out[:len(out)-1]
			}
		case in == "." || in == "..":
			in = ""
		default:
			start := 0
			if in[0] == '/' {
				start = 1
			}
			j := strings.IndexByte(in[start:], '/')
			if j < 0 {
				out = append(out, in)
				in = ""
			} else {
				out = append(out, in[:start+j])
				in = in[start+j:]
			}
		}
	}
	return strings.Join(out, "")
}

func (n *Normalizer) normalizeQuery(raw string) string {
	if raw == "" {
		return ""
	}
	parts := strings.FieldsFunc(raw, func(r rune) bool { return r == '&' })
	kept := parts[:0]
	for _, part := range parts {
		part = normalizeEscapes(part, queryChar)
		name := part
		if i := strings.IndexByte(part, '='); i >= 0 {
			name = part[:i]
		}
		if n.dropParam(name) {
			continue
		}
		kept = append(kept, part)
	}
	if n.opts.SortQuery {
		sort.SliceStable(kept, func(i, j int) bool { return paramName(kept[i]) < paramName(kept[j]) })
	}
	return strings.Join(kept, "&")
}

func paramName(p string) string {
	if i := strings.IndexByte(p, '='); i >= 0 {
		return p[:i]
	}
	return p
}

func (n *Normalizer) dropParam(name string) bool {
	if len(n.drop) == 0 && len(n.prefixes) == 0 {
		return false
	}
	if d, err := url.QueryUnescape(name); err == nil {
		name = d
	}
	name = strings.ToLower(name)
	if n.drop[name] {
		return true
	}
	for _, p := range n.prefixes {
		if strings.HasPrefix(name, p) {
			return true
		}
	}
	return false
}
