package delegation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"time"

	"github.com/micra-crawler/micra/hierarchy"
)

// Load balancing: room per crawler, the configured balancing of a
// decision's winner, moving a cached owner without room, and releasing
// subnets from a crawler over its capacity.

// held reports whether rec was decided less than BalanceHold ago: load
// balancing leaves it where it is.
func (e *engine) held(rec Record) bool {
	return e.c.BalanceHold > 0 && !rec.At.IsZero() && e.now().Sub(rec.At) < e.c.BalanceHold
}

func (e *engine) hasRoom(c CrawlerID, pages int) bool {
	cr, ok := e.members()[c]
	if !ok {
		return false
	}
	return cr.Capacity <= 0 || e.loads.Load(c)+pages <= cr.Capacity
}

// balance applies the configured load-balancing option to the ranked
// candidates of subnet s and returns the winner.
func (e *engine) balance(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, ranked []ProbeResult, d *Decision, redelegation bool) (ProbeResult, error) {
	// the pages a crawler takes on with s: the subnet's pages and the one
	// being delegated; a re-delegation's page is counted already, and the
	// current owner's load holds the subnet's pages
	extra := 1
	if redelegation {
		extra = 0
	}
	pages := e.loads.Pages(s) + extra
	owner, owned := e.loads.Owner(s)
	need := func(c CrawlerID) int {
		if owned && owner == c {
			return extra
		}
		return pages
	}
	best := ranked[0]
	if e.hasRoom(best.Crawler, need(best.Crawler)) {
		return best, nil
	}
	step := Step{Kind: StepBalance, Node: s}
	if e.c.Balance == BalanceRelease {
		moved, err := e.release(ctx, best.Crawler, s, need(best.Crawler), d, true)
		if err != nil {
			return best, err
		}
		if moved > 0 && e.hasRoom(best.Crawler, need(best.Crawler)) {
			step.Note = fmt.Sprintf("%s full: released %d lowest-variance subnet(s) to their next best", best.Crawler, moved)
			d.Steps = append(d.Steps, step)
			return best, nil
		}
	}
	// Option (b), and the release option's last resort: the best-ranked
	// candidate with room; if none of the ranked ones has room, probe the
	// live crawlers that do.
	for _, r := range ranked[1:] {
		if r.OK && e.hasRoom(r.Crawler, need(r.Crawler)) {
			step.Note = fmt.Sprintf("%s full: next best with room", best.Crawler)
			d.Steps = append(d.Steps, step)
			return r, nil
		}
	}
	pick, err := e.probeRoom(ctx, ip, s, pages, ranked, &step, d)
	if err != nil {
		return best, err
	}
	if !pick.OK {
		step.Note = "nobody has room: best takes it over capacity"
		d.Steps = append(d.Steps, step)
		return best, nil
	}
	step.Note = fmt.Sprintf("%s full: probed crawlers with room", best.Crawler)
	d.Steps = append(d.Steps, step)
	return pick, nil
}

// probeRoom probes live crawlers (not in skip) that have room for pages
// more and returns the lowest answer. At most Config.RoomProbes are asked,
// so the fallback does not grow with the overlay: a chooser that predicts
// (roomOrderer) names them; otherwise the holders of subnets nearest s in
// the hierarchy (IPMicra's notion of near: the walk from s's parent up),
// then others drawn from Deps.Rand.
func (e *engine) probeRoom(ctx context.Context, ip netip.Addr, s hierarchy.NodeID, pages int, skip []ProbeResult, step *Step, d *Decision) (ProbeResult, error) {
	skipped := func(c CrawlerID) bool {
		return slices.ContainsFunc(skip, func(r ProbeResult) bool { return r.Crawler == c })
	}
	var room []CrawlerID
	picked := false
	if rp, ok := e.ch.(roomPicker); ok {
		room, picked = rp.roomPick(e, s, pages, skipped, e.c.RoomProbes)
	}
	if !picked {
		for _, c := range e.liveIDs() {
			if e.hasRoom(c, pages) && !skipped(c) {
				room = append(room, c)
			}
		}
	}
	if n := e.c.RoomProbes; !picked && len(room) > n {
		if ro, ok := e.ch.(roomOrderer); ok {
			ro.roomOrder(e, s, room)
			room = room[:n]
		} else {
			near, err := e.nearHolders(ctx, s, n, func(c CrawlerID) bool { return e.live(c) && e.hasRoom(c, pages) && !skipped(c) })
			if err != nil {
				return ProbeResult{}, err
			}
			rest := slices.DeleteFunc(room, func(c CrawlerID) bool { return slices.Contains(near, c) })
			// a partial Fisher–Yates: the n−len(near) random ones cost
			// that many draws, not one per crawler of the overlay
			k := n - len(near)
			for i := range k {
				j := i + e.d.Rand.IntN(len(rest)-i)
				rest[i], rest[j] = rest[j], rest[i]
			}
			room = append(near, rest[:k]...)
		}
	}
	var pick ProbeResult
	for _, r := range e.probe(ctx, ip, room, step, d) {
		if r.OK && (!pick.OK || r.RTT < pick.RTT) {
			pick = r
		}
	}
	return pick, nil
}

// nearHolders returns up to n crawlers accepted by ok, holders of subnets
// under s's ancestors, the nearest ancestor first (the root, holders of
// everything, excluded). Within a level the order is drawn from Deps.Rand,
// as IPMicra's walk does: directories list holders by name, and a cut in
// that order would favour the same names everywhere.
func (e *engine) nearHolders(ctx context.Context, s hierarchy.NodeID, n int, ok func(CrawlerID) bool) ([]CrawlerID, error) {
	var near, level []CrawlerID
	for _, a := range e.d.Tree.Ancestors(s) {
		if len(near) == n || a == hierarchy.Root {
			break
		}
		holders, err := e.d.Dir.HoldersUnder(ctx, a)
		if err != nil {
			return nil, fmt.Errorf("delegation: holders under %d: %w", a, err)
		}
		level = level[:0]
		for _, c := range holders {
			if ok(c) && !slices.Contains(near, c) {
				level = append(level, c)
			}
		}
		e.d.Rand.Shuffle(len(level), func(i, j int) { level[i], level[j] = level[j], level[i] })
		near = append(near, level[:min(len(level), n-len(near))]...)
	}
	return near, nil
}

// rebalanceCached handles a delegated subnet whose owner is full when one
// more page arrives: option (a) releases the owner's lowest-variance
// subnet(s) (possibly this one), option (b) hands this subnet to its
// next-best crawler with room. Both use the probe results already in the
// records: no new probes.
func (e *engine) rebalanceCached(ctx context.Context, s hierarchy.NodeID, rec Record, d *Decision) error {
	step := Step{Kind: StepBalance, Node: s}
	if e.c.Balance == BalanceSecondBest && e.held(rec) {
		// (the release option may still move the owner's other subnets)
		step.Note = fmt.Sprintf("%s full, but the delegation stands: decided %v ago, held %v", rec.Owner, e.now().Sub(rec.At).Round(time.Millisecond), e.c.BalanceHold)
		d.Steps = append(d.Steps, step)
		return nil
	}
	if e.c.Balance == BalanceRelease {
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false)
		if err != nil {
			return err
		}
		step.Note = fmt.Sprintf("%s full: released %d lowest-variance subnet(s)", rec.Owner, n)
	} else {
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, s)
		if err != nil {
			return err
		}
		if n == 0 {
			// nobody probed for s has room: free room by moving another
			// of the owner's subnets instead
			n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, false)
			if err != nil {
				return err
			}
		}
		step.Note = fmt.Sprintf("%s full: moved %d subnet(s) to the next best with room", rec.Owner, n)
		if n == 0 {
			// no recorded alternative has room: ask those who have
			pages := e.loads.Pages(s) + 1
			pick, err := e.probeRoom(ctx, d.IP, s, pages, rec.Probes, &step, d)
			if err != nil {
				return err
			}
			if pick.OK {
				nr := rec
				nr.Owner, nr.OwnerRTT, nr.DecidedBy, nr.At = pick.Crawler, pick.RTT, e.c.Self, e.now()
				nr.Epoch = NextEpoch(rec.Epoch, nr.At)
				nr.Blocks = e.carryBlocks(rec.Blocks, pick.Crawler)
				nr.Probes = append(slices.Clone(rec.Probes), pick)
				sortRanked(nr.Probes)
				pub, err := e.d.Dir.Publish(ctx, nr)
				if err != nil {
					return err
				}
				e.loads.Move(s, pub.Owner)
				d.Moved = append(d.Moved, pub)
				step.Note = fmt.Sprintf("%s full, no recorded alternative with room: probed crawlers with room, %s takes it", rec.Owner, pub.Owner)
			}
		}
	}
	for _, m := range d.Moved {
		if m.Subnet == s {
			d.Owner, d.OwnerRTT, d.Record = m.Owner, m.OwnerRTT, m
		}
	}
	d.Steps = append(d.Steps, step)
	return nil
}

// releaseVictim is a subnet release may move and its probe variance.
type releaseVictim struct {
	subnet hierarchy.NodeID
	vari   float64
}

// release moves subnets away from crawler c (option a) until it has room
// for pages more, lowest probe-variance first. It returns how many moved.
// With only, the candidates are restricted to those subnets. With whole,
// nothing moves unless the moves make that room: a new subnet that goes to
// its second best anyway gains nothing from them, and the subnets moved
// would be crawled from farther away. (A cached subnet's page is added
// whatever happens, so there any room freed helps.)
func (e *engine) release(ctx context.Context, c CrawlerID, incoming hierarchy.NodeID, pages int, d *Decision, whole bool, only ...hierarchy.NodeID) (int, error) {
	// (subnets and variances only, in a buffer kept across calls: a crawler
	// among 10,000 holds a hundred subnets, and copying every record each
	// time a full crawler takes a page was most of the simulator's garbage)
	vs := e.victims[:0]
	defer func() { e.victims = vs[:0] }()
	subs := only
	if len(subs) == 0 {
		subs = e.loads.Subnets(c)
	}
	for _, s := range subs {
		if s == incoming {
			continue
		}
		rec, ok, err := e.d.Dir.Lookup(ctx, s)
		if err != nil {
			return 0, err
		}
		if !ok || rec.Owner != c || len(rec.Probes) < 2 || e.held(rec) {
			continue // no next best known (placement or single probe), or held
		}
		vs = append(vs, releaseVictim{rec.Subnet, probeVariance(rec.Probes)})
	}
	slices.SortFunc(vs, func(a, b releaseVictim) int {
		if c := cmp.Compare(a.vari, b.vari); c != 0 {
			return c
		}
		return cmp.Compare(a.subnet, b.subnet)
	})
	// plan the moves on the loads as they would become, then publish
	type move struct {
		rec Record
		to  ProbeResult
	}
	var plan []move
	delta := map[CrawlerID]int{} // pages the plan adds (or takes)
	room := func(x CrawlerID, n int) bool { return e.hasRoom(x, delta[x]+n) }
	for _, v := range vs {
		if room(c, pages) {
			break
		}
		rec, ok, err := e.d.Dir.Lookup(ctx, v.subnet)
		if err != nil {
			return 0, err
		}
		if !ok {
			continue
		}
		vp := e.loads.Pages(rec.Subnet)
		if rec.Subnet == d.Subnet {
			vp++ // the page being delegated goes with it
		}
		alts := slices.Clone(rec.Probes)
		slices.SortStableFunc(alts, func(a, b ProbeResult) int { return cmp.Compare(a.RTT, b.RTT) })
		for _, a := range alts {
			if a.Crawler == c || !a.OK || !room(a.Crawler, vp) {
				continue
			}
			plan = append(plan, move{rec, a})
			delta[c] -= vp
			delta[a.Crawler] += vp
			break
		}
	}
	if whole && !room(c, pages) {
		return 0, nil
	}
	moved := 0
	for _, mv := range plan {
		nr := mv.rec
		nr.Owner, nr.OwnerRTT, nr.DecidedBy, nr.At = mv.to.Crawler, mv.to.RTT, e.c.Self, e.now()
		nr.Epoch = NextEpoch(mv.rec.Epoch, nr.At)
		nr.Blocks = e.carryBlocks(mv.rec.Blocks, mv.to.Crawler)
		pub, err := e.d.Dir.Publish(ctx, nr)
		if errors.Is(err, ErrBusy) {
			continue // being decided elsewhere right now: it stays
		}
		if err != nil {
			return moved, err
		}
		moved++
		e.loads.Move(mv.rec.Subnet, pub.Owner)
		d.Moved = append(d.Moved, pub)
	}
	return moved, nil
}
