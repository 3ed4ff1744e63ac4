package sink

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"path/filepath"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink/pb"
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

// /micra/subscribe/1 serves the log as /v1/records does: from a cursor,
// filtered, live with follow, ended by the sink when finite.
func TestSubscribeOverLibp2p(t *testing.T) {
	s := openStore(t, t.TempDir())
	defer s.Close()
	sinkHost, reader := newHost(t), newHost(t)
	s.RegisterSubscribe(sinkHost, 5*time.Second)
	if _, err := s.Commit("c1", carrier("c1", 0, 0, 5)); err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	info := peer.AddrInfo{ID: sinkHost.ID(), Addrs: sinkHost.Addrs()}

	finite, err := Subscribe(ctx, reader, info, &pb.SubscribeRequest{After: 0, Host: "h1.example"}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	var got []uint64
	for {
		seq, rec, err := finite.Next(5 * time.Second)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		var r StreamRecord
		if err := json.Unmarshal(rec, &r); err != nil || r.Seq != seq {
			t.Fatalf("frame %d: %v %+v", seq, err, r)
		}
		got = append(got, seq)
	}
	finite.Close()
	if fmt.Sprint(got) != "[2 5]" {
		t.Fatalf("filtered subscription: %v, want [2 5] (the records of h1.example)", got)
	}

	live, err := Subscribe(ctx, reader, info, &pb.SubscribeRequest{After: 3, Follow: true}, 5*time.Second)
	if err != nil {
		t.Fatal(err)
	}
	defer live.Close()
	go func() { _, _ = s.Commit("c1", carrier("c1", 1, 5, 2)) }()
	for want := uint64(4); want <= 7; want++ {
		seq, _, err := live.Next(5 * time.Second)
		if err != nil || seq != want {
			t.Fatalf("live subscription: seq %d, %v; want %d", seq, err, want)
		}
	}
	// the sink lists the subscriber, under its peer id, with its cursor
	// (Store.Readers; TestReadersAreListed for HTTP); the finite one, ended,
	// is forgotten. (One that goes away is noticed at its next frame: a
	// record or the keep-alive.)
	for {
		rs, _ := s.Readers()
		if len(rs) == 1 && rs[0].Kind == "libp2p" && rs[0].Remote == reader.ID().String() && rs[0].Follow &&
			rs[0].From == 3 && rs[0].Cursor == 7 && rs[0].Sent == 4 {
			break
		}
		if ctx.Err() != nil {
			t.Fatalf("readers: %+v, want the libp2p subscriber at cursor 7", rs)
		}
		time.Sleep(10 * time.Millisecond)
	}
}
