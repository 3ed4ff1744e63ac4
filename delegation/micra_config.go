package delegation

import (
	"math"
	"time"
)

// MicraConfig tunes NewMicra. Zero fields take defaults.
type MicraConfig struct {
	// Miss is the risk the policy accepts: it stops probing once the summed
	// probability that an unprobed candidate beats the best answer so far is
	// below Miss. Default 0.06.
	Miss float64
	// Neighbours: when a round's answers give a new best, from a crawler
	// that states its position, and more crawlers are live than the
	// decision's candidates, up to Neighbours of the 8 live crawlers
	// nearest to that crawler (by stated position) that are not candidates
	// yet join the candidates, predicted by the distance fit (the host
	// lies about the answer's distance from the best crawler). The learned
	// candidates cover a region, not the neighbourhood of the crawler that
	// answered best: with 50 crawlers the optimal one was among them for
	// too few hosts (docs/experiments/2026-11-delegation-log.md,
	// "Neighbour candidates"). With no more live crawlers than
	// MinCandidates every crawler is a candidate already.
	// Default 2, at most 8; negative: none.
	Neighbours int
	// Locate: after every round with an answer from a crawler that
	// states its position, with more live crawlers than the decision's
	// candidates, the host is placed at the stated position whose
	// distances to the answering crawlers best fit their answers (from a
	// single answer: the place on its ring with the most crawlers around),
	// every unprobed candidate is predicted anew from its distance to it,
	// and up to Locate of the live crawlers nearest it join the candidates
	// (micra_locate.go). When the probes end above
	// Config.Threshold, the walk first goes there too. Among thousands of
	// crawlers the learned candidates often sit in another region than the
	// host (docs/experiments/2026-11-scale-probes.md).
	// Default 2, at most 8; negative: none.
	Locate int
	// MissFirst is the risk accepted after a decision's first probe, when
	// the estimate rests on a single answer and overstates the risk: in
	// the simulator, first-probe estimates of 0.06–0.08 missed 1.6 % of
	// the time and those of 0.08–0.2 about 5 % (docs/experiments/2026-11-delegation-log.md,
	// "The stop rule's calibration"). Default 0.1; negative: Miss.
	MissFirst float64
	// MaxProbes caps the probes of one decision. Default 12.
	MaxProbes int
	// PriorSigma is the spread (sd of ln RTT) assumed for a crawler with a
	// single observation in a context, until the pooled spread of that kind
	// of context has been learned (PooledAfter observations). Default 0.45.
	PriorSigma float64
	// PooledAfter: observations of a kind of context (subnets at one depth,
	// organisations, countries, everything) after which the spread learned
	// across all contexts of that kind replaces PriorSigma. Default 20;
	// negative: never.
	PooledAfter float64
	// MinCandidates: contexts are widened until at least this many
	// candidates are known (with fewer live crawlers: all of them).
	// Default 16 (topK): at 8, the nearest crawler was often never a
	// candidate (docs/experiments/2026-11-delegation-log.md).
	MinCandidates int
	// Parallel probes this many top candidates per round. Default 1.
	Parallel int
	// Blind is the risk accepted for a decision without any probe: when the
	// predicted nearest beats every other candidate with probability above
	// 1−Blind (from the learned statistics alone), it gets the subnet
	// unprobed; its own crawl timings (Calibrator) catch a wrong guess.
	// Default 0.005; negative disables.
	Blind float64
	// BlindMinObs is the number of observations the predicted nearest needs
	// in its context before a blind decision. Default 3.
	BlindMinObs float64
	// NoPairs disables the pairwise model (how one crawler's answer predicts
	// another's, learned from hosts probed by both); the marginal
	// per-context predictions alone then decide when to stop.
	NoPairs bool
	// PairBandwidth is the kernel width of the pairwise model on ln RTT.
	// Default 0.3.
	PairBandwidth float64
	// Walk is the probe budget of the fallback walk used when there are far
	// more crawlers than one decision considers (> 4·MaxProbes) and the
	// best answer is still above Config.Threshold. Default 8; negative: off.
	Walk int
	// PairPrior is the weight, in samples, of the marginal prediction in
	// the pairwise estimate. Default 0.3.
	PairPrior float64
	// PairSamples caps the samples kept per ordered pair, at most 65535.
	// Default 96: 128 gave the same accuracy over 80 seed runs with a
	// third more samples to scan (docs/experiments/2026-11-delegation-log.md).
	PairSamples int
	// FirstByWins probes first the likeliest winner by the learned win
	// counts per context instead of the candidate with the lowest predicted
	// RTT. Off: on the simulator it cost 0.1 probes/URL and 1.6 points.
	FirstByWins bool
	// NoGeo disables the distance prior (registry country centroid of the
	// subnet to the position a crawler states for itself).
	NoGeo bool
	// GeoAfter is the number of (distance, RTT) observations after which the
	// learned distance prior replaces the crawler's overall mean as the base
	// of its prediction. Default 30.
	GeoAfter float64
	// ReviewMiss is the risk of a review (Reviewer): the owner's timing of a
	// further host of its subnet is a free answer, and other crawlers are
	// probed only while the probability that one of them beats it is at
	// least ReviewMiss. Default 0.3 (a review is a free answer for a host
	// whose subnet is already delegated: it only has to catch large
	// errors); negative: no review probes (the tally then only counts the
	// owner).
	ReviewMiss float64
	// ReviewEvery: the first ReviewEvery hosts of a subnet under its
	// current record (the deciding host included) are reviewed; after
	// that only the 2^k-th host is — the majority is settled, and each
	// further vote moves it less. Default 16; negative: every host.
	ReviewEvery int
	// ReviewProbeUpTo: the reviews of a subnet's 2nd, 4th, 8th … host, up
	// to this one, probe at least one other crawler (the likeliest to beat
	// the owner) even when the statistics call none likely. A review sees
	// the subnet through the statistics that decided it, so a crawler the
	// first decision wrongly ruled out stays ruled out host after host
	// (zipf hosts: +0.5 points for 0.06 probes/URL; docs/experiments/2026-11-delegation-log.md,
	// "Measured").
	// Default 2 (the second host only); negative: never.
	ReviewProbeUpTo int
	// ReviewPool, in (0, 1): a review whose best answer beats the owner's
	// timing by this fraction is a vote against the owner, and the
	// subnet goes to that answer's crawler once such votes outnumber the
	// owner's. Among thousands of crawlers a few ms apart, the hosts that
	// find the owner slow each find a different faster crawler, so no
	// single one outvotes the owner (a plurality tally) however bad the
	// owner is: pooled, they do. 0 or negative: off (the default; the
	// plurality alone decides).
	ReviewPool float64
	// PairFromLowest: a pair (a, b) is learned from a record only when a's
	// answer is among its PairFromLowest lowest (b may be any answer); 0 or
	// negative: every pair. A decision conditions on its few lowest answers,
	// and a record's pairs grow as its answers squared. Off by default: 8
	// gives 1000 crawlers 1.2–1.5× the decisions per second at the same
	// accuracy (BenchmarkDecisions prints micra-pairfrom8 beside micra),
	// but costs 12 crawlers 0.2–0.5 points on the hub-matrix worlds
	// (docs/experiments/2026-11-delegation-log.md, "Measured").
	PairFromLowest int
	// BlockMargin, in (0, 1): a review whose nearest crawler for the host
	// is not the owner, with an answer at most (1 − BlockMargin) × the
	// owner's timing, delegates the host's block (Record.Blocks) to that
	// crawler. Default 0.2 (+1.5 points on zipf hosts, +0.6 on the hub
	// matrix: docs/experiments/2026-11-delegation-log.md, "Block
	// delegations"); negative or ≥ 1: no block delegations.
	BlockMargin float64
	// Shift (0..1) moves every candidate's prediction by this fraction of the
	// surprise of the best answer so far (ln observed − ln predicted): host
	// access delay is shared by all crawlers. Default 0 (off): 0.5 buys
	// 0.3–0.4 points for 0.1–0.2 more probes/URL, the trade a tighter Miss
	// gives (docs/experiments/2026-11-delegation-log.md). Outside 0..1: 0.
	Shift float64
	// MaxContexts bounds the learned state of a long-running peer: the
	// subnet, ancestor and organisation contexts it keeps statistics for
	// (about 1.2 per decided subnet on uniform hosts, some 450 bytes each
	// at 12 crawlers), and the review tallies of subnets. When a new
	// context would pass it, the quarter used least recently is forgotten
	// (contexts where live crawlers sit are kept; countries, registries and
	// everything are few and always kept). Default 1<<16 (≈ 30 MB at 12
	// crawlers, a little more with many; BenchmarkLearnedState);
	// negative: unbounded.
	MaxContexts int
	// Margin: the stop rule counts an unprobed candidate as beating the
	// best answer only when it is faster by more than Margin. Among
	// thousands of crawlers many sit within a few ms of each other, and
	// the risk that one of them is a little nearer never falls under Miss:
	// without a margin decisions probe until MaxProbes for gains of a
	// millisecond (docs/delegation.md, "At scale"). Default 0 (none).
	Margin time.Duration

	// OnRound, if set, sees every round of the stop rule (experiments:
	// `micra sim --calibration` measures how well the risk predicts a
	// miss). It runs inside the policy call and must not call the policy.
	OnRound func(RoundRisk)

	// refineAll computes every candidate's pairwise estimate each round,
	// as before the bounds pruned them: the tests check that the pruning
	// changes no decision.
	refineAll bool
}

func (m MicraConfig) withDefaults() MicraConfig {
	if !(m.Miss > 0) { // (NaN too)
		m.Miss = 0.06
	}
	if m.Neighbours == 0 {
		m.Neighbours = 2
	}
	m.Neighbours = min(m.Neighbours, nbList) // only nbList are kept per crawler
	if m.Locate == 0 {
		m.Locate = 2
	}
	m.Locate = min(m.Locate, nbList)
	switch {
	case m.MissFirst == 0:
		m.MissFirst = 0.1
	case !(m.MissFirst > 0): // negative, NaN
		m.MissFirst = m.Miss
	}
	if m.MaxProbes <= 0 {
		m.MaxProbes = 12
	}
	if !(m.PriorSigma > 0) { // (NaN too)
		m.PriorSigma = 0.45
	}
	if m.PooledAfter == 0 || math.IsNaN(m.PooledAfter) {
		m.PooledAfter = 20
	}
	if m.MinCandidates <= 0 {
		m.MinCandidates = topK
	}
	if m.Parallel <= 0 {
		m.Parallel = 1
	}
	if m.Blind == 0 {
		m.Blind = 0.005
	}
	if !(m.BlindMinObs > 0) { // (NaN too)
		m.BlindMinObs = 3
	}
	if !(m.PairBandwidth > 0 && m.PairBandwidth < math.Inf(1)) {
		m.PairBandwidth = 0.3
	}
	if m.Walk == 0 {
		m.Walk = 8
	}
	if !(m.PairPrior > 0 && m.PairPrior < math.Inf(1)) {
		m.PairPrior = 0.3
	}
	if m.PairSamples <= 0 {
		m.PairSamples = 96
	}
	m.PairSamples = min(m.PairSamples, math.MaxUint16) // pairSamples counts in uint16
	if m.ReviewMiss == 0 {
		m.ReviewMiss = 0.3
	}
	if m.ReviewEvery == 0 {
		m.ReviewEvery = 16
	}
	if m.ReviewProbeUpTo == 0 {
		m.ReviewProbeUpTo = 2
	}
	switch {
	case m.BlockMargin == 0:
		m.BlockMargin = 0.2
	case !(m.BlockMargin > 0 && m.BlockMargin < 1):
		m.BlockMargin = -1 // off
	}
	if !(m.GeoAfter > 0) {
		m.GeoAfter = 30
	}
	if !(m.Shift >= 0 && m.Shift <= 1) { // (NaN too)
		m.Shift = 0
	}
	if m.MaxContexts == 0 {
		m.MaxContexts = 1 << 16
	}
	return m
}
