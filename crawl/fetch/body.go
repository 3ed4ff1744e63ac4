package fetch

import (
	"bufio"
	"bytes"
	"compress/zlib"
	"errors"
	"fmt"
	"io"
	"mime"
	"strings"
	"unicode/utf8"

	"github.com/andybalholm/brotli"
	"github.com/klauspost/compress/flate"
	"github.com/klauspost/compress/gzip"
	"github.com/klauspost/compress/zstd"
	"golang.org/x/net/html/charset"
	"golang.org/x/text/encoding"
	"golang.org/x/text/encoding/unicode"
)

// acceptEncoding is what the fetcher advertises; it decodes all of these
// itself so that the body cap applies to decoded bytes.
const acceptEncoding = "gzip, br, zstd, deflate"

// maxCodings bounds the Content-Encoding chain of one response.
const maxCodings = 4

// errBodyTooLarge marks a decoded body above the cap.
var errBodyTooLarge = errors.New("decoded body exceeds limit")

// countingReader counts bytes as transferred (before decoding).
type countingReader struct {
	r io.Reader
	n int64
}

func (c *countingReader) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	c.n += int64(n)
	return n, err
}

// decoders wraps r in the decoders for a Content-Encoding header, last
// applied first. The returned close function releases decoder resources.
func decoders(r io.Reader, contentEncoding string, maxWindow uint64) (io.Reader, func(), error) {
	var closers []func()
	closeAll := func() {
		for _, c := range closers {
			c()
		}
	}
	codings := strings.Split(contentEncoding, ",")
	if len(codings) > maxCodings {
		// each layer holds a decoder at once: thousands of them are a
		// memory bomb in a header (curl's CVE-2022-32206 caps them at 5)
		return nil, nil, fmt.Errorf("%d content-codings (at most %d)", len(codings), maxCodings)
	}
	for i := len(codings) - 1; i >= 0; i-- {
		switch c := strings.ToLower(strings.TrimSpace(codings[i])); c {
		case "", "identity":
		case "gzip", "x-gzip":
			zr, err := gzip.NewReader(r)
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("gzip: %w", err)
			}
			closers = append(closers, func() { zr.Close() })
			r = zr
		case "deflate":
			// "deflate" is zlib-wrapped per RFC 9110, but many servers send
			// raw DEFLATE: sniff the zlib header.
			br := bufioPeek(r)
			if hdr, _ := br.Peek(2); len(hdr) == 2 && hdr[0]&0x0f == 8 && (uint16(hdr[0])<<8|uint16(hdr[1]))%31 == 0 {
				zr, err := zlib.NewReader(br)
				if err != nil {
					closeAll()
					return nil, nil, fmt.Errorf("deflate: %w", err)
				}
				closers = append(closers, func() { zr.Close() })
				r = zr
			} else {
				fr := flate.NewReader(br)
				closers = append(closers, func() { fr.Close() })
				r = fr
			}
		case "br":
			r = brotli.NewReader(r)
		case "zstd":
			zr, err := zstd.NewReader(r, zstd.WithDecoderConcurrency(1), zstd.WithDecoderLowmem(true),
				zstd.WithDecoderMaxWindow(maxWindow), zstd.WithDecoderMaxMemory(maxWindow*2))
			if err != nil {
				closeAll()
				return nil, nil, fmt.Errorf("zstd: %w", err)
			}
			closers = append(closers, zr.Close)
			r = zr
		default:
			closeAll()
			return nil, nil, fmt.Errorf("unsupported content-coding %q", c)
		}
	}
	return r, closeAll, nil
}

// readLimited reads at most limit bytes from r. Past the limit it returns
// errBodyTooLarge, or, when truncate, the first limit bytes and no error.
func readLimited(r io.Reader, limit int64, sizeHint int64, truncate bool) ([]byte, error) {
	var buf bytes.Buffer
	if sizeHint > 0 && sizeHint <= limit {
		buf.Grow(int(sizeHint) + 512)
	} else {
		buf.Grow(16 << 10)
	}
	n, err := buf.ReadFrom(io.LimitReader(r, limit+1))
	if err != nil {
		return nil, err
	}
	if n > limit {
		if truncate {
			return buf.Bytes()[:limit], nil
		}
		return nil, errBodyTooLarge
	}
	return buf.Bytes(), nil
}

// mediaType returns the lower-case media type and its charset parameter.
func mediaType(contentType string) (string, string) {
	if contentType == "" {
		return "", ""
	}
	mt, params, err := mime.ParseMediaType(contentType)
	if err != nil {
		// Lenient: take what precedes ";".
		mt = strings.TrimSpace(strings.SplitN(contentType, ";", 2)[0])
		return strings.ToLower(mt), ""
	}
	return strings.ToLower(mt), params["charset"]
}

func (f *Fetcher) typeAllowed(mt string) bool {
	for _, t := range f.cfg.AllowedTypes {
		if t == "*/*" || strings.EqualFold(t, mt) {
			return true
		}
		if strings.HasSuffix(t, "/*") && strings.HasPrefix(mt, strings.ToLower(strings.TrimSuffix(t, "*"))) {
			return true
		}
	}
	return false
}

// isText reports whether a media type carries text that should be UTF-8.
func isText(mt string) bool {
	return strings.HasPrefix(mt, "text/") || mt == "application/xhtml+xml" || mt == "application/xml" ||
		strings.HasSuffix(mt, "+xml") || mt == "application/json"
}

// toUTF8 converts body to UTF-8. It returns the canonical charset name, and
// whether the bytes were converted or repaired.
func (f *Fetcher) toUTF8(body []byte, mt, declared string) ([]byte, string, error) {
	if declared != "" {
		enc, name := charset.Lookup(declared)
		if enc == nil {
			return nil, "", fmt.Errorf("unknown charset %q", declared)
		}
		return f.convert(body, enc, name)
	}
	if mt == "text/html" || mt == "application/xhtml+xml" {
		// BOM, then <meta charset>, then a guess (as browsers do).
		enc, name, _ := charset.DetermineEncoding(body, mt)
		return f.convert(body, enc, name)
	}
	return f.convert(body, nil, "utf-8")
}

// convert decodes body from enc (nil or UTF-8: validate and repair).
func (f *Fetcher) convert(body []byte, enc encoding.Encoding, name string) ([]byte, string, error) {
	if enc == nil || name == "utf-8" || enc == unicode.UTF8 {
		if utf8.Valid(body) {
			return body, "utf-8", nil
		}
		f.m.charsetRepaired.Inc()
		return bytes.ToValidUTF8(body, []byte("\uFFFD")), "utf-8", nil
	}
	out, err := enc.NewDecoder().Bytes(body)
	if err != nil {
		return nil, name, fmt.Errorf("decoding %s: %w", name, err)
	}
	f.m.charsetConverted.Inc()
	if !utf8.Valid(out) {
		out = bytes.ToValidUTF8(out, []byte("\uFFFD"))
	}
	return out, name, nil
}

func bufioPeek(r io.Reader) *bufio.Reader {
	if br, ok := r.(*bufio.Reader); ok {
		return br
	}
	return bufio.NewReader(r)
}
