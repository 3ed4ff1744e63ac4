package overlay

import (
	"bufio"
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"os/exec"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

const spoolChildEnv = "MICRA_OVERLAY_SPOOL_CHILD_DIR"

// handoffTargets are addresses in three subnets of testTree.
var handoffTargets = []netip.Addr{
	netip.MustParseAddr("127.2.1.20"),
	netip.MustParseAddr("127.5.0.9"),
	netip.MustParseAddr("127.7.3.200"),
}

// TestHandoffSpoolChild is the process TestHandoffSurvivesKill kills: an
// isolated peer (no bootstrap, so no owner is reachable and nothing is
// delivered) that hands off URLs from four goroutines (two by Handoff, two
// by HandoffAll across subnets) as fast as it can and
// prints each URL once Handoff returned nil — the crawl engine's view of
// "durably accepted" — until it is SIGKILLed.
func TestHandoffSpoolChild(t *testing.T) {
	dir := os.Getenv(spoolChildEnv)
	if dir == "" {
		t.Skip("child process of TestHandoffSurvivesKill")
	}
	tree := testTree(t)
	cfg := TestnetConfig()
	cfg.HandoffInMemory, cfg.HandoffDir = false, dir
	cfg.HandoffSyncWrites = false // a kill, not a power cut: Badger's mmapped log suffices
	p, err := Open(context.Background(), tree, cfg, Services{Sink: &memSink{}})
	if err != nil {
		fmt.Println("ERR", err)
		os.Exit(2)
	}
	var mu sync.Mutex
	out := bufio.NewWriter(os.Stdout)
	var wg sync.WaitGroup
	for g := range 4 {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; ; i++ {
				ip := handoffTargets[(g+i)%len(handoffTargets)]
				s := tree.SmallestNonUnary(ip)
				// Calls of 1..3 URLs, like a page's foreign links.
				urls := make([]string, 1+i%3)
				for j := range urls {
					urls[j] = fmt.Sprintf("http://%v/g%d/%d/%d", ip, g, i, j)
				}
				var err error
				if g < 2 {
					err = p.Handoff(context.Background(), s, ip, urls...)
				} else {
					// A page's links across subnets in one commit.
					var items []HandoffItem
					for j, u := range urls {
						ip := handoffTargets[(g+i+j)%len(handoffTargets)]
						urls[j] = strings.Replace(u, handoffTargets[(g+i)%len(handoffTargets)].String(), ip.String(), 1)
						items = append(items, HandoffItem{Subnet: tree.SmallestNonUnary(ip), IP: ip, URLs: []string{urls[j]}})
					}
					err = p.HandoffAll(context.Background(), items)
				}
				if err != nil {
					mu.Lock()
					fmt.Fprintln(out, "ERR", err)
					out.Flush()
					mu.Unlock()
					return
				}
				mu.Lock()
				for _, u := range urls {
					fmt.Fprintln(out, "ACK", u)
				}
				out.Flush()
				mu.Unlock()
			}
		}()
	}
	wg.Wait()
	os.Exit(3)
}

// TestHandoffSurvivesKill: URLs whose Handoff returned nil in a process that
// is then SIGKILLed reach their owner after a restart from the same spool
// directory — every one at least once — and leave the spool once delivered.
func TestHandoffSurvivesKill(t *testing.T) {
	if testing.Short() {
		t.Skip("re-executes the test binary")
	}
	dir := t.TempDir()
	cmd := exec.Command(os.Args[0], "-test.run=^TestHandoffSpoolChild$", "-test.count=1")
	cmd.Env = append(os.Environ(), spoolChildEnv+"="+dir)
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	cmd.Stderr = os.Stderr
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	acked := map[string]bool{}
	sc := bufio.NewScanner(stdout)
	const killAfter = 3000
	for sc.Scan() {
		line := sc.Text()
		if u, ok := strings.CutPrefix(line, "ACK "); ok {
			acked[u] = true
			if len(acked) == killAfter {
				// Mid-stream: Handoff calls are in flight in the child.
				if err := cmd.Process.Signal(syscall.SIGKILL); err != nil {
					t.Fatal(err)
				}
			}
		} else if strings.HasPrefix(line, "ERR") {
			t.Fatalf("child: %s", line)
		}
	}
	// Lines written between the kill signal and the child's death were acked too.
	werr := cmd.Wait()
	if len(acked) < killAfter {
		t.Fatalf("child exited (%v) after %d acknowledged URLs", werr, len(acked))
	}
	if ws, ok := cmd.ProcessState.Sys().(syscall.WaitStatus); !ok || !ws.Signaled() || ws.Signal() != syscall.SIGKILL {
		t.Fatalf("child was not killed by SIGKILL: %v", cmd.ProcessState)
	}

	// The killed peer restarts from the same directory and joins a network of three.
	tn := newTestNet(t, 3, nil)
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	defer cancel()
	tn.settle(t, tn.peers, 5*time.Second)
	cfg := TestnetConfig()
	cfg.HandoffInMemory, cfg.HandoffDir = false, dir
	for _, a := range tn.peers[0].h.Addrs() {
		cfg.Bootstrap = append(cfg.Bootstrap, a.String()+"/p2p/"+tn.peers[0].ID().String())
	}
	restartedSink := &memSink{}
	restarted, err := Open(ctx, tn.tree, cfg, Services{Sink: restartedSink, Measurer: modelMeasurer{i: 5}})
	if err != nil {
		t.Fatal(err)
	}
	restarted.NewPolicy(delegation.NewIPMicra, delegation.Config{})
	closed := false
	defer func() {
		if !closed {
			restarted.Close()
		}
	}()
	st := restarted.HandoffStats()
	if st.Reloaded < uint64(len(acked)) {
		t.Fatalf("reloaded %d URLs from the spool, %d were acknowledged before the kill", st.Reloaded, len(acked))
	}
	waitFor(t, 30*time.Second, func() bool { return restarted.HandoffStats().Pending == 0 })
	// Each URL went to its subnet's owner, as the network sees it now.
	all := append([]*Peer{restarted}, tn.peers...)
	sinks := append([]*memSink{restartedSink}, tn.sinks...)
	owner := map[hierarchy.NodeID]delegation.CrawlerID{}
	for _, ip := range handoffTargets {
		d, err := tn.peers[1].Delegate(ctx, ip)
		if err != nil {
			t.Fatal(err)
		}
		owner[d.Subnet] = d.Owner
	}
	got := map[string]int{}
	for i, s := range sinks {
		for _, u := range s.got() {
			got[u]++
			ip := netip.MustParseAddr(strings.Split(strings.TrimPrefix(u, "http://"), "/")[0])
			if o := owner[tn.tree.SmallestNonUnary(ip)]; o != all[i].CrawlerID() {
				t.Fatalf("%s delivered to %s, its owner is %s", u, shortID(all[i].ID()), o)
			}
		}
	}
	lost, dup := 0, 0
	for u := range acked {
		switch n := got[u]; {
		case n == 0:
			lost++
		case n > 1:
			dup++
		}
	}
	st = restarted.HandoffStats()
	t.Logf("%d URLs acknowledged before SIGKILL, %d reloaded, %d delivered (%d distinct) in %d messages; %d acknowledged ones duplicated, %d lost",
		len(acked), st.Reloaded, sumCounts(got), len(got), st.Messages, dup, lost)
	if lost > 0 {
		t.Fatalf("%d of %d acknowledged URLs lost across the kill", lost, len(acked))
	}
	// Delivered entries left the spool: a second restart reloads nothing.
	closed = true
	if err := restarted.Close(); err != nil {
		t.Fatal(err)
	}
	cfg.Bootstrap = nil
	again, err := Open(ctx, tn.tree, cfg, Services{Sink: &memSink{}})
	if err != nil {
		t.Fatal(err)
	}
	defer again.Close()
	if n := again.HandoffStats().Reloaded; n != 0 {
		t.Fatalf("%d acknowledged URLs still in the spool after delivery", n)
	}
}

func sumCounts(m map[string]int) int {
	n := 0
	for _, c := range m {
		n += c
	}
	return n
}

func TestSpoolValueRoundTrip(t *testing.T) {
	ip := netip.MustParseAddr("2001:db8::1")
	urls := []string{"http://a/", "https://b/x?y=1"}
	gotIP, gotURLs, err := decodeSpoolValue(encodeSpoolValue(ip, urls))
	if err != nil || gotIP != ip || strings.Join(gotURLs, " ") != strings.Join(urls, " ") {
		t.Fatalf("round trip: %v %v %v", gotIP, gotURLs, err)
	}
	if _, u, err := decodeSpoolValue(encodeSpoolValue(netip.Addr{}, urls)); err != nil || len(u) != 2 {
		t.Fatalf("no address: %v %v", u, err)
	}
	v := encodeSpoolValue(ip, urls)
	for _, bad := range [][]byte{nil, v[:len(v)-1], append(v, 0)} {
		if _, _, err := decodeSpoolValue(bad); err == nil {
			t.Fatalf("malformed value %x accepted", bad)
		}
	}
}

func TestHandoffRefusesBadInput(t *testing.T) {
	tree := testTree(t)
	p, err := Open(context.Background(), tree, TestnetConfig(), Services{})
	if err != nil {
		t.Fatal(err)
	}
	defer p.Close()
	ip := handoffTargets[0]
	if err := p.Handoff(context.Background(), hierarchy.NodeID(tree.Len()), ip, "http://x/"); err == nil {
		t.Fatal("subnet outside the hierarchy accepted")
	}
	if err := p.Handoff(context.Background(), tree.SmallestNonUnary(ip), ip, ""); err == nil {
		t.Fatal("empty URL accepted")
	}
	cfg := TestnetConfig()
	cfg.HandoffInMemory = false
	if _, err := Open(context.Background(), tree, cfg, Services{}); err == nil {
		t.Fatal("peer without a hand-off spool accepted")
	}
}

// BenchmarkHandoff is the cost of making hand-offs durable: one URL per
// call, and a page's ten links across subnets per HandoffAll, in memory and
// on disk with and without fsync. The peer is alone, so the spool only grows.
func BenchmarkHandoff(b *testing.B) {
	tree := testTree(b)
	for _, mode := range []string{"memory", "disk", "disk-fsync"} {
		cfg := TestnetConfig()
		if mode != "memory" {
			cfg.HandoffInMemory, cfg.HandoffDir, cfg.HandoffSyncWrites = false, b.TempDir(), mode == "disk-fsync"
		}
		cfg.HandoffInterval = time.Hour
		p, err := Open(context.Background(), tree, cfg, Services{})
		if err != nil {
			b.Fatal(err)
		}
		ip := handoffTargets[0]
		s := tree.SmallestNonUnary(ip)
		b.Run(mode+"/url", func(b *testing.B) {
			for i := range b.N {
				if err := p.Handoff(context.Background(), s, ip, fmt.Sprintf("http://%v/u/%d", ip, i)); err != nil {
					b.Fatal(err)
				}
			}
		})
		b.Run(mode+"/page-of-10", func(b *testing.B) {
			items := make([]HandoffItem, 10)
			for i := range b.N {
				for j := range items {
					ip := handoffTargets[j%len(handoffTargets)]
					items[j] = HandoffItem{Subnet: tree.SmallestNonUnary(ip), IP: ip, URLs: []string{fmt.Sprintf("http://%v/p/%d/%d", ip, i, j)}}
				}
				if err := p.HandoffAll(context.Background(), items); err != nil {
					b.Fatal(err)
				}
			}
		})
		p.Close()
	}
}

// The in-memory spool (tests, benches) has no value log, so Badger refuses
// values above its value threshold: a page's hand-off of many long URLs to
// one subnet must still fit.
func TestInMemorySpoolTakesLargeChunks(t *testing.T) {
	sp, err := openSpool("", true, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	// The largest chunk HandoffAll makes: maxSpoolChunkBytes of long URLs.
	var urls []string
	for size, i := 0, 0; ; i++ {
		u := fmt.Sprintf("http://host-%d.example/%s", i, strings.Repeat("p", 200))
		if size+len(u) > maxSpoolChunkBytes {
			break
		}
		urls = append(urls, u)
		size += len(u)
	}
	ip := netip.MustParseAddr("192.0.2.1")
	ents, err := sp.put([]spoolPut{{s: 7, ip: ip, first: 1, chunks: [][]string{urls}}})
	if err != nil {
		t.Fatalf("in-memory spool refused a chunk of %d URLs: %v", len(urls), err)
	}
	if len(ents) != 1 || len(ents[0]) != 1 {
		t.Fatalf("put returned %v entries", ents)
	}
}
