// Package chaos owns `micra testnet chaos`: random crash faults, restarts,
// stalls and partitions on a running testnet (testnet/cluster) while its
// crawl is under way, with the invariants checked as it goes and once the
// crawl is done — coverage and overlap at the sink, records acknowledged
// and lost, records ingested twice, what a subscriber beside the sink read,
// and whether the live nodes agree on every subnet's owner after each
// fault. One seed gives one schedule of faults.
package chaos

import (
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"slices"
	"sync"
	"time"

	"github.com/micra-crawler/micra/testnet/cluster"
)

// Kind is a fault.
type Kind string

// The faults: each is undone before the next starts.
const (
	// Kill SIGKILLs a crawler and starts it again on its home 5–20 s later.
	Kill Kind = "kill"
	// KillSink SIGKILLs the sink during ingest and starts it again on its
	// data 3–10 s later.
	KillSink Kind = "kill-sink"
	// Partition splits the live crawlers into two random halves (the sink
	// with one) for 10–30 s, then heals.
	Partition Kind = "partition"
	// Stall stops a crawler (SIGSTOP) for 2–8 s: long enough, past the
	// failure timeout, for the others to declare it dead while it holds
	// its connections.
	Stall Kind = "stall"
)

// Kinds are every fault, in the order a run first draws them from.
var Kinds = []Kind{Kill, KillSink, Partition, Stall}

// Options configures a chaos run.
type Options struct {
	Duration time.Duration // how long faults are injected
	Seed     uint64        // the schedule's seed (0: 1)
	Kinds    []Kind        // the faults drawn from (nil: Kinds)
	// GapMin and GapMax bound the quiet time between two faults, drawn
	// uniformly (default 5 s and 15 s); the next fault also waits until the
	// owners agree again (at most ConvergeLimit).
	GapMin, GapMax time.Duration
	// Waves is how many parts the web's seeds are given in, spread over
	// the first 80 % of Duration, so that faults hit a crawl under way
	// (default one every 20 s, at least 1).
	Waves int
	// ConvergeGoal is the time after a fault within which the live nodes
	// must agree on every owner (default 30 s); ConvergeLimit how long
	// agreement is waited for at most (default 60 s).
	ConvergeGoal, ConvergeLimit time.Duration
	// Timeout bounds the wait for the crawl to complete after the last
	// fault (default 5 min).
	Timeout time.Duration
	// Log receives the timeline as it happens (nil: discarded).
	Log io.Writer
}

func (o *Options) defaults() {
	if o.Seed == 0 {
		o.Seed = 1
	}
	if len(o.Kinds) == 0 {
		o.Kinds = Kinds
	}
	if o.GapMin <= 0 {
		o.GapMin = 5 * time.Second
	}
	if o.GapMax < o.GapMin {
		o.GapMax = max(o.GapMin, 15*time.Second)
	}
	if o.Waves <= 0 {
		o.Waves = max(1, int(o.Duration/(20*time.Second)))
	}
	if o.ConvergeGoal <= 0 {
		o.ConvergeGoal = 30 * time.Second
	}
	if o.ConvergeLimit <= 0 {
		o.ConvergeLimit = 60 * time.Second
	}
	if o.Timeout <= 0 {
		o.Timeout = 5 * time.Minute
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// ParseKinds reads a comma-separated list of fault names.
func ParseKinds(names []string) ([]Kind, error) {
	var out []Kind
	for _, n := range names {
		k := Kind(n)
		if !slices.Contains(Kinds, k) {
			return nil, fmt.Errorf("fault %q: want one of kill, kill-sink, partition, stall", n)
		}
		out = append(out, k)
	}
	return out, nil
}

// Event is one line of the timeline.
type Event struct {
	AtS  float64 `json:"at_s"` // seconds since the first seeds
	Kind string  `json:"kind"` // a fault, "seed", "heal", "converged", "check"
	What string  `json:"what"`
}

// Cost is what one fault cost the crawl.
type Cost struct {
	Kind         Kind  `json:"kind"`
	FetchedTwice int64 `json:"fetched_twice"`
}

// Check is one invariant and whether it held.
type Check = cluster.Check

// Report is what a chaos run did and what held.
type Report struct {
	Seed     uint64           `json:"seed"`
	Minutes  float64          `json:"minutes"`
	Peers    int              `json:"peers"`
	Faults   map[Kind]int     `json:"faults"`
	Timeline []Event          `json:"timeline"`
	Checks   []Check          `json:"checks"`
	Result   *cluster.Result  `json:"result"`
	Delivery cluster.Delivery `json:"delivery"`
	// ConvergeS is each fault's time from its undoing until the live nodes
	// agreed on every owner (-1: not within ConvergeLimit), in order;
	// LastConvergeS the last fault's.
	ConvergeS     []float64 `json:"converge_s"`
	LastConvergeS float64   `json:"last_converge_s"`
	// MaxDisagree is the most subnets with two owners seen at once while a
	// fault was in force; QuietDisagree the most seen outside faults once
	// the owners had agreed (decisions racing each other in normal work).
	MaxDisagree   int `json:"max_disagree"`
	QuietDisagree int `json:"quiet_disagree"`
	Samples       int `json:"samples"` // looks at the owners
	// Costs is each fault's pages fetched twice at the web from its start
	// to the next fault's (the cost of its re-delegations and re-routed
	// hand-offs), in order.
	Costs []Cost `json:"costs"`
	// Held says every check held.
	Held bool `json:"held"`
}

// run is one chaos run's state.
type run struct {
	t      *cluster.Testnet
	o      Options
	rng    *rand.Rand
	start  time.Time
	seeds  [][]string // the waves not yet given
	waveAt []time.Duration
	// seeding runs in the background: routing a wave's seeds takes the
	// seeded node one delegation per host, which must not hold up the
	// faults and the looks at the owners
	seeding sync.WaitGroup
	failed  chan []string // waves whose node failed them, to give again

	mu  sync.Mutex // rep.Timeline, written by the seeding too
	rep *Report
}

// Run puts the testnet t (up, with a sink and its subscriber) through
// Options.Duration of random faults while its web is crawled, then waits
// for the crawl to complete and checks the invariants. An error means the
// run could not be carried out; an invariant that did not hold is a Check
// with Held false.
func Run(ctx context.Context, t *cluster.Testnet, o Options) (*Report, error) {
	o.defaults()
	if t.State.Sink == nil {
		return nil, errors.New("chaos: the invariants are measured at the sink: start the testnet with a sink")
	}
	r := &run{t: t, o: o, rng: rand.New(rand.NewPCG(o.Seed, 0x63686173)), failed: make(chan []string, 1024),
		rep: &Report{Seed: o.Seed, Minutes: o.Duration.Minutes(), Peers: len(t.State.Nodes), Faults: map[Kind]int{}}}
	if err := t.WaitMembers(ctx); err != nil {
		return nil, err
	}
	seeds := t.Web.Seeds()
	r.rng.Shuffle(len(seeds), func(i, j int) { seeds[i], seeds[j] = seeds[j], seeds[i] })
	waves := min(o.Waves, len(seeds))
	for w := range waves {
		r.seeds = append(r.seeds, seeds[w*len(seeds)/waves:(w+1)*len(seeds)/waves])
		r.waveAt = append(r.waveAt, time.Duration(float64(o.Duration)*0.8*float64(w)/float64(waves)))
	}
	t.Web.ResetStats()
	r.start = time.Now()
	r.seedDue(ctx)

	// the faults: every kind once in a shuffled order, then at random
	order := slices.Clone(o.Kinds)
	r.rng.Shuffle(len(order), func(i, j int) { order[i], order[j] = order[j], order[i] })
	r.quiet(ctx, r.gap())
	cost := func() {
		if n := len(r.rep.Costs); n > 0 {
			r.rep.Costs[n-1].FetchedTwice += t.Web.Stats().DuplicateFetches
		}
	}
	for n := 0; time.Since(r.start) < o.Duration && ctx.Err() == nil; n++ {
		k := o.Kinds[r.rng.IntN(len(o.Kinds))]
		if n < len(order) {
			k = order[n]
		}
		cost()
		r.rep.Costs = append(r.rep.Costs, Cost{Kind: k, FetchedTwice: -t.Web.Stats().DuplicateFetches})
		if err := r.fault(ctx, k); err != nil {
			return r.rep, err
		}
		c := r.converge(ctx)
		r.rep.ConvergeS = append(r.rep.ConvergeS, c)
		r.rep.LastConvergeS = c
		if time.Since(r.start) >= o.Duration {
			break
		}
		r.quiet(ctx, r.gap())
	}
	if ctx.Err() != nil {
		return r.rep, ctx.Err()
	}
	for len(r.seeds) > 0 { // (a run shorter than its waves)
		r.seedWave(ctx)
	}
	for {
		r.seeding.Wait()
		if len(r.failed) == 0 || ctx.Err() != nil {
			break
		}
		r.seedDue(ctx)
	}
	r.event("check", "faults over after %.0f s; waiting for the crawl to complete", time.Since(r.start).Seconds())
	cctx, cancel := context.WithTimeout(ctx, o.Timeout)
	complete, err := t.WaitCrawled(cctx, r.start, nil)
	cancel()
	cost()
	if err != nil {
		r.event("check", "%v", err)
	}
	res, err := t.Score(ctx, r.start)
	if err != nil {
		return r.rep, err
	}
	res.Complete = complete
	r.rep.Result = res
	dctx, cancel := context.WithTimeout(ctx, time.Minute)
	r.rep.Delivery, err = t.CheckDelivery(dctx)
	cancel()
	if err != nil {
		r.event("check", "the subscriber: %v", err)
	}
	r.event("check", "crawl complete: %d of %d pages at the sink", res.Pages, res.TotalPages)
	r.checks()
	return r.rep, nil
}

func (r *run) event(kind, format string, a ...any) {
	r.mu.Lock()
	defer r.mu.Unlock()
	e := Event{AtS: time.Since(r.start).Seconds(), Kind: kind, What: fmt.Sprintf(format, a...)}
	r.rep.Timeline = append(r.rep.Timeline, e)
	fmt.Fprintf(r.o.Log, "%7.1fs  %-9s %s\n", e.AtS, e.Kind, e.What)
}

func (r *run) gap() time.Duration {
	return r.o.GapMin + time.Duration(r.rng.Int64N(int64(r.o.GapMax-r.o.GapMin)+1))
}

// between draws a duration in [lo, hi].
func (r *run) between(lo, hi time.Duration) time.Duration {
	return lo + time.Duration(r.rng.Int64N(int64(hi-lo)+1))
}

// seedDue gives the waves whose time has come, and again those whose
// node failed them (it was killed or stalled meanwhile).
func (r *run) seedDue(ctx context.Context) {
	for {
		select {
		case w := <-r.failed:
			r.seeds, r.waveAt = append([][]string{w}, r.seeds...), append([]time.Duration{0}, r.waveAt...)
			continue
		default:
		}
		break
	}
	for len(r.seeds) > 0 && time.Since(r.start) >= r.waveAt[0] {
		r.seedWave(ctx)
	}
}

// seedWave gives the next wave of seeds to a live node drawn at random,
// in the background.
func (r *run) seedWave(ctx context.Context) {
	live := r.t.Live()
	if len(live) == 0 {
		return
	}
	i := live[r.rng.IntN(len(live))]
	wave := r.seeds[0]
	r.seeds, r.waveAt = r.seeds[1:], r.waveAt[1:]
	cl := r.t.Control(i)
	r.seeding.Go(func() {
		sctx, cancel := context.WithTimeout(ctx, 2*time.Minute)
		defer cancel()
		si, err := cl.Seed(sctx, wave)
		if err != nil {
			r.event("seed", "%d hosts' home pages to node %d failed (given again): %v", len(wave), i, err)
			if ctx.Err() == nil {
				r.failed <- wave
			}
			return
		}
		r.event("seed", "%d hosts' home pages to node %d (%d queued there, %d handed off, %d rejected)",
			len(wave), i, si.Queued, si.HandedOff, si.Rejected)
	})
}

// quiet waits d, seeding and looking at the owners meanwhile.
func (r *run) quiet(ctx context.Context, d time.Duration) {
	r.hold(ctx, d, false)
}

// hold waits d while a fault is in force (or not), seeding and sampling
// the owners every 2 s.
func (r *run) hold(ctx context.Context, d time.Duration, fault bool) {
	end := time.Now().Add(d)
	for time.Now().Before(end) && ctx.Err() == nil {
		r.seedDue(ctx)
		if o, err := r.t.Owners(ctx); err == nil {
			r.rep.Samples++
			if fault {
				r.rep.MaxDisagree = max(r.rep.MaxDisagree, o.Disagree)
			} else if o.Disagree > r.rep.QuietDisagree {
				r.rep.QuietDisagree = o.Disagree
				r.event("check", "%d of %d subnets with two owners outside a fault (%s)", o.Disagree, o.Subnets, o.Example)
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(min(2*time.Second, time.Until(end))):
		}
	}
}

// fault applies one fault of kind k, holds it and undoes it.
func (r *run) fault(ctx context.Context, k Kind) error {
	t := r.t
	live := t.Live()
	if k == Partition && len(live) < 2 {
		k = Stall // (nothing to split)
		r.rep.Costs[len(r.rep.Costs)-1].Kind = k
	}
	r.rep.Faults[k]++
	switch k {
	case Kill:
		i := live[r.rng.IntN(len(live))]
		down := r.between(5*time.Second, 20*time.Second)
		if err := t.KillNode(i); err != nil {
			return err
		}
		r.event(string(k), "node %d SIGKILLed; started again in %.0f s", i, down.Seconds())
		r.hold(ctx, down, true)
		if err := t.RestartNode(ctx, i); err != nil {
			return err
		}
		r.event("restart", "node %d started again on its home", i)
	case KillSink:
		down := r.between(3*time.Second, 10*time.Second)
		// during ingest: once carriers come in (crawlers hold records
		// up to their carrier_hold before they send them)
		st, _ := t.SinkStatus(ctx)
		for wait := time.Now(); st.Head == 0 && time.Since(wait) < time.Minute && ctx.Err() == nil; {
			r.hold(ctx, time.Second, false)
			st, _ = t.SinkStatus(ctx)
		}
		if err := t.KillSink(); err != nil {
			return err
		}
		r.event(string(k), "sink SIGKILLed at record %d; started again in %.0f s", st.Head, down.Seconds())
		r.hold(ctx, down, true)
		if err := t.RestartSink(ctx); err != nil {
			return err
		}
		r.event("restart", "sink started again on its data")
	case Partition:
		side := slices.Clone(live)
		r.rng.Shuffle(len(side), func(i, j int) { side[i], side[j] = side[j], side[i] })
		side = side[:len(side)/2]
		slices.Sort(side)
		sinkWith := r.rng.IntN(2) == 0
		hold := r.between(10*time.Second, 30*time.Second)
		if err := t.Partition(ctx, side, sinkWith); err != nil {
			return err
		}
		where := "the rest"
		if sinkWith {
			where = "them"
		}
		r.event(string(k), "nodes %v split from the rest (the sink with %s) for %.0f s", side, where, hold.Seconds())
		r.hold(ctx, hold, true)
		if err := t.Heal(ctx); err != nil {
			return err
		}
		r.event("heal", "partition healed")
	case Stall:
		i := live[r.rng.IntN(len(live))]
		d := r.between(2*time.Second, 8*time.Second)
		if err := t.StallNode(i); err != nil {
			return err
		}
		r.event(string(k), "node %d stopped (SIGSTOP) for %.0f s", i, d.Seconds())
		r.hold(ctx, d, true)
		if err := t.ResumeNode(i); err != nil {
			return err
		}
		r.event("resume", "node %d continued (SIGCONT)", i)
	default:
		return fmt.Errorf("chaos: fault %q", k)
	}
	return nil
}

// converge waits until every live node answers and no two disagree on an
// owner, and returns the seconds that took (-1: not within ConvergeLimit).
func (r *run) converge(ctx context.Context) float64 {
	from := time.Now()
	worst := 0
	for time.Since(from) < r.o.ConvergeLimit && ctx.Err() == nil {
		r.seedDue(ctx)
		o, err := r.t.Owners(ctx)
		if err == nil {
			r.rep.Samples++
			worst = max(worst, o.Disagree)
			r.rep.MaxDisagree = max(r.rep.MaxDisagree, o.Disagree)
			if o.Disagree == 0 && o.Nodes == len(r.t.Live()) {
				s := time.Since(from).Seconds()
				r.event("converged", "every live node names the same owners (%d subnets) %.1f s after the fault ended (at most %d disagreed)", o.Subnets, s, worst)
				return s
			}
		}
		select {
		case <-ctx.Done():
		case <-time.After(time.Second):
		}
	}
	r.event("converged", "NOT within %v: owners still disagree", r.o.ConvergeLimit)
	return -1
}

// checks fills the table of invariants.
func (r *run) checks() {
	res, d := r.rep.Result, r.rep.Delivery
	add := func(inv, goal, measured string, held bool) {
		r.rep.Checks = append(r.rep.Checks, Check{Invariant: inv, Goal: goal, Measured: measured, Held: held})
	}
	r.rep.Checks = append(r.rep.Checks, cluster.CrawlChecks(res, d)...)
	worst := 0.0
	failed := 0
	for _, c := range r.rep.ConvergeS {
		if c < 0 {
			failed++
		}
		worst = max(worst, c)
	}
	goal := r.o.ConvergeGoal.Seconds()
	last := r.rep.LastConvergeS
	add("owners agree after the last fault", fmt.Sprintf("within %.0f s", goal),
		fmt.Sprintf("%.1f s", last), last >= 0 && last <= goal && len(r.rep.ConvergeS) > 0)
	add("owners agree after every fault", fmt.Sprintf("within %.0f s", goal),
		fmt.Sprintf("worst %.1f s over %d faults (%d never)", worst, len(r.rep.ConvergeS), failed), failed == 0 && worst <= goal)
	r.rep.Held = true
	for _, c := range r.rep.Checks {
		r.rep.Held = r.rep.Held && c.Held
	}
}
