package main

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
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
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"

	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/overlay"
)

// sinkProcess is a real `micra sink` child process.
type sinkProcess struct {
	cmd      *exec.Cmd
	addr     peer.AddrInfo
	httpBase string
	out      *bytes.Buffer
}

func startSink(t *testing.T, data string) *sinkProcess {
	t.Helper()
	cmd := exec.Command(os.Args[0], "sink", "--data", data, "--listen", "/ip4/127.0.0.1/tcp/0", "--http", "127.0.0.1:0")
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

// The sink process is SIGKILLed while a crawler's outbox is delivering to
// it, and restarted on its data directory: no carrier it acknowledged is
// lost, none is committed twice (the outbox redelivers what was in flight),
// and a subscriber that resumes from its cursor sees every record once, in
// order, with no gap.
func TestSinkKilledDuringIngest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts processes")
	}
	const carriers, perCarrier = 120, 40
	data := t.TempDir()
	sp := startSink(t, data)
	defer func() { sp.cmd.Process.Kill(); sp.cmd.Wait() }()

	h, err := overlay.NewHost(overlay.TestnetConfig())
	if err != nil {
		t.Fatal(err)
	}
	defer h.Close()
	client := &sink.Client{Host: h, Sink: sp.addr, Timeout: 5 * time.Second}
	db, err := badger.Open(badger.DefaultOptions(filepath.Join(t.TempDir(), "outbox")).WithLogger(nil))
	if err != nil {
		t.Fatal(err)
	}
	defer db.Close()
	ob, err := pack.NewOutbox(db, client, pack.Options{CrawlerID: h.ID().String(), MaxHold: time.Hour,
		RetryMin: 20 * time.Millisecond, RetryMax: 200 * time.Millisecond, DeliverTimeout: 5 * time.Second})
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
	defer cancel()
	octx, stopOutbox := context.WithCancel(ctx)
	var wg sync.WaitGroup
	wg.Go(func() { ob.Run(octx) })
	defer func() { stopOutbox(); wg.Wait() }()

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
	add(0, carriers/2)
	deadline := time.Now().Add(30 * time.Second)
	for ob.Stats().CarriersDelivered < carriers/4 && time.Now().Before(deadline) {
		time.Sleep(5 * time.Millisecond)
	}
	// a subscriber reads part of the log before the kill
	before := readRecords(t, sp.httpBase, 0)
	if err := sp.cmd.Process.Signal(syscall.SIGKILL); err != nil {
		t.Fatal(err)
	}
	sp.cmd.Wait()
	acked := ob.Stats().CarriersDelivered
	add(carriers/2, carriers) // the crawler goes on meanwhile

	sp = startSink(t, data) // same identity, a new port
	h.Peerstore().AddAddrs(sp.addr.ID, sp.addr.Addrs, time.Hour)
	if err := ob.Drain(ctx); err != nil {
		t.Fatalf("drain after the restart: %v (outbox %+v; sink: %s)", err, ob.Stats(), sp.out.String())
	}
	cursor := uint64(0)
	if len(before) > 0 {
		cursor = before[len(before)-1].Seq
	}
	all := append(before, readRecords(t, sp.httpBase, cursor)...)
	seen := map[string]bool{}
	for i, r := range all {
		if r.Seq != uint64(i+1) {
			t.Fatalf("record %d has seq %d: a gap or a duplicate in the resumed stream", i, r.Seq)
		}
		if seen[r.URL] {
			t.Fatalf("%s committed twice", r.URL)
		}
		seen[r.URL] = true
	}
	if len(all) != carriers*perCarrier {
		t.Fatalf("%d records in the log, want %d (%d carriers acknowledged before the kill)", len(all), carriers*perCarrier, acked)
	}
	t.Logf("killed after %d acknowledged carriers, subscriber had read %d records; %d records after the restart",
		acked, len(before), len(all))
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
