package overlay

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/ipfs/go-cid"
	dht "github.com/libp2p/go-libp2p-kad-dht"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/routing"
	mh "github.com/multiformats/go-multihash"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// Directory is the DHT-backed delegation.Directory: a local cache of
// verified records in front of the /micra/deleg/<subnet> DHT values, kept
// fresh by DELEGATED events on micra/calibration/1 and marked stale by
// SLOW_PAGE and RELEASED events. Every merge applies the Select rule, so all
// caches converge on the same record per subnet.
//
// Holder sets (crawlers holding subnets under an ancestor, or of an
// organisation) are the union of what the cache knows and DHT provider
// records, filtered to live peers.
type Directory struct {
	p *Peer

	mu    sync.RWMutex
	recs  map[hierarchy.NodeID]*cached
	under map[hierarchy.NodeID]map[delegation.CrawlerID]int
	org   map[hierarchy.OrgID]map[delegation.CrawlerID]int
	owned map[hierarchy.NodeID]bool
	prov  map[string]provEntry
	// provPending marks background provider walks in flight.
	provPending map[string]bool
	// rechecked: when a subnet's record was last re-read in the
	// background because a hand-off was refused by it (Recheck)
	rechecked map[hierarchy.NodeID]time.Time

	// ids interns crawler ids: a record names its owner, its decider and
	// every crawler it probed, and the same few hundred peers recur in
	// every record, so the cache keeps one copy of each (idMu, not mu:
	// records are interned before they are queued for learning, outside
	// the cache's lock).
	idMu sync.Mutex
	ids  map[delegation.CrawlerID]delegation.CrawlerID
}

// cached is one subnet's record as the cache keeps it. The sealed value is
// not kept, only its SHA-256 (all that Better and the equality test need):
// the value is about as large again as the decoded record. Crawler ids are
// interned (Directory.ids).
type cached struct {
	rec   delegation.Record
	sum   [32]byte // SHA-256 of the sealed value
	stale bool     // a gossip event says the DHT may hold something newer
}

// maxInterned bounds Directory.ids: past it the table starts again (ids
// already cached keep their copies; only sharing with later records is lost).
const maxInterned = 1 << 16

// intern replaces the crawler ids of rec (which the caller owns) by the
// directory's shared copies.
func (d *Directory) intern(rec *delegation.Record) {
	d.idMu.Lock()
	defer d.idMu.Unlock()
	if d.ids == nil || len(d.ids) >= maxInterned {
		d.ids = make(map[delegation.CrawlerID]delegation.CrawlerID)
	}
	one := func(id *delegation.CrawlerID) {
		if c, ok := d.ids[*id]; ok {
			*id = c
			return
		}
		d.ids[*id] = *id
	}
	one(&rec.Owner)
	one(&rec.DecidedBy)
	for i := range rec.Probes {
		one(&rec.Probes[i].Crawler)
	}
	for i := range rec.Blocks {
		one(&rec.Blocks[i].Owner)
	}
}

type provEntry struct {
	ids []delegation.CrawlerID
	at  time.Time
}

const providerCacheTTL = 30 * time.Second

func newDirectory(p *Peer) *Directory {
	return &Directory{
		p:     p,
		recs:  make(map[hierarchy.NodeID]*cached),
		under: make(map[hierarchy.NodeID]map[delegation.CrawlerID]int),
		org:   make(map[hierarchy.OrgID]map[delegation.CrawlerID]int),
		owned: make(map[hierarchy.NodeID]bool),
		prov:  make(map[string]provEntry),

		provPending: make(map[string]bool),
	}
}

// Cached returns the cached record for s without touching the network:
// the sub-microsecond path of every owner lookup.
func (d *Directory) Cached(s hierarchy.NodeID) (delegation.Record, bool) {
	e, ok := d.entry(s)
	if !ok || e.stale {
		return delegation.Record{}, false
	}
	return e.rec, d.p.members.IsLive(e.rec.Owner)
}

// entry copies s's cache entry under the lock (stale is written in place).
func (d *Directory) entry(s hierarchy.NodeID) (cached, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	e, ok := d.recs[s]
	if !ok {
		return cached{}, false
	}
	return *e, true
}

// Lookup implements delegation.Directory. A record whose owner is dead is
// returned with ok == false (so the engine bumps its epoch).
func (d *Directory) Lookup(ctx context.Context, s hierarchy.NodeID) (delegation.Record, bool, error) {
	e, ok := d.entry(s)
	if ok && !e.stale {
		return e.rec, d.p.members.IsLive(e.rec.Owner), nil
	}
	rec, found, err := d.fetch(ctx, s)
	if err != nil {
		if ok { // stale but usable
			return e.rec, d.p.members.IsLive(e.rec.Owner), nil
		}
		return delegation.Record{}, false, err
	}
	if !found {
		if ok {
			d.unstale(s)
			return e.rec, d.p.members.IsLive(e.rec.Owner), nil
		}
		return delegation.Record{}, false, nil
	}
	// the DHT was read: the cache holds the better of the two now, even
	// when that is the cached one (a record that came by gossip and whose
	// put never landed), so it is fresh again
	d.unstale(s)
	return rec, d.p.members.IsLive(rec.Owner), nil
}

// recheckEvery bounds the background re-reads of one subnet (Recheck).
const recheckEvery = 5 * time.Second

// Recheck re-reads s's record from the DHT in the background, at most once
// per recheckEvery: a hand-off refused because of the cached record may
// mean the record changed and its announcement never reached this peer
// (gossip is best-effort), and the cache would otherwise keep refusing the
// subnet's URLs for good, with the senders sending them back.
func (d *Directory) Recheck(s hierarchy.NodeID) {
	d.mu.Lock()
	if d.rechecked == nil {
		d.rechecked = make(map[hierarchy.NodeID]time.Time)
	}
	if time.Since(d.rechecked[s]) < recheckEvery {
		d.mu.Unlock()
		return
	}
	if len(d.rechecked) >= 1<<16 {
		clear(d.rechecked)
	}
	d.rechecked[s] = time.Now()
	d.mu.Unlock()
	d.p.goBackground(func() {
		if _, _, err := d.fetch(d.p.ctx, s); err != nil && d.p.ctx.Err() == nil {
			d.p.log.Debug("overlay: re-read of a refused subnet failed", "subnet", s, "err", err)
		}
	})
}

// fetch reads the subnet's record from the DHT and merges it into the cache.
func (d *Directory) fetch(ctx context.Context, s hierarchy.NodeID) (delegation.Record, bool, error) {
	return d.fetchQuorum(ctx, s, d.p.cfg.LookupQuorum)
}

func (d *Directory) fetchQuorum(ctx context.Context, s hierarchy.NodeID, quorum int) (delegation.Record, bool, error) {
	start := time.Now()
	ctx, cancel := context.WithTimeout(ctx, d.p.cfg.RequestTimeout)
	defer cancel()
	val, err := d.p.dht.GetValue(ctx, DelegKey(s), dht.Quorum(quorum))
	d.p.metrics.dhtGet.Observe(time.Since(start).Seconds())
	if errors.Is(err, routing.ErrNotFound) {
		return delegation.Record{}, false, nil
	}
	if err != nil {
		return delegation.Record{}, false, fmt.Errorf("overlay: dht get %s: %w", DelegKey(s), err)
	}
	best, _, err := d.mergeValue(s, val)
	if err != nil {
		return delegation.Record{}, false, err
	}
	return best, true, nil
}

func (d *Directory) unstale(s hierarchy.NodeID) {
	d.mu.Lock()
	if e, ok := d.recs[s]; ok {
		e.stale = false
	}
	d.mu.Unlock()
}

// Invalidate marks s's cache entry stale: the next Lookup reads the DHT.
func (d *Directory) Invalidate(s hierarchy.NodeID) {
	d.mu.Lock()
	if e, ok := d.recs[s]; ok {
		e.stale = true
	}
	d.mu.Unlock()
}

// mergeValue verifies a DHT value and merges it by the Select rule. It
// returns the record that prevails in the cache afterwards.
func (d *Directory) mergeValue(s hierarchy.NodeID, val []byte) (delegation.Record, bool, error) {
	rec, sum, err := d.p.validator.check(DelegKey(s), val)
	if err != nil {
		return delegation.Record{}, false, err
	}
	best, changed := d.merge(rec, sum, val)
	return best, changed, nil
}

// merge applies Select against the cached record for rec.Subnet. rec is
// the caller's (validator.check returns a copy), raw its sealed value and
// sum that value's SHA-256.
func (d *Directory) merge(rec delegation.Record, sum [32]byte, raw []byte) (delegation.Record, bool) {
	d.intern(&rec)
	// every verified record is evidence, whether or not it prevails
	d.p.queueLearn(rec)
	s := rec.Subnet
	d.mu.Lock()
	old, had := d.recs[s]
	if had && !betterSum(rec, sum, old.rec, old.sum) {
		if sum == old.sum {
			old.stale = false
		}
		best := old.rec
		d.mu.Unlock()
		return best, false
	}
	var prevOwner delegation.CrawlerID
	if had {
		prevOwner = old.rec.Owner
		if prevOwner != rec.Owner {
			d.indexLocked(old.rec, -1)
		}
	}
	d.recs[s] = &cached{rec: rec, sum: sum}
	if !had || prevOwner != rec.Owner {
		d.indexLocked(rec, +1)
	}
	self := d.p.selfID
	gained := rec.Owner == self && !d.owned[s]
	lost := rec.Owner != self && d.owned[s]
	if gained {
		d.owned[s] = true
	}
	if lost {
		delete(d.owned, s)
	}
	n := len(d.owned)
	d.mu.Unlock()
	if gained || lost {
		d.p.members.subnets.Store(uint32(n))
	}
	if gained {
		d.p.onGained(rec, prevOwner, raw)
	}
	if had {
		for _, g := range blocksGained(old.rec, rec, self, d.p.members.IsLive) {
			d.p.recoverFrom(g.Owner, rec.Subnet, g.Host, raw)
		}
	}
	return rec, true
}

// blocksGained lists the blocks whose hosts self crawls under rec but
// another crawler crawled under old — a block delegated to self, or a
// block dissolved into a subnet self owns — one host per block, each with
// its previous crawler as Owner (a block whose owner was not live was
// crawled by the subnet's owner, as hand-offs route it).
func blocksGained(old, rec delegation.Record, self delegation.CrawlerID, live func(delegation.CrawlerID) bool) []delegation.BlockDelegation {
	if len(old.Blocks) == 0 && len(rec.Blocks) == 0 {
		return nil
	}
	var out []delegation.BlockDelegation
	consider := func(host netip.Addr) {
		if rec.OwnerOf(host, nil) != self {
			return
		}
		prev := old.OwnerOf(host, live)
		if prev == self || prev == "" {
			return
		}
		block := delegation.BlockOf(host)
		for _, g := range out {
			if g.Block() == block {
				return
			}
		}
		out = append(out, delegation.BlockDelegation{Host: host, Owner: prev})
	}
	for _, b := range rec.Blocks {
		consider(b.Host)
	}
	for _, b := range old.Blocks {
		consider(b.Host)
	}
	return out
}

// indexLocked counts r's owner (delta +1 or -1) in the holder sets of r's
// ancestors and of its organisation. The subnet's own owner is not counted
// under the subnet itself (HoldersUnder adds it from the record): most
// delegated subnets have nothing delegated below them, and a holder set
// each would weigh more than the record.
func (d *Directory) indexLocked(r delegation.Record, delta int) {
	t := d.p.tree
	if int(r.Subnet) >= t.Len() {
		return
	}
	for _, a := range t.Ancestors(r.Subnet) {
		countHolder(d.under, a, r.Owner, delta)
	}
	if o := t.Node(r.Subnet).Org; o != 0 {
		countHolder(d.org, o, r.Owner, delta)
	}
}

// countHolder adds delta to c's count in set k of sets, dropping counts and
// sets that reach zero.
func countHolder[K comparable](sets map[K]map[delegation.CrawlerID]int, k K, c delegation.CrawlerID, delta int) {
	m, ok := sets[k]
	if !ok {
		m = make(map[delegation.CrawlerID]int)
		sets[k] = m
	}
	m[c] += delta
	if m[c] <= 0 {
		delete(m, c)
		if len(m) == 0 {
			delete(sets, k)
		}
	}
}

// Publish implements delegation.Directory: obtain the owner's signature
// (/micra/endorse/1 unless the owner is this peer), sign as decider, put to
// the DHT, announce on micra/calibration/1, then read back what prevails.
func (d *Directory) Publish(ctx context.Context, rec delegation.Record) (delegation.Record, error) {
	p := d.p
	if rec.Snapshot != p.snap {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: snapshot %x, this peer runs %x", rec.Subnet, rec.Snapshot[:6], p.snap[:6])
	}
	if rec.DecidedBy != p.selfID {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: decided by %s, but only this peer (%s) can sign", rec.Subnet, rec.DecidedBy, p.selfID)
	}
	start := time.Now()
	if err := p.gatherConsents(ctx, &rec); err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: %w", rec.Subnet, refusal(err))
	}
	m, err := toPB(rec)
	if err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: %w", rec.Subnet, err)
	}
	var ownerEnv []byte
	if rec.Owner == p.selfID {
		ownerEnv, err = sealOwner(m, p.sk)
	} else {
		var owner peer.ID
		owner, err = peer.Decode(string(rec.Owner))
		if err == nil {
			ownerEnv, err = p.endorse(ctx, owner, m)
		}
	}
	if err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: owner %s: %w", rec.Subnet, rec.Owner, refusal(err))
	}
	endorsed := time.Now()
	certs, err := p.recordCerts(rec)
	if err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: %w", rec.Subnet, err)
	}
	val, err := sealDecision(ownerEnv, p.sk, certs...)
	if err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: publish subnet %d: %w", rec.Subnet, err)
	}
	best, err := d.put(ctx, rec.Subnet, val, true)
	p.log.Debug("overlay: published", "subnet", rec.Subnet, "owner", rec.Owner, "epoch", rec.Epoch,
		"endorse", endorsed.Sub(start), "put", time.Since(endorsed), "prevails", best.Owner)
	return best, err
}

// refusal marks an endorsement or a consent the other peer refused as
// delegation.ErrRefused: load balancing leaves a subnet whose move was
// refused where it is, rather than failing the decision that moved it.
func refusal(err error) error {
	if StatusOf(err) == pb.Status_REFUSED {
		return fmt.Errorf("%w: %w", delegation.ErrRefused, err)
	}
	return err
}

// put stores a sealed value in the DHT and the cache, optionally announces
// it, and returns the record that prevails.
func (d *Directory) put(ctx context.Context, s hierarchy.NodeID, val []byte, announce bool) (delegation.Record, error) {
	p := d.p
	key := DelegKey(s)
	mine, sum, err := p.validator.check(key, val)
	if err != nil {
		return delegation.Record{}, fmt.Errorf("overlay: own record rejected: %w", err)
	}
	best, _ := d.merge(mine, sum, val)
	if announce {
		p.announce(ctx, &pb.CalibrationEvent{Kind: pb.CalibrationKind_DELEGATED, Subnet: uint32(s), Value: val})
	}
	pctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	start := time.Now()
	if err := p.dht.PutValue(pctx, key, val); err != nil {
		// A better local value, or no DHT peers yet (a lone first node):
		// the record lives in the cache and on gossip; the republish loop
		// puts it again later.
		p.log.Debug("overlay: dht put", "key", key, "err", err)
	}
	p.metrics.dhtPut.Observe(time.Since(start).Seconds())
	// Read back what prevails among the closest peers: a concurrent writer
	// may have won the Select.
	if got, found, err := d.fetchQuorum(ctx, s, p.cfg.PublishQuorum); err == nil && found {
		best = got
	} else if e, ok := d.get(s); ok {
		best = e
	}
	return best, nil
}

func (d *Directory) get(s hierarchy.NodeID) (delegation.Record, bool) {
	d.mu.RLock()
	defer d.mu.RUnlock()
	e, ok := d.recs[s]
	if !ok {
		return delegation.Record{}, false
	}
	return e.rec, true
}

// Records returns every cached record (any staleness), ordered by subnet.
func (d *Directory) Records() []delegation.Record {
	d.mu.RLock()
	out := make([]delegation.Record, 0, len(d.recs))
	for _, e := range d.recs {
		out = append(out, e.rec)
	}
	d.mu.RUnlock()
	slices.SortFunc(out, func(a, b delegation.Record) int { return int(a.Subnet) - int(b.Subnet) })
	return out
}

// Owned lists the subnets this peer owns, ascending.
func (d *Directory) Owned() []hierarchy.NodeID {
	d.mu.RLock()
	out := make([]hierarchy.NodeID, 0, len(d.owned))
	for s := range d.owned {
		out = append(out, s)
	}
	d.mu.RUnlock()
	slices.Sort(out)
	return out
}

// HoldersUnder implements delegation.Directory.
func (d *Directory) HoldersUnder(ctx context.Context, a hierarchy.NodeID) ([]delegation.CrawlerID, error) {
	c, local := d.underHolders(a)
	return d.holders(ctx, c, local)
}

// underHolders names a's holder set: its provider record and the holders
// the cache knows.
func (d *Directory) underHolders(a hierarchy.NodeID) (cid.Cid, []delegation.CrawlerID) {
	d.mu.RLock()
	local := keys(d.under[a])
	if e, ok := d.recs[a]; ok && !slices.Contains(local, e.rec.Owner) {
		local = append(local, e.rec.Owner) // a's own owner (indexLocked)
	}
	d.mu.RUnlock()
	return underCID(d.p.snap, a), local
}

// HoldersOfOrg implements delegation.Directory.
func (d *Directory) HoldersOfOrg(ctx context.Context, o hierarchy.OrgID) ([]delegation.CrawlerID, error) {
	if o == 0 {
		return nil, nil
	}
	c, local := d.orgHolders(o)
	return d.holders(ctx, c, local)
}

// orgHolders names o's holder set, as underHolders.
func (d *Directory) orgHolders(o hierarchy.OrgID) (cid.Cid, []delegation.CrawlerID) {
	d.mu.RLock()
	local := keys(d.org[o])
	d.mu.RUnlock()
	return orgCID(d.p.snap, o), local
}

func keys(m map[delegation.CrawlerID]int) []delegation.CrawlerID {
	out := make([]delegation.CrawlerID, 0, len(m))
	for k := range m {
		out = append(out, k)
	}
	return out
}

// holders returns the live holders of a set. The local index is
// authoritative when it knows anyone: every delegation is announced on
// gossip, so it is normally complete. When it knows nobody, DHT provider
// records answer: synchronously while this peer may have missed
// announcements (its first warm-up period, or an empty cache), otherwise
// from a provider answer cached for providerCacheTTL and refreshed in the
// background, so a decision never waits for a provider walk in steady state.
func (d *Directory) holders(ctx context.Context, c cid.Cid, local []delegation.CrawlerID) ([]delegation.CrawlerID, error) {
	out, wait := d.holdersCached(c, local)
	if !wait {
		return out, nil
	}
	d.findProviders(ctx, c)
	out, _ = d.holdersCached(c, local)
	return out, nil
}

// holdersCached answers a holder set from what this peer knows: the live
// holders among local, else the cached provider walk (a stale one is
// refreshed in the background). wait is true when the answer needs a
// provider walk first: nothing cached while this peer may still be
// missing announcements (just started, or no record known).
func (d *Directory) holdersCached(c cid.Cid, local []delegation.CrawlerID) (out []delegation.CrawlerID, wait bool) {
	for _, id := range local {
		if d.p.members.IsLive(id) {
			out = append(out, id)
		}
	}
	if len(out) > 0 {
		slices.Sort(out)
		return out, false
	}
	k := c.KeyString()
	d.mu.RLock()
	pe, ok := d.prov[k]
	known := len(d.recs)
	pending := d.provPending[k]
	d.mu.RUnlock()
	fresh := ok && time.Since(pe.at) <= providerCacheTTL
	switch {
	case fresh:
	case known == 0 || time.Since(d.p.members.started) < d.warmup():
		return nil, true
	case !pending:
		d.mu.Lock()
		d.provPending[k] = true
		d.mu.Unlock()
		started := d.p.goBackground(func() {
			d.findProviders(d.p.ctx, c)
			d.mu.Lock()
			delete(d.provPending, k)
			d.mu.Unlock()
		})
		if !started { // closing
			d.mu.Lock()
			delete(d.provPending, k)
			d.mu.Unlock()
		}
	}
	for _, id := range pe.ids {
		if d.p.members.IsLive(id) && !slices.Contains(out, id) {
			out = append(out, id)
		}
	}
	slices.Sort(out)
	return out, false
}

// warmup is how long after start a peer may still be missing announcements.
func (d *Directory) warmup() time.Duration { return 2 * d.p.cfg.FailureTimeout }

// findProviders walks the DHT for c's providers and caches the answer.
func (d *Directory) findProviders(ctx context.Context, c cid.Cid) provEntry {
	pe := provEntry{at: time.Now()}
	qctx, cancel := context.WithTimeout(ctx, d.p.cfg.RequestTimeout)
	defer cancel()
	for ai := range d.p.dht.FindProvidersAsync(qctx, c, 64) {
		pe.ids = append(pe.ids, delegation.CrawlerID(ai.ID.String()))
	}
	d.mu.Lock()
	d.prov[c.KeyString()] = pe
	d.mu.Unlock()
	return pe
}

// invalidateProviders drops cached provider answers (a delegation changed).
func (d *Directory) invalidateProviders() {
	d.mu.Lock()
	clear(d.prov)
	d.mu.Unlock()
}

// underCID and orgCID name the provider records of the holder sets:
// SHA-256 multihash of a textual key, raw CIDv1.
func underCID(snap hierarchy.SnapshotID, a hierarchy.NodeID) cid.Cid {
	return keyCID("micra/holders/under/" + hex.EncodeToString(snap[:8]) + "/" + strconv.FormatUint(uint64(a), 10))
}

func orgCID(snap hierarchy.SnapshotID, o hierarchy.OrgID) cid.Cid {
	return keyCID("micra/holders/org/" + hex.EncodeToString(snap[:8]) + "/" + strconv.FormatUint(uint64(o), 10))
}

func keyCID(s string) cid.Cid {
	h, err := mh.Sum([]byte(s), mh.SHA2_256, -1)
	if err != nil {
		panic(err) // SHA2-256 is always available
	}
	return cid.NewCidV1(cid.Raw, h)
}

// holderCIDs are the provider keys an owner of s announces.
func (p *Peer) holderCIDs(s hierarchy.NodeID) []cid.Cid {
	out := []cid.Cid{underCID(p.snap, s)}
	for _, a := range p.tree.Ancestors(s) {
		out = append(out, underCID(p.snap, a))
	}
	if o := p.tree.Node(s).Org; o != 0 {
		out = append(out, orgCID(p.snap, o))
	}
	return out
}

// republishValue re-seals an owned record with a fresh time (this peer as
// decider and owner), which the Select rule prefers over its older copy.
func (p *Peer) republishValue(rec delegation.Record) ([]byte, error) {
	rec.DecidedBy = p.selfID
	rec.At = time.Now()
	m, err := toPB(rec)
	if err != nil {
		return nil, err
	}
	env, err := sealOwner(m, p.sk)
	if err != nil {
		return nil, err
	}
	certs, err := p.recordCerts(rec)
	if err != nil {
		return nil, err
	}
	return sealDecision(env, p.sk, certs...)
}

var _ delegation.Directory = (*Directory)(nil)
var _ = proto.Equal

// LookupDHT reads s's record from the DHT, bypassing the cache (which it
// then updates). found is false when the DHT holds no record.
func (d *Directory) LookupDHT(ctx context.Context, s hierarchy.NodeID) (rec delegation.Record, found bool, err error) {
	return d.fetch(ctx, s)
}
