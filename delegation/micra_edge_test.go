package delegation

import (
	"context"
	"testing"
	"time"
)

// A record naming one (known) crawler many times is one host's answers, not
// many: Learn folded every copy in as a separate observation, so a single
// record gave that crawler n = 64 in every context of the subnet and added
// 63 zero-variance degrees of freedom to the pooled spread of every kind of
// context. The next decision elsewhere in the country went blind (no probe)
// to that crawler. The overlay's record validator does not reject repeated
// crawlers, so any peer can send such a record.
func TestLearnDuplicateAnswersCountOnce(t *testing.T) {
	run := func(copies int) (Decision, float64) {
		w := newFlatWorld(t, 50)
		for i := range 20 {
			c := crawlerAt(i)
			w.members.Add(c)
			w.rtt[c.ID] = time.Duration(10+3*i) * time.Millisecond
		}
		p := NewMicra(w.deps(), Config{})
		m := p.(learningEngine).ch.(*micraChooser)
		var ps []ProbeResult
		for range copies {
			ps = append(ps, ProbeResult{Crawler: crawlerAt(0).ID, RTT: 10 * time.Millisecond, OK: true})
		}
		for i := 1; i < 20; i++ {
			c := crawlerAt(i).ID
			ps = append(ps, ProbeResult{Crawler: c, RTT: w.rtt[c], OK: true})
		}
		sub := w.tree.SmallestNonUnary(w.host(0))
		if !p.(Learner).Learn(Record{Subnet: sub, Snapshot: w.tree.ID(), Owner: ps[0].Crawler, OwnerRTT: ps[0].RTT, Probes: ps, Epoch: 1, DecidedBy: "x"}) {
			t.Fatal("record not learned")
		}
		n := m.scopes[mkScope(scopeGlobal, 0)].stat(m.crawler.idx[crawlerAt(0).ID]).n
		d, err := p.Delegate(context.Background(), w.host(7))
		if err != nil {
			t.Fatal(err)
		}
		return d, n
	}
	dOne, _ := run(1)
	dDup, n := run(44) // 44 + 19 = 63 answers: under the overlay's 64
	t.Logf("one copy:  %v", dOne)
	t.Logf("44 copies: %v", dDup)
	if n != 1 {
		t.Errorf("one record with %s's answer 44 times: %v observations of it", crawlerAt(0).ID, n)
	}
	if dDup.Probes == 0 && dOne.Probes > 0 {
		t.Errorf("the repeated answers made the next decision blind (%v): with one copy it probed %d", dDup.Reason, dOne.Probes)
	}
}

// liveTopOf (the live crawlers with the lowest means, for a context whose
// top list holds departed crawlers) breaks ties in mean by crawler index —
// the order in which this peer first saw the crawlers — so two peers with
// the same records and membership, that met the crawlers in another order,
// take other candidates and decide differently (TestNeighbourDecisions-
// Deterministic states that numbering must not matter).
func TestLiveTopTiesIndependentOfNumbering(t *testing.T) {
	run := func(reverse bool) []string {
		w := newFlatWorld(t, 300)
		const n = 40
		for i := range n {
			c := crawlerAt(i)
			w.rtt[c.ID] = 50 * time.Millisecond // equal: answers at a timer's resolution
			if i < 16 {
				w.rtt[c.ID] = time.Duration(10+i) * time.Millisecond
			}
		}
		p := NewMicra(w.deps(), Config{Micra: MicraConfig{Blind: -1}})
		m := p.(learningEngine).ch.(*micraChooser)
		if reverse { // this peer met the crawlers in the other order
			for i := n - 1; i >= 0; i-- {
				m.crawler.id(crawlerAt(i).ID)
			}
		}
		for i := range n {
			w.members.Add(crawlerAt(i))
		}
		for s := range 20 {
			var ps []ProbeResult
			for i := range n {
				c := crawlerAt(i).ID
				ps = append(ps, ProbeResult{Crawler: c, RTT: w.rtt[c], OK: true})
			}
			p.(Learner).Learn(Record{Subnet: w.tree.SmallestNonUnary(w.host(s)), Snapshot: w.tree.ID(), Owner: ps[0].Crawler, OwnerRTT: ps[0].RTT, Probes: ps, Epoch: 1, DecidedBy: "x"})
		}
		for i := range 16 { // the fastest leave
			w.members.Remove(crawlerAt(i).ID)
		}
		var out []string
		for s := 100; s < 110; s++ {
			d, err := p.Delegate(context.Background(), w.host(s))
			if err != nil {
				t.Fatal(err)
			}
			out = append(out, d.String())
		}
		return out
	}
	a, b := run(false), run(true)
	for i := range a {
		if a[i] != b[i] {
			t.Fatalf("decision %d depends on the crawlers' numbering:\n%s\nvs\n%s", i, a[i], b[i])
		}
	}
}
