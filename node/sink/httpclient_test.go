package sink

import (
	"context"
	"fmt"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// TestHTTPClient reads a sink through its HTTP API as the CLI and the
// testnet do: the log from a cursor (with a limit and a filter), the
// status, and a sink's refusal passed on with its message.
func TestHTTPClient(t *testing.T) {
	store, err := Open(Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := httptest.NewServer(Handler(store, nil, nil))
	defer srv.Close()
	recs := make([]pack.Record, 6)
	for i := range recs {
		host := "a.example"
		if i%2 == 1 {
			host = "b.example"
		}
		recs[i] = pack.Record{URL: fmt.Sprintf("http://%s/%d", host, i), Status: 200, Change: pack.ChangeNew}
	}
	if _, err := store.Commit("c", pack.EncodeCarrier("c", 0, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
	if _, err := NewHTTPClient("127.0.0.1:80"); err == nil {
		t.Fatal("an address without http:// accepted")
	}
	c, err := NewHTTPClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	ctx := context.Background()
	var seqs []uint64
	n, err := c.Records(ctx, 2, 0, false, Filter{Host: "b.example"}, func(seq uint64, line []byte) error {
		if !strings.Contains(string(line), "b.example") {
			t.Errorf("record %d outside the filter: %s", seq, line)
		}
		seqs = append(seqs, seq)
		return nil
	})
	if err != nil || n != 2 || fmt.Sprint(seqs) != "[4 6]" {
		t.Fatalf("records after 2 on b.example: %v %d %v", seqs, n, err)
	}
	n, err = c.Records(ctx, 0, 2, false, Filter{}, func(uint64, []byte) error { return nil })
	if err != nil || n != 2 {
		t.Fatalf("limit 2: %d %v", n, err)
	}
	st, err := c.Status(ctx)
	if err != nil || st.Head != 6 || st.Counts.Pages != 6 {
		t.Fatalf("status %+v, %v", st, err)
	}
	if _, err := c.Search(ctx, "anything", "", 0); err == nil || !strings.Contains(err.Error(), "/v1/search") {
		t.Fatalf("search on a sink without an index: %v", err)
	}
}
