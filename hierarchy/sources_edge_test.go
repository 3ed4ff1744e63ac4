package hierarchy

// Review of the input loaders, BuildSources and the snapshot file helpers.
// Each test demonstrates one defect and fails on the code as reviewed.

import (
	"bytes"
	"compress/gzip"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
)

// boundedReader stops a runaway read loop: after max reads it reports io.EOF,
// so a loader that never gives up on a sticky read error still returns.
type boundedReader struct {
	r     io.Reader
	reads int
	max   int
}

func (b *boundedReader) Read(p []byte) (int, error) {
	b.reads++
	if b.reads > b.max {
		return 0, io.EOF
	}
	return b.r.Read(p)
}

// Regression (the defect it caught): eachCSVRecord treats a read error (truncated or corrupt gzip, I/O
// error) like a malformed CSV line; in lenient mode it counts it as a skipped
// "line 0" and reads again, gets the same sticky error, and loops forever
// (`micra hierarchy build --lenient --ranges truncated.csv.gz` hangs at 100 %
// CPU). Strict mode reports it as "file:0: unexpected EOF".
func TestTruncatedGzipEndsLenientRead(t *testing.T) {
	var buf bytes.Buffer
	zw := gzip.NewWriter(&buf)
	for i := 0; i < 2000; i++ {
		fmt.Fprintf(zw, "1.%d.%d.0,1.%d.%d.255,13335,Cloudflare\n", i/256, i%256, i/256, i%256)
	}
	zw.Close()
	path := filepath.Join(t.TempDir(), "asn-ipv4.csv.gz")
	if err := os.WriteFile(path, buf.Bytes()[:buf.Len()/2], 0o644); err != nil {
		t.Fatal(err)
	}
	var br *boundedReader
	load := func(r io.Reader, o LoadOptions) ([]Range, LoadReport, error) {
		br = &boundedReader{r: r, max: 10000}
		return LoadRangeCSV(br, o)
	}
	_, rep, err := LoadFile(path, load, true)
	if br.reads > br.max {
		t.Fatalf("lenient LoadRangeCSV kept re-reading a truncated gzip file: %d reads, %d \"skipped lines\", err %v (unbounded: it never returns)", br.reads, rep.Skipped, err)
	}
	if !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Fatalf("truncated gzip: want a read error even in lenient mode, got %v (skipped %d)", err, rep.Skipped)
	}
}

func rangeCSVWithUnterminatedQuote() string {
	var sb strings.Builder
	sb.WriteString("1.0.0.0,1.0.0.255,1,A\n")
	sb.WriteString("1.0.1.0,1.0.1.255,2,\"Bad Org\n") // line 2: opening quote never closed
	for i := 2; i < 50; i++ {
		fmt.Fprintf(&sb, "1.0.%d.0,1.0.%d.255,3,C\n", i, i)
	}
	return sb.String()
}

// Regression (the defect it caught): a malformed CSV record is reported at the line where encoding/csv
// gave up (ParseError.Line: here the end of the file), not at the line where
// the bad record starts (ParseError.StartLine).
func TestCSVErrorLineIsRecordStart(t *testing.T) {
	_, _, err := LoadRangeCSV(strings.NewReader(rangeCSVWithUnterminatedQuote()), LoadOptions{Name: "asn.csv"})
	var le *LineError
	if !errors.As(err, &le) || le.Line != 2 {
		t.Fatalf("want the error at asn.csv:2 (the row with the stray quote), got %v", err)
	}
}

// Regression (the defect it caught): in lenient mode one row with an unterminated quote swallows every
// following row of a range (or country) CSV — 48 good rows lost, reported as
// a single skipped line. These formats have one record per line.
func TestUnterminatedQuoteCostsOneLine(t *testing.T) {
	rs, rep, err := LoadRangeCSV(strings.NewReader(rangeCSVWithUnterminatedQuote()), LoadOptions{Name: "asn.csv", Lenient: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 49 || rep.Skipped != 1 {
		t.Fatalf("lenient: %d ranges, %d skipped; want 49 ranges and 1 skipped line (errors %v)", len(rs), rep.Skipped, rep.Errors)
	}
}

// Regression (the defect it caught): a UTF-8 BOM before the first data row makes that row a bad start
// address (strict: the build fails at line 1; lenient: the row is lost).
// LoadIANA strips the BOM; the range and country CSV loaders do not.
func TestRangeCSVByteOrderMark(t *testing.T) {
	for _, c := range []struct {
		name string
		load func(io.Reader, LoadOptions) ([]Range, LoadReport, error)
		in   string
	}{
		{"range", LoadRangeCSV, "\ufeff1.0.0.0,1.0.0.255,13335,Cloudflare\r\n1.0.1.0,1.0.1.255,1,X\r\n"},
		{"country", LoadCountryCSV, "\ufeff1.0.0.0,1.0.0.255,AU\r\n1.0.1.0,1.0.1.255,CN\r\n"},
	} {
		rs, _, err := c.load(strings.NewReader(c.in), LoadOptions{Name: c.name + ".csv"})
		if err != nil || len(rs) != 2 {
			t.Errorf("%s CSV with BOM: %d ranges, err %v; want 2 ranges", c.name, len(rs), err)
		}
	}
}

// Regression (the defect it caught): two valid range-CSV rows make `hierarchy build` write a snapshot
// that can never be read back. The Builder splits the second row at the
// first one's end ::fffe:ffff:ffff, so the remainder starts at ::ffff:0.0.0.0,
// inside the IPv4-mapped space that Decode (rightly) refuses.
func TestSplitIntoMappedSpaceReadsBack(t *testing.T) {
	dir := t.TempDir()
	csv := filepath.Join(dir, "asn-ipv6.csv")
	if err := os.WriteFile(csv, []byte("::,::fffe:ffff:ffff,1,A\n::1:0:0,::1:0:0:0,2,B\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tr, _, err := BuildSources(context.Background(), Sources{Ranges: []string{csv}, Logger: discardLogger()})
	if err != nil {
		t.Fatal(err)
	}
	out := filepath.Join(dir, "s.snap")
	if err := WriteSnapshotFile(out, tr, false); err != nil {
		t.Fatal(err)
	}
	if _, err := ReadSnapshotFile(out); err != nil {
		t.Fatalf("build accepted the input and wrote %s, but it does not read back: %v", out, err)
	}
}

// Regression (the defect it caught): WriteSnapshotFile writes "<path>.tmp" and leaves it behind when the
// write fails (disk full, quota, file-size limit: simulated with
// RLIMIT_FSIZE, whose SIGXFSZ the Go runtime ignores), so a failed
// `hierarchy build` leaves a truncated snapshot next to the output.
func TestWriteSnapshotFailureLeavesNoTemp(t *testing.T) {
	tr, err := Default()
	if err != nil {
		t.Skip(err)
	}
	out := filepath.Join(t.TempDir(), "s.snap")
	var old syscall.Rlimit
	if err := syscall.Getrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Skip(err)
	}
	lim := old
	lim.Cur = 64 << 10
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &lim); err != nil {
		t.Skip(err)
	}
	werr := WriteSnapshotFile(out, tr, false)
	if err := syscall.Setrlimit(syscall.RLIMIT_FSIZE, &old); err != nil {
		t.Fatal(err)
	}
	if werr == nil {
		t.Skip("the write did not fail")
	}
	ents, _ := os.ReadDir(filepath.Dir(out))
	for _, e := range ents {
		fi, _ := e.Info()
		t.Errorf("after the failed write (%v) %s is left behind (%d bytes)", werr, e.Name(), fi.Size())
	}
}
