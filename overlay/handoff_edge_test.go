package overlay

import (
	"context"
	"fmt"
	"log/slog"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// TestHandoffMessageWithinSizeLimit: flush packs a message up to
// maxHandoffURLs URLs but never bounds its bytes. 4096 URLs of ~1.1 KB (legal:
// maxURLLen is 8 KiB) make a message above maxHandoffMsg (4 MiB); the
// stream write refuses it, the batch is retried with back-off for ever and
// the URLs never reach their owner.
func TestHandoffMessageWithinSizeLimit(t *testing.T) {
	tn := newTestNet(t, 2, nil)
	a, b := tn.peers[0], tn.peers[1]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	tn.settle(t, tn.peers, slowdown*5*time.Second)
	if o, ok := b.CachedOwner(a.cfg.CrawlerAddr); !ok || o != a.CrawlerID() {
		t.Fatalf("b does not see a as the owner: %v %v", o, ok)
	}
	ip := a.cfg.CrawlerAddr
	var urls []string
	for i := range maxHandoffURLs {
		urls = append(urls, fmt.Sprintf("http://%s/%s/%d", ip, strings.Repeat("q", 1100), i))
	}
	if err := b.Handoff(ctx, d.Subnet, ip, urls...); err != nil {
		t.Fatal(err)
	}
	deadline := time.Now().Add(slowdown * 8 * time.Second)
	for time.Now().Before(deadline) {
		if len(tn.sinks[0].got()) == len(urls) && b.HandoffStats().Pending == 0 {
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
	st := b.HandoffStats()
	t.Fatalf("owner got %d of %d URLs after 8 s (sender: pending %d, failures %d, resent %d)",
		len(tn.sinks[0].got()), len(urls), st.Pending, st.Failures, st.Resent)
}

func reviewDirSize(dir string) (total int64, vlogs int) {
	filepath.Walk(dir, func(_ string, fi os.FileInfo, err error) error {
		if err == nil && !fi.IsDir() {
			total += fi.Size()
			if strings.HasSuffix(fi.Name(), ".vlog") {
				vlogs++
			}
		}
		return nil
	})
	return
}

// TestSpoolDiskSpaceReclaimed: on disk, every spool value above 1 KiB
// goes to Badger's value log, and nothing ever runs value-log GC: the
// space of acknowledged (deleted) hand-offs is never reclaimed, so an
// empty spool grows with every URL ever handed off.
func TestSpoolDiskSpaceReclaimed(t *testing.T) {
	dir := t.TempDir()
	sp, err := openSpool(dir, false, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer func() { sp.close() }()
	ip := netip.MustParseAddr("192.0.2.1")
	var chunk []string
	for i := range 1000 {
		chunk = append(chunk, fmt.Sprintf("http://192.0.2.1/%s/%d", strings.Repeat("x", 180), i))
	}
	// ~120 MB through the spool, never more than one 200 KB entry held
	for round := range 600 {
		ents, err := sp.put([]spoolPut{{s: 7, ip: ip, first: uint64(round), chunks: [][]string{chunk}}})
		if err != nil {
			t.Fatal(err)
		}
		if err := sp.remove([][]byte{ents[0][0].key}); err != nil {
			t.Fatal(err)
		}
	}
	size, vlogs := reviewDirSize(dir)
	if size > 100<<20 {
		t.Fatalf("empty spool occupies %d MiB on disk (%d value-log files) after ~120 MB of acknowledged hand-offs", size>>20, vlogs)
	}
}

// TestInMemorySpoolShortURLChunk: HandoffAll makes chunks of up to
// 4096 URLs and 256 KiB of URL bytes; with 4096 URLs of 64 bytes the
// framing (one varint byte per URL + header) is 4103 bytes, above the
// 4 KiB slack of the in-memory value threshold, and Badger refuses it.
func TestInMemorySpoolShortURLChunk(t *testing.T) {
	sp, err := openSpool("", true, false, slog.New(slog.DiscardHandler))
	if err != nil {
		t.Fatal(err)
	}
	defer sp.close()
	var urls []string
	for i := range maxHandoffURLs {
		u := fmt.Sprintf("http://192.0.2.1/%04d/", i)
		u += strings.Repeat("p", 64-len(u))
		urls = append(urls, u)
	}
	// exactly one chunk by HandoffAll's rule
	if len(urls) != maxHandoffURLs || len(urls)*64 > maxSpoolChunkBytes {
		t.Fatal("setup")
	}
	if _, err := sp.put([]spoolPut{{s: 7, ip: netip.MustParseAddr("192.0.2.1"), first: 1, chunks: [][]string{urls}}}); err != nil {
		t.Fatalf("in-memory spool refused one HandoffAll chunk: %.120s", err.Error())
	}
}

type countingSink struct {
	memSink
	calls atomic.Int64
}

func (s *countingSink) Accept(ctx context.Context, urls []string) error {
	s.calls.Add(1)
	return s.memSink.Accept(ctx, urls)
}

// TestBackedOffQueueDoesNotKickEveryCall: a queue holding HandoffBatch URLs
// whose owner cannot be reached sits in back-off, yet every HandoffAll that
// adds to it kicks a flush; each such flush (which skips it) sends every
// other queue at once, so batching collapses to one message per owner per
// call for as long as that owner is unreachable.
func TestBackedOffQueueDoesNotKickEveryCall(t *testing.T) {
	sink := &countingSink{}
	tn := newTestNet(t, 1, func(_ int, c *Config, s *Services) {
		c.HandoffInterval = 3 * time.Second
		c.HandoffBatch = 20
		s.Sink = sink
	})
	p := tn.peers[0]
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	own := netip.MustParseAddr("127.6.3.10")
	if _, err := p.Delegate(ctx, own); err != nil {
		t.Fatal(err)
	}
	sOwn := tn.tree.SmallestNonUnary(own)
	// a subnet nobody holds, queued without an address: its owner cannot
	// be resolved (stand-in for any unreachable owner)
	sDead := tn.tree.SmallestNonUnary(netip.MustParseAddr("127.5.2.9"))
	var full []string
	for i := range 20 {
		full = append(full, fmt.Sprintf("http://x/%d", i))
	}
	if err := p.Handoff(ctx, sDead, netip.Addr{}, full...); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*5*time.Second, func() bool { return p.HandoffStats().Failures >= 1 })
	before := sink.calls.Load()
	for i := range 10 {
		if err := p.HandoffAll(ctx, []HandoffItem{
			{Subnet: sDead, URLs: []string{fmt.Sprintf("http://x/more/%d", i)}},
			{Subnet: sOwn, IP: own, URLs: []string{fmt.Sprintf("http://%s/%d", own, i)}},
		}); err != nil {
			t.Fatal(err)
		}
		time.Sleep(30 * time.Millisecond)
	}
	time.Sleep(100 * time.Millisecond)
	if n := sink.calls.Load() - before; n > 2 {
		t.Fatalf("10 single-URL hand-offs within 0.4 s (HandoffInterval 3 s, HandoffBatch 20) were flushed in %d deliveries: the backed-off queue kicks a flush on every call", n)
	}
}
