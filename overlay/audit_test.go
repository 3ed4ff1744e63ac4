package overlay

import (
	"context"
	"fmt"
	"hash/fnv"
	"math"
	"net/netip"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// planeWorld places crawlers and targets on a plane: a round trip costs
// 7 ms per unit of distance plus 1 ms, a probe up to 1 ms of jitter more.
// A target 127.b.c.x stands at (3b, 6c). Peers listen at their own
// loopback address, by which PeerRTT finds them: the same world answers
// probes and the round trips between peers, as the audit needs.
type planeWorld struct {
	mu  sync.Mutex
	pos map[netip.Addr]point // a peer's listen address → its place
}

type point struct{ x, y float64 }

func planeRTT(a, b point) time.Duration {
	return time.Duration((7*math.Hypot(a.x-b.x, a.y-b.y) + 1) * float64(time.Millisecond))
}

func targetAt(a netip.Addr) point {
	b := a.As4()
	return point{3 * float64(b[1]), 6 * float64(b[2])}
}

type planeMeasurer struct {
	w    *planeWorld
	at   point
	liar bool // answers 1 ms to every target
}

func (m planeMeasurer) Measure(_ context.Context, t ProbeTarget) (time.Duration, error) {
	if m.liar {
		return time.Millisecond, nil
	}
	b := t.Addr.As4()
	h := fnv.New32a()
	h.Write(b[:])
	fmt.Fprint(h, m.at)
	return planeRTT(targetAt(t.Addr), m.at) + time.Duration(h.Sum32()%1000)*time.Microsecond, nil
}

func (m planeMeasurer) PeerRTT(remote netip.Addr) (time.Duration, bool) {
	m.w.mu.Lock()
	at, ok := m.w.pos[remote]
	m.w.mu.Unlock()
	return planeRTT(m.at, at), ok
}

// planePlaces: two honest crawlers in a corner of the targets' grid
// (21 × 18 units), two at the others, the fifth beside the first two —
// who alone can see its false answers (delegation.ImpossibleRTT: a
// checker sees a false claim about targets much further from it than the
// claimant), and whose two accusations make the others distrust it.
var planePlaces = []point{{0, 0}, {1.5, 0}, {21, 0}, {0, 18}, {0.75, 0.75}}

// nearestIsLast reports whether the last crawler is the nearest to a
// target at t.
func nearestIsLast(t point) bool {
	last := planePlaces[len(planePlaces)-1]
	for _, p := range planePlaces[:len(planePlaces)-1] {
		if math.Hypot(p.x-t.x, p.y-t.y) <= math.Hypot(last.x-t.x, last.y-t.y) {
			return false
		}
	}
	return true
}

// newPlaneNet starts a peer at each of places in a planeWorld; the last
// one lies about its probes when liar is set.
func newPlaneNet(t *testing.T, places []point, liar bool, tune func(i int, c *Config, s *Services)) *testNet {
	w := &planeWorld{pos: map[netip.Addr]point{}}
	return newTestNet(t, len(places), func(i int, c *Config, s *Services) {
		addr := netip.AddrFrom4([4]byte{127, 0, 1, byte(10 + i)})
		w.mu.Lock()
		w.pos[addr] = places[i]
		w.mu.Unlock()
		c.ListenAddrs = []string{fmt.Sprintf("/ip4/%s/tcp/0", addr)}
		s.Measurer = planeMeasurer{w: w, at: places[i], liar: liar && i == len(places)-1}
		if tune != nil {
			tune(i, c, s)
		}
	})
}

// lineHosts is one host in each /24 of the test tree.
func lineHosts() []netip.Addr {
	var out []netip.Addr
	for b := range 8 {
		for c := range 4 {
			out = append(out, netip.AddrFrom4([4]byte{127, byte(b), byte(c), 77}))
		}
	}
	return out
}

// delegateAll has peers[j % len(peers)] delegate host j, each peer's
// share in its own goroutine.
func delegateAll(ctx context.Context, t *testing.T, peers []*Peer, hosts []netip.Addr) {
	t.Helper()
	var wg sync.WaitGroup
	for k, p := range peers {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for j, ip := range hosts {
				if j%len(peers) != k {
					continue
				}
				if _, err := p.Delegate(ctx, ip); err != nil && ctx.Err() == nil {
					t.Errorf("%s: delegate %v: %v", shortID(p.ID()), ip, err)
				}
			}
		}()
	}
	wg.Wait()
}

// liarHoldsAmiss lists, per honest peer's cache, the subnets the liar owns
// that it is not the nearest crawler to.
func liarHoldsAmiss(tn *testNet, honest []*Peer, liar delegation.CrawlerID) []string {
	var out []string
	for _, p := range honest {
		for _, r := range p.Directory().Records() {
			if r.Owner != liar {
				continue
			}
			if n := tn.tree.Node(r.Subnet); !nearestIsLast(targetAt(n.Start)) {
				out = append(out, fmt.Sprintf("%s sees subnet %v owned by the liar", shortID(p.ID()), n.Start))
			}
		}
	}
	return out
}

// A member that answers every probe with 1 ms is caught by the triangle
// bound of honest deciders' own measurements: its answers are left out of
// their decisions, it becomes a suspect at every honest peer (accusations
// make the others check it themselves), and the subnets it won, by its
// own decisions too, are re-decided: it keeps none it is not nearest to.
// The same world without the liar gives no evidence against anyone.
func TestLiarAboutRTTsLosesItsSubnets(t *testing.T) {
	hosts := lineHosts()
	t.Run("liar", func(t *testing.T) {
		tn := newPlaneNet(t, planePlaces, true, nil)
		ctx, cancel := context.WithTimeout(context.Background(), slowdown*90*time.Second)
		defer cancel()
		honest, liar := tn.peers[:4], tn.peers[4].CrawlerID()
		for _, p := range tn.peers {
			if _, err := p.Join(ctx); err != nil {
				t.Fatal(err)
			}
		}
		delegateAll(ctx, t, tn.peers, hosts) // the liar decides its share too
		// honest peers route every host again until none holds a subnet
		// the liar took amiss
		for round := 1; ; round++ {
			delegateAll(ctx, t, honest, hosts)
			for _, p := range honest {
				delegateAll(ctx, t, []*Peer{p}, hosts)
			}
			amiss := liarHoldsAmiss(tn, honest, liar)
			suspected := 0
			for _, p := range honest {
				if s := p.Suspects(); len(s) == 1 && s[0].Crawler == liar {
					suspected++
				}
			}
			if len(amiss) == 0 && suspected == len(honest) {
				t.Logf("liar suspected by all %d honest peers, no subnet held amiss, after %d rounds", len(honest), round)
				break
			}
			if round == 5 || ctx.Err() != nil {
				t.Fatalf("after %d rounds: suspected by %d of %d honest peers; %v", round, suspected, len(honest), amiss)
			}
			time.Sleep(200 * time.Millisecond) // accusations are checked at 2 a second
		}
		own := 0
		for _, p := range honest {
			for _, s := range p.Suspects() {
				for _, e := range s.Evidence {
					if e.Witness == p.CrawlerID() {
						own++
					}
				}
				if s.Crawler != liar {
					t.Errorf("%s suspects honest %s", shortID(p.ID()), s.Crawler)
				}
			}
		}
		if own == 0 {
			t.Error("no honest peer holds evidence of its own measurements")
		}
		// the liar is no crawler to them: a new subnet never goes to it
		d, err := honest[0].Delegate(ctx, netip.AddrFrom4([4]byte{127, 3, 3, 99}))
		if err != nil || d.Owner == liar {
			t.Fatalf("fresh decision after detection: %v %v", d, err)
		}
	})
	t.Run("honest", func(t *testing.T) {
		tn := newPlaneNet(t, planePlaces, false, nil)
		ctx, cancel := context.WithTimeout(context.Background(), slowdown*60*time.Second)
		defer cancel()
		for _, p := range tn.peers {
			if _, err := p.Join(ctx); err != nil {
				t.Fatal(err)
			}
		}
		delegateAll(ctx, t, tn.peers, hosts)
		delegateAll(ctx, t, tn.peers[1:], hosts)
		for _, p := range tn.peers {
			if st, s := p.AuditStats(), p.Suspects(); st.FalseRTT != 0 || st.Refused != 0 || len(s) != 0 {
				t.Errorf("%s in an honest run: %+v, suspects %v", shortID(p.ID()), st, s)
			}
		}
	})
}

// crawlingSink takes hand-offs as a crawler that fetches at once: each
// URL's page reaches the archive (the sink) fetched now.
type crawlingSink struct{ archive *rangeArchive }

func (s crawlingSink) Accept(_ context.Context, urls []string) error {
	s.archive.mu.Lock()
	defer s.archive.mu.Unlock()
	for _, raw := range urls {
		u, err := url.Parse(raw)
		if err != nil {
			return err
		}
		a, err := netip.ParseAddr(u.Hostname())
		if err != nil {
			return err
		}
		s.archive.pages = append(s.archive.pages, PageState{URL: raw, Addr: a, LastFetch: time.Now()})
	}
	return nil
}

// A member that acknowledges hand-offs and crawls nothing: the peers that
// handed it URLs find no page of its subnets at the sink past the grace
// period, hold it a suspect and re-decide its subnets; the honest owners,
// whose pages reach the sink, keep theirs and are accused of nothing.
func TestStalledOwnerLosesItsSubnets(t *testing.T) {
	archive := &rangeArchive{}
	// the stalled member in the middle, nearest to many subnets
	places := []point{{0, 0}, {21, 0}, {0, 18}, {21, 18}, {10.5, 9}}
	last := len(places) - 1
	tn := newPlaneNet(t, places, false, func(i int, c *Config, s *Services) {
		c.Audit = AuditConfig{Stall: delegation.StallConfig{Grace: 500 * time.Millisecond}, CheckEvery: 100 * time.Millisecond}
		s.Archive = archive
		if i != last {
			s.Sink = crawlingSink{archive}
		} // the last keeps its hand-offs in a memSink: acknowledged, never crawled
	})
	ctx, cancel := context.WithTimeout(context.Background(), slowdown*90*time.Second)
	defer cancel()
	honest, stalled := tn.peers[:last], tn.peers[last].CrawlerID()
	for _, p := range tn.peers {
		if _, err := p.Join(ctx); err != nil {
			t.Fatal(err)
		}
	}
	hosts := lineHosts()
	delegateAll(ctx, t, tn.peers, hosts)
	tn.settle(t, tn.peers, slowdown*10*time.Second)
	before := map[netip.Addr]delegation.CrawlerID{}
	stalledHeld := 0
	for _, ip := range hosts {
		o, ok := honest[0].CachedOwner(ip)
		if !ok {
			t.Fatalf("%v: no owner after settling", ip)
		}
		before[ip] = o
		if o == stalled {
			stalledHeld++
		}
	}
	if stalledHeld < 2 {
		t.Fatalf("the stalled member owns %d subnets: the test needs two", stalledHeld)
	}
	handOff := func(round int) {
		for k, p := range honest {
			for _, ip := range hosts {
				u := fmt.Sprintf("http://%s/r%d-p%d", ip, round, k)
				if err := p.Handoff(ctx, tn.tree.SmallestNonUnary(ip), ip, u); err != nil {
					t.Fatal(err)
				}
			}
		}
	}
	start := time.Now()
	for round := 1; ; round++ {
		handOff(round)
		time.Sleep(300 * time.Millisecond)
		delegateAll(ctx, t, honest, hosts) // re-decides what a suspect owns
		held, suspected := 0, 0
		for _, p := range honest {
			for _, ip := range hosts {
				if o, _ := p.CachedOwner(ip); o == stalled {
					held++
				}
			}
			if s := p.Suspects(); len(s) == 1 && s[0].Crawler == stalled {
				suspected++
			}
		}
		if held == 0 && suspected > 0 {
			t.Logf("stalled member held %d subnets; none after %v (%d rounds), a suspect of %d of %d honest peers",
				stalledHeld, time.Since(start).Round(100*time.Millisecond), round, suspected, len(honest))
			break
		}
		if round == 40 || ctx.Err() != nil {
			t.Fatalf("after %d rounds the stalled member still owns %d routes (suspected by %d)", round, held, suspected)
		}
	}
	for _, p := range honest {
		for _, s := range p.Suspects() {
			if s.Crawler != stalled {
				t.Errorf("%s suspects honest %s: %+v", shortID(p.ID()), s.Crawler, s.Evidence)
			}
		}
		for _, ip := range hosts {
			if was := before[ip]; was != stalled {
				if now, _ := p.CachedOwner(ip); now != was {
					t.Errorf("%s: %v moved from honest %s to %s", shortID(p.ID()), ip, shortID2(was), shortID2(now))
				}
			}
		}
	}
}

func shortID2(c delegation.CrawlerID) string {
	if len(c) > 8 {
		return string(c[len(c)-8:])
	}
	return string(c)
}
