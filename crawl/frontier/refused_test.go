package frontier

import (
	"strings"
	"testing"
)

// A refused item leaves its queue but keeps its seen mark (links to it do
// not queue it again), survives a restart, and Readmit queues it again
// once, within its host's budget already spent.
func TestRefuseAndReadmit(t *testing.T) {
	dir := t.TempDir()
	db, f := open(t, dir, Options{MaxPagesPerHost: 2})
	if _, err := f.Add(items("h", "/a", "/b")); err != nil {
		t.Fatal(err)
	}
	host := take0(t, f)
	for _, it := range nextAll(t, f, host) {
		if err := f.Refuse(it); err != nil {
			t.Fatal(err)
		}
	}
	if err := f.ReleaseHost(host); err != nil {
		t.Fatal(err)
	}
	if n, _ := f.Add(items("h", "/a")); n != 0 || f.Stats().Queued != 0 || f.Stats().Refused != 2 {
		t.Fatalf("after Refuse: re-added %d, stats %+v; want nothing queued, 2 refused", n, f.Stats())
	}
	f.Close()
	db.Close()

	db, f = open(t, dir, Options{MaxPagesPerHost: 2})
	defer db.Close()
	defer f.Close()
	if st := f.Stats(); st.Refused != 2 || st.Queued != 0 {
		t.Fatalf("after a restart: %+v, want 2 refused", st)
	}
	var refused []Item
	if err := f.EachRefused(func(it Item) error { refused = append(refused, it); return nil }); err != nil {
		t.Fatal(err)
	}
	if n, err := f.Readmit(refused); err != nil || n != 2 {
		t.Fatalf("Readmit: %d, %v; want both queued (the budget counted them already)", n, err)
	}
	if st := f.Stats(); st.Refused != 0 || st.Queued != 2 {
		t.Fatalf("after Readmit: %+v", st)
	}
	if got := drainHost(t, f, take0(t, f), true); len(got) != 2 {
		t.Fatalf("queued again: %v", got)
	}
}

// Defer moves an item to the tail of its host's queue: the host's other
// items come first, and it is still queued (nothing lost, nothing added).
func TestDeferMovesToTheTail(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, err := f.Add(items("h", "/a", "/b", "/c")); err != nil {
		t.Fatal(err)
	}
	host := take0(t, f)
	first, ok, err := f.Next(host)
	if err != nil || !ok {
		t.Fatal(ok, err)
	}
	if err := f.Defer(first); err != nil {
		t.Fatal(err)
	}
	if got := drainHost(t, f, host, false); strings.Join(got, " ") != "http://h/b http://h/c http://h/a" || f.Stats().Queued != 0 {
		t.Fatalf("order after Defer: %v (queued %d)", got, f.Stats().Queued)
	}
}
