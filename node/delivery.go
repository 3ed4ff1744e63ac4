package node

import (
	"context"
	"sync"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
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
