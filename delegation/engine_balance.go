package delegation

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"math"
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
		moved, err := e.release(ctx, best.Crawler, s, need(best.Crawler), d, true, math.Inf(1))
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
	held := e.held(rec)
	if e.c.Balance == BalanceSecondBest && held {
		// (the release option may still move the owner's other subnets)
		step.Note = fmt.Sprintf("%s full, but the delegation stands: decided %v ago, held %v", rec.Owner, e.now().Sub(rec.At).Round(time.Millisecond), e.c.BalanceHold)
		d.Steps = append(d.Steps, step)
		return nil
	}
	switch e.c.Balance {
	case BalanceRelease:
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, math.Inf(1))
		if err != nil {
			return err
		}
		step.Note = fmt.Sprintf("%s full: released %d lowest-variance subnet(s)", rec.Owner, n)
	case BalanceLeastCost:
		if err := e.rebalanceLeastCost(ctx, s, rec, held, d, &step); err != nil {
			return err
		}
	default:
		n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, math.Inf(1), s)
		if err == nil && n == 0 {
			// nobody probed for s has room: free room by moving another
			// of the owner's subnets instead
			n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, math.Inf(1))
		}
		if err != nil {
			return err
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
				pub, err := e.moveTo(ctx, rec, pick, d)
				switch {
				case moveNotMade(err):
					step.Note = fmt.Sprintf("%s full, no recorded alternative with room: %s answered, but the move was not made: %v", rec.Owner, pick.Crawler, err)
				case err != nil:
					return err
				default:
					step.Note = fmt.Sprintf("%s full, no recorded alternative with room: probed crawlers with room, %s takes it", rec.Owner, pub.Owner)
				}
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

// rebalanceLeastCost makes room at s's full owner for one page of s
// (BalanceLeastCost): the least-cost move (RTT added × pages) of the
// owner's subnets, s included unless held. With Config.MoveAsk set and
// that move costing more than MoveAsk per page, it asks crawlers with room
// (probeRoom) for s instead, and s moves to the best of them unless the
// least-cost recorded move costs less per page.
func (e *engine) rebalanceLeastCost(ctx context.Context, s hierarchy.NodeID, rec Record, held bool, d *Decision, step *Step) error {
	ms := func(t time.Duration) float64 { return float64(t) / float64(time.Millisecond) }
	ask, limit := e.c.MoveAsk > 0, math.Inf(1)
	if ask {
		limit = ms(e.c.MoveAsk)
	}
	n, err := e.release(ctx, rec.Owner, hierarchy.None, 1, d, ask, limit)
	if err != nil || n > 0 {
		step.Note = fmt.Sprintf("%s full: moved %d least-cost subnet(s) to the next best with room", rec.Owner, n)
		return err
	}
	if held {
		// s stays: any recorded move of the others (done above unless
		// the move was bounded)
		if ask {
			n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, math.Inf(1))
		}
		step.Note = fmt.Sprintf("%s full: moved %d least-cost subnet(s); %v is held", rec.Owner, n, s)
		return err
	}
	// no recorded move is cheap: ask crawlers with room for s
	pick, err := e.probeRoom(ctx, d.IP, s, e.loads.Pages(s)+1, rec.Probes, step, d)
	if err != nil {
		return err
	}
	if !pick.OK {
		if ask {
			n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, false, math.Inf(1))
		}
		step.Note = fmt.Sprintf("%s full, nobody with room answered for %v: moved %d least-cost subnet(s)", rec.Owner, s, n)
		return err
	}
	own := rec.OwnerRTT
	if a, ok := answerOf(rec.Probes, rec.Owner); ok && a.OK {
		own = a.RTT
	}
	if ask {
		// (without MoveAsk the first release found no recorded move at all)
		if n, err = e.release(ctx, rec.Owner, hierarchy.None, 1, d, true, ms(pick.RTT-own)); err != nil || n > 0 {
			step.Note = fmt.Sprintf("%s full: moved %d recorded subnet(s), cheaper than %v to %s", rec.Owner, n, s, pick.Crawler)
			return err
		}
	}
	pub, err := e.moveTo(ctx, rec, pick, d)
	if moveNotMade(err) {
		// being decided elsewhere right now, or refused by pick: it stays
		step.Note = fmt.Sprintf("%s full: %s answered for %v, but the move was not made: %v", rec.Owner, pick.Crawler, s, err)
		return nil
	}
	if err != nil {
		return err
	}
	step.Note = fmt.Sprintf("%s full, no recorded move cheap: probed crawlers with room, %s takes %v", rec.Owner, pub.Owner, s)
	return nil
}

// moveNotMade reports whether a move's Publish failed in a way that leaves
// the subnet where it is (ErrBusy, ErrRefused) rather than failing the
// decision that made the move.
func moveNotMade(err error) bool { return errors.Is(err, ErrBusy) || errors.Is(err, ErrRefused) }

// moveTo publishes rec's subnet with pick (a probe answer for the host
// taking the page) as its owner, its answer added to the record's, and
// moves the subnet's pages there (d.Moved records it).
func (e *engine) moveTo(ctx context.Context, rec Record, pick ProbeResult, d *Decision) (Record, error) {
	nr := rec
	nr.Owner, nr.OwnerRTT, nr.DecidedBy, nr.At = pick.Crawler, pick.RTT, e.c.Self, e.now()
	nr.Epoch = NextEpoch(rec.Epoch, nr.At)
	nr.Blocks = e.carryBlocks(rec.Blocks, pick.Crawler)
	nr.Probes = append(slices.Clone(rec.Probes), pick)
	sortRanked(nr.Probes)
	pub, err := e.d.Dir.Publish(ctx, nr)
	if err != nil {
		return pub, err
	}
	e.loads.Move(rec.Subnet, pub.Owner)
	d.Moved = append(d.Moved, pub)
	return pub, nil
}

// movingPages is the pages that go with subnet s when it moves: its own,
// and the one being delegated when d is s's decision.
func (e *engine) movingPages(s hierarchy.NodeID, d *Decision) int {
	vp := e.loads.Pages(s)
	if s == d.Subnet {
		vp++
	}
	return vp
}

// moveCost returns the answer of rec's nearest recorded crawler, other
// than c, with room for pages (room; nil: hasRoom), and what moving the
// subnet there from c costs: the RTT it adds over c's answer (the record's
// OwnerRTT when c's answer is not in it), in ms, times the pages. False
// when no recorded crawler has room.
func (e *engine) moveCost(rec Record, c CrawlerID, pages int, room func(CrawlerID, int) bool) (ProbeResult, float64, bool) {
	if room == nil {
		room = e.hasRoom
	}
	own := rec.OwnerRTT
	if a, ok := answerOf(rec.Probes, c); ok && a.OK {
		own = a.RTT
	}
	var to ProbeResult
	for _, a := range rec.Probes {
		if a.Crawler == c || !a.OK || (to.OK && a.RTT >= to.RTT) || !room(a.Crawler, pages) {
			continue
		}
		to = a
	}
	if !to.OK {
		return to, 0, false
	}
	return to, float64(to.RTT-own) / float64(time.Millisecond) * float64(pages), true
}

// releaseVictim is a subnet release may move and its key: probe variance,
// or the cost of the move (BalanceLeastCost).
type releaseVictim struct {
	subnet hierarchy.NodeID
	vari   float64
}

// release moves subnets away from crawler c (option a) until it has room
// for pages more, each to its next recorded crawler with room: lowest
// probe-variance first, or, with BalanceLeastCost, the least cost first
// (moveCost). It returns how many moved. With only, the candidates are
// restricted to those subnets. With whole, nothing moves unless the moves
// make that room at a cost of at most maxPerPage (ms) per page moved: a
// new subnet that goes to its second best anyway gains nothing from them,
// and the subnets moved would be crawled from farther away. (A cached
// subnet's page is added whatever happens, so there any room freed helps.)
func (e *engine) release(ctx context.Context, c CrawlerID, incoming hierarchy.NodeID, pages int, d *Decision, whole bool, maxPerPage float64, only ...hierarchy.NodeID) (int, error) {
	// (subnets and variances only, in a buffer kept across calls: a crawler
	// among 10,000 holds a hundred subnets, and copying every record each
	// time a full crawler takes a page was most of the simulator's garbage)
	vs := e.victims[:0]
	defer func() { e.victims = vs[:0] }()
	subs := only
	if len(subs) == 0 {
		if mb, ok := e.loads.(*MemLoadBook); ok {
			// (the order does not matter: victims are sorted below)
			subs = mb.appendSubnets(c, e.subsBuf[:0])
			e.subsBuf = subs
			defer func() { e.subsBuf = subs[:0] }()
		} else {
			subs = e.loads.Subnets(c)
		}
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
		key := probeVariance(rec.Probes)
		if e.c.Balance == BalanceLeastCost {
			var can bool
			if _, key, can = e.moveCost(rec, c, e.movingPages(rec.Subnet, d), nil); !can {
				continue // no recorded alternative has room
			}
		}
		vs = append(vs, releaseVictim{rec.Subnet, key})
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
	cost, moving := 0.0, 0
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
		vp := e.movingPages(rec.Subnet, d)
		if to, k, can := e.moveCost(rec, c, vp, room); can {
			plan = append(plan, move{rec, to})
			delta[c] -= vp
			delta[to.Crawler] += vp
			cost, moving = cost+k, moving+vp
		}
	}
	if whole && (!room(c, pages) || (!math.IsInf(maxPerPage, 1) && cost > maxPerPage*float64(moving))) {
		return 0, nil
	}
	moved := 0
	for _, mv := range plan {
		nr := mv.rec
		nr.Owner, nr.OwnerRTT, nr.DecidedBy, nr.At = mv.to.Crawler, mv.to.RTT, e.c.Self, e.now()
		nr.Epoch = NextEpoch(mv.rec.Epoch, nr.At)
		nr.Blocks = e.carryBlocks(mv.rec.Blocks, mv.to.Crawler)
		pub, err := e.d.Dir.Publish(ctx, nr)
		if moveNotMade(err) {
			continue // being decided elsewhere right now, or refused: it stays
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
