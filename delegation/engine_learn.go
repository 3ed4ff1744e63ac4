package delegation

import (
	"slices"

	"github.com/micra-crawler/micra/hierarchy"
)

// Learning: how an engine folds delegation records — its own and every
// other peer's — into its chooser once each, within a bounded memory.

// learner is implemented by choosers that learn from published records.
type learner interface {
	learn(e *engine, s hierarchy.NodeID, rec Record)
}

// Learner is implemented by the policies that learn from delegation records
// (NewMicra). Records are public (the overlay's DHT values and their gossip
// announcements), so every peer can learn from every decision, not only its
// own: Learn folds a record decided elsewhere into the policy's statistics
// exactly as if this policy had made that decision.
//
// Learn is idempotent: a record already learned (same subnet, epoch and
// decider — including the policy's own decisions and placements) changes
// nothing. A record of another hierarchy snapshot, or for a subnet outside
// the tree, is ignored (its node ids mean other subnets). Like every policy
// call it must be serialised with Delegate, Join and Redelegate.
type Learner interface {
	Learn(rec Record) bool // reports whether rec was new and learned
}

// learnedPerSubnet bounds the dedup memory of one subnet: the newest epochs
// learned. Older records arriving late are learned again only if more than
// this many newer decisions of the same subnet were seen in between, which a
// subnet re-delegated that often does not mind.
const learnedPerSubnet = 4

// learnedKey names one record of a subnet: its epoch and a 64-bit FNV-1a
// hash of its decider. Not the decider's name: a node that decodes every
// record afresh kept a copy of a 52-byte peer ID per key (up to four per
// subnet learned); two deciders colliding in one subnet's epoch would need
// odds of 2^-64.
type learnedKey struct {
	epoch   uint64
	decider uint64
}

func fnv64a(s CrawlerID) uint64 {
	h := uint64(14695981039346656037)
	for i := 0; i < len(s); i++ {
		h ^= uint64(s[i])
		h *= 1099511628211
	}
	return h
}

// learnedSet is the dedup memory of one subnet, held in a slice by value
// (no allocation per subnet learned).
type learnedSet struct {
	n    uint8
	used uint64 // engine.learnTick when the subnet last had a record to learn
	k    [learnedPerSubnet]learnedKey
}

// learningEngine is an engine whose chooser learns: it exports Learn.
type learningEngine struct{ *engine }

// Learn implements Learner.
func (le learningEngine) Learn(rec Record) bool {
	e := le.engine
	if rec.Snapshot != e.d.Tree.ID() || rec.Subnet == hierarchy.None || rec.Subnet == hierarchy.Root || int(rec.Subnet) >= e.d.Tree.Len() {
		return false
	}
	if l, ok := e.ch.(interface{ prepare(e *engine) }); ok {
		l.prepare(e)
	}
	if k, ok := e.ch.(interface{ knows(CrawlerID) bool }); ok {
		rec.Probes = knownOnly(rec.Probes, k.knows)
	}
	return e.learnOnce(rec.Subnet, rec)
}

// knownOnly drops the answers of crawlers the learner never saw in its
// membership. Every crawler a record names costs a learner state in every
// context it learns, kept for good, so a record of made-up crawlers (up to
// 64 answers each) would grow it without bound; a crawler that has joined
// is known as soon as this peer's membership lists it. The answers of one
// that joined too recently for that are lost, which costs little: its
// next decisions bring new ones. rec's slice is shared with the caller:
// it is copied only when something is dropped.
func knownOnly(ps []ProbeResult, known func(CrawlerID) bool) []ProbeResult {
	for i, p := range ps {
		if known(p.Crawler) {
			continue
		}
		out := slices.Clone(ps[:i])
		for _, q := range ps[i+1:] {
			if known(q.Crawler) {
				out = append(out, q)
			}
		}
		return out
	}
	return ps
}

// learnOnce feeds rec to the chooser unless it was learned before.
func (e *engine) learnOnce(s hierarchy.NodeID, rec Record) bool {
	l, ok := e.ch.(learner)
	if !ok {
		return false
	}
	if e.learnedAt == nil {
		e.learnedAt = make(map[hierarchy.NodeID]int32)
	}
	e.dropForgotten(l)
	k := learnedKey{rec.Epoch, fnv64a(rec.DecidedBy)}
	e.learnTick++
	at, ok := e.learnedAt[s]
	if !ok {
		at = e.newLearnedSet(l)
		e.learnedAt[s] = at
	}
	set := e.learnedSets.at(at)
	set.used = e.learnTick
	seen := set.k[:set.n]
	if slices.Contains(seen, k) {
		return false
	}
	if len(seen) >= learnedPerSubnet {
		// forget the lowest epoch — unless rec is older still: forgetting
		// one of the newest would learn it again when it comes back
		lo := 0
		for i := range seen {
			if seen[i].epoch < seen[lo].epoch {
				lo = i
			}
		}
		if k.epoch < seen[lo].epoch {
			return false
		}
		seen = slices.Delete(seen, lo, lo+1)
	}
	seen = append(seen, k)
	set.n = uint8(len(seen))
	if rec.DecidedBy != e.c.Self {
		// another peer's record (the one the directory kept, or a
		// placement): only answers of crawlers this peer knows, as Learn
		// does, or a made-up crawler would enter the learned state
		if kn, ok := e.ch.(interface{ knows(CrawlerID) bool }); ok {
			rec.Probes = knownOnly(rec.Probes, kn.knows)
		}
	}
	l.learn(e, s, rec)
	return true
}

// learnBounder is implemented by learners whose learned state is bounded
// (MicraConfig.MaxContexts): the engine forgets a subnet's dedup memory when
// the learner forgets the subnet's own statistics (takeForgotten), so a
// record is learned twice only into statistics that no longer hold it.
type learnBounder interface {
	learnBound() int
	takeForgotten() []hierarchy.NodeID
}

// dropForgotten forgets the dedup memory of the subnets the learner has
// forgotten.
func (e *engine) dropForgotten(l learner) {
	b, ok := l.(learnBounder)
	if !ok {
		return
	}
	for _, s := range b.takeForgotten() {
		if at, ok := e.learnedAt[s]; ok {
			delete(e.learnedAt, s)
			e.learnedFree = append(e.learnedFree, at)
		}
	}
}

// newLearnedSet returns the index of an empty dedup set for a subnet. The
// sets follow the learner's statistics (dropForgotten); records that leave
// no statistics (every answer unknown or failed) leave a set all the same,
// so past twice the learner's bound the least recently offered quarter is
// forgotten as well: a record of such a subnet learned again adds nothing.
func (e *engine) newLearnedSet(l learner) int32 {
	if b, ok := l.(learnBounder); ok {
		if bound := b.learnBound(); bound > 0 && len(e.learnedAt) >= 2*bound {
			stamps := make([]uint64, 0, len(e.learnedAt))
			for _, at := range e.learnedAt {
				stamps = append(stamps, e.learnedSets.at(at).used)
			}
			slices.Sort(stamps)
			cut := max(stamps[len(stamps)/4], stamps[0]+1)
			for s, at := range e.learnedAt {
				if e.learnedSets.at(at).used < cut {
					delete(e.learnedAt, s)
					e.learnedFree = append(e.learnedFree, at)
				}
			}
		}
	}
	if n := len(e.learnedFree); n > 0 {
		at := e.learnedFree[n-1]
		e.learnedFree = e.learnedFree[:n-1]
		*e.learnedSets.at(at) = learnedSet{}
		return at
	}
	return e.learnedSets.add()
}
