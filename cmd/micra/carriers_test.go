package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// writeCarriers writes two carriers of records into dir, plus a damaged file.
func writeCarriers(t *testing.T, dir string) {
	t.Helper()
	at := time.Date(2026, 11, 22, 1, 0, 0, 0, time.UTC)
	sink := pack.FileSink{Dir: dir}
	c1 := pack.EncodeCarrier("c1", 0, at, []pack.Record{
		{URL: "http://a.test/", Status: 200, Change: pack.ChangeNew, FetchedAt: at, Title: "Alpha  home",
			Keywords:  []pack.Keyword{{Term: "alpha", Weight: 9}, {Term: "home", Weight: 4}, {Term: "page", Weight: 1}},
			BodyBytes: 10_000, ContentHash: [16]byte{0xab}, SimHash: 0xfeed, Flags: pack.FlagNoFollow},
		{URL: "http://a.test/x", FinalURL: "http://a.test/y", Status: 200, Change: pack.ChangeChanged, FetchedAt: at.Add(time.Minute),
			Timing: pack.Timing{Total: 1500 * time.Microsecond}, BodyBytes: 20_000},
	})
	c2 := pack.EncodeCarrier("c1", 1, at, []pack.Record{
		{URL: "http://a.test/gone", Status: 404, Change: pack.ChangeGone, FetchedAt: at.Add(2 * time.Minute), Error: "gone"},
	})
	for _, c := range []pack.Carrier{c1, c2} {
		if err := sink.Deliver(context.Background(), c); err != nil {
			t.Fatal(err)
		}
	}
	bad := append([]byte(nil), c2.Data...)
	bad[len(bad)-1] ^= 0xff
	if err := os.WriteFile(filepath.Join(dir, "c1-zz-damaged.mcar"), bad, 0o644); err != nil {
		t.Fatal(err)
	}
}

func TestCarriersCat(t *testing.T) {
	dir := t.TempDir()
	writeCarriers(t, dir)
	var out, errw bytes.Buffer
	err := carriersCat(&out, &errw, []string{dir}, false, 2)
	if err == nil || !strings.Contains(err.Error(), "1 of 3 carrier files unreadable") {
		t.Errorf("error %v, want the damaged file counted", err)
	}
	if !strings.Contains(errw.String(), "c1-zz-damaged.mcar") || !strings.Contains(errw.String(), "checksum") {
		t.Errorf("stderr %q does not name the damaged file and reason", errw.String())
	}
	want := "new       200 http://a.test/ \"Alpha home\" [alpha home]\n" +
		"changed   200 http://a.test/x \"\" []\n" +
		"gone      404 http://a.test/gone \"\" []\n"
	if out.String() != want {
		t.Errorf("text output\n%s\nwant\n%s", out.String(), want)
	}

	out.Reset()
	errw.Reset()
	if err := carriersCat(&out, &errw, []string{filepath.Join(dir, "c1-00000000000000000000.mcar")}, true, 2); err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 {
		t.Fatalf("JSON lines %q", lines)
	}
	var r0, r1 map[string]any
	if err := json.Unmarshal([]byte(lines[0]), &r0); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(lines[1]), &r1); err != nil {
		t.Fatal(err)
	}
	if r0["carrier"] != "c1-00000000000000000000" || r0["change"] != "new" || r0["simhash"] != "000000000000feed" ||
		!strings.HasPrefix(r0["content_hash"].(string), "ab00") || len(r0["keywords"].([]any)) != 3 ||
		r0["flags"].([]any)[0] != "nofollow" {
		t.Errorf("first record %v", r0)
	}
	if kw := r0["keywords"].([]any)[0].(map[string]any); kw["term"] == nil || kw["weight"] == nil {
		t.Errorf("keywords not snake_case: %v", kw)
	}
	if r1["final_url"] != "http://a.test/y" || r1["total_ms"] != 1.5 || r1["change"] != "changed" {
		t.Errorf("second record %v", r1)
	}
}

func TestCarriersStats(t *testing.T) {
	dir := t.TempDir()
	writeCarriers(t, dir)
	os.Remove(filepath.Join(dir, "c1-zz-damaged.mcar"))
	var out, errw bytes.Buffer
	if err := carriersStats(&out, &errw, []string{dir}); err != nil {
		t.Fatal(err, errw.String())
	}
	for _, want := range []string{"carriers              2", "records               3", "  changed             1",
		"  gone                1", "  new                 1", "crawler c1            3 records",
		"fetched               2026-11-22T01:00:00Z … 2026-11-22T01:02:00Z"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("stats output lacks %q:\n%s", want, out.String())
		}
	}
}

func TestCarriersMissingPath(t *testing.T) {
	var out, errw bytes.Buffer
	missing := filepath.Join(t.TempDir(), "nothing-here")
	if err := carriersStats(&out, &errw, []string{missing}); err == nil || out.Len() != 0 {
		t.Errorf("stats of a missing path: err %v, output %q", err, out.String())
	}
	if err := carriersCat(&out, &errw, []string{missing}, false, 8); err == nil || out.Len() != 0 {
		t.Errorf("cat of a missing path: err %v, output %q", err, out.String())
	}
}
