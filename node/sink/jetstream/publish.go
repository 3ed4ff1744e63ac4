// Package jetstream publishes the index sink's change log to a NATS
// JetStream stream, for indexers that outgrow one sink machine: they
// consume from JetStream (replicated, with its own consumers, retention
// and cluster) instead of the sink's HTTP streams. A package of its own so
// that neither the sink's store nor a crawler node links the NATS client.
package jetstream

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"strconv"
	"time"

	"github.com/nats-io/nats.go"
	"github.com/nats-io/nats.go/jetstream"

	"github.com/micra-crawler/micra/node/sink"
)

// Publisher copies every committed record to Stream, one message per
// record on Subject, the record's sequence as the message id (so a
// message published again after a crash is dropped by JetStream's
// de-duplication) and in the Micra-Seq header. It resumes after the last
// sequence the stream holds: no record is skipped, none published twice
// as long as a re-publication falls within the duplicate window.
type Publisher struct {
	Store   *sink.Store
	URL     string // nats://host:port
	Stream  string // default "MICRA"
	Subject string // default "micra.records"
	// Replicas of the stream in a JetStream cluster (default 1).
	Replicas int
	Logger   *slog.Logger
}

// HeaderSeq carries a message's change-log sequence.
const HeaderSeq = "Micra-Seq"

func (p *Publisher) defaults() {
	if p.Stream == "" {
		p.Stream = "MICRA"
	}
	if p.Subject == "" {
		p.Subject = "micra.records"
	}
	if p.Replicas <= 0 {
		p.Replicas = 1
	}
	if p.Logger == nil {
		p.Logger = slog.Default()
	}
}

// Run publishes until ctx ends, reconnecting after failures.
func (p *Publisher) Run(ctx context.Context) {
	p.defaults()
	log := p.Logger.With("component", "jetstream", "stream", p.Stream)
	wait := time.Second
	for ctx.Err() == nil {
		err := p.session(ctx)
		if ctx.Err() != nil {
			return
		}
		log.Warn("JetStream publication interrupted, will resume", "err", err, "retry_in", wait)
		select {
		case <-ctx.Done():
			return
		case <-time.After(wait):
		}
		wait = min(wait*2, time.Minute)
	}
}

// session connects, finds where the stream ends and publishes from there
// until ctx ends or something fails.
func (p *Publisher) session(ctx context.Context) error {
	nc, err := nats.Connect(p.URL, nats.Name("micra sink"), nats.MaxReconnects(-1))
	if err != nil {
		return err
	}
	defer nc.Close()
	js, err := jetstream.New(nc)
	if err != nil {
		return err
	}
	st, err := js.CreateOrUpdateStream(ctx, jetstream.StreamConfig{
		Name: p.Stream, Subjects: []string{p.Subject}, Storage: jetstream.FileStorage,
		Replicas: p.Replicas, Duplicates: 10 * time.Minute,
		Description: "micra index sink change log: one JSON record per message, Nats-Msg-Id = sequence",
	})
	if err != nil {
		return fmt.Errorf("stream %s: %w", p.Stream, err)
	}
	cursor, err := lastPublished(ctx, st, p.Subject)
	if err != nil {
		return err
	}
	p.Logger.Info("publishing the change log to JetStream", "stream", p.Stream, "after", cursor, "head", p.Store.Head())
	for ctx.Err() == nil {
		es, last, err := p.Store.Read(cursor, 1000, sink.Filter{})
		var bs *sink.BeforeStartError
		if errors.As(err, &bs) {
			// the log's retention dropped records not published yet: the
			// stream goes on from the log's start, without them
			p.Logger.Warn("records dropped by the log's retention before they were published", "stream", p.Stream, "after", cursor, "start", bs.Start)
			cursor = bs.Start - 1
			continue
		}
		if err != nil {
			return err
		}
		if len(es) == 0 {
			p.Store.Wait(ctx, cursor)
			continue
		}
		futures := make([]jetstream.PubAckFuture, 0, len(es))
		for i := range es {
			body, err := json.Marshal(sink.StreamEntry(&es[i]))
			if err != nil {
				return err
			}
			seq := strconv.FormatUint(es[i].Seq, 10)
			m := &nats.Msg{Subject: p.Subject, Data: body, Header: nats.Header{HeaderSeq: []string{seq}}}
			f, err := js.PublishMsgAsync(m, jetstream.WithMsgID(seq))
			if err != nil {
				return err
			}
			futures = append(futures, f)
		}
		for _, f := range futures {
			select {
			case <-f.Ok():
			case err := <-f.Err():
				return fmt.Errorf("publish record %s: %w", f.Msg().Header.Get(HeaderSeq), err)
			case <-ctx.Done():
				return ctx.Err()
			}
		}
		cursor = last
	}
	return ctx.Err()
}

// lastPublished is the sequence of the last record the stream holds (0:
// none).
func lastPublished(ctx context.Context, st jetstream.Stream, subject string) (uint64, error) {
	m, err := st.GetLastMsgForSubject(ctx, subject)
	if errors.Is(err, jetstream.ErrMsgNotFound) {
		return 0, nil
	}
	if err != nil {
		return 0, fmt.Errorf("last message: %w", err)
	}
	seq, err := strconv.ParseUint(m.Header.Get(HeaderSeq), 10, 64)
	if err != nil {
		return 0, fmt.Errorf("last message of %s carries no %s header: not a micra stream?", subject, HeaderSeq)
	}
	return seq, nil
}
