package overlay

import (
	"github.com/micra-crawler/micra/delegation"
)

// Every peer learns from every delegation record, not only its own
// decisions: records are public (DHT values, announced on
// micra/calibration/1 as DELEGATED events), signed, snapshot-checked by the
// record validator, and carry the probe answers that decided them. A policy
// that learns (delegation.Learner, e.g. NewMicra) therefore gets the
// statistics of one engine that saw every decision of the network.
//
// Records reach the learn queue from Directory.merge, the single door of
// every verified record into the cache: gossip announcements, DHT reads
// (lookups, publish read-backs) and this peer's own puts. The policy is a
// state machine serialised by polMu. A decision holds polMu only while it
// computes (decide.go), but the gossip loop must never wait even for that
// (a slow subscriber loses messages): it queues, and the queue is drained
// by whoever holds polMu next — the gossip loop when the lock is free
// (TryLock), or the next policy call before and after each attempt.

// maxLearnQueue bounds the records waiting for the policy lock; beyond it the
// oldest are dropped (counted in micra_overlay_learn_dropped_total).
const maxLearnQueue = 4096

// queueLearn queues a verified record for the policy to learn from.
func (p *Peer) queueLearn(rec delegation.Record) {
	if len(rec.Probes) == 0 {
		return // nothing to learn (and nothing a learner would keep)
	}
	p.learnMu.Lock()
	if len(p.learnQ) >= maxLearnQueue {
		n := len(p.learnQ) - maxLearnQueue + 1
		p.learnQ = append(p.learnQ[:0], p.learnQ[n:]...)
		p.metrics.learnDropped.Add(float64(n))
	}
	p.learnQ = append(p.learnQ, rec)
	p.learnMu.Unlock()
}

// drainLearnLocked feeds the queued records to the policy. The caller holds
// polMu.
func (p *Peer) drainLearnLocked() {
	if p.policy == nil {
		return // (the queue waits for UsePolicy: records are evidence all the same)
	}
	p.learnMu.Lock()
	q := p.learnQ
	p.learnQ = nil
	p.learnMu.Unlock()
	l, ok := p.policy.(delegation.Learner)
	if !ok || len(q) == 0 {
		return
	}
	n := 0
	for _, r := range q {
		if l.Learn(r) {
			n++
		}
	}
	p.metrics.learned.Add(float64(n))
}

// tryDrainLearn drains the learn queue if no decision holds the policy.
func (p *Peer) tryDrainLearn() {
	if !p.polMu.TryLock() {
		return // the decision in progress drains it when it ends
	}
	p.drainLearnLocked()
	p.polMu.Unlock()
}

// LearnPending drains the learn queue now, waiting for the policy lock (tests,
// benchmarks, a node going idle). It returns the records still queued
// afterwards (0 unless more arrived meanwhile).
func (p *Peer) LearnPending() int {
	p.polMu.Lock()
	p.drainLearnLocked()
	p.polMu.Unlock()
	p.learnMu.Lock()
	defer p.learnMu.Unlock()
	return len(p.learnQ)
}

// WithPolicy runs fn with the installed policy (nil if none) under the
// policy lock, after draining the learn queue: the way to inspect or feed a
// policy from outside without racing the peer's own calls.
func (p *Peer) WithPolicy(fn func(delegation.Policy)) {
	p.polMu.Lock()
	defer p.polMu.Unlock()
	p.drainLearnLocked()
	fn(p.policy)
}
