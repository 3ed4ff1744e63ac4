package node

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// deliveries is the engine's carrier receiver (the sink client, or a
// FileSink) with the outcome of its deliveries kept for the node's status.
type deliveries struct {
	pack.Receiver

	mu               sync.Mutex
	ok, failed       int64
	lastAt           time.Time
	lastErr          error
	lastOKAt, failAt time.Time
}

// Deliver implements pack.Receiver.
func (d *deliveries) Deliver(ctx context.Context, c pack.Carrier) error {
	err := d.Receiver.Deliver(ctx, c)
	now := time.Now()
	d.mu.Lock()
	d.lastAt, d.lastErr = now, err
	if err == nil {
		d.ok++
		d.lastOKAt = now
	} else {
		d.failed++
		d.failAt = now
	}
	d.mu.Unlock()
	return err
}

// deliveryState is a snapshot of deliveries.
type deliveryState struct {
	ok, failed       int64
	lastAt           time.Time
	lastErr          error
	lastOKAt, failAt time.Time
}

func (d *deliveries) state() deliveryState {
	d.mu.Lock()
	defer d.mu.Unlock()
	return deliveryState{ok: d.ok, failed: d.failed, lastAt: d.lastAt, lastErr: d.lastErr, lastOKAt: d.lastOKAt, failAt: d.failAt}
}

// sinkFinder is the engine's receiver when carriers go to an index sink:
// the configured one (Config.Sink: the sink setting, MICRA_SINK, --sink),
// else the one the network announces — the live member whose heartbeats
// carry the sink role (overlay.Members.Sinks; the lowest peer id if more
// than one does). It asks again at every delivery, so a sink that moves
// (another address in its heartbeats) or is replaced (another identity) is
// followed, and while none is live a delivery waits for one until its
// deadline, then fails: the outbox keeps the carrier and tries again
// later. Nothing is dropped either way.
type sinkFinder struct {
	// pinned is the configured sink (nil: the network's). A pinned sink
	// that is a member is dialled at its configured addresses and at those
	// its heartbeats advertise, so it may move; /p2p/<id> alone pins the
	// identity and takes the addresses from the heartbeats only.
	pinned  *peer.AddrInfo
	host    host.Host        // set once the overlay peer is open
	members *overlay.Members // its membership
	log     *slog.Logger
	// poll: how often a delivery waiting for a sink looks again (default
	// 200 ms)
	poll time.Duration

	mu      sync.Mutex
	current peer.ID // the sink of the last delivery attempt ("": none)
	noted   bool    // current was logged
}

// errNoSink: no sink configured and none announced on the network.
var errNoSink = errors.New("no index sink announced on the network (and no sink setting): the carrier waits in the outbox")

// source is where the sink comes from: config or network.
func (f *sinkFinder) source() string {
	if f.pinned != nil {
		return "config"
	}
	return "network"
}

// target is the sink to deliver to now.
func (f *sinkFinder) target() (peer.AddrInfo, bool) {
	if f.members == nil {
		return peer.AddrInfo{}, false
	}
	if f.pinned != nil {
		ai := peer.AddrInfo{ID: f.pinned.ID, Addrs: slices.Clone(f.pinned.Addrs)}
		for _, a := range f.members.Addrs(ai.ID) {
			if !slices.ContainsFunc(ai.Addrs, a.Equal) {
				ai.Addrs = append(ai.Addrs, a)
			}
		}
		return ai, true
	}
	s := f.members.Sinks()
	if len(s) == 0 {
		return peer.AddrInfo{}, false
	}
	return peer.AddrInfo{ID: s[0], Addrs: f.members.Addrs(s[0])}, true
}

// Deliver implements pack.Receiver.
func (f *sinkFinder) Deliver(ctx context.Context, c pack.Carrier) error {
	ai, err := f.await(ctx)
	if err != nil {
		return err
	}
	return (&sink.Client{Host: f.host, Sink: ai}).Deliver(ctx, c)
}

// await returns the sink to ask now, waiting for one while none is live
// until ctx ends.
func (f *sinkFinder) await(ctx context.Context) (peer.AddrInfo, error) {
	ai, ok := f.target()
	if !ok {
		f.note("")
		poll := f.poll
		if poll <= 0 {
			poll = 200 * time.Millisecond
		}
		t := time.NewTicker(poll)
		defer t.Stop()
		for !ok {
			select {
			case <-ctx.Done():
				return ai, fmt.Errorf("node: %w (%w)", errNoSink, ctx.Err())
			case <-t.C:
				ai, ok = f.target()
			}
		}
	}
	f.note(ai.ID)
	return ai, nil
}

// note logs a change of sink.
func (f *sinkFinder) note(id peer.ID) {
	f.mu.Lock()
	was, noted := f.current, f.noted
	f.current, f.noted = id, true
	f.mu.Unlock()
	switch {
	case noted && id == was:
	case id == "":
		f.log.Warn("no index sink announced on the network: carriers wait in the outbox until one is", "was", was.String())
	case f.pinned == nil:
		f.log.Info("delivering carriers to the index sink the network announces", "sink", id.String(), "addrs", f.members.Addrs(id))
	}
}
