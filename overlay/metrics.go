package overlay

import (
	"fmt"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	dhtGet, dhtPut                                                       prometheus.Histogram
	probesSent, probesServed, endorsements, delegations, handoffsRefused prometheus.Counter
	pagesRecovered, pagesArchived, calibrationEvents                     prometheus.Counter
	deaths                                                               *prometheus.CounterVec // by reason: left, failed
	gossipRejected                                                       *prometheus.CounterVec // by topic and reason
	learned, learnDropped                                                prometheus.Counter
	decisionAttempts                                                     prometheus.Histogram
	decisionInPlace, cachedRoutes                                        prometheus.Counter
	swimSuspicions                                                       prometheus.Counter
	swimRefused                                                          prometheus.Counter
	identitiesRefused                                                    prometheus.Counter
	ownedRecords                                                         *prometheus.CounterVec // by outcome: sent, merged, refused
}

// newMetrics registers the overlay's metrics on reg (nil: unregistered),
// labelled with the peer id so many peers can share one registry.
func newMetrics(reg prometheus.Registerer, peerID string) (*metrics, error) {
	buckets := prometheus.ExponentialBuckets(0.0005, 2, 16)
	m := &metrics{
		dhtGet: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "micra", Subsystem: "overlay", Name: "dht_get_seconds",
			Help: "Latency of uncached DHT delegation lookups.", Buckets: buckets}),
		dhtPut: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "micra", Subsystem: "overlay", Name: "dht_put_seconds",
			Help: "Latency of DHT delegation puts.", Buckets: buckets}),
		probesSent:        prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "probes_sent_total", Help: "Probe requests issued (one per crawler asked)."}),
		probesServed:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "probes_served_total", Help: "Probe requests answered."}),
		endorsements:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "endorsements_total", Help: "Owner countersignatures obtained."}),
		handoffsRefused:   prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "handoffs_refused_total", Help: "Hand-off streams refused because their sender is not a live member."}),
		delegations:       prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "delegations_total", Help: "Delegation decisions run by this peer."}),
		pagesRecovered:    prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "pages_recovered_total", Help: "Page histories pulled from previous owners."}),
		pagesArchived:     prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "pages_recovered_archive_total", Help: "Page states pulled from the archive (the index sink) when a subnet's previous owner was dead or did not answer."}),
		calibrationEvents: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "calibration_events_total", Help: "Calibration events received."}),
		deaths: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "peers_declared_dead_total",
			Help: "Peers declared dead, by reason: left (announced a clean stop) or failed (silent past the failure timeout)."}, []string{"reason"}),
		gossipRejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "gossip_rejected_total",
			Help: "Gossip messages rejected, ignored or dropped, by topic and gossipsub's reason (invalid signature, validation failed, validation queue full, subscriber behind, ...)."}, []string{"topic", "reason"}),
		learned:      prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "records_learned_total", Help: "Delegation records (this peer's and others') the policy learned from."}),
		learnDropped: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "learn_dropped_total", Help: "Delegation records dropped from a full learn queue before the policy learned them."}),
		decisionAttempts: prometheus.NewHistogram(prometheus.HistogramOpts{Namespace: "micra", Subsystem: "overlay", Name: "decision_attempts",
			Help: "Attempts per policy call (one plus one per network wait: lookup, probe round, provider walk).", Buckets: prometheus.LinearBuckets(1, 1, 8)}),
		decisionInPlace: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "decision_inplace_total",
			Help: "Policy calls that kept asking new questions and ran their last attempt with its I/O under the policy lock."}),
		cachedRoutes: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "cached_owner_lookups_total",
			Help: "Owner lookups answered from the cached record without the policy."}),
		swimSuspicions: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "swim_suspicions_total",
			Help: "Members this peer heard suspected (Membership swim): each is refuted by the member or ends in its death."}),
		swimRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "swim_records_refused_total",
			Help: "SWIM records refused (Membership swim): not signed by the member they name, another snapshot, no admission, past the identity limits; as the heartbeat topic's rejections."}),
		identitiesRefused: prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "identities_refused_total",
			Help: "Heartbeats of new identities ignored for an open network's limits per IP and per neighbour (also counted as ignored gossip)."}),
		ownedRecords: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "overlay", Name: "owned_records_total",
			Help: "Owned delegation records moved over /micra/owned/1 to members back from the dead, by outcome: sent (taken by the member), merged or refused (received)."}, []string{"outcome"}),
	}
	if reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"peer": peerID}, reg)
		for _, c := range []prometheus.Collector{m.dhtGet, m.dhtPut, m.probesSent, m.probesServed, m.endorsements, m.delegations, m.handoffsRefused, m.pagesRecovered, m.pagesArchived, m.calibrationEvents, m.deaths, m.gossipRejected, m.learned, m.learnDropped, m.decisionAttempts, m.decisionInPlace, m.cachedRoutes, m.swimSuspicions, m.swimRefused, m.identitiesRefused, m.ownedRecords} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("overlay: metrics: %w", err)
			}
		}
	}
	return m, nil
}
