package delegation

import (
	"context"
	"slices"
	"strings"
	"testing"
)

// unversioned hides MemMembership's Version: the engine and micra then
// rebuild what they derive from the membership at every decision.
type unversioned struct{ m *MemMembership }

func (u unversioned) Live() []Crawler { return u.m.Live() }

// neighbourRun delegates 600 hosts among 40 crawlers that state their
// positions (more crawlers than candidates, so neighbours join decisions),
// with churn: after host 200 crawlers 0–9 state new positions and 10–14
// leave; after host 400, 10–14 come back. It returns every decision's
// explanation. versioned false hides the membership's version; reverse
// numbers the crawlers inside micra in reverse order before anything else.
func neighbourRun(t *testing.T, versioned, reverse bool, tune func(*MicraConfig)) []string {
	t.Helper()
	ctx := context.Background()
	w := newSynthWorld(t, 6, 40, 600)
	crawlers := slices.Clone(w.crawlers)
	for i := range crawlers {
		l := w.addrLoc(crawlers[i].Addr)
		crawlers[i].Lat, crawlers[i].Lon, crawlers[i].HasPos = l[0], l[1], true
	}
	members := NewMemMembership()
	deps := synthDeps(w, NewMemDirectory(w.tree, members), members, 1)
	if !versioned {
		deps.Members = unversioned{members}
	}
	cfg := Config{Self: "d", Micra: MicraConfig{GeoAfter: 10}}
	if tune != nil {
		tune(&cfg.Micra)
	}
	p := NewMicra(deps, cfg)
	if reverse {
		m := p.(learningEngine).ch.(*micraChooser)
		for i := len(crawlers) - 1; i >= 0; i-- {
			m.crawler.id(crawlers[i].ID)
		}
	}
	join := func(c Crawler) {
		members.Add(c)
		if _, err := p.Join(ctx, c); err != nil {
			t.Fatal(err)
		}
	}
	for _, c := range crawlers {
		join(c)
	}
	var out []string
	for i, h := range w.hosts {
		switch i {
		case 200:
			for j := range 10 {
				c := crawlers[j]
				c.Lat, c.Lon = -c.Lat, c.Lon/2
				members.Add(c)
			}
			for j := 10; j < 15; j++ {
				members.Remove(crawlers[j].ID)
			}
		case 400:
			for j := 10; j < 15; j++ {
				join(crawlers[j])
			}
		}
		d, err := p.Delegate(ctx, h)
		if err != nil {
			t.Fatal(err)
		}
		if !members.IsLive(d.Owner) {
			t.Fatalf("host %d: owner %s is not live: %v", i, d.Owner, d)
		}
		out = append(out, d.String())
	}
	return out
}

func countNeighbourNotes(ds []string) int {
	n := 0
	for _, s := range ds {
		if strings.Contains(s, "neighbours of best") {
			n++
		}
	}
	return n
}

// Neighbour lists (and the places Locate scores) are cached per membership version: deciding with the
// version hidden (lists rebuilt every decision) or with the crawlers
// numbered in another order must give the same decisions, through moves,
// departures and returns — every peer decides alike.
func TestNeighbourDecisionsDeterministic(t *testing.T) {
	ref := neighbourRun(t, true, false, nil)
	if n := countNeighbourNotes(ref); n < 50 {
		t.Fatalf("only %d of %d decisions added neighbours: the test does not exercise them", n, len(ref))
	}
	located := 0
	for _, d := range ref {
		if strings.Contains(d, "near the located host") {
			located++
		}
	}
	if located < 20 {
		t.Fatalf("only %d of %d decisions added located candidates: the test does not exercise them", located, len(ref))
	}
	for _, v := range []struct {
		name              string
		versioned, revers bool
	}{{"unversioned", false, false}, {"reversed index", true, true}} {
		got := neighbourRun(t, v.versioned, v.revers, nil)
		for i := range ref {
			if got[i] != ref[i] {
				t.Fatalf("%s: host %d decided differently:\n%s\nvs\n%s", v.name, i, got[i], ref[i])
			}
		}
	}
}

// No neighbour joins after the last allowed probe: no round could weigh
// it, and the explanation would count candidates nobody considered.
func TestNeighboursNotAfterProbeCap(t *testing.T) {
	if n := countNeighbourNotes(neighbourRun(t, true, false, func(m *MicraConfig) { m.MaxProbes = 2 })); n == 0 {
		t.Fatal("MaxProbes 2: no decision added neighbours; the check below would prove nothing")
	}
	if n := countNeighbourNotes(neighbourRun(t, true, false, func(m *MicraConfig) { m.MaxProbes = 1 })); n > 0 {
		t.Fatalf("MaxProbes 1: %d decisions report neighbour candidates no round could weigh", n)
	}
}
