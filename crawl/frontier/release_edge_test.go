package frontier

import (
	"errors"
	"fmt"
	"testing"
)

var errInjected = errors.New("injected storage error")

// failNextCommit makes the next update of f fail as a storage error would
// (Badger discards the transaction's writes); later updates succeed.
func failNextCommit(f *Frontier) {
	failed := false
	f.failCommit = func() error {
		if failed {
			return nil
		}
		failed = true
		return errInjected
	}
}

// ReleaseHost takes the host off the active map before the update that puts
// it back on the ready list: when that update fails the host is neither
// active nor ready, and its queued URLs wait for a chance link to the host
// (Add re-readies it) or a restart — a one-pass crawl never ends.
func TestFailedReleaseHostIsNotStranded(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, err := f.Add(items("a.example", "/1", "/2", "/3")); err != nil {
		t.Fatal(err)
	}
	host, ok, err := f.AcquireHost()
	if err != nil || !ok || host != "a.example" {
		t.Fatalf("acquired %q %v %v", host, ok, err)
	}
	it, ok, err := f.Next(host)
	if err != nil || !ok {
		t.Fatalf("next %v %v", ok, err)
	}
	if err := f.Done(it, nil); err != nil {
		t.Fatal(err)
	}
	if _, _, err := f.Next(host); err != nil { // handed out, not Done
		t.Fatal(err)
	}

	failNextCommit(f)
	if err := f.ReleaseHost(host); !errors.Is(err, errInjected) {
		t.Fatalf("ReleaseHost: %v, want the injected error", err)
	}
	if s := f.Stats(); s.ActiveHosts != 0 || s.Queued != 2 {
		t.Fatalf("after the failed release: %+v", s)
	}

	host, ok, err = f.AcquireHost()
	if err != nil || !ok || host != "a.example" {
		t.Fatalf("after a failed release AcquireHost = %q %v %v: the host's 2 queued URLs are stranded", host, ok, err)
	}
	if s := f.Stats(); s.ReadyHosts != 0 || s.ActiveHosts != 1 {
		t.Fatalf("re-acquired: %+v", s)
	}
	got := drainHost(t, f, host, false)
	if fmt.Sprint(got) != "[http://a.example/2 http://a.example/3]" {
		t.Fatalf("served %v", got)
	}
	releaseDrained(t, f, host)
}

// A host whose release failed may be re-readied by Add (a link to it) and
// acquired before its own retry succeeds: the retry must then leave it
// alone, or it would be on the ready list while a worker holds it.
func TestFailedReleaseHostReacquiredMeanwhile(t *testing.T) {
	db, f := open(t, t.TempDir(), Options{})
	defer db.Close()
	defer f.Close()
	if _, err := f.Add(items("a.example", "/1", "/2")); err != nil {
		t.Fatal(err)
	}
	host, ok, err := f.AcquireHost()
	if err != nil || !ok {
		t.Fatalf("acquired %q %v %v", host, ok, err)
	}
	failNextCommit(f)
	if err := f.ReleaseHost(host); !errors.Is(err, errInjected) {
		t.Fatalf("ReleaseHost: %v, want the injected error", err)
	}
	// A link to the host puts it back on the ready list.
	if _, err := f.Add(items("a.example", "/3")); err != nil {
		t.Fatal(err)
	}
	if s := f.Stats(); s.ReadyHosts != 1 {
		t.Fatalf("after Add: %+v", s)
	}
	// The retry (AcquireHost's first update) fails again, the acquisition
	// succeeds.
	failNextCommit(f)
	host, ok, err = f.AcquireHost()
	if err != nil || !ok || host != "a.example" {
		t.Fatalf("acquired %q %v %v", host, ok, err)
	}
	if h, ok, err := f.AcquireHost(); ok || err != nil {
		t.Fatalf("host held by a worker is ready too: acquired %q again (%v)", h, err)
	}
	if s := f.Stats(); s.ReadyHosts != 0 || s.ActiveHosts != 1 {
		t.Fatalf("while held: %+v", s)
	}
	got := drainHost(t, f, host, false)
	if fmt.Sprint(got) != "[http://a.example/1 http://a.example/2 http://a.example/3]" {
		t.Fatalf("served %v", got)
	}
	releaseDrained(t, f, host)
}

// releaseDrained releases a host whose queue is empty and checks that
// nothing is left: the host is not acquired again and no counter is off.
func releaseDrained(t *testing.T, f *Frontier, host string) {
	t.Helper()
	if err := f.ReleaseHost(host); err != nil {
		t.Fatal(err)
	}
	if h, ok, err := f.AcquireHost(); ok || err != nil {
		t.Fatalf("drained host acquired again: %q %v", h, err)
	}
	if s := f.Stats(); s.Queued != 0 || s.ReadyHosts != 0 || s.ActiveHosts != 0 {
		t.Fatalf("at the end: %+v", s)
	}
}
