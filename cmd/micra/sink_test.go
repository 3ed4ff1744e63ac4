package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/dgraph-io/badger/v4"
	"github.com/libp2p/go-libp2p/core/host"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/pb"
	"github.com/micra-crawler/micra/overlay"
)

// sinkProcess is a real `micra sink` child process.
type sinkProcess struct {
	cmd      *exec.Cmd
	addr     peer.AddrInfo
	httpBase string
	out      *bytes.Buffer
}

// startSink starts `micra sink` on data, listening on loopback (HTTP on
// httpAddr, a free port if empty).
func startSink(t *testing.T, data, httpAddr string) *sinkProcess {
	t.Helper()
	if httpAddr == "" {
		httpAddr = "127.0.0.1:0"
	}
	cmd := exec.Command(os.Args[0], "sink", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--http", httpAddr)
	cmd.Env = append(os.Environ(), mainEnv+"=1")
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	p := &sinkProcess{cmd: cmd, out: &stderr}
	sc := bufio.NewScanner(stdout)
	for p.httpBase == "" && sc.Scan() {
		line := sc.Text()
		if a, ok := strings.CutPrefix(line, "sink listening "); ok {
			info, err := peer.AddrInfoFromP2pAddr(ma.StringCast(a))
			if err != nil {
				t.Fatal(err)
			}
			p.addr = *info
		}
		if u, ok := strings.CutPrefix(line, "sink streams "); ok {
			p.httpBase = strings.TrimSuffix(strings.Fields(u)[0], "/v1/records")
		}
	}
	if p.httpBase == "" || p.addr.ID == "" {
		cmd.Process.Kill()
		cmd.Wait()
		t.Fatalf("sink did not start: %s", stderr.String())
	}
	go io.Copy(io.Discard, stdout)
	return p
}

// p2p is the sink's first libp2p address with /p2p/<id>.
func (p *sinkProcess) p2p() string { return p.addr.Addrs[0].String() + "/p2p/" + p.addr.ID.String() }

// joinAsMember makes h a member of the sink's network (a light member on
// the embedded snapshot, as the sink's, joined through the sink), so the
// sink admits its carriers; it leaves when the test ends.
func joinAsMember(t *testing.T, h host.Host, sp *sinkProcess) *overlay.LightMember {
	t.Helper()
	tree, err := hierarchy.Default()
	if err != nil {
		t.Skip("no embedded hierarchy:", err)
	}
	l, err := overlay.JoinMembership(context.Background(), h, overlay.LightConfig{Snapshot: tree.ID(), Nodes: tree.Len(),
		Bootstrap: []string{sp.p2p()}, HeartbeatInterval: 100 * time.Millisecond, FailureTimeout: time.Second, LoopbackTestnet: true,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { l.Close() })
	return l
}

// readRecords reads the change log after cursor, to its head.
func readRecords(t *testing.T, base string, after uint64) []sink.StreamRecord {
	t.Helper()
	resp, err := http.Get(fmt.Sprintf("%s/v1/records?after=%d", base, after))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out []sink.StreamRecord
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for sc.Scan() {
		var r sink.StreamRecord
		if err := json.Unmarshal(sc.Bytes(), &r); err != nil {
			t.Fatalf("line %q: %v", sc.Text(), err)
		}
		out = append(out, r)
	}
	return out
}

// The sink process takes carriers from members of the network only: a
// peer it has heard no heartbeat of is answered NOT_MEMBER with the
// reason (the carrier stays with it: not a rejection), counted by status,
// and nothing is stored; once the peer is a member, the same carrier is
// committed.
func TestSinkProcessAdmitsMembersOnly(t *testing.T) {
	if testing.Short() {
		t.Skip("starts a process")
	}
	sp := startSink(t, t.TempDir(), "")
	defer func() { sp.cmd.Process.Kill(); sp.cmd.Wait() }()
	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	client := &sink.Client{Host: h, Sink: sp.addr, Timeout: 5 * time.Second}
	id := h.ID().String()
	car := pack.EncodeCarrier(id, 0, time.Now(), []pack.Record{{URL: "http://a.example/", Status: 200, Change: pack.ChangeNew,
		FetchedAt: time.Now(), CrawlerID: id}})
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	err = client.Deliver(ctx, car)
	var re *sink.RefusedError
	if !errors.As(err, &re) || re.Status != pb.Status_NOT_MEMBER || !strings.Contains(re.Reason, "not a member of the network") ||
		errors.Is(err, pack.ErrRejected) {
		t.Fatalf("a stranger's carrier: %v; want NOT_MEMBER with the reason, kept by the sender", err)
	}
	if recs := readRecords(t, sp.httpBase, 0); len(recs) != 0 {
		t.Fatalf("a refused carrier stored %d records", len(recs))
	}
	resp, err := http.Get(sp.httpBase + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	metrics, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(metrics), `micra_sink_rejected_carriers_total{status="not_member"} 1`) {
		t.Fatalf("the refusal is not counted:\n%s", metrics)
	}

	joinAsMember(t, h, sp)
	for err = client.Deliver(ctx, car); err != nil; err = client.Deliver(ctx, car) {
		if !errors.As(err, &re) || re.Status != pb.Status_NOT_MEMBER || ctx.Err() != nil {
			t.Fatalf("a member's carrier: %v", err)
		}
		time.Sleep(50 * time.Millisecond) // its heartbeats are on their way
	}
	if recs := readRecords(t, sp.httpBase, 0); len(recs) != 1 || recs[0].CrawlerID != id {
		t.Fatalf("the member's carrier: %d records in the log", len(recs))
	}
}

// freeAddr is a loopback host:port nobody listens on now.
func freeAddr(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer ln.Close()
	return ln.Addr().String()
}

// follower is a real `micra subscribe --follow --cursor-file` process: an
// indexer following the sink's HTTP stream.
type follower struct {
	cmd    *exec.Cmd
	cursor string
	stderr bytes.Buffer // (read after Wait)
	mu     sync.Mutex
	lines  []string
	done   chan struct{}
}

func startFollower(t *testing.T, httpBase string) *follower {
	t.Helper()
	f := &follower{cursor: filepath.Join(t.TempDir(), "cursor"), done: make(chan struct{})}
	f.cmd = exec.Command(os.Args[0], "subscribe", "--sink", httpBase, "--follow", "--cursor-file", f.cursor)
	f.cmd.Env = append(os.Environ(), mainEnv+"=1")
	f.cmd.Stderr = &f.stderr
	stdout, err := f.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	if err := f.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(f.done)
		sc := bufio.NewScanner(stdout)
		sc.Buffer(make([]byte, 64<<10), 1<<20)
		for sc.Scan() {
			f.mu.Lock()
			f.lines = append(f.lines, sc.Text())
			f.mu.Unlock()
		}
	}()
	return f
}

// seen is how many records the follower printed.
func (f *follower) seen() int {
	f.mu.Lock()
	defer f.mu.Unlock()
	return len(f.lines)
}

// stop interrupts the follower and returns the records it printed.
func (f *follower) stop(t *testing.T) []sink.StreamRecord {
	t.Helper()
	f.cmd.Process.Signal(syscall.SIGINT)
	<-f.done
	f.cmd.Wait()
	var out []sink.StreamRecord
	for _, l := range f.lines {
		var r sink.StreamRecord
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("follower printed %q: %v", l, err)
		}
		out = append(out, r)
	}
	return out
}

// The sink process is SIGKILLed while a crawler's outbox is delivering to
// it and an indexer follows its HTTP stream (a real `micra subscribe
// --follow --cursor-file` process), then restarted on its data directory
// and HTTP address while the crawler keeps adding records. No carrier it
// acknowledged is lost, none is committed twice (the outbox redelivers
// what was in flight), and the follower — reconnecting by itself and
// resuming after its cursor — prints every record once, in order, with no
// gap; so does a reader that resumes from a cursor taken before the kill.
func TestSinkKilledDuringIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const carriers, perCarrier = 120, 40
	data, httpAddr := t.TempDir(), freeAddr(t)
	sp := startSink(t, data, httpAddr)
	defer func() { sp.cmd.Process.Kill(); sp.cmd.Wait() }()

	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	joinAsMember(t, h, sp) // the sink admits members only
	client := &sink.Client{Host: h, Sink: sp.addr, Timeout: 5 * time.Second}
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(t.TempDir(), "outbox")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := pack.NewOutbox(db, client, pack.Options{CrawlerID: h.ID().String(), MaxHold: time.Hour,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, DeliverTimeout: 5 * time.Second,
		Logger: slog.New(slog.DiscardHandler)})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	octx, stopOutbox := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ob.Run(octx) })
	defer func() { stopOutbox(); wg.Wait() }()
	fl := startFollower(t, sp.httpBase)
	defer func() { fl.cmd.Process.Kill(); fl.cmd.Wait() }()

	add := func(from, to int) {
		for c := from; c < to; c++ {
			for i := range perCarrier {
				r := pack.Record{URL: fmt.Sprintf("http://h%d.example/p%d", c%7, c*perCarrier+i), Status: 200,
					Change: pack.ChangeNew, FetchedAt: time.Now()}
				if err := ob.Add(ctx, &r); err != nil {
					t.Fatal(err)
				}
			}
			if err := ob.Flush(); err != nil {
				t.Fatal(err)
			}
		}
	}
	waitFor := func(what string, cond func() bool) {
		t.Helper()
		for !cond() {
			if ctx.Err() != nil {
				t.Fatalf("timed out waiting for %s (outbox %+v, follower %d records; sink: %s)", what, ob.Stats(), fl.seen(), sp.out.String())
			}
			time.Sleep(5 * time.Millisecond)
		}
	}
	add(0, carriers/2)
	// killed while ingesting, with the follower streaming
	waitFor("a quarter of the carriers and the follower", func() bool {
		return ob.Stats().CarriersDelivered >= carriers/4 && fl.seen() > 0
	})
	// a reader takes a cursor before the kill
	before := readRecords(t, sp.httpBase, 0)
	if err := sp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sp.cmd.Wait()
	acked, followed := ob.Stats().CarriersDelivered, fl.seen()
	add(carriers/2, carriers) // the crawler goes on meanwhile

	sp = startSink(t, data, httpAddr) // same identity and HTTP address, a new libp2p port
	h.Peerstore().AddAddrs(sp.addr.ID, sp.addr.Addrs, time.Hour)
	if err := ob.Drain(ctx); err != nil {
		t.Fatalf("drain after the restart: %v (outbox %+v; sink: %s)", err, ob.Stats(), sp.out.String())
	}
	waitFor("the follower to reach the head", func() bool { return fl.seen() >= carriers*perCarrier })

	check := func(who string, recs []sink.StreamRecord) {
		t.Helper()
		seen := map[string]bool{}
		for i, r := range recs {
			if r.Seq != uint64(i+1) {
				t.Fatalf("%s: record %d has seq %d: a gap or a duplicate in the resumed stream", who, i, r.Seq)
			}
			if seen[r.URL] {
				t.Fatalf("%s: %s committed twice", who, r.URL)
			}
			seen[r.URL] = true
		}
		if len(recs) != carriers*perCarrier {
			t.Fatalf("%s: %d records, want %d (%d carriers acknowledged before the kill)", who, len(recs), carriers*perCarrier, acked)
		}
	}
	cursor := uint64(0)
	if len(before) > 0 {
		cursor = before[len(before)-1].Seq
	}
	check("the log read from a cursor", append(before, readRecords(t, sp.httpBase, cursor)...))
	check("the follower", fl.stop(t))
	if !strings.Contains(fl.stderr.String(), "stream ended, reconnecting") {
		t.Fatalf("the follower never lost its stream: the kill did not reach it\n%s", fl.stderr.String())
	}
	if b, err := os.ReadFile(fl.cursor); err != nil || strings.TrimSpace(string(b)) != fmt.Sprint(carriers*perCarrier) {
		t.Fatalf("the follower's cursor file: %q, %v; want %d", b, err, carriers*perCarrier)
	}
	t.Logf("killed after %d acknowledged carriers, the follower had printed %d records and a reader read %d; %d records after the restart",
		acked, followed, len(before), carriers*perCarrier)
}

// sink import commits carrier files once: a second import of the same
// folder adds nothing, and a damaged file is reported as "file: reason"
// (exit non-zero) while the others are imported.
func TestSinkImport(t *testing.T) {
	dir, data := t.TempDir(), t.TempDir()
	writeCarriers(t, dir)
	var out, errw bytes.Buffer
	err := sinkImport(&out, &errw, data, []string{dir}, true)
	if err == nil || !strings.Contains(errw.String(), "c1-zz-damaged.mcar: ") || !strings.Contains(out.String(), "imported 2 carriers (3 records)") {
		t.Fatalf("first import: %v\nout: %s\nerr: %s", err, out.String(), errw.String())
	}
	out.Reset()
	errw.Reset()
	os.Remove(filepath.Join(dir, "c1-zz-damaged.mcar"))
	if err := sinkImport(&out, &errw, data, []string{dir}, true); err != nil || !strings.Contains(out.String(), "imported 0 carriers (0 records); 2 committed before; head 3") {
		t.Fatalf("second import: %v\nout: %s\nerr: %s", err, out.String(), errw.String())
	}
}

// micra subscribe --cursor-file resumes exactly after the last record it
// printed: run again, it prints only what came since.
func TestSubscribeCursorFile(t *testing.T) {
	store, err := sink.Open(sink.Options{Dir: t.TempDir(), NoSync: true})
	if err != nil {
		t.Fatal(err)
	}
	defer store.Close()
	srv := httptest.NewServer(sink.Handler(store, nil, nil))
	defer srv.Close()
	commit := func(seq uint64, from, n int) {
		recs := make([]pack.Record, n)
		for i := range recs {
			recs[i] = pack.Record{URL: fmt.Sprintf("http://h.example/%d", from+i), Status: 200, Change: pack.ChangeNew}
		}
		if _, err := store.Commit("c", pack.EncodeCarrier("c", seq, time.Now(), recs).Data); err != nil {
			t.Fatal(err)
		}
	}
	cursor := filepath.Join(t.TempDir(), "cursor")
	o := &subscribeOptions{sink: srv.URL, cursorFile: cursor}
	run := func() []uint64 {
		t.Helper()
		var out bytes.Buffer
		if err := runSubscribe(context.Background(), &out, o); err != nil {
			t.Fatal(err)
		}
		var seqs []uint64
		for _, line := range strings.Split(strings.TrimSpace(out.String()), "\n") {
			if line == "" {
				continue
			}
			var r sink.StreamRecord
			if err := json.Unmarshal([]byte(line), &r); err != nil {
				t.Fatal(err)
			}
			seqs = append(seqs, r.Seq)
		}
		return seqs
	}
	commit(0, 0, 5)
	if got := run(); fmt.Sprint(got) != "[1 2 3 4 5]" {
		t.Fatalf("first run: %v", got)
	}
	commit(1, 5, 3)
	if got := run(); fmt.Sprint(got) != "[6 7 8]" {
		t.Fatalf("resumed run: %v", got)
	}
	if b, _ := os.ReadFile(cursor); strings.TrimSpace(string(b)) != "8" {
		t.Fatalf("cursor file %q", b)
	}
}
