package delegation

import (
	"context"
	"net/netip"
	"slices"
	"strconv"

	"github.com/micra-crawler/micra/hierarchy"
)

// NewRandom returns UCYMicra's location-unaware delegation: a new subnet goes
// to a live crawler drawn uniformly with Deps.Rand. It issues no probes.
func NewRandom(d Deps, c Config) Policy { return newEngine("random", d, c, randomChooser{}) }

type randomChooser struct{}

func (randomChooser) rank(_ context.Context, e *engine, _ netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	ids := e.liveIDs()
	if len(ids) == 0 {
		return nil, nil
	}
	pick := ids[e.d.Rand.IntN(len(ids))]
	d.Reason = ReasonRandom
	d.Steps = append(d.Steps, Step{Kind: StepRandom, Node: s, Note: "uniform among " + strconv.Itoa(len(ids)) + " live crawlers"})
	return []ProbeResult{{Crawler: pick}}, nil
}

// NewOptimal returns the brute-force policy: probe every live crawler, the
// lowest answer wins. It is the probing upper bound the others are measured
// against (the simulator's "optimal" column is computed from the model's
// mean RTTs, which brute force reaches only up to probe jitter).
func NewOptimal(d Deps, c Config) Policy { return newEngine("optimal", d, c, bruteChooser{}) }

type bruteChooser struct{}

func (bruteChooser) rank(ctx context.Context, e *engine, ip netip.Addr, s hierarchy.NodeID, d *Decision) ([]ProbeResult, error) {
	step := Step{Kind: StepBruteForce, Node: s}
	res := e.probe(ctx, ip, slices.Clone(e.liveIDs()), &step, d)
	ranked := make([]ProbeResult, 0, len(res))
	for _, r := range res {
		if r.OK {
			ranked = append(ranked, r)
		}
	}
	sortRanked(ranked)
	step.Note = "every live crawler probed"
	d.Steps = append(d.Steps, step)
	d.Reason = ReasonBruteForce
	return ranked, nil
}

// hashPolicy is UbiCrawler's assignment as a policy: every host goes to its
// consistent-hash owner. It is per host (not per subnet), needs no directory
// and issues no probes.
type hashPolicy struct{ *engine }

// NewConsistentHash returns UbiCrawler's consistent hashing as a policy.
// Config.HashReplicas, HashCapacityUnit and HashProbes tune the ring.
func NewConsistentHash(d Deps, c Config) Policy {
	return hashPolicy{newEngine("hash", d, c, nil)}
}

func (h hashPolicy) Delegate(ctx context.Context, ip netip.Addr) (Decision, error) {
	d := Decision{IP: ip, Subnet: h.d.Tree.SmallestNonUnary(ip)}
	if err := ctx.Err(); err != nil {
		return d, err
	}
	return h.hashed(ip, ReasonHashed, d)
}

func (h hashPolicy) Redelegate(ctx context.Context, ip netip.Addr) (Decision, error) {
	return h.Delegate(ctx, ip)
}

func (h hashPolicy) Join(_ context.Context, c Crawler) (Decision, error) {
	// The ring is rebuilt from the membership; a joining crawler owns
	// whatever the ring gives it, not its subnet.
	return Decision{IP: c.Addr, Subnet: hierarchy.None, Owner: c.ID, Reason: ReasonHashed}, nil
}
