package export

import (
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/nlnwa/gowarc/v3"
	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }

// The export reads back as valid WARC 1.1: a warcinfo record, then one
// metadata record per page record, each naming its page and carrying the
// record's JSON, with no validation finding.
func TestWARCExportReadsBack(t *testing.T) {
	dir := t.TempDir()
	x, err := NewWARC(Options{Dir: dir, Description: "test crawl"})
	if err != nil {
		t.Fatal(err)
	}
	const n = 50
	for i := range n {
		e := sink.Entry{Seq: uint64(i + 1), Carrier: "c-0", IngestedAt: time.Now(), Record: pack.Record{
			URL: fmt.Sprintf("http://h.example/p%d", i), Status: 200, Change: pack.ChangeNew, FetchedAt: time.Now(),
			Title: "page", Keywords: []pack.Keyword{{Term: "alpha", Weight: 3}}}}
		r := sink.StreamEntry(&e)
		if err := x.Write(&r); err != nil {
			t.Fatal(err)
		}
	}
	if err := x.Close(); err != nil {
		t.Fatal(err)
	}
	files, _ := filepath.Glob(filepath.Join(dir, "*.warc.gz"))
	if len(files) != 1 {
		entries, _ := os.ReadDir(dir)
		t.Fatalf("files %v (dir: %v)", files, entries)
	}
	rd, err := gowarc.NewWarcFileReader(files[0], 0, gowarc.WithSpecViolationPolicy(gowarc.ErrWarn), gowarc.WithSyntaxErrorPolicy(gowarc.ErrWarn))
	if err != nil {
		t.Fatal(err)
	}
	defer rd.Close()
	var types []gowarc.RecordType
	var uris []string
	for {
		rec, err := rd.Next()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		if len(rec.Validation) > 0 {
			t.Fatalf("record %d: validation %v", len(types), rec.Validation)
		}
		types = append(types, rec.WarcRecord.Type())
		uris = append(uris, rec.WarcRecord.WarcHeader().Get(gowarc.WarcTargetURI))
		rec.WarcRecord.Close()
	}
	if len(types) != n+1 || types[0] != gowarc.Warcinfo || types[1] != gowarc.Metadata || uris[n] != fmt.Sprintf("http://h.example/p%d", n-1) {
		t.Fatalf("%d records, types %v…, last URI %q", len(types), types[:min(3, len(types))], uris[len(uris)-1])
	}
}
