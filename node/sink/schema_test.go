package sink

import (
	"encoding/json"
	"maps"
	"net/netip"
	"os"
	"slices"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// docs/sink-record.schema.json describes exactly the fields a streamed
// record has: a record with every field set marshals to the schema's
// properties, and the schema's required fields are always present.
func TestRecordSchemaMatches(t *testing.T) {
	b, err := os.ReadFile("../../docs/sink-record.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	var schema struct {
		Required   []string                   `json:"required"`
		Properties map[string]json.RawMessage `json:"properties"`
	}
	if err := json.Unmarshal(b, &schema); err != nil {
		t.Fatalf("schema: %v", err)
	}
	full := Entry{Seq: 7, Carrier: "c-1", IngestedAt: time.Now(), Overlap: true, Record: pack.Record{
		URL: "http://a/", FinalURL: "http://a/b", Status: 200, Change: pack.ChangeNew, FetchedAt: time.Now(),
		ContentType: "text/html", Title: "t", Lang: "en", Keywords: []pack.Keyword{{Term: "x", Weight: 1}},
		ETag: `"e"`, LastModified: "yesterday", CrawlerID: "c", Flags: pack.FlagNoIndex, Error: "gone", Links: []string{"http://a/c"},
		Addr: netip.MustParseAddr("192.0.2.1")}}
	var got map[string]any
	out, _ := json.Marshal(StreamEntry(&full))
	if err := json.Unmarshal(out, &got); err != nil {
		t.Fatal(err)
	}
	if g, s := slices.Sorted(maps.Keys(got)), slices.Sorted(maps.Keys(schema.Properties)); !slices.Equal(g, s) {
		t.Fatalf("record fields %v\nschema fields %v", g, s)
	}
	var bare map[string]any
	out, _ = json.Marshal(StreamEntry(&Entry{Seq: 1, Record: pack.Record{URL: "http://a/"}}))
	if err := json.Unmarshal(out, &bare); err != nil {
		t.Fatal(err)
	}
	for _, f := range schema.Required {
		if _, ok := bare[f]; !ok {
			t.Errorf("required field %q missing from a bare record", f)
		}
	}
}
