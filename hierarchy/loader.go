package hierarchy

import (
	"fmt"
	"io"
	"strings"
)

// LineError is a bad input line: it prints as "file:line: reason".
type LineError struct {
	File   string
	Line   int
	Reason string
}

func (e *LineError) Error() string { return fmt.Sprintf("%s:%d: %s", e.File, e.Line, e.Reason) }

// LoadOptions configure a loader.
type LoadOptions struct {
	// Name is the file name used in error messages.
	Name string
	// Lenient makes loaders skip and count bad lines instead of failing on
	// the first one.
	Lenient bool
	// MaxErrors bounds how many skipped-line errors are kept in the report
	// (default 20); all are counted.
	MaxErrors int
}

// LoadReport says what a loader read.
type LoadReport struct {
	File    string
	Lines   int          // physical lines read
	Records int          // ranges produced
	Ignored int          // well-formed lines that carry no range (headers, summaries, comments, ASN records)
	Skipped int          // bad lines skipped (lenient mode)
	Errors  []*LineError // the first MaxErrors skipped lines
}

// bad records a bad line: in strict mode it returns the error, in lenient
// mode it counts it and returns nil.
func (o *LoadOptions) bad(rep *LoadReport, line int, format string, a ...any) error {
	e := &LineError{File: o.name(), Line: line, Reason: fmt.Sprintf(format, a...)}
	if !o.Lenient {
		return e
	}
	rep.Skipped++
	limit := o.MaxErrors
	if limit == 0 {
		limit = 20
	}
	if len(rep.Errors) < limit {
		rep.Errors = append(rep.Errors, e)
	}
	return nil
}

func (o *LoadOptions) name() string {
	if o.Name == "" {
		return "<input>"
	}
	return o.Name
}

// clipOrg makes an organisation name safe for the Builder: trimmed, valid
// UTF-8, at most MaxOrgLen bytes.
func clipOrg(s string) string {
	s = strings.ToValidUTF8(strings.TrimSpace(s), "\uFFFD")
	if len(s) <= MaxOrgLen {
		return s
	}
	s = s[:MaxOrgLen]
	for len(s) > 0 && !utf8RuneStartOK(s) {
		s = s[:len(s)-1]
	}
	return s
}

// utf8RuneStartOK reports whether s does not end in a cut multi-byte rune.
func utf8RuneStartOK(s string) bool {
	return strings.ToValidUTF8(s, "") == s
}

// lineCounter counts the newlines that pass through it.
type lineCounter struct {
	r     io.Reader
	lines int
	last  byte
}

func (c *lineCounter) Read(p []byte) (int, error) {
	n, err := c.r.Read(p)
	for _, b := range p[:n] {
		if b == '\n' {
			c.lines++
		}
	}
	if n > 0 {
		c.last = p[n-1]
	}
	return n, err
}

// total returns the number of lines, counting an unterminated last line.
func (c *lineCounter) total() int {
	if c.last != 0 && c.last != '\n' {
		return c.lines + 1
	}
	return c.lines
}
