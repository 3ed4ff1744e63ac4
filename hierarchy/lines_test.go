package hierarchy

import (
	"strings"
	"testing"
)

func TestLineReader(t *testing.T) {
	in := "a\r\nbb\n" + strings.Repeat("x", 10) + "\n" + strings.Repeat("y", 11) + "\r\n\nlast\r"
	l := newLineReader(strings.NewReader(in), 10)
	type got struct {
		text    string
		tooLong bool
	}
	var lines []got
	for l.Scan() {
		lines = append(lines, got{l.Text(), l.TooLong()})
	}
	want := []got{{"a", false}, {"bb", false}, {strings.Repeat("x", 10), false}, {"", true}, {"", false}, {"last", false}}
	if l.Err() != nil || len(lines) != len(want) {
		t.Fatalf("lines %+v (err %v), want %+v", lines, l.Err(), want)
	}
	for i := range want {
		if lines[i] != want[i] {
			t.Fatalf("line %d: %+v, want %+v", i+1, lines[i], want[i])
		}
	}
	// a line longer than the reader's buffer is skipped whole
	l = newLineReader(strings.NewReader(strings.Repeat("z", 200_000)+"\nok\n"), 100_000)
	if !l.Scan() || !l.TooLong() || !l.Scan() || l.Text() != "ok" || l.Scan() {
		t.Fatal("a line past the buffer was not skipped whole")
	}
}
