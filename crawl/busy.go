package crawl

import (
	"context"
	"sync"
)

// busyHosts counts the workers visiting each host: a host is busy from the
// moment a worker takes it, before the re-check of its first queued URL,
// until the worker puts it aside, every page it fetched marked Done. So a
// caller that changed who owns a host and then waits for it to be idle
// knows that no fetch decided under the old owner is still running
// (Engine.WaitHostsIdle).
type busyHosts struct {
	mu      sync.Mutex
	n       map[string]int
	changed chan struct{} // closed and replaced whenever a host becomes idle
}

func newBusyHosts() *busyHosts {
	return &busyHosts{n: make(map[string]int), changed: make(chan struct{})}
}

func (b *busyHosts) enter(host string) {
	b.mu.Lock()
	b.n[host]++
	b.mu.Unlock()
}

func (b *busyHosts) leave(host string) {
	b.mu.Lock()
	if b.n[host]--; b.n[host] <= 0 {
		delete(b.n, host)
		close(b.changed)
		b.changed = make(chan struct{})
	}
	b.mu.Unlock()
}

// snapshot returns the busy hosts and the channel closed at the next change.
func (b *busyHosts) snapshot() ([]string, <-chan struct{}) {
	b.mu.Lock()
	defer b.mu.Unlock()
	hosts := make([]string, 0, len(b.n))
	for h := range b.n {
		hosts = append(hosts, h)
	}
	return hosts, b.changed
}

// WaitHostsIdle returns once no worker is visiting a host that match
// accepts (a frontier host key: the URL's host and port, lower case), or
// with ctx's error. match is called without the engine's locks held and
// may be slow (a resolution); it is asked again about every host still
// busy each time a host becomes idle.
//
// The node calls it after a subnet moved away from this crawler, before it
// sends the subnet's page history to the new owner: a URL re-checked from
// then on goes to the new owner, and a page fetched before is in the
// history, so the new owner fetches none of them again.
func (e *Engine) WaitHostsIdle(ctx context.Context, match func(host string) bool) error {
	for {
		hosts, changed := e.busy.snapshot()
		waiting := false
		for _, h := range hosts {
			if match(h) {
				waiting = true
				break
			}
		}
		if !waiting {
			return nil
		}
		select {
		case <-changed:
		case <-ctx.Done():
			return ctx.Err()
		}
	}
}
