package overlay

// Page recovery and the transfer budgets: regressions found by a review of
// df17637. Each comment above a test describes the defect it caught.

import (
	"context"
	"fmt"
	"net/netip"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// scanPages is a PageHistory whose History spends delay before its first
// page (a previous owner scanning its whole page history, resolving hosts,
// for the few pages of one subnet), then emits n pages; Import sleeps
// importDelay on its first call (a new owner importing a frame: a DNS
// lookup per new host, a Badger write).
type scanPages struct {
	delay       time.Duration
	n           int
	urlLen      int
	importDelay time.Duration

	mu       sync.Mutex
	imports  int
	imported int
}

func (sp *scanPages) History(ctx context.Context, s hierarchy.NodeID, _ netip.Prefix, emit func(PageState) error) error {
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-time.After(sp.delay):
	}
	pad := strings.Repeat("x", max(sp.urlLen-40, 0))
	for i := range sp.n {
		if err := emit(PageState{URL: fmt.Sprintf("http://127.1.0.1/%d/%s", i, pad), HTTPStatus: 200}); err != nil {
			return err
		}
	}
	return nil
}

func (sp *scanPages) Import(ctx context.Context, _ hierarchy.NodeID, ps []PageState) error {
	sp.mu.Lock()
	sp.imports++
	first := sp.imports == 1
	sp.imported += len(ps)
	sp.mu.Unlock()
	if first && sp.importDelay > 0 {
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(sp.importDelay):
		}
	}
	return nil
}

func openRecoverPair(t *testing.T, rt time.Duration, server, client PageHistory) (srv, cli *Peer) {
	t.Helper()
	open := func(pages PageHistory) *Peer {
		cfg := TestnetConfig()
		cfg.RequestTimeout = rt
		p := openPeer(t, testTree(t), cfg, Services{Measurer: modelMeasurer{}, Pages: pages})
		return p
	}
	srv, cli = open(server), open(client)
	cli.h.Peerstore().AddAddrs(srv.ID(), srv.h.Addrs(), time.Minute)
	return srv, cli
}

// The serving side of page recovery sends a frame only every recoverBatch
// pages (or at the end), and History scans the whole page history of the
// previous owner, resolving each host, to pick out one subnet's pages. No
// byte moves while it scans; the client's new idle read deadline
// (RequestTimeout) drops the previous owner after RequestTimeout although
// the server is working and well within the overall budget
// (recoverBudget × RequestTimeout). Before df17637 the client allowed the
// whole budget.
func TestRecoverSlowHistoryNotCut(t *testing.T) {
	const rt = 2 * time.Second
	// 2.5 × RequestTimeout of scanning; the budget is 6 × RequestTimeout
	srv, cli := openRecoverPair(t, rt, &scanPages{delay: 5 * time.Second, n: 3}, &scanPages{})
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	n, err := cli.RecoverPages(ctx, srv.ID(), 7)
	if err != nil || n != 3 {
		t.Fatalf("recovery from a previous owner whose history scan takes 5 s (RequestTimeout %v, budget %v) cut after %v: %d pages, %v",
			rt, recoverBudget*rt, time.Since(start).Round(time.Millisecond), n, err)
	}
}

// The same on the serving side: the new owner imports a frame before it
// reads the next one. When one import takes longer than RequestTimeout,
// the server, which keeps writing the next frames, blocks once the stream's
// window is full and its idle write deadline cuts the transfer, well within
// the overall budget.
func TestRecoverSlowImportNotCut(t *testing.T) {
	const rt = 2 * time.Second
	const frames = 12 // × 512 pages × 4 KiB ≈ 24 MiB: more than yamux's 16 MiB window
	cp := &scanPages{importDelay: 3 * time.Second}
	srv, cli := openRecoverPair(t, rt, &scanPages{n: frames * recoverBatch, urlLen: 4 << 10}, cp)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	start := time.Now()
	n, err := cli.RecoverPages(ctx, srv.ID(), 7)
	if err != nil || n != frames*recoverBatch {
		t.Fatalf("recovery where one import took 3 s (RequestTimeout %v, budget %v) cut after %v: %d of %d pages, %v",
			rt, recoverBudget*rt, time.Since(start).Round(time.Millisecond), n, frames*recoverBatch, err)
	}
}

// Config.Validate accepts any positive RequestTimeout, but the bulk budgets
// multiply it without a bound: 4 × (or 6 ×) a RequestTimeout above ~73 (~48)
// years wraps negative, and every snapshot / recovery deadline lies in the
// past.
func TestRequestTimeoutBoundedAgainstOverflow(t *testing.T) {
	cfg := TestnetConfig()
	cfg.RequestTimeout = 100 * 365 * 24 * time.Hour
	if err := cfg.Validate(); err != nil {
		return // rejected: fine
	}
	if b := snapshotBudget(cfg.RequestTimeout, 0); b <= 0 {
		t.Errorf("RequestTimeout %v passes Validate, but snapshotBudget = %v: every snapshot transfer's deadline is in the past", cfg.RequestTimeout, b)
	}
	if b := recoverBudget * cfg.RequestTimeout; b <= 0 {
		t.Errorf("RequestTimeout %v passes Validate, but recoverBudget × RequestTimeout = %v: every page recovery ends at once", cfg.RequestTimeout, b)
	}
}
