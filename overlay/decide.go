package overlay

import (
	"context"
	"errors"
	"math/rand/v2"
	"net/netip"
	"sync"

	"github.com/ipfs/go-cid"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
)

// How a policy decides without holding its lock across the network.
//
// The delegation policy is a deterministic state machine with scratch
// state of its own (one decision at a time, under polMu). What it needs
// from the network — a DHT read of a subnet's record, a round of probes, a
// provider walk for a holder set — it asks through the Directory and
// Prober the peer gave it (Deps). The peer runs every policy call as a
// series of attempts, in the manner of etcd raft's Ready/Step:
//
//  1. Under polMu, the call runs against what is known: the cache, and the
//     answers gathered by earlier attempts of the same call. The first
//     question it asks that nothing answers yet is recorded as data, its
//     context is cancelled, and it returns; the policy's own cancellation
//     paths make sure nothing is published or learned from a cut-short
//     attempt.
//  2. Without any lock, the peer performs that I/O (probes in parallel).
//  3. It steps the answers in and runs the call again.
//
// A decision therefore holds polMu only for its computation (microseconds
// each time), and decisions for different subnets overlap their network
// waits. Publishing is the decision's last I/O and carries no scratch
// state: the peer releases polMu around it (Directory.Publish).
//
// Calls for one subnet are serialised by a per-subnet lock, so two
// decisions for the same subnet become one: the second finds the first's
// record in the cache. Cached owners are read without any of these locks
// (Peer.Delegate's fast path).
//
// A call that keeps asking new questions (maxAttempts) runs its last
// attempt in place with the I/O under the lock, as a policy called
// directly would; micra_overlay_decision_inplace_total counts those.

// maxAttempts bounds the attempts of one policy call before the last one
// performs its I/O in place. A decision needs one per probe round plus one
// per uncached lookup; a handful covers every policy.
const maxAttempts = 16

// attempt is one policy call's state across its attempts.
type attempt struct {
	// answers gathered so far (for this call only: probes age)
	probes  map[probeKey]delegation.ProbeResult
	lookups map[hierarchy.NodeID]lookupAnswer

	subnet  hierarchy.NodeID // the call's subnet (its lock is held)
	inPlace bool             // the last attempt: I/O in place
	cancel  context.CancelFunc
	// the call's own random stream, restarted at every attempt from one
	// seed, so a replay draws what the attempt before it drew and asks
	// the same questions (a randomised walk would ask new ones each time)
	seed [2]uint64
	rng  *rand.PCG
	// the question that stopped this attempt (at most one of them)
	missed       bool
	needTarget   netip.Addr
	needProbes   []delegation.CrawlerID
	needLookup   hierarchy.NodeID
	needLookupOK bool
	needHolders  cid.Cid
	needHolderOK bool
}

type probeKey struct {
	target  netip.Addr
	crawler delegation.CrawlerID
}

type lookupAnswer struct {
	rec delegation.Record
	ok  bool
	err error
}

// errAsked is what a cut-short attempt's Directory calls return.
var errAsked = errors.New("overlay: answer pending (the decision resumes once it arrives)")

// miss records the question that stops the current attempt, unless one
// already did (what the policy asks after a cut-short answer is built on
// it, and is not asked for real).
func (a *attempt) miss(set func()) {
	if a.missed {
		return
	}
	a.missed = true
	set()
	a.cancel()
}

// subnetLocks serialises policy calls per subnet.
type subnetLocks struct {
	mu sync.Mutex
	m  map[hierarchy.NodeID]*subnetLock
}

type subnetLock struct {
	mu   sync.Mutex
	refs int
}

// lock takes s's lock, waiting for ctx at most; the returned func releases it.
func (l *subnetLocks) lock(ctx context.Context, s hierarchy.NodeID) (func(), error) {
	l.mu.Lock()
	if l.m == nil {
		l.m = make(map[hierarchy.NodeID]*subnetLock)
	}
	e := l.m[s]
	if e == nil {
		e = &subnetLock{}
		l.m[s] = e
	}
	e.refs++
	l.mu.Unlock()
	release := func() {
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, s)
		}
		l.mu.Unlock()
	}
	if !e.mu.TryLock() {
		got := make(chan struct{})
		go func() {
			e.mu.Lock()
			close(got)
		}()
		select {
		case <-got:
		case <-ctx.Done():
			go func() { // hand the lock back once the waiter gets it
				<-got
				e.mu.Unlock()
				release()
			}()
			return nil, ctx.Err()
		}
	}
	return func() {
		e.mu.Unlock()
		release()
	}, nil
}

// tryLock takes s's lock if it is free; the returned func releases it.
func (l *subnetLocks) tryLock(s hierarchy.NodeID) (func(), bool) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil {
		l.m = make(map[hierarchy.NodeID]*subnetLock)
	}
	if _, held := l.m[s]; held {
		return nil, false // held or waited for
	}
	e := &subnetLock{refs: 1}
	e.mu.Lock()
	l.m[s] = e
	return func() {
		e.mu.Unlock()
		l.mu.Lock()
		if e.refs--; e.refs == 0 {
			delete(l.m, s)
		}
		l.mu.Unlock()
	}, true
}

// decide runs one policy call (call, given the policy and the context of
// an attempt) for subnet s by attempts, as described above.
func (p *Peer) decide(ctx context.Context, s hierarchy.NodeID, call func(context.Context, delegation.Policy) (delegation.Decision, error)) (delegation.Decision, error) {
	unlock, err := p.subnetLocks.lock(ctx, s)
	if err != nil {
		return delegation.Decision{}, err
	}
	defer unlock()
	a := &attempt{subnet: s, probes: map[probeKey]delegation.ProbeResult{}, lookups: map[hierarchy.NodeID]lookupAnswer{}}
	seeded := false
	for n := 1; ; n++ {
		if err := ctx.Err(); err != nil {
			return delegation.Decision{}, err
		}
		actx, cancel := context.WithCancel(ctx)
		a.cancel, a.missed, a.inPlace = cancel, false, n >= maxAttempts
		a.needProbes, a.needLookupOK, a.needHolderOK = nil, false, false
		p.polMu.Lock()
		if p.policy == nil {
			p.polMu.Unlock()
			cancel()
			return delegation.Decision{}, errNoPolicy
		}
		if p.rng != nil {
			if !seeded {
				a.seed, seeded = [2]uint64{p.rng.base.Uint64(), p.rng.base.Uint64()}, true
			}
			a.rng = rand.NewPCG(a.seed[0], a.seed[1])
		}
		p.enter(a)
		p.drainLearnLocked()
		d, err := call(actx, p.policy)
		p.drainLearnLocked() // what the attempt read from the DHT
		p.enter(nil)
		p.polMu.Unlock()
		cancel()
		if !a.missed {
			p.metrics.decisionAttempts.Observe(float64(n))
			if a.inPlace {
				p.metrics.decisionInPlace.Inc()
			}
			return d, err
		}
		p.answer(ctx, a)
	}
}

// answer performs, without any lock, the I/O the last attempt asked for.
func (p *Peer) answer(ctx context.Context, a *attempt) {
	switch {
	case len(a.needProbes) > 0:
		res := p.prober.Probe(ctx, a.needTarget, a.needProbes)
		for _, r := range res {
			a.probes[probeKey{a.needTarget, r.Crawler}] = r
		}
	case a.needLookupOK:
		rec, ok, err := p.lookupDHT(ctx, a.needLookup)
		a.lookups[a.needLookup] = lookupAnswer{rec, ok, err}
	case a.needHolderOK:
		p.dir.findProviders(ctx, a.needHolders) // cached: the next attempt reads it
	}
}

// lookupDHT is Directory.Lookup from the network (the DHT seam of tests).
func (p *Peer) lookupDHT(ctx context.Context, s hierarchy.NodeID) (delegation.Record, bool, error) {
	if p.dhtDelay != nil {
		if err := p.dhtDelay(ctx); err != nil {
			return delegation.Record{}, false, err
		}
	}
	return p.dir.Lookup(ctx, s)
}

// enter makes a (nil: none) the attempt holding polMu, with its random
// stream. The caller holds polMu.
func (p *Peer) enter(a *attempt) {
	p.attempt = a
	if p.rng != nil {
		p.rng.cur = nil
		if a != nil && a.rng != nil {
			p.rng.cur = a.rng
		}
	}
}

// attemptSource is the policy's source of randomness: the peer's own
// stream, except while a policy call's attempt holds polMu (enter).
type attemptSource struct {
	base *rand.PCG
	cur  *rand.PCG
}

func (s *attemptSource) Uint64() uint64 {
	if s.cur != nil {
		return s.cur.Uint64()
	}
	return s.base.Uint64()
}

// decisionProber is the Prober the policy sees (Deps).
type decisionProber struct{ p *Peer }

func (dp decisionProber) Probe(ctx context.Context, target netip.Addr, crawlers []delegation.CrawlerID) []delegation.ProbeResult {
	p := dp.p
	a := p.attempt
	if a == nil || a.inPlace {
		return p.prober.Probe(ctx, target, crawlers)
	}
	out := make([]delegation.ProbeResult, len(crawlers))
	var miss []delegation.CrawlerID
	for i, c := range crawlers {
		if r, ok := a.probes[probeKey{target, c}]; ok && !a.missed {
			out[i] = r
			continue
		}
		out[i] = delegation.ProbeResult{Crawler: c}
		miss = append(miss, c)
	}
	if len(miss) > 0 {
		a.miss(func() { a.needTarget, a.needProbes = target, miss })
	}
	return out
}

// ErrNoQuorum: this peer has not heard lately a strict majority of the
// crawlers it knows (Members.DecisionQuorum), so it makes no delegation:
// in a partition the other
// side might make another of the same subnet, and both would crawl it. The
// node spools such URLs until a quorum returns (node.Router.Route).
var ErrNoQuorum = errors.New("overlay: no quorum of the known crawlers is heard: no delegation is made until one is")

// decisionDirectory is the Directory the policy sees (Deps).
type decisionDirectory struct{ p *Peer }

func (dd decisionDirectory) Lookup(ctx context.Context, s hierarchy.NodeID) (delegation.Record, bool, error) {
	p := dd.p
	a := p.attempt
	if a == nil || a.inPlace {
		return p.lookupDHT(ctx, s)
	}
	if a.missed {
		return delegation.Record{}, false, errAsked
	}
	if e, ok := p.dir.entry(s); ok && !e.stale {
		return e.rec, p.members.IsLive(e.rec.Owner), nil // as Directory.Lookup, from the cache
	}
	if ans, ok := a.lookups[s]; ok {
		return ans.rec, ans.ok, ans.err
	}
	a.miss(func() { a.needLookup, a.needLookupOK = s, true })
	return delegation.Record{}, false, errAsked
}

// Publish releases polMu around the network (endorsement, DHT put, read
// back): publishing is a decision's last step and holds no scratch state
// of the policy's. A cut-short attempt publishes nothing, nor does a peer
// without a quorum (ErrNoQuorum).
func (dd decisionDirectory) Publish(ctx context.Context, rec delegation.Record) (delegation.Record, error) {
	p := dd.p
	if !p.members.DecisionQuorum() {
		return delegation.Record{}, ErrNoQuorum
	}
	a := p.attempt
	if a == nil || a.inPlace {
		return p.dir.Publish(ctx, rec)
	}
	if a.missed || ctx.Err() != nil {
		return delegation.Record{}, errAsked
	}
	if rec.Subnet != a.subnet {
		// another subnet's record (load balancing moves subnets): only
		// while no other call decides that subnet
		unlock, ok := p.subnetLocks.tryLock(rec.Subnet)
		if !ok {
			return delegation.Record{}, delegation.ErrBusy
		}
		defer unlock()
	}
	p.enter(nil)
	p.polMu.Unlock()
	pub, err := p.dir.Publish(ctx, rec)
	p.polMu.Lock()
	p.enter(a)
	return pub, err
}

func (dd decisionDirectory) HoldersUnder(ctx context.Context, anc hierarchy.NodeID) ([]delegation.CrawlerID, error) {
	c, local := dd.p.dir.underHolders(anc)
	return dd.holders(ctx, c, local)
}

func (dd decisionDirectory) HoldersOfOrg(ctx context.Context, o hierarchy.OrgID) ([]delegation.CrawlerID, error) {
	if o == 0 {
		return nil, nil
	}
	c, local := dd.p.dir.orgHolders(o)
	return dd.holders(ctx, c, local)
}

func (dd decisionDirectory) holders(ctx context.Context, c cid.Cid, local []delegation.CrawlerID) ([]delegation.CrawlerID, error) {
	p := dd.p
	a := p.attempt
	if a == nil || a.inPlace {
		return p.dir.holders(ctx, c, local)
	}
	if a.missed {
		return nil, errAsked
	}
	out, wait := p.dir.holdersCached(c, local)
	if wait {
		a.miss(func() { a.needHolders, a.needHolderOK = c, true })
		return nil, errAsked
	}
	return out, nil
}
