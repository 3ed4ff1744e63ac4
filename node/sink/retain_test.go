package sink

import (
	"context"
	"errors"
	"net/http/httptest"
	"testing"
	"time"
)

func openRetaining(t *testing.T, dir string, r Retention) *Store {
	t.Helper()
	s, err := Open(Options{Dir: dir, NoSync: true, Retain: r})
	if err != nil {
		t.Fatal(err)
	}
	return s
}

func wantBeforeStart(t *testing.T, err error, cursor, start uint64) {
	t.Helper()
	var bs *BeforeStartError
	if !errors.As(err, &bs) || bs.Cursor != cursor || bs.Start != start {
		t.Fatalf("error %v; want cursor %d before the log's start %d", err, cursor, start)
	}
}

// Records committed longer ago than the retention's age leave the log's
// start; a reader behind it is told so, naming its cursor and the start,
// and one at the start reads on; a carrier delivered again after its
// records left is still a duplicate.
func TestRetentionByAge(t *testing.T) {
	dir := t.TempDir()
	s := openRetaining(t, dir, Retention{Age: time.Hour})
	commitOK(t, s, "c1", 0, 0, 3) // 1-3
	time.Sleep(2 * time.Millisecond)
	commitOK(t, s, "c1", 1, 3, 2) // 4-5
	es, _, err := s.Read(3, 10, Filter{})
	if err != nil || len(es) != 2 {
		t.Fatal(es, err)
	}
	if n, err := s.Trim(es[0].IngestedAt.Add(time.Hour)); err != nil || n != 3 || s.Start() != 4 {
		t.Fatalf("trimmed %d, %v; start %d; want 3 records gone, the start at 4", n, err, s.Start())
	}
	_, _, err = s.Read(0, 10, Filter{})
	wantBeforeStart(t, err, 0, 4)
	if err.Error() != "cursor 0 is before the log's start 4: records 1 to 3 were dropped by the sink's retention; resume from cursor 3" {
		t.Fatalf("the message: %q", err)
	}
	if es, _, err := s.Read(3, 10, Filter{}); err != nil || len(es) != 2 || es[0].Seq != 4 {
		t.Fatalf("from the start: %+v, %v", es, err)
	}
	if a, err := s.Commit("c1", carrier("c1", 0, 0, 3)); err != nil || !a.Duplicate || a.First != 1 {
		t.Fatalf("the first carrier again: %+v, %v", a, err)
	}
	if n, _ := s.Trim(es[0].IngestedAt.Add(time.Hour)); n != 0 {
		t.Fatalf("trimmed %d again", n)
	}
	// the start and the pages survive a restart, the page table a crash
	commitOK(t, s, "c2", 0, 0, 1) // 6, overlap with page 0
	crash(s)
	s = openRetaining(t, dir, Retention{Age: time.Hour})
	defer s.Close()
	if s.Start() != 4 || s.Head() != 6 {
		t.Fatalf("after a crash: start %d, head %d", s.Start(), s.Head())
	}
	commitOK(t, s, "c3", 0, 4, 1) // 7: page 4, delivered by c1 as record 5
	if c, _ := s.Counts(); c.Pages != 5 || c.Overlap != 2 {
		t.Fatalf("counts %+v", c)
	}
	wantPage(t, s, "http://h1.example/p4", []uint64{7, 5}, "c1", "c3")
	wantPage(t, s, "http://h0.example/p0", []uint64{6}, "c1", "c2") // (its record 1 is gone)
}

// A size bound drops the oldest records until the entries left fit it;
// a trim that dropped everything leaves a log that starts past its head.
func TestRetentionBySize(t *testing.T) {
	s := openRetaining(t, t.TempDir(), Retention{})
	for seq := range uint64(10) {
		commitOK(t, s, "c1", seq, int(seq)*10, 10)
	}
	s.Close()
	dir := s.opt.Dir
	s = openRetaining(t, dir, Retention{Bytes: s.logBytes * 3 / 10})
	defer s.Close()
	n, err := s.Trim(time.Now())
	if err != nil || n < 65 || n > 75 {
		t.Fatalf("trimmed %d, %v; want about 70 of the 100 records", n, err)
	}
	if s.logBytes > s.opt.Retain.Bytes {
		t.Fatalf("%d bytes left, bound %d", s.logBytes, s.opt.Retain.Bytes)
	}
	if es, _, err := s.Read(s.Start()-1, 1000, Filter{}); err != nil || len(es) != 100-n {
		t.Fatalf("%d records read from the start, %v", len(es), err)
	}
	s.opt.Retain = Retention{Age: time.Nanosecond}
	if n, err := s.Trim(time.Now().Add(time.Hour)); err != nil || s.Start() != 101 {
		t.Fatalf("trimmed %d, %v; start %d", n, err, s.Start())
	}
	if es, last, err := s.Read(100, 10, Filter{}); err != nil || len(es) != 0 || last != 100 {
		t.Fatalf("an empty log at its head: %v, %d, %v", es, last, err)
	}
}

// Over HTTP a cursor before the log's start is 410 Gone with the message,
// which the Go client returns as a *BeforeStartError; the status says
// where the log starts.
func TestRetentionOverHTTP(t *testing.T) {
	s := openRetaining(t, t.TempDir(), Retention{Age: time.Hour})
	defer s.Close()
	commitOK(t, s, "c1", 0, 0, 5)
	if _, err := s.Trim(time.Now().Add(2 * time.Hour)); err != nil {
		t.Fatal(err)
	}
	commitOK(t, s, "c1", 1, 5, 2) // 6, 7
	srv := httptest.NewServer(Handler(s, nil, nil))
	defer srv.Close()
	c, err := NewHTTPClient(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	_, err = c.Records(context.Background(), 2, 0, false, Filter{}, func(uint64, []byte) error { return nil })
	wantBeforeStart(t, err, 2, 6)
	n, err := c.Records(context.Background(), 5, 0, false, Filter{}, func(uint64, []byte) error { return nil })
	if err != nil || n != 2 {
		t.Fatalf("from the start: %d, %v", n, err)
	}
	if st, err := c.Status(context.Background()); err != nil || st.Start != 6 || st.Head != 7 {
		t.Fatalf("status %+v, %v", st, err)
	}
}

// The message names the cursor and the start, and reads back.
func TestParseBeforeStart(t *testing.T) {
	e := &BeforeStartError{Cursor: 12, Start: 40}
	got, ok := ParseBeforeStart("GET /v1/records: " + e.Error())
	if !ok || *got != *e {
		t.Fatalf("%+v, %v", got, ok)
	}
	if _, ok := ParseBeforeStart("connection refused"); ok {
		t.Fatal("read one from another error")
	}
}
