package cluster

import (
	"bufio"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"syscall"
	"time"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/node/sink"
)

// The faults a running testnet can be put through (`micra testnet run
// --kill --restart --kill-sink --partition`, `micra testnet chaos`). Each
// acts on the real processes or their connections: SIGKILL and a start on
// the same home, SIGSTOP and SIGCONT, and a partition that every node's
// connection gater enforces (node's /v1/testnet/partition). They are
// called from one goroutine at a time.

// Control is node i's control API client.
func (t *Testnet) Control(i int) *node.ControlClient { return t.control(t.State.Nodes[i]) }

// NodeDown reports whether node i was killed and not started again.
func (t *Testnet) NodeDown(i int) bool { return t.killed[i] }

// Stalled reports whether node i is stopped (StallNode).
func (t *Testnet) Stalled(i int) bool { return t.stalled[i] }

// Live lists the nodes neither killed nor stalled.
func (t *Testnet) Live() []int {
	var out []int
	for i := range t.nodes {
		if !t.killed[i] && !t.stalled[i] {
			out = append(out, i)
		}
	}
	return out
}

// SinkDown reports whether the sink was killed and not started again.
func (t *Testnet) SinkDown() bool { return t.sinkDown }

// Partitioned reports whether a partition is in force.
func (t *Testnet) Partitioned() bool { return t.partitioned }

// KillNode SIGKILLs node i and waits for it to exit: nothing it held in
// memory survives, only what it committed to its data directory.
func (t *Testnet) KillNode(i int) error {
	if i < 0 || i >= len(t.nodes) || t.killed[i] {
		return fmt.Errorf("kill node %d: no such live node", i)
	}
	p := t.nodes[i]
	if t.stalled[i] {
		delete(t.stalled, i) // (SIGKILL ends a stopped process too)
	}
	if err := p.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill node %d: %w", i, err)
	}
	<-p.done
	if t.killed == nil {
		t.killed = map[int]bool{}
	}
	t.killed[i] = true
	return nil
}

// RestartNode starts a killed node i again on its home: the same identity,
// frontier, outbox and hand-off spool, bootstrapped to the live nodes (its
// old port is gone with it). It returns once the node listens and serves
// its control API, and updates testnet.json.
func (t *Testnet) RestartNode(ctx context.Context, i int) error {
	if !t.killed[i] {
		return fmt.Errorf("restart node %d: it was not killed", i)
	}
	// the dead process's api file names a port nobody serves
	if err := os.Remove(filepath.Join(t.State.Nodes[i].Data, node.APIFile)); err != nil && !errors.Is(err, os.ErrNotExist) {
		return err
	}
	var boot []string
	for _, j := range t.Live() {
		if j != i {
			boot = append(boot, t.State.Nodes[j].Addrs...)
		}
	}
	if err := t.startNode(ctx, i, t.State.World, boot); err != nil {
		return fmt.Errorf("restart node %d: %w", i, err)
	}
	delete(t.killed, i)
	return t.writeState()
}

// StallNode stops node i (SIGSTOP) until ResumeNode: a process that
// answers nothing for a while, as a swapped or overloaded machine does.
func (t *Testnet) StallNode(i int) error {
	if t.killed[i] || t.stalled[i] {
		return fmt.Errorf("stall node %d: not a running node", i)
	}
	if err := t.nodes[i].cmd.Process.Signal(syscall.SIGSTOP); err != nil {
		return fmt.Errorf("stall node %d: %w", i, err)
	}
	if t.stalled == nil {
		t.stalled = map[int]bool{}
	}
	t.stalled[i] = true
	return nil
}

// ResumeNode continues a stalled node (SIGCONT).
func (t *Testnet) ResumeNode(i int) error {
	if !t.stalled[i] {
		return nil
	}
	delete(t.stalled, i)
	if err := t.nodes[i].cmd.Process.Signal(syscall.SIGCONT); err != nil {
		return fmt.Errorf("resume node %d: %w", i, err)
	}
	return nil
}

// KillSink SIGKILLs the sink and waits for it to exit.
func (t *Testnet) KillSink() error {
	if t.sink == nil || t.sinkDown {
		return errors.New("kill sink: no sink runs")
	}
	if err := t.sink.cmd.Process.Kill(); err != nil {
		return fmt.Errorf("kill sink: %w", err)
	}
	<-t.sink.done
	t.sinkDown = true
	return nil
}

// RestartSink starts the killed sink again on its data directory, its
// libp2p and HTTP addresses: the crawlers' outboxes deliver again what it
// did not acknowledge, and the subscriber reconnects to the same URL.
func (t *Testnet) RestartSink(ctx context.Context) error {
	if !t.sinkDown {
		return errors.New("restart sink: it was not killed")
	}
	listen, _, _ := strings.Cut(t.State.Sink.Addr, "/p2p/")
	httpAddr := strings.TrimPrefix(t.State.Sink.HTTP, "http://")
	var boot []string
	for _, i := range t.Live() {
		boot = append(boot, t.State.Nodes[i].Addrs...)
	}
	if err := t.startSink(ctx, boot, listen, httpAddr); err != nil {
		return fmt.Errorf("restart sink: %w", err)
	}
	t.sinkDown = false
	return t.writeState()
}

// Partition splits the crawlers into side and the rest: every live node
// refuses connections with the nodes of the other side, and the sink
// stays with side when sinkWithSide, else with the rest (the other side's
// carriers wait in their outboxes). A node killed now and started again
// before Heal is not partitioned.
func (t *Testnet) Partition(ctx context.Context, side []int, sinkWithSide bool) error {
	in := map[int]bool{}
	for _, i := range side {
		in[i] = true
	}
	sinkID := ""
	if t.State.Sink != nil {
		_, sinkID, _ = strings.Cut(t.State.Sink.Addr, "/p2p/")
	}
	var errs []error
	for _, i := range t.Live() {
		var deny []string
		for j, n := range t.State.Nodes {
			if in[j] != in[i] {
				deny = append(deny, n.PeerID)
			}
		}
		if sinkID != "" && in[i] != sinkWithSide {
			deny = append(deny, sinkID)
		}
		if _, err := t.control(t.State.Nodes[i]).Partition(ctx, deny); err != nil {
			errs = append(errs, fmt.Errorf("partition node %d: %w", i, err))
		}
	}
	t.partitioned = true
	return errors.Join(errs...)
}

// Heal lifts the partition on every live node.
func (t *Testnet) Heal(ctx context.Context) error {
	var errs []error
	for _, i := range t.Live() {
		if _, err := t.control(t.State.Nodes[i]).Partition(ctx, nil); err != nil {
			errs = append(errs, fmt.Errorf("heal node %d: %w", i, err))
		}
	}
	t.partitioned = false
	return errors.Join(errs...)
}

// Owners is one look at who the live nodes say owns each subnet.
type Owners struct {
	Nodes    int // live nodes that answered
	Subnets  int // subnets some of them cache a record of with a live owner
	Disagree int // of them, those two nodes name different owners for
	Example  string
}

// Owners asks every live node for its cached delegation records and counts
// the subnets on which they disagree. A record whose owner the node sees
// as dead (or that is down) is left out: it is re-delegated on its next
// use, not followed; so is one the node marked stale.
func (t *Testnet) Owners(ctx context.Context) (Owners, error) {
	down := map[string]bool{}
	for i, n := range t.State.Nodes {
		if t.killed[i] {
			down[n.PeerID] = true
		}
	}
	by := map[uint32]map[string]int{} // subnet → owner → the first node naming it
	var o Owners
	var errs []error
	for _, i := range t.Live() {
		qctx, cancel := context.WithTimeout(ctx, 5*time.Second)
		recs, err := t.control(t.State.Nodes[i]).Owners(qctx, nil, false, false)
		cancel()
		if err != nil {
			errs = append(errs, fmt.Errorf("node %d: %w", i, err))
			continue
		}
		o.Nodes++
		for _, r := range recs {
			if r.Stale || r.Owner == "" || down[r.Owner] {
				continue
			}
			if by[r.Subnet] == nil {
				by[r.Subnet] = map[string]int{}
			}
			if _, ok := by[r.Subnet][r.Owner]; !ok {
				by[r.Subnet][r.Owner] = i
			}
		}
	}
	o.Subnets = len(by)
	for s, owners := range by {
		if len(owners) > 1 {
			o.Disagree++
			if o.Example == "" {
				var parts []string
				for id, i := range owners {
					parts = append(parts, fmt.Sprintf("node %d says %s", i, shortPeer(id)))
				}
				slices.Sort(parts)
				o.Example = fmt.Sprintf("subnet %d: %s", s, strings.Join(parts, ", "))
			}
		}
	}
	if o.Nodes == 0 {
		return o, errors.Join(errs...)
	}
	return o, nil
}

func shortPeer(id string) string {
	if len(id) > 12 {
		return "…" + id[len(id)-6:]
	}
	return id
}

// startSubscriber starts the indexer beside the sink: `micra subscribe
// --follow --cursor-file`, its records appended to
// DIR/subscriber/records.ndjson. It reconnects by itself when the sink
// goes away and resumes after its cursor.
func (t *Testnet) startSubscriber() error {
	dir, err := mkdir(t.o.Dir, "subscriber")
	if err != nil {
		return err
	}
	out := filepath.Join(dir, "records.ndjson")
	p, err := startToFile("subscriber", t.o.Binary, out, filepath.Join(dir, "subscriber.log"),
		"subscribe", "--sink", t.State.Sink.HTTP, "--cursor-file", filepath.Join(dir, "cursor"), "--follow")
	if err != nil {
		return err
	}
	t.sub = p
	t.State.Subscriber = out
	return nil
}

// Delivery is what reached the sink and its subscriber, checked against
// what the sink acknowledged.
type Delivery struct {
	Head uint64 `json:"head"` // the change log's last sequence
	// Followed is the records the subscriber printed; Gaps the sequences
	// it skipped and Repeats those it printed again or out of order.
	Followed int64 `json:"followed"`
	Gaps     int64 `json:"gaps"`
	Repeats  int64 `json:"repeats"`
	// Lost is records the subscriber read (so the sink had committed and
	// acknowledged them) that the log no longer holds as they were.
	Lost int64 `json:"lost"`
	// IngestedTwice is records committed twice: the same crawler's record
	// of the same fetch of a page (URL and fetch time) at two sequences.
	IngestedTwice int64 `json:"ingested_twice"`
	// RedeliveredCarriers is carriers the sink acknowledged again without
	// a change (a lost acknowledgement or a crash of either side), since
	// it last started.
	RedeliveredCarriers int64 `json:"redelivered_carriers"`
}

// CheckDelivery waits (up to ctx) until the subscriber has printed the
// change log's head, then compares what it printed with the log.
func (t *Testnet) CheckDelivery(ctx context.Context) (Delivery, error) {
	var d Delivery
	if t.State.Sink == nil || t.sinkDown {
		return d, errors.New("check delivery: the sink is not running")
	}
	st, err := t.sinkClient().Status(ctx)
	if err != nil {
		return d, err
	}
	d.Head, d.RedeliveredCarriers = st.Head, st.Counts.Duplicates
	type rec struct {
		Seq       uint64    `json:"seq"`
		URL       string    `json:"url"`
		CrawlerID string    `json:"crawler"`
		FetchedAt time.Time `json:"fetched_at"`
	}
	logged := map[uint64]rec{}
	seen := map[rec]bool{}
	_, err = t.sinkClient().Records(ctx, 0, 0, false, sink.Filter{}, func(seq uint64, line []byte) error {
		var r rec
		if err := json.Unmarshal(line, &r); err != nil {
			return err
		}
		k := rec{URL: r.URL, CrawlerID: r.CrawlerID, FetchedAt: r.FetchedAt}
		if seen[k] {
			d.IngestedTwice++
		}
		seen[k] = true
		logged[seq] = r
		return nil
	})
	if err != nil {
		return d, err
	}
	if t.sub == nil {
		return d, nil
	}
	for {
		var last uint64
		d.Followed, d.Gaps, d.Repeats, d.Lost, last = 0, 0, 0, 0, 0
		if err := readNDJSON(t.State.Subscriber, func(line []byte) error {
			var r rec
			if err := json.Unmarshal(line, &r); err != nil {
				return fmt.Errorf("%s: record %d: %w", t.State.Subscriber, d.Followed+1, err)
			}
			d.Followed++
			switch {
			case r.Seq == last+1:
			case r.Seq > last+1:
				d.Gaps += int64(r.Seq - last - 1)
			default:
				d.Repeats++
			}
			last = max(last, r.Seq)
			if l, ok := logged[r.Seq]; !ok || l.URL != r.URL || l.CrawlerID != r.CrawlerID || !l.FetchedAt.Equal(r.FetchedAt) {
				d.Lost++
			}
			return nil
		}); err != nil {
			return d, err
		}
		if last >= d.Head {
			return d, nil
		}
		select {
		case <-ctx.Done():
			return d, fmt.Errorf("the subscriber printed up to record %d of %d: %w", last, d.Head, ctx.Err())
		case <-time.After(500 * time.Millisecond):
		}
	}
}

// readNDJSON calls fn for every complete line of path (a line still being
// written is left for the next read).
func readNDJSON(path string, fn func([]byte) error) error {
	f, err := os.Open(path)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		return err
	}
	defer f.Close()
	r := bufio.NewReaderSize(f, 1<<20)
	for {
		line, err := r.ReadBytes('\n')
		if err != nil {
			return nil // (EOF: a partial last line waits)
		}
		if err := fn(line); err != nil {
			return err
		}
	}
}

// SinkStatus is the sink's status document.
func (t *Testnet) SinkStatus(ctx context.Context) (sink.Status, error) {
	return t.sinkClient().Status(ctx)
}
