package jetstream

import (
	"context"
	"fmt"
	"log/slog"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/nats-io/nats-server/v2/server"
	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"
	"go.uber.org/goleak"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
)

// startNATS runs a real nats-server with JetStream in this process.
func startNATS(t *testing.T) *server.Server {
	t.Helper()
	s, err := server.NewServer(&server.Options{Host: "127.0.0.1", Port: -1, JetStream: true, StoreDir: t.TempDir(), NoLog: true, NoSigs: true})
	if err != nil {
		t.Fatal(err)
	}
	go s.Start()
	if !s.ReadyForConnections(10 * time.Second) {
		t.Fatal("nats-server not ready")
	}
	t.Cleanup(func() { s.Shutdown(); s.WaitForShutdown() })
	return s
}

func commit(t *testing.T, s *sink.Store, seq uint64, from, n int) {
	t.Helper()
	recs := make([]pack.Record, n)
	for i := range recs {
		recs[i] = pack.Record{URL: fmt.Sprintf("http://h.example/p%d", from+i), Status: 200, Change: pack.ChangeNew, FetchedAt: time.Now()}
	}
	if _, err := s.Commit("c", pack.EncodeCarrier("c", seq, time.Now(), recs).Data); err != nil {
		t.Fatal(err)
	}
}

// run starts a publisher; the returned function stops it.
func run(p *Publisher) func() {
	ctx, cancel := context.WithCancel(context.Background())
	var wg sync.WaitGroup
	wg.Go(func() { p.Run(ctx) })
	return func() { cancel(); wg.Wait() }
}

// Every committed record reaches the JetStream stream once, in order,
// with its sequence as the message id: a publisher stopped and started
// again resumes after the last record the stream holds, and records
// published again are dropped by JetStream's de-duplication.
func TestPublishToJetStream(t *testing.T) {
	ns := startNATS(t)
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	commit(t, store, 0, 0, 40)
	p := &Publisher{Store: store, URL: ns.ClientURL(), Logger: slog.New(slog.DiscardHandler)}
	stop := run(p)
	commit(t, store, 1, 40, 30) // while it runs
	nc, err := nats.Connect(ns.ClientURL())
	if err != nil {
		t.Fatal(err)
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 20*time.Second)
	defer cancel()
	waitMsgs := func(n uint64) {
		t.Helper()
		for {
			st, err := js.Stream(ctx, "MICRA")
			if err == nil {
				if info, err := st.Info(ctx); err == nil && info.State.Msgs >= n {
					return
				}
			}
			select {
			case <-ctx.Done():
				t.Fatalf("stream never held %d messages", n)
			case <-time.After(20 * time.Millisecond):
			}
		}
	}
	waitMsgs(70)
	stop()
	commit(t, store, 2, 70, 30) // while it is stopped
	// a message published again (as after a crash before the cursor moved)
	if _, err := js.Publish(ctx, "micra.records", []byte(`{}`), jetstream.WithMsgID("5")); err != nil {
		t.Fatal(err)
	}
	stop = run(p)
	defer stop()
	waitMsgs(100)

	cons, err := js.OrderedConsumer(ctx, "MICRA", jetstream.OrderedConsumerConfig{})
	if err != nil {
		t.Fatal(err)
	}
	for want := uint64(1); want <= 100; want++ {
		m, err := cons.Next(jetstream.FetchMaxWait(5 * time.Second))
		if err != nil {
			t.Fatalf("record %d: %v", want, err)
		}
		if got, _ := strconv.ParseUint(m.Headers().Get(HeaderSeq), 10, 64); got != want {
			t.Fatalf("message %d carries record %d", want, got)
		}
	}
	if st, _ := js.Stream(ctx, "MICRA"); st != nil {
		if info, _ := st.Info(ctx); info.State.Msgs != 100 {
			t.Fatalf("stream holds %d messages, want 100", info.State.Msgs)
		}
	}
}

func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
