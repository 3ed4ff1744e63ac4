package hostile

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sync"
	"time"
)

// Options configures RunFlood.
type Options struct {
	Binary string // the micra binary the victim runs (required)
	Dir    string // the victim's home (default: a temporary directory, removed)
	// Open runs the victim in an open network; otherwise in a network
	// with admission that admits it alone.
	Open bool
	// Duration of the attack (default 60 s).
	Duration time.Duration
	// Identities announced over one connection (default 20,000).
	Identities int
	// HandoffStreams: hand-off messages in flight at once (default 4).
	HandoffStreams int
	// StreamsPerProtocol: concurrent streams of each StreamProtocols
	// (default 32).
	StreamsPerProtocol int
	// Settle is how long the victim runs before its idle memory is
	// sampled, and Idle how long that sampling lasts (defaults 5 s, 5 s);
	// the victim is sampled for Idle again after the attack.
	Settle, Idle time.Duration
	// HeapProfile, when set, is where the victim's heap profile is saved
	// at the end of the attack (go tool pprof).
	HeapProfile string
	VictimArgs  []string // extra flags for the victim's `micra node`
	VictimEnv   []string // extra environment variables of the victim
	Log         io.Writer
}

func (o *Options) defaults() {
	if o.Duration <= 0 {
		o.Duration = time.Minute
	}
	if o.Identities <= 0 {
		o.Identities = 20_000
	}
	if o.HandoffStreams <= 0 {
		o.HandoffStreams = 4
	}
	if o.StreamsPerProtocol <= 0 {
		o.StreamsPerProtocol = 32
	}
	if o.Settle <= 0 {
		o.Settle = 5 * time.Second
	}
	if o.Idle <= 0 {
		o.Idle = 5 * time.Second
	}
	if o.Log == nil {
		o.Log = io.Discard
	}
}

// Goal is the bound the flood is judged by: the victim's RSS under the flood at most this
// many times its idle RSS.
const Goal = 1.2

// Report is a flood's outcome: the victim's memory idle (the reference,
// measured in the same run), under the attack and after it, what the
// attacker sent, and what the victim counted.
type Report struct {
	Network    string  `json:"network"` // "admission" or "open"
	Seconds    float64 `json:"seconds"` // the attack's length
	Identities int     `json:"identities"`
	Idle       RSS     `json:"idle_rss"`
	Flood      RSS     `json:"flood_rss"`
	After      RSS     `json:"after_rss"` // the Idle period after the attack
	// PeakRatio and MeanRatio are the flood's peak and mean RSS over the
	// idle mean; Goal is the bound PeakRatio is held to.
	PeakRatio   float64      `json:"peak_ratio"`
	MeanRatio   float64      `json:"mean_ratio"`
	Goal        float64      `json:"goal"`
	VictimAlive bool         `json:"victim_alive"` // still running after the attack
	Attack      AttackCounts `json:"attack"`
	Victim      VictimCounts `json:"victim"`
	// LoadAvg is the machine's 1-minute load average when the attack
	// starts and when it ends: the victim and the attacker share its cores.
	LoadAvg     [2]float64 `json:"load_avg"`
	HeapProfile string     `json:"heap_profile,omitempty"`
	VictimLog   string     `json:"victim_log,omitempty"` // kept when Options.Dir was given
}

// VictimCounts is what the victim reported at the end of the attack (its
// control API's /v1/status and /metrics).
type VictimCounts struct {
	MembersLive    int    `json:"members_live"`
	CrawlersLive   int    `json:"crawlers_live"`
	PeersConnected int    `json:"peers_connected"`
	FrontierQueued uint64 `json:"frontier_queued"`
	FrontierSeen   uint64 `json:"frontier_seen"`
	// HandoffsRefused: hand-off streams refused (sender not a member).
	HandoffsRefused float64 `json:"handoffs_refused"`
	ProbesServed    float64 `json:"probes_served"`
	// GossipRejected: gossip rejected or ignored, by topic and reason.
	GossipRejected []Rejected `json:"gossip_rejected"`
	// MembershipRejected sums GossipRejected on the membership topic.
	MembershipRejected float64 `json:"membership_rejected"`
	HeapInuseMB        float64 `json:"heap_inuse_mb"`
	Goroutines         float64 `json:"goroutines"`
}

// RunFlood starts the victim, measures it idle, floods it for o.Duration
// from one attacker host and measures it under the flood and after.
func RunFlood(ctx context.Context, o Options) (r Report, err error) {
	o.defaults()
	if o.Binary == "" {
		return r, errors.New("hostile: RunFlood needs the micra binary")
	}
	r = Report{Network: "admission", Seconds: o.Duration.Seconds(), Identities: o.Identities, Goal: Goal, HeapProfile: o.HeapProfile}
	if o.Open {
		r.Network = "open"
	}
	dir := o.Dir
	if dir == "" {
		if dir, err = os.MkdirTemp("", "micra-flood-"); err != nil {
			return r, err
		}
		defer os.RemoveAll(dir)
	} else {
		r.VictimLog = dir + "/node.log"
	}
	v, err := StartVictim(ctx, VictimOptions{Dir: dir, Binary: o.Binary, Open: o.Open, Args: o.VictimArgs, Env: o.VictimEnv})
	if err != nil {
		return r, err
	}
	defer func() {
		if serr := v.Stop(); serr != nil && err == nil {
			err = serr
		}
	}()
	fmt.Fprintf(o.Log, "victim %s (pid %d) ready in a %s network; settling %v, then sampling idle for %v\n", v.Info.ID, v.PID, r.Network, o.Settle, o.Idle)
	if err := wait(ctx, o.Settle); err != nil {
		return r, err
	}
	idle := sampleRSS(v.PID, 100*time.Millisecond)
	if err := wait(ctx, o.Idle); err != nil {
		idle.end()
		return r, err
	}
	r.Idle = idle.end()

	// each hand-off worker states the subnet of its URLs' hosts, as the
	// victim's hierarchy has it (one public snapshot: the attacker has it)
	subnets, err := handoffSubnets(ctx, v, o.HandoffStreams)
	if err != nil {
		return r, err
	}
	a, err := NewAttacker(ctx, v.Info, v.Snap)
	if err != nil {
		return r, err
	}
	defer a.Close()
	fmt.Fprintf(o.Log, "idle RSS %.1f MB; attacking for %v: %d identities, %d hand-off streams, %d streams of each of %d protocols\n",
		r.Idle.MeanMB, o.Duration, o.Identities, o.HandoffStreams, o.StreamsPerProtocol, len(StreamProtocols))
	r.LoadAvg[0] = loadAvg()
	flood := sampleRSS(v.PID, 100*time.Millisecond)
	actx, cancel := context.WithTimeout(ctx, o.Duration)
	defer cancel()
	var wg sync.WaitGroup
	var idErr error
	wg.Go(func() { idErr = a.Identities(actx, o.Identities) })
	wg.Go(func() { a.Handoffs(actx, subnets) })
	wg.Go(func() { a.Streams(actx, o.StreamsPerProtocol) })
	<-actx.Done()
	r.LoadAvg[1] = loadAvg()
	// what the victim holds at the end of the attack, before it is lifted
	vc, verr := victimCounts(ctx, v)
	if o.HeapProfile != "" && verr == nil {
		verr = saveHeap(ctx, v.API.URL(), o.HeapProfile)
	}
	wg.Wait()
	r.Flood = flood.end()
	r.Attack, r.Victim = a.Counts(), vc
	a.Close()
	if ctx.Err() != nil {
		return r, ctx.Err()
	}
	if idErr != nil {
		return r, idErr
	}
	if verr != nil {
		return r, verr
	}
	after := sampleRSS(v.PID, 100*time.Millisecond)
	_ = wait(ctx, o.Idle)
	r.After = after.end()
	r.VictimAlive = v.Alive()
	if r.Idle.MeanMB > 0 {
		r.PeakRatio, r.MeanRatio = r.Flood.PeakMB/r.Idle.MeanMB, r.Flood.MeanMB/r.Idle.MeanMB
	}
	fmt.Fprintf(o.Log, "flood RSS peak %.1f MB (%.2f× idle), mean %.1f MB; %d heartbeats, %d hand-offs, %d streams sent\n",
		r.Flood.PeakMB, r.PeakRatio, r.Flood.MeanMB, r.Attack.Heartbeats, r.Attack.HandoffMsgs, r.Attack.StreamsOpened)
	return r, nil
}

// handoffSubnets asks the victim's control API for the subnet of each
// hand-off worker's address.
func handoffSubnets(ctx context.Context, v *Victim, workers int) ([]uint32, error) {
	addrs := make([]string, workers)
	for w := range addrs {
		addrs[w] = HandoffAddr(w).String()
	}
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	owners, err := v.API.Owners(sctx, addrs, false, false)
	if err != nil {
		return nil, fmt.Errorf("hostile: the subnets of the hand-offs' hosts: %w", err)
	}
	if len(owners) != workers {
		return nil, fmt.Errorf("hostile: asked the subnets of %d addresses, got %d", workers, len(owners))
	}
	out := make([]uint32, workers)
	for w, o := range owners {
		if o.Subnet == 0 {
			return nil, fmt.Errorf("hostile: %s is in no subnet of the victim's hierarchy", addrs[w])
		}
		out[w] = o.Subnet
	}
	return out, nil
}

// victimCounts reads the victim's status and metrics.
func victimCounts(ctx context.Context, v *Victim) (VictimCounts, error) {
	var c VictimCounts
	sctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	defer cancel()
	st, err := v.API.Status(sctx)
	if err != nil {
		return c, fmt.Errorf("hostile: the victim's status: %w", err)
	}
	c.MembersLive, c.CrawlersLive, c.PeersConnected = st.MembersLive, st.CrawlersLive, st.PeersConnected
	if st.Frontier != nil {
		c.FrontierQueued, c.FrontierSeen = uint64(st.Frontier.Queued), uint64(st.Frontier.Seen)
	}
	ss, err := scrape(ctx, v.API.URL())
	if err != nil {
		return c, err
	}
	c.HandoffsRefused = sum(ss, "micra_overlay_handoffs_refused_total", nil)
	c.ProbesServed = sum(ss, "micra_overlay_probes_served_total", nil)
	c.GossipRejected = rejected(ss)
	c.MembershipRejected = sum(ss, "micra_overlay_gossip_rejected_total", map[string]string{"topic": "micra/membership/1"})
	c.HeapInuseMB = sum(ss, "go_memstats_heap_inuse_bytes", nil) / (1 << 20)
	c.Goroutines = sum(ss, "go_goroutines", nil)
	return c, nil
}

func wait(ctx context.Context, d time.Duration) error {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-ctx.Done():
		return ctx.Err()
	case <-t.C:
		return nil
	}
}

// loadAvg is the machine's 1-minute load average (0 where /proc is not).
func loadAvg() float64 {
	b, err := os.ReadFile("/proc/loadavg")
	if err != nil {
		return 0
	}
	var l float64
	fmt.Sscanf(string(b), "%f", &l)
	return l
}
