package overlay

// The directory's bounded cache (Config.MaxCachedRecords, makeRoomLocked).

import (
	"context"
	crand "crypto/rand"
	"fmt"
	"maps"
	"math/rand/v2"
	"net/netip"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// bigTree is a hierarchy over loopback space with many subnets: 127.0.0.0/8,
// ni /16s (two per organisation), each split into nj /24s.
func bigTree(t testing.TB, ni, nj int) *hierarchy.Tree {
	t.Helper()
	b := hierarchy.NewBuilder()
	add := func(start, end, org string) {
		if err := b.Add(hierarchy.Range{Start: netip.MustParseAddr(start), End: netip.MustParseAddr(end), Org: org,
			Registry: hierarchy.Registry(1), Country: "NL"}); err != nil {
			t.Fatal(err)
		}
	}
	add("127.0.0.0", "127.255.255.255", "LOOPBACK-NIC")
	for i := range ni {
		org := fmt.Sprintf("ORG-%d", i/2)
		add(fmt.Sprintf("127.%d.0.0", i), fmt.Sprintf("127.%d.255.255", i), org)
		for j := range nj {
			add(fmt.Sprintf("127.%d.%d.0", i, j), fmt.Sprintf("127.%d.%d.255", i, j), org)
		}
	}
	tr, _, err := b.Build()
	if err != nil {
		t.Fatal(err)
	}
	return tr
}

// openLone opens one peer without bootstrap peers over tree.
func openLone(t testing.TB, tree *hierarchy.Tree, bound int) *Peer {
	t.Helper()
	cfg := TestnetConfig()
	cfg.CrawlerAddr = netip.MustParseAddr("127.0.0.1")
	cfg.MaxCachedRecords = bound
	p, err := Open(context.Background(), tree, cfg, Services{Measurer: modelMeasurer{}})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { p.Close() })
	return p
}

// recomputedIndexes builds the holder indexes from the cached records, as
// indexLocked keeps them (no empty sets: forgotten records must not leave
// one behind per subnet).
func recomputedIndexes(d *Directory) (map[hierarchy.NodeID]map[delegation.CrawlerID]int, map[hierarchy.OrgID]map[delegation.CrawlerID]int) {
	under := map[hierarchy.NodeID]map[delegation.CrawlerID]int{}
	org := map[hierarchy.OrgID]map[delegation.CrawlerID]int{}
	t := d.p.tree
	for _, e := range d.recs {
		r := e.rec
		for _, a := range append([]hierarchy.NodeID{r.Subnet}, t.Ancestors(r.Subnet)...) {
			if under[a] == nil {
				under[a] = map[delegation.CrawlerID]int{}
			}
			under[a][r.Owner]++
		}
		if o := t.Node(r.Subnet).Org; o != 0 {
			if org[o] == nil {
				org[o] = map[delegation.CrawlerID]int{}
			}
			org[o][r.Owner]++
		}
	}
	return under, org
}

func checkIndexes(t *testing.T, d *Directory, when string) {
	t.Helper()
	d.mu.RLock()
	defer d.mu.RUnlock()
	under, org := recomputedIndexes(d)
	if !maps.EqualFunc(d.under, under, maps.Equal) {
		t.Fatalf("%s: the under index differs from a recomputation over the %d cached records", when, len(d.recs))
	}
	if !maps.EqualFunc(d.org, org, maps.Equal) {
		t.Fatalf("%s: the org index differs from a recomputation over the %d cached records", when, len(d.recs))
	}
	for s := range d.owned {
		if e, ok := d.recs[s]; !ok || e.rec.Owner != d.p.selfID {
			t.Fatalf("%s: owned subnet %d not cached as this peer's", when, s)
		}
	}
}

// boundFeed is a deterministic stream of sealed records for a directory:
// subnets of tree drawn at random (so many are replaced, most are new),
// owned by one of a few crawlers; every 97th owned by self, every 89th
// giving self a block; interleaved with uses of a small hot set.
type boundFeed struct {
	recs []delegation.Record
	raws [][]byte
	hot  []hierarchy.NodeID // subnets used (Cached) after every record
}

func newBoundFeed(t *testing.T, p *Peer, tree *hierarchy.Tree, n int) boundFeed {
	others := make([]keyed, 6)
	for i := range others {
		others[i] = newKeyed(t)
	}
	rng := rand.New(rand.NewPCG(7, 11))
	var f boundFeed
	epoch := map[hierarchy.NodeID]uint64{}
	now := time.Now()
	leaf := func() hierarchy.NodeID {
		for {
			s := hierarchy.NodeID(1 + rng.IntN(tree.Len()-1))
			if len(tree.Children(s)) == 0 {
				return s
			}
		}
	}
	for k := range 8 {
		f.hot = append(f.hot, hierarchy.NodeID(2+k*3))
	}
	for k := range n {
		s := leaf()
		if k < len(f.hot) {
			s = f.hot[k]
		}
		o := others[rng.IntN(len(others))]
		owner, osk := o.id, o.sk
		if k%97 == 50 {
			owner, osk = p.selfID, p.sk
		}
		epoch[s]++
		rec := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: owner, OwnerRTT: time.Duration(1+rng.IntN(90)) * time.Millisecond,
			Epoch: epoch[s], DecidedBy: o.id, At: now,
			Probes: []delegation.ProbeResult{{Crawler: owner, RTT: 5 * time.Millisecond, OK: true}, {Crawler: others[0].id, RTT: 9 * time.Millisecond, OK: true}}}
		if k%89 == 40 && owner != p.selfID {
			host := tree.Node(s).Start.Next()
			rec.Blocks = []delegation.BlockDelegation{{Host: host, Owner: p.selfID, OwnerRTT: time.Millisecond}}
		}
		f.recs = append(f.recs, rec)
		f.raws = append(f.raws, seal(t, rec, osk, o.sk))
	}
	return f
}

// TestDirectoryBoundForgetsLeastRecentlyUsed: a directory fed many times
// more records than its bound stays within it, forgets the least recently
// used records and never one this peer crawls from (its subnets, its
// blocks), keeps its holder indexes equal to a recomputation from the
// cached records, and marks what it forgot.
func TestDirectoryBoundForgetsLeastRecentlyUsed(t *testing.T) {
	const bound, n = 256, 3000
	tree := bigTree(t, 16, 256)
	p := openLone(t, tree, bound)
	f := newBoundFeed(t, p, tree, n)
	d := p.Directory()
	for k, rec := range f.recs {
		d.merge(rec, f.raws[k])
		for _, s := range f.hot {
			d.Cached(s)
		}
		if got := d.Len(); got > bound {
			t.Fatalf("after %d records the cache holds %d, bound %d", k+1, got, bound)
		}
		if k%100 == 0 || k == len(f.recs)-1 {
			checkIndexes(t, d, fmt.Sprintf("after %d records", k+1))
		}
	}
	if d.forgets < n/2 {
		t.Fatalf("%d records forgotten of %d fed with a bound of %d", d.forgets, n, bound)
	}
	// the latest record of every subnet this peer crawls from is cached
	latest := map[hierarchy.NodeID]delegation.Record{}
	for _, r := range f.recs {
		latest[r.Subnet] = r
	}
	mine := 0
	for s, r := range latest {
		if r.Owner != p.selfID && !slices.ContainsFunc(r.Blocks, func(b delegation.BlockDelegation) bool { return b.Owner == p.selfID }) {
			continue
		}
		mine++
		got, ok := d.get(s)
		if !ok || got.Epoch != r.Epoch {
			t.Fatalf("subnet %d, crawled by this peer (owner %s, blocks %v), was forgotten", s, short(string(r.Owner)), r.Blocks)
		}
	}
	if mine < 20 {
		t.Fatalf("only %d subnets of this peer in the feed: the check above is vacuous", mine)
	}
	if owned := d.Owned(); len(owned) == 0 {
		t.Fatal("no subnet owned")
	}
	// the hot set, used after every record, is never the least recent
	for _, s := range f.hot {
		if _, ok := d.get(s); !ok {
			t.Fatalf("subnet %d, used after every record, was forgotten", s)
		}
	}
	// a forgotten subnet is marked as such until cached again
	forgotten := 0
	for s := range latest {
		if _, ok := d.get(s); !ok {
			forgotten++
			if !d.wasForgotten(s) {
				t.Fatalf("subnet %d not cached but not marked forgotten", s)
			}
		}
	}
	if forgotten == 0 {
		t.Fatal("no subnet forgotten")
	}
}

// TestDirectoryBoundDeterministic: two directories fed the same records,
// with the same uses in between, keep the same records.
func TestDirectoryBoundDeterministic(t *testing.T) {
	const bound = 64
	tree := bigTree(t, 4, 256)
	p, q := openLone(t, tree, bound), openLone(t, tree, bound)
	f := newBoundFeed(t, p, tree, 800)
	var kept [2][]hierarchy.NodeID
	for i, peer := range []*Peer{p, q} {
		d := peer.Directory()
		for k, rec := range f.recs {
			if rec.Owner == p.selfID || len(rec.Blocks) > 0 {
				continue // (p's records would be pinned in p only)
			}
			d.merge(rec, f.raws[k])
			if k%3 == 0 {
				d.Cached(f.recs[k/2].Subnet)
			}
		}
		for _, r := range d.Records() {
			kept[i] = append(kept[i], r.Subnet)
		}
		checkIndexes(t, d, "after the feed")
	}
	if len(kept[0]) == 0 || !slices.Equal(kept[0], kept[1]) {
		t.Fatalf("the same history kept different records: %d vs %d subnets", len(kept[0]), len(kept[1]))
	}
}

// BenchmarkDirectoryRecordBytes measures the heap one cached record holds
// (decoded record, its signed bytes, its map entry and its share of the
// holder indexes), for records of 4, 8 and 64 probes from 12 crawlers:
//
//	go test -run '^$' -bench DirectoryRecordBytes -benchtime 1x ./overlay/
func BenchmarkDirectoryRecordBytes(b *testing.B) {
	const n = 1 << 14
	tree := bigTree(b, 64, 256)
	for _, probes := range []int{4, 8, 64} {
		b.Run(fmt.Sprintf("probes=%d", probes), func(b *testing.B) {
			for range b.N {
				p := openLone(b, tree, 1<<20)
				p.NewPolicy(delegation.NewIPMicra, delegation.Config{}) // learns nothing: the learn queue empties
				crawlers := make([]keyed, 12)
				for i := range crawlers {
					crawlers[i] = newKeyedTB(b)
				}
				var vals [][]byte
				now := time.Now()
				for k := range n {
					s := hierarchy.NodeID(1 + k%(tree.Len()-1))
					o := crawlers[k%len(crawlers)]
					rec := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: o.id, OwnerRTT: 7 * time.Millisecond, Epoch: 1,
						DecidedBy: crawlers[(k+1)%len(crawlers)].id, At: now}
					for i := range probes {
						rec.Probes = append(rec.Probes, delegation.ProbeResult{Crawler: crawlers[i%len(crawlers)].id,
							RTT: time.Duration(5+i) * time.Millisecond, OK: true})
					}
					vals = append(vals, sealTB(b, rec, o.sk, crawlers[(k+1)%len(crawlers)].sk))
				}
				d := p.Directory()
				var before, after runtime.MemStats
				runtime.GC()
				runtime.ReadMemStats(&before)
				size := 0
				for _, v := range vals {
					v = slices.Clone(v) // as read from the network: the cache's own copy
					rec, err := openRecord(v)
					if err != nil {
						b.Fatal(err)
					}
					size += len(v)
					d.merge(rec, v)
				}
				p.LearnPending()
				runtime.GC()
				runtime.ReadMemStats(&after)
				if d.Len() != n {
					b.Fatalf("%d records cached of %d", d.Len(), n)
				}
				b.ReportMetric(float64(int64(after.HeapAlloc)-int64(before.HeapAlloc))/n, "B/record")
				b.ReportMetric(float64(size)/n, "signed-B/record")
				runtime.KeepAlive(vals)
				p.Close()
			}
		})
	}
}

// BenchmarkDirectoryForgetPass times one forget pass at the default bound
// (the cache full, the next new record forgets a quarter of it; the
// directory's lock is held meanwhile):
//
//	go test -run '^$' -bench DirectoryForgetPass -benchtime 5x ./overlay/
func BenchmarkDirectoryForgetPass(b *testing.B) {
	bound := DefaultMaxCachedRecords
	tree := bigTree(b, 256, 256)
	p := openLone(b, tree, bound)
	d := p.Directory()
	owners := make([]keyed, 12)
	for i := range owners {
		owners[i] = newKeyedTB(b)
	}
	next := 1
	add := func() {
		rec := delegation.Record{Subnet: hierarchy.NodeID(next), Snapshot: p.snap, Owner: owners[next%len(owners)].id, Epoch: 1}
		next++
		if next == tree.Len() {
			next = 1
		}
		d.merge(rec, []byte{byte(next)})
	}
	for d.Len() < bound {
		add()
	}
	b.ResetTimer()
	for range b.N {
		b.StopTimer()
		for d.Len() < bound {
			add()
		}
		b.StartTimer()
		add() // the pass
	}
}

// newKeyedTB and sealTB are newKeyed and seal for benchmarks.
func newKeyedTB(tb testing.TB) keyed {
	sk, _, err := crypto.GenerateEd25519Key(crand.Reader)
	if err != nil {
		tb.Fatal(err)
	}
	id, _ := peer.IDFromPrivateKey(sk)
	return keyed{sk, delegation.CrawlerID(id.String())}
}

func sealTB(tb testing.TB, r delegation.Record, owner, decider crypto.PrivKey) []byte {
	m, err := toPB(r)
	if err != nil {
		tb.Fatal(err)
	}
	env, err := sealOwner(m, owner)
	if err != nil {
		tb.Fatal(err)
	}
	val, err := sealDecision(env, decider)
	if err != nil {
		tb.Fatal(err)
	}
	return val
}

// floodRecords merges into p's directory, as gossip would, records of
// every subnet of the test tree but skip, owned by crawlers that are not
// members, until skip's record has been forgotten.
func floodRecords(t *testing.T, p *Peer, skip hierarchy.NodeID) {
	t.Helper()
	x := newKeyed(t)
	d := p.Directory()
	for s := hierarchy.NodeID(1); int(s) < p.tree.Len(); s++ {
		if s == skip {
			continue
		}
		rec := delegation.Record{Subnet: s, Snapshot: p.snap, Owner: x.id, OwnerRTT: 3 * time.Millisecond, Epoch: 40, DecidedBy: x.id,
			At: time.Now(), Probes: []delegation.ProbeResult{{Crawler: x.id, RTT: 3 * time.Millisecond, OK: true}}}
		if _, _, err := d.mergeValue(s, seal(t, rec, x.sk, x.sk)); err != nil {
			t.Fatal(err)
		}
	}
	if _, ok := d.get(skip); ok || !d.wasForgotten(skip) {
		t.Fatalf("subnet %d still cached (or not marked forgotten) after %d other records with a bound of %d", skip, p.tree.Len()-2, p.cfg.MaxCachedRecords)
	}
	checkIndexes(t, d, "after the flood")
}

// TestForgottenRecordReadAgain: real peers on loopback. b caches a's
// record, then forgets it (bounded cache); b's next Lookup reads it from
// the DHT, b's hand-off of the subnet's URLs goes to a, and a hand-off of
// them sent to b (a sender with an old view) is still refused: b re-reads
// the record before its ownership check instead of taking the subnet for
// undelegated.
func TestForgottenRecordReadAgain(t *testing.T) {
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		if i == 1 {
			c.MaxCachedRecords = minCachedRecords
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	a, b := tn.peers[0], tn.peers[1]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s, ip := d.Subnet, a.cfg.CrawlerAddr
	waitFor(t, slowdown*5*time.Second, func() bool { o, ok := b.CachedOwner(ip); return ok && o == a.CrawlerID() })

	// a hand-off refused by the cached record
	u := "http://" + ip.String() + "/p"
	req := &pb.HandoffRequest{Snapshot: b.snap[:], Batches: []*pb.HandoffBatch{{Subnet: uint32(s), Urls: []string{u}, Addr: ip.AsSlice()}}}
	if st, msg, n, refused := b.acceptHandoff(req); st != pb.Status_OK || n != 0 || len(refused) != 1 {
		t.Fatalf("b with a's record cached: %v %q, accepted %d, refused %v", st, msg, n, refused)
	}

	floodRecords(t, b, s)
	if _, ok := b.CachedOwner(ip); ok {
		t.Fatal("the forgotten record still answers CachedOwner")
	}
	// the hand-off check reads the record again
	if st, msg, n, refused := b.acceptHandoff(req); st != pb.Status_OK || n != 0 || len(refused) != 1 {
		t.Fatalf("b after forgetting a's record accepted a hand-off of a's subnet: %v %q, accepted %d, refused %v (b's sink: %v)",
			st, msg, n, refused, tn.sinks[1].got())
	}
	if r, ok := b.Directory().get(s); !ok || r.Owner != a.CrawlerID() {
		t.Fatalf("a's record not cached again by the hand-off check: %+v %v", r, ok)
	}

	// forgotten again: Lookup reads the DHT
	floodRecords(t, b, s)
	rec, ok, err := b.Directory().Lookup(ctx, s)
	if err != nil || !ok || rec.Owner != a.CrawlerID() || rec.Epoch != d.Record.Epoch {
		t.Fatalf("lookup of a forgotten record: %+v %v %v", rec, ok, err)
	}
	if o, ok := b.CachedOwner(ip); !ok || o != a.CrawlerID() {
		t.Fatalf("after the lookup the record is not cached again: %v %v", o, ok)
	}

	// forgotten again: b's own hand-off resolves the owner by the DHT
	floodRecords(t, b, s)
	if err := b.Handoff(ctx, s, ip, u+"2"); err != nil {
		t.Fatal(err)
	}
	waitFor(t, slowdown*8*time.Second, func() bool { return slices.Contains(tn.sinks[0].got(), u+"2") })
	if got := tn.sinks[1].got(); len(got) > 0 {
		t.Fatalf("b accepted URLs of a's subnet: %v", got)
	}
}

// TestGainOfForgottenSubnetRecoversPages: b forgot the record of a's
// subnet; c then re-delegates the subnet to b. b reads the forgotten
// record again when asked to endorse the new one, so the gain knows a as
// the previous owner and b pulls a's pages, as it would with every record
// kept.
func TestGainOfForgottenSubnetRecoversPages(t *testing.T) {
	pages := []*memPages{{pages: map[hierarchy.NodeID][]PageState{}}, {}, {}}
	tn := newTestNet(t, 3, func(i int, c *Config, s *Services) {
		s.Pages = pages[i]
		if i == 1 {
			c.MaxCachedRecords = minCachedRecords
		}
	})
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*30*time.Second)
	defer cancel()
	a, b, c := tn.peers[0], tn.peers[1], tn.peers[2]
	d, err := a.Join(ctx)
	if err != nil {
		t.Fatal(err)
	}
	s := d.Subnet
	for i := range 20 {
		pages[0].pages[s] = append(pages[0].pages[s], PageState{URL: fmt.Sprintf("http://%s/%d", a.cfg.CrawlerAddr, i),
			LastFetch: time.Unix(1700000000, 0), HTTPStatus: 200})
	}
	tn.settle(t, tn.peers, slowdown*5*time.Second)
	floodRecords(t, b, s)

	rec := d.Record
	rec.Owner, rec.DecidedBy, rec.Epoch, rec.At, rec.OwnerRTT, rec.Probes = b.CrawlerID(), c.CrawlerID(), rec.Epoch+1, time.Now(), time.Millisecond, nil
	m, err := toPB(rec)
	if err != nil {
		t.Fatal(err)
	}
	env, err := c.endorse(ctx, b.ID(), m)
	if err != nil {
		t.Fatalf("b refused to endorse: %v", err)
	}
	val, err := sealDecision(env, c.sk)
	if err != nil {
		t.Fatal(err)
	}
	if got, err := c.Directory().put(ctx, s, val, true); err != nil || got.Owner != b.CrawlerID() {
		t.Fatalf("put: %+v %v", got, err)
	}
	waitFor(t, slowdown*10*time.Second, func() bool {
		pages[1].mu.Lock()
		defer pages[1].mu.Unlock()
		return len(pages[1].imported[s]) == 20
	})
}

// TestProviderAndRecheckCachesBounded: expired provider answers and
// re-read times are dropped once their maps reach their bounds.
func TestProviderAndRecheckCachesBounded(t *testing.T) {
	p := openLone(t, testTree(t), DefaultMaxCachedRecords)
	d := p.Directory()
	old := time.Now().Add(-time.Hour)
	d.mu.Lock()
	for i := range maxProvEntries {
		d.prov[fmt.Sprint(i)] = provEntry{at: old}
	}
	for i := range maxRechecked {
		d.rechecked[hierarchy.NodeID(1000+i)] = old
	}
	d.mu.Unlock()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	d.findProviders(ctx, underCID(p.snap, 1))
	d.Recheck(2)
	d.mu.RLock()
	np, nr := len(d.prov), len(d.rechecked)
	d.mu.RUnlock()
	if np != 1 || nr != 1 {
		t.Fatalf("after one more entry each: %d provider answers (bound %d), %d re-read times (bound %d)", np, maxProvEntries, nr, maxRechecked)
	}
}

func TestValidateMaxCachedRecords(t *testing.T) {
	for _, n := range []int{0, -1, minCachedRecords - 1} {
		c := TestnetConfig()
		c.MaxCachedRecords = n
		if err := c.validatePeer(); err == nil {
			t.Errorf("MaxCachedRecords=%d accepted", n)
		}
	}
	c := TestnetConfig()
	if err := c.validatePeer(); err != nil || c.MaxCachedRecords != DefaultMaxCachedRecords {
		t.Fatalf("default: %d, %v", c.MaxCachedRecords, err)
	}
}

// TestDirectoryBoundTiesBySubnet: records last used at the same tick are
// forgotten lowest subnet first, whatever the map's order.
func TestDirectoryBoundTiesBySubnet(t *testing.T) {
	tree := bigTree(t, 2, 64)
	for range 5 {
		p := openLone(t, tree, minCachedRecords)
		d := p.Directory()
		x := newKeyed(t)
		var subnets []hierarchy.NodeID
		for s := hierarchy.NodeID(tree.Len() - 1); len(subnets) <= minCachedRecords; s-- {
			subnets = append(subnets, s)
		}
		for _, s := range subnets[:minCachedRecords] {
			d.merge(delegation.Record{Subnet: s, Snapshot: p.snap, Owner: x.id, Epoch: 1}, []byte{1})
		}
		for _, s := range subnets[:minCachedRecords] {
			d.Cached(s) // all used at the same tick
		}
		d.merge(delegation.Record{Subnet: subnets[minCachedRecords], Snapshot: p.snap, Owner: x.id, Epoch: 1}, []byte{1})
		lowest := slices.Clone(subnets[:minCachedRecords])
		slices.Sort(lowest)
		for i, s := range lowest {
			_, ok := d.get(s)
			if ok != (i >= minCachedRecords/4) {
				t.Fatalf("subnet %d (%d-th lowest of %d used together) cached: %v; want the %d lowest forgotten", s, i, minCachedRecords, ok, minCachedRecords/4)
			}
		}
		p.Close()
	}
}
