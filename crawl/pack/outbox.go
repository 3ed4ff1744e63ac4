package pack

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"log/slog"
	"math/rand/v2"
	"sync"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/prometheus/client_golang/prometheus"
)

// Receiver takes sealed carriers. Deliver returns nil only once the carrier is
// durably stored on the other side (the acknowledgement); any error keeps the
// carrier in the outbox for a later retry. Deliveries may repeat after a crash
// (at-least-once), so receivers deduplicate by Carrier.ID.
type Receiver interface {
	Deliver(ctx context.Context, c Carrier) error
}

// ErrRejected, wrapped in a Receiver's error, says the receiver will never
// take the carrier (malformed, too large, not this sender's to send):
// retrying cannot help, so the outbox moves it aside (kept on disk, under
// its "bad/" keys, and logged) instead of holding every later carrier
// behind it. Any other error is retried.
var ErrRejected = errors.New("pack: carrier rejected by the receiver")

// Options configure an Outbox. Zero values take the defaults noted.
type Options struct {
	CrawlerID string
	// MaxBytes bounds a carrier's uncompressed record payload (default 1 MiB).
	// A carrier is sealed before a record would push it past the bound; the
	// compressed carrier is never larger than MaxBytes plus its small header.
	MaxBytes int
	// MaxHold bounds how long a record waits before its carrier is sealed
	// (default 30 s), UCYMicra's "max time to hold a packet".
	MaxHold time.Duration
	// RetryMin and RetryMax bound the exponential back-off between failed
	// deliveries (defaults 500 ms and 1 min).
	RetryMin, RetryMax time.Duration
	// DeliverTimeout bounds one Deliver call (default 1 min).
	DeliverTimeout time.Duration
	// KeyPrefix separates this outbox's keys from others in a shared DB (default "pk/").
	KeyPrefix  string
	Logger     *slog.Logger
	Registerer prometheus.Registerer
}

func (o *Options) defaults() {
	if o.MaxBytes <= 0 {
		o.MaxBytes = 1 << 20
	}
	if o.MaxHold <= 0 {
		o.MaxHold = 30 * time.Second
	}
	if o.RetryMin <= 0 {
		o.RetryMin = 500 * time.Millisecond
	}
	if o.RetryMax < o.RetryMin {
		o.RetryMax = max(time.Minute, o.RetryMin)
	}
	if o.DeliverTimeout <= 0 {
		o.DeliverTimeout = time.Minute
	}
	if o.KeyPrefix == "" {
		o.KeyPrefix = "pk/"
	}
	if o.Logger == nil {
		o.Logger = slog.Default()
	}
}

// OutboxStats is a snapshot of the outbox counters.
type OutboxStats struct {
	RecordsAdded      int64
	PendingRecords    int   // records not yet sealed into a carrier
	PendingCarriers   int   // sealed, not yet acknowledged
	CarriersSealed    int64 // since Open
	CarriersDelivered int64
	BytesSealed       int64 // encoded carrier bytes (compressed, with header)
	RawBytesSealed    int64 // uncompressed record payload
	BytesDelivered    int64
	DeliveryErrors    int64
	// CarriersAside counts carriers moved aside since Open: corrupt, or
	// rejected by the receiver (ErrRejected).
	CarriersAside int64
}

// Outbox packs records into carriers and keeps every carrier in Badger until
// the Receiver acknowledges it. Records are durable from the moment Add
// returns: a crash before sealing loses nothing, the records are reloaded and
// sealed after restart.
type Outbox struct {
	db   *badger.DB
	recv Receiver
	opt  Options
	log  *slog.Logger

	recPrefix, carPrefix, seqKey []byte

	mu           sync.Mutex
	payload      []byte   // length-prefixed encoded pending records
	pendingKeys  [][]byte // their Badger keys, deleted when sealed
	pendingSince time.Time
	nextRecSeq   uint64
	nextCarSeq   uint64
	stats        OutboxStats

	wake      chan struct{} // a carrier was sealed
	delivered chan struct{} // a carrier was acknowledged (for Drain)

	mRecords, mSealed, mDelivered, mErrors, mBytes prometheus.Counter
	mPending                                       prometheus.GaugeFunc
}

// NewOutbox opens the outbox stored in db, reloading pending records and
// undelivered carriers left by a previous run.
func NewOutbox(db *badger.DB, recv Receiver, opt Options) (*Outbox, error) {
	opt.defaults()
	if opt.CrawlerID == "" {
		return nil, errors.New("pack: outbox needs a CrawlerID")
	}
	o := &Outbox{
		db: db, recv: recv, opt: opt, log: opt.Logger.With("component", "outbox"),
		recPrefix: []byte(opt.KeyPrefix + "r/"),
		carPrefix: []byte(opt.KeyPrefix + "c/"),
		seqKey:    []byte(opt.KeyPrefix + "m/cseq"),
		wake:      make(chan struct{}, 1),
		delivered: make(chan struct{}, 1),
	}
	o.registerMetrics(opt.Registerer) // (load may seal: the counters must exist)
	if err := o.load(); err != nil {
		return nil, err
	}
	return o, nil
}

func (o *Outbox) registerMetrics(reg prometheus.Registerer) {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "outbox", Name: name, Help: help})
	}
	o.mRecords = c("records_total", "Records added to the outbox.")
	o.mSealed = c("carriers_sealed_total", "Carriers sealed.")
	o.mDelivered = c("carriers_delivered_total", "Carriers acknowledged by the receiver.")
	o.mErrors = c("delivery_errors_total", "Failed carrier deliveries (retried).")
	o.mBytes = c("carrier_bytes_total", "Encoded carrier bytes sealed.")
	o.mPending = prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "outbox", Name: "pending_carriers",
		Help: "Carriers sealed and not yet acknowledged."}, func() float64 {
		o.mu.Lock()
		defer o.mu.Unlock()
		return float64(o.stats.PendingCarriers)
	})
	if reg != nil {
		for _, m := range []prometheus.Collector{o.mRecords, o.mSealed, o.mDelivered, o.mErrors, o.mBytes, o.mPending} {
			if err := reg.Register(m); err != nil {
				o.log.Warn("metric not registered", "err", err)
			}
		}
	}
}

func (o *Outbox) load() error {
	type stored struct{ key, rec []byte }
	var recs []stored
	err := o.db.View(func(txn *badger.Txn) error {
		if it, err := txn.Get(o.seqKey); err == nil {
			v, _ := it.ValueCopy(nil)
			if len(v) == 8 {
				o.nextCarSeq = binary.BigEndian.Uint64(v) + 1
			}
		} else if !errors.Is(err, badger.ErrKeyNotFound) {
			return err
		}
		it := txn.NewIterator(badger.IteratorOptions{Prefix: o.carPrefix})
		for it.Rewind(); it.Valid(); it.Next() {
			o.stats.PendingCarriers++
			seq := binary.BigEndian.Uint64(it.Item().Key()[len(o.carPrefix):])
			o.nextCarSeq = max(o.nextCarSeq, seq+1)
		}
		it.Close()
		it = txn.NewIterator(badger.IteratorOptions{Prefix: o.recPrefix, PrefetchValues: true})
		defer it.Close()
		for it.Rewind(); it.Valid(); it.Next() {
			item := it.Item()
			v, err := item.ValueCopy(nil)
			if err != nil {
				return err
			}
			recs = append(recs, stored{item.KeyCopy(nil), v})
			o.nextRecSeq = binary.BigEndian.Uint64(item.Key()[len(o.recPrefix):]) + 1
		}
		return nil
	})
	if err != nil {
		return err
	}
	// the records stored and not sealed (a run that stopped inside Add, or
	// a smaller MaxBytes than the last run's) go into carriers as Add puts
	// them, bound included
	o.mu.Lock()
	defer o.mu.Unlock()
	for _, r := range recs {
		if len(o.pendingKeys) > 0 && len(o.payload)+len(r.rec)+binary.MaxVarintLen32 > o.opt.MaxBytes {
			if err := o.sealLocked(); err != nil {
				return err
			}
		}
		o.appendPending(r.key, r.rec, time.Now())
	}
	if n := len(o.pendingKeys); n > 0 || o.stats.PendingCarriers > 0 {
		o.log.Info("outbox reloaded", "pending_records", n, "pending_carriers", o.stats.PendingCarriers)
	}
	return nil
}

func (o *Outbox) appendPending(key, rec []byte, now time.Time) {
	if len(o.pendingKeys) == 0 {
		o.pendingSince = now
	}
	o.payload = binary.AppendUvarint(o.payload, uint64(len(rec)))
	o.payload = append(o.payload, rec...)
	o.pendingKeys = append(o.pendingKeys, key)
	o.stats.PendingRecords = len(o.pendingKeys)
}

// Add stores a record durably and seals a carrier when the size bound is
// reached. The record's CrawlerID is set to the outbox's when empty.
func (o *Outbox) Add(ctx context.Context, r *Record) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	if r.CrawlerID == "" {
		r.CrawlerID = o.opt.CrawlerID
	}
	enc := r.AppendBinary(nil)
	// The record is written outside the lock, so concurrent Adds share
	// Badger's group commit instead of queueing behind one another; it joins
	// the in-memory carrier only once durable, so a seal never covers a
	// record that is not on disk.
	o.mu.Lock()
	seq := o.nextRecSeq
	o.nextRecSeq++
	o.mu.Unlock()
	key := binary.BigEndian.AppendUint64(append([]byte(nil), o.recPrefix...), seq)
	if err := o.db.Update(func(txn *badger.Txn) error { return txn.Set(key, enc) }); err != nil {
		return fmt.Errorf("pack: store record: %w", err)
	}
	o.mu.Lock()
	defer o.mu.Unlock()
	// Seal first if this record would push the carrier past its bounds.
	if len(o.pendingKeys) > 0 && (len(o.payload)+len(enc)+binary.MaxVarintLen32 > o.opt.MaxBytes || len(o.pendingKeys) >= MaxCarrierRecords) {
		if err := o.sealLocked(); err != nil {
			return err
		}
	}
	o.appendPending(key, enc, time.Now())
	o.stats.RecordsAdded++
	o.mRecords.Inc()
	return nil
}

// Flush seals the pending records into a carrier now.
func (o *Outbox) Flush() error {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.sealLocked()
}

func (o *Outbox) sealLocked() error {
	if len(o.pendingKeys) == 0 {
		return nil
	}
	c := Seal(o.opt.CrawlerID, o.nextCarSeq, time.Now(), len(o.pendingKeys), o.payload)
	ckey := binary.BigEndian.AppendUint64(append([]byte(nil), o.carPrefix...), c.Seq)
	var seq [8]byte
	binary.BigEndian.PutUint64(seq[:], c.Seq)
	// The carrier and the removal of its records go in one transaction; if the
	// records do not fit, the remainder is deleted in follow-up transactions
	// (a crash in between re-sends them: at-least-once, never lost).
	txn := o.db.NewTransaction(true)
	defer func() { txn.Discard() }()
	if err := txn.Set(ckey, c.Data); err != nil {
		return fmt.Errorf("pack: store carrier: %w", err)
	}
	if err := txn.Set(o.seqKey, seq[:]); err != nil {
		return err
	}
	stored := false // the carrier is on disk: its sequence number is spent
	for _, k := range o.pendingKeys {
		err := txn.Delete(k)
		if errors.Is(err, badger.ErrTxnTooBig) {
			if err = txn.Commit(); err != nil {
				return fmt.Errorf("pack: seal carrier: %w", err)
			}
			if !stored {
				// a later failure leaves the records pending, to be sealed
				// again (at-least-once), but never under this number: a
				// receiver drops carriers by ID as duplicates
				stored = true
				o.nextCarSeq++
			}
			txn = o.db.NewTransaction(true)
			err = txn.Delete(k)
		}
		if err != nil {
			return fmt.Errorf("pack: seal carrier: %w", err)
		}
	}
	if err := txn.Commit(); err != nil {
		return fmt.Errorf("pack: seal carrier: %w", err)
	}
	if !stored {
		o.nextCarSeq++
	}
	o.payload = o.payload[:0]
	o.pendingKeys = o.pendingKeys[:0]
	o.stats.PendingRecords = 0
	o.stats.PendingCarriers++
	o.stats.CarriersSealed++
	o.stats.BytesSealed += int64(len(c.Data))
	o.stats.RawBytesSealed += int64(c.RawBytes)
	o.mSealed.Inc()
	o.mBytes.Add(float64(len(c.Data)))
	select {
	case o.wake <- struct{}{}:
	default:
	}
	return nil
}

// Stats returns a snapshot of the counters.
func (o *Outbox) Stats() OutboxStats {
	o.mu.Lock()
	defer o.mu.Unlock()
	return o.stats
}

// Run seals carriers when their hold time expires and delivers sealed
// carriers in order, retrying failures with exponential back-off, until ctx
// ends. Undelivered carriers stay in the outbox for the next Run.
func (o *Outbox) Run(ctx context.Context) error {
	tick := time.NewTicker(max(o.opt.MaxHold/8, 10*time.Millisecond))
	defer tick.Stop()
	backoff := time.Duration(0)
	var retry <-chan time.Time
	for {
		if retry == nil {
			delivered, err := o.deliverNext(ctx)
			switch {
			case err != nil && ctx.Err() != nil:
				return nil
			case err != nil:
				backoff = min(max(backoff*2, o.opt.RetryMin), o.opt.RetryMax)
				// Full jitter keeps many crawlers from retrying in lockstep.
				wait := backoff/2 + rand.N(backoff/2+1)
				o.log.Warn("carrier delivery failed, will retry", "err", err, "retry_in", wait)
				retry = time.After(wait)
			case delivered:
				backoff = 0
				continue
			}
		}
		select {
		case <-ctx.Done():
			return nil
		case <-o.wake:
		case <-retry:
			retry = nil
		case <-tick.C:
			o.mu.Lock()
			if len(o.pendingKeys) > 0 && time.Since(o.pendingSince) >= o.opt.MaxHold {
				if err := o.sealLocked(); err != nil {
					o.log.Error("seal on hold time failed", "err", err)
				}
			}
			o.mu.Unlock()
		}
	}
}

// deliverNext delivers the oldest sealed carrier; it reports false, nil when
// there is none.
func (o *Outbox) deliverNext(ctx context.Context) (bool, error) {
	var key, data []byte
	err := o.db.View(func(txn *badger.Txn) error {
		it := txn.NewIterator(badger.IteratorOptions{Prefix: o.carPrefix, PrefetchValues: false})
		defer it.Close()
		it.Rewind()
		if !it.Valid() {
			return nil
		}
		key = it.Item().KeyCopy(nil)
		var err error
		data, err = it.Item().ValueCopy(nil)
		return err
	})
	if err != nil || key == nil {
		return false, err
	}
	h, _, err := DecodeHeader(data)
	if err != nil {
		// A corrupt carrier can never be delivered; keep it aside rather than block forever.
		o.log.Error("corrupt carrier in outbox, moved aside", "key", string(key), "err", err)
		return true, o.moveAside(key, data)
	}
	c := Carrier{CrawlerID: h.CrawlerID, Seq: h.Seq, Created: h.Created, Records: h.Records, RawBytes: h.RawBytes, Data: data}
	dctx, cancel := context.WithTimeout(ctx, o.opt.DeliverTimeout)
	err = o.recv.Deliver(dctx, c)
	cancel()
	if errors.Is(err, ErrRejected) {
		o.log.Error("carrier rejected by the receiver, moved aside", "carrier", c.ID(), "records", c.Records, "err", err)
		o.mErrors.Inc()
		return true, o.moveAside(key, data)
	}
	if err != nil {
		o.mu.Lock()
		o.stats.DeliveryErrors++
		o.mu.Unlock()
		o.mErrors.Inc()
		return false, fmt.Errorf("deliver %s: %w", c.ID(), err)
	}
	if err := o.db.Update(func(txn *badger.Txn) error { return txn.Delete(key) }); err != nil {
		return false, fmt.Errorf("pack: drop acknowledged carrier: %w", err)
	}
	o.mu.Lock()
	o.stats.PendingCarriers--
	o.stats.CarriersDelivered++
	o.stats.BytesDelivered += int64(len(data))
	o.mu.Unlock()
	o.mDelivered.Inc()
	select {
	case o.delivered <- struct{}{}:
	default:
	}
	return true, nil
}

// moveAside keeps a carrier that can never be delivered under the "bad/"
// keys, out of the delivery order.
func (o *Outbox) moveAside(key, data []byte) error {
	if err := o.db.Update(func(txn *badger.Txn) error {
		if err := txn.Set(append([]byte(o.opt.KeyPrefix+"bad/"), key...), data); err != nil {
			return err
		}
		return txn.Delete(key)
	}); err != nil {
		return err
	}
	o.mu.Lock()
	o.stats.PendingCarriers-- // no longer pending: Drain must not wait for it
	o.stats.CarriersAside++
	o.mu.Unlock()
	select {
	case o.delivered <- struct{}{}:
	default:
	}
	return nil
}

// Drain seals pending records and waits until every carrier is acknowledged
// or ctx ends. Run must be running in another goroutine.
func (o *Outbox) Drain(ctx context.Context) error {
	if err := o.Flush(); err != nil {
		return err
	}
	for {
		o.mu.Lock()
		left := o.stats.PendingCarriers
		o.mu.Unlock()
		if left == 0 {
			return nil
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("pack: drain: %d carriers unacknowledged: %w", left, ctx.Err())
		case <-o.delivered:
		case <-time.After(50 * time.Millisecond):
		}
	}
}
