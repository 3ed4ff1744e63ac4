package overlay

import (
	"context"
	"net/netip"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// blockingDHT holds every decision's DHT read until released, and tells
// which subnets' reads are waiting.
type blockingDHT struct {
	entered chan struct{}
	release chan struct{}
	calls   atomic.Int32
}

func newBlockingDHT(p *Peer) *blockingDHT {
	b := &blockingDHT{entered: make(chan struct{}, 64), release: make(chan struct{})}
	p.dhtDelay = func(ctx context.Context) error {
		b.calls.Add(1)
		b.entered <- struct{}{}
		select {
		case <-b.release:
			return nil
		case <-ctx.Done():
			return ctx.Err()
		}
	}
	return b
}

// waitEntered waits for n DHT reads to be waiting (failing the test if the
// decisions never get there: they would be serialised).
func (b *blockingDHT) waitEntered(t *testing.T, n int) {
	t.Helper()
	deadline := time.After(slowdown * 20 * time.Second) // a guard against a hang, not a measurement
	for range n {
		select {
		case <-b.entered:
		case <-deadline:
			t.Fatalf("fewer than %d decisions reached their DHT read at once", n)
		}
	}
}

// measuredPeer is a lone peer whose probes answer (modelMeasurer), with
// the micra policy.
func measuredPeer(t *testing.T) *Peer {
	cfg := TestnetConfig()
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}})
	p.NewPolicy(delegation.NewMicra, delegation.Config{})
	return p
}

// TestDecisionsWaitOnTheNetworkWithoutThePolicyLock: while two decisions
// for different subnets both wait on their DHT read, a cached owner is
// answered, and the policy lock is free.
func TestDecisionsWaitOnTheNetworkWithoutThePolicyLock(t *testing.T) {
	p := measuredPeer(t)
	ctx := context.Background()
	known := netip.MustParseAddr("127.3.1.9")
	if d, err := p.Delegate(ctx, known); err != nil || d.Record.Owner != p.CrawlerID() {
		t.Fatalf("first decision: %v, %v", d, err)
	}
	dht := newBlockingDHT(p)

	var wg sync.WaitGroup
	results := make([]delegation.Decision, 2)
	errs := make([]error, 2)
	for i, ip := range []netip.Addr{netip.MustParseAddr("127.5.2.9"), netip.MustParseAddr("127.6.3.9")} {
		wg.Go(func() { results[i], errs[i] = p.Delegate(ctx, ip) })
	}
	dht.waitEntered(t, 2) // both decisions are in their network wait at once

	if !p.polMu.TryLock() {
		t.Fatal("the policy lock is held while decisions wait on the network")
	}
	p.polMu.Unlock()
	d, err := p.Delegate(ctx, known)
	if err != nil || !d.Cached || d.Owner != p.CrawlerID() {
		t.Fatalf("cached owner while decisions wait: %v, %v", d, err)
	}
	close(dht.release)
	wg.Wait()
	for i := range errs {
		if errs[i] != nil || results[i].Owner != p.CrawlerID() || results[i].Cached {
			t.Errorf("decision %d: %v, %v", i, results[i], errs[i])
		}
	}
}

// TestSameSubnetDecisionsBecomeOne: concurrent calls for one new subnet
// make one decision (one DHT read); the others read its record.
func TestSameSubnetDecisionsBecomeOne(t *testing.T) {
	p := measuredPeer(t)
	ctx := context.Background()
	dht := newBlockingDHT(p)
	ip := netip.MustParseAddr("127.4.1.20")
	const n = 8
	var wg sync.WaitGroup
	out := make([]delegation.Decision, n)
	errs := make([]error, n)
	for i := range n {
		wg.Go(func() { out[i], errs[i] = p.Delegate(ctx, ip) })
	}
	dht.waitEntered(t, 1)
	close(dht.release)
	wg.Wait()
	decided := 0
	for i := range n {
		if errs[i] != nil {
			t.Fatal(errs[i])
		}
		if !out[i].Cached {
			decided++
		}
	}
	if decided != 1 || dht.calls.Load() != 1 {
		t.Fatalf("%d decisions and %d DHT reads for one subnet, want 1 and 1", decided, dht.calls.Load())
	}
}

// TestCutShortAttemptsPublishNothing: a decision that asks for probes is
// run again with their answers; the attempts before publish nothing and
// the decision counts every probe it used.
func TestCutShortAttemptsPublishNothing(t *testing.T) {
	tn := newTestNet(t, 3, nil)
	ctx := context.Background()
	tn.joinWithMicra(t)
	p := tn.peers[0]
	ip := netip.MustParseAddr("127.6.2.40")
	s := tn.tree.SmallestNonUnary(ip)
	d, err := p.Delegate(ctx, ip)
	if err != nil {
		t.Fatal(err)
	}
	if d.Cached || d.Owner == "" || d.Subnet != s {
		t.Fatalf("decision %v", d)
	}
	// a cut-short attempt that published would have left its record for
	// the next attempt to find: a cached decision, a successor's epoch
	// (above its own time's, delegation.NextEpoch) or a second endorsement
	rec, ok := p.Directory().Cached(s)
	if !ok || rec.Epoch != uint64(rec.At.UnixMilli()) || rec.Owner != d.Owner {
		t.Fatalf("record after one decision: %+v (ok %v), want the epoch of its own time, owned by %s", rec, ok, d.Owner)
	}
	if n := counterValue(t, p.metrics.endorsements); rec.Owner != p.CrawlerID() && n != 1 {
		t.Fatalf("%v endorsements for one decision", n)
	}
	if d.Probes == 0 {
		t.Fatalf("decision %v asked no probe: no attempt was cut short", d)
	}
	if d.Probes < len(d.Record.Probes) {
		t.Fatalf("decision counts %d probes but its record carries %d answers", d.Probes, len(d.Record.Probes))
	}
	// each replay draws what the attempt before drew: no call ran out of
	// attempts and fell back to I/O under the lock
	for i, ip := range []string{"127.5.1.40", "127.7.3.40", "127.3.2.40"} {
		if _, err := tn.peers[i%3].Delegate(ctx, netip.MustParseAddr(ip)); err != nil {
			t.Fatal(err)
		}
	}
	for _, q := range tn.peers {
		if n := counterValue(t, q.metrics.decisionInPlace); n != 0 {
			t.Fatalf("%v policy calls ran their I/O under the lock", n)
		}
	}
}
