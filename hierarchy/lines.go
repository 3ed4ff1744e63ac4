package hierarchy

import (
	"bufio"
	"errors"
	"io"
)

// lineReader reads lines as bufio.Scanner does (without the newline or a
// trailing carriage return), but a line longer than max is reported
// (TooLong) and skipped, not the end of the read: in lenient mode one bad
// line must not lose the rest of the file.
type lineReader struct {
	br      *bufio.Reader
	max     int
	line    []byte
	tooLong bool
	err     error
}

func newLineReader(r io.Reader, max int) *lineReader {
	return &lineReader{br: bufio.NewReaderSize(r, 64*1024), max: max}
}

// Scan reads the next line; false at the end of the input or on an error.
func (l *lineReader) Scan() bool {
	if l.err != nil {
		return false
	}
	l.line, l.tooLong = l.line[:0], false
	n := 0
	for {
		frag, err := l.br.ReadSlice('\n')
		n += len(frag)
		if !l.tooLong {
			l.line = append(l.line, frag...)
			if body := len(l.line) - endLen(l.line); body > l.max {
				l.tooLong, l.line = true, l.line[:0]
			}
		}
		if errors.Is(err, bufio.ErrBufferFull) {
			continue
		}
		if err != nil {
			l.err = err
			return n > 0
		}
		return true
	}
}

// endLen is the length of b's line ending ("\n", "\r\n" or none).
func endLen(b []byte) int {
	n := 0
	if len(b) > 0 && b[len(b)-1] == '\n' {
		n++
		if len(b) > 1 && b[len(b)-2] == '\r' {
			n++
		}
	}
	return n
}

// Text is the line read by the last Scan ("" when it was too long).
func (l *lineReader) Text() string {
	b := l.line[:len(l.line)-endLen(l.line)]
	if len(b) > 0 && b[len(b)-1] == '\r' { // a last line without "\n"
		b = b[:len(b)-1]
	}
	return string(b)
}

// TooLong reports whether the last line was longer than max (and skipped).
func (l *lineReader) TooLong() bool { return l.tooLong }

// Err is the first error other than io.EOF.
func (l *lineReader) Err() error {
	if errors.Is(l.err, io.EOF) {
		return nil
	}
	return l.err
}
