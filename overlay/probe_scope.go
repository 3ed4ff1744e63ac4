package overlay

import (
	"net/netip"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/micra-crawler/micra/hierarchy"
)

// What a probe may measure: an address of the subnet being decided.
//
// A decision probes the address of the host being delegated, and decides
// the smallest non-unary subnet that holds it (delegation's Delegate and
// Join). A probe request therefore names that subnet, and the prober checks
// it against its own hierarchy: the target must lie in it and it must be
// the subnet a decision for the target decides — not the root, and not an
// address outside every registered range, which a decision never probes.
// The requester's word is needed for none of that. What the prober cannot
// see is whether the requester really is deciding the subnet (its DHT
// lookups go to other peers, and load balancing re-probes subnets that have
// a live owner), so it bounds what a member could scan by pretending:
// few distinct addresses per subnet, and new subnets at a steady rate.

// probeTargetsPerSubnet is how many distinct addresses of one subnet a
// requester may have this peer probe within probeLogAge: a decision probes
// one host's address, and while the subnet's owner is full each further
// host of it is a room decision with a probe of its own address (the
// testnet's world of 200 hosts puts 22 in one subnet).
const probeTargetsPerSubnet = 32

// probeSubnetRate and probeSubnetBurst bound the new subnets a requester
// may name a second: a crawler starting on a fresh seed list decides a few
// hundred subnets at once, then the subnets of the hosts it discovers.
const (
	probeSubnetRate  = 2
	probeSubnetBurst = 500
)

// probeScope remembers, per requester, the subnets it had this peer probe
// and their distinct targets, for probeLogAge.
type probeScope struct {
	mu sync.Mutex
	by map[peer.ID]*scopeOf
}

type scopeOf struct {
	subnets map[hierarchy.NodeID]*subnetTargets
	newSub  *rate.Limiter
	last    time.Time
}

type subnetTargets struct {
	targets []netip.Addr
	first   time.Time // when the first of targets was probed
}

// maxScopedRequesters bounds the table; past it, requesters not heard of
// for probeLogAge are forgotten (requesters are members: few).
const maxScopedRequesters = 4096

// Why a probe's scope refused it.
const (
	scopeTooManyTargets = "too many addresses of one subnet"
	scopeTooManySubnets = "too many new subnets"
)

// admit records that id has this peer probe target of subnet s at now, or
// says why not (""; admitted). A target already probed for s is admitted
// again (retries, samples).
func (sc *probeScope) admit(id peer.ID, s hierarchy.NodeID, target netip.Addr, now time.Time) string {
	sc.mu.Lock()
	defer sc.mu.Unlock()
	if sc.by == nil {
		sc.by = make(map[peer.ID]*scopeOf)
	}
	if len(sc.by) >= maxScopedRequesters {
		for rid, r := range sc.by {
			if now.Sub(r.last) > probeLogAge {
				delete(sc.by, rid)
			}
		}
	}
	r := sc.by[id]
	if r == nil {
		r = &scopeOf{subnets: make(map[hierarchy.NodeID]*subnetTargets), newSub: rate.NewLimiter(probeSubnetRate, probeSubnetBurst)}
		sc.by[id] = r
	}
	r.last = now
	st := r.subnets[s]
	if st != nil && now.Sub(st.first) > probeLogAge {
		delete(r.subnets, s)
		st = nil
	}
	if st == nil {
		if !r.newSub.AllowN(now, 1) {
			return scopeTooManySubnets
		}
		if len(r.subnets) > probeSubnetBurst {
			// the rate's tokens are spent by now; drop subnets past their age
			for k, v := range r.subnets {
				if now.Sub(v.first) > probeLogAge {
					delete(r.subnets, k)
				}
			}
		}
		r.subnets[s] = &subnetTargets{targets: []netip.Addr{target}, first: now}
		return ""
	}
	for _, t := range st.targets {
		if t == target {
			return ""
		}
	}
	if len(st.targets) >= probeTargetsPerSubnet {
		return scopeTooManyTargets
	}
	st.targets = append(st.targets, target)
	return ""
}
