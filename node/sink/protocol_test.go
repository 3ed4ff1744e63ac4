package sink

import (
	"context"
	"errors"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/overlay"
)

func newHost(t *testing.T) host.Host {
	t.Helper()
	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { h.Close() })
	return h
}

// A crawler's outbox delivers over /micra/carrier/1 to a real sink on
// loopback: every record is committed once, and the carrier is dropped
// from the outbox only once the sink acknowledged it. A carrier that names
// another crawler than its sender is refused (WRONG_SENDER) and kept aside
// by the outbox, the carriers behind it still delivered.
func TestOutboxDeliversOverTheProtocol(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	sinkHost, crawlerHost := newHost(t), newHost(t)
	(&Server{Store: s, Timeout: 5 * time.Second}).Register(sinkHost)
	client := &Client{Host: crawlerHost, Sink: peer.AddrInfo{ID: sinkHost.ID(), Addrs: sinkHost.Addrs()}, Timeout: 5 * time.Second}

	id := crawlerHost.ID().String()
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	if err := client.Deliver(ctx, pack.Carrier{CrawlerID: "someone-else", Data: carrier("someone-else", 0, 0, 1)}); !errors.Is(err, pack.ErrRejected) {
		t.Fatalf("a carrier of another crawler: %v, want a rejection", err)
	}

	db, err := badger.Open(badger.DefaultOptions(filepath.Join(t.TempDir(), "outbox")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := pack.NewOutbox(db, client, pack.Options{CrawlerID: id, MaxHold: time.Hour})
	if err != nil {
		t.Fatal(err)
	}
	octx, stop := context.WithCancel(ctx)
	done := make(chan struct{})
	go func() { defer close(done); ob.Run(octx) }()
	defer func() { stop(); <-done }()
	for i := range 30 {
		r := pack.Record{URL: "http://h.example/p" + string(rune('a'+i)), Status: 200, Change: pack.ChangeNew, FetchedAt: time.Now()}
		if err := ob.Add(ctx, &r); err != nil {
			t.Fatal(err)
		}
		if i%10 == 9 {
			if err := ob.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	if err := ob.Drain(ctx); err != nil {
		t.Fatalf("drain: %v (outbox %+v)", err, ob.Stats())
	}
	c, crawlers := s.Counts()
	if s.Head() != 30 || c.Carriers != 3 || len(crawlers) != 1 || crawlers[0].Crawler != id || ob.Stats().CarriersDelivered != 3 {
		t.Fatalf("head %d, counts %+v, crawlers %+v, outbox %+v", s.Head(), c, crawlers, ob.Stats())
	}
}
