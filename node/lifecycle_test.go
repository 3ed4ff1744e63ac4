package node

import (
	"testing"
	"time"

	"github.com/micra-crawler/micra/testnet/synthweb"
)

// The formation rule on views built by hand: no clock, no network.
func TestSeedWaitRule(t *testing.T) {
	t0 := time.Unix(1_000_000, 0)
	quiet := 3 * time.Second
	view := func(sinceQuiet time.Duration, live, joining, rt int, boot bool) formationView {
		return formationView{now: t0.Add(sinceQuiet), quietFrom: t0, live: live, joining: joining, rt: rt, bootstrap: boot}
	}
	for _, c := range []struct {
		name string
		w    SeedWait
		v    formationView
		want bool
		why  string
	}{
		{"alone, quiet long enough", SeedWait{}, view(quiet, 1, 0, 0, false), true, ""},
		{"alone, a member joined just now", SeedWait{}, view(quiet-time.Millisecond, 1, 0, 0, false), false, "no member joining for 3s"},
		{"bootstrap peers, nobody heard", SeedWait{}, view(time.Hour, 1, 0, 0, true), false, "a first member (the bootstrap peers)"},
		{"two of three members", SeedWait{Members: 3}, view(time.Hour, 2, 0, 1, false), false, "3 members"},
		{"three of three, at once", SeedWait{Members: 3}, view(0, 3, 0, 2, false), true, ""},
		{"a crawler still to publish its subnet", SeedWait{Members: 2}, view(0, 2, 1, 1, false), false, "members to publish their own subnet"},
		{"routing table short of the members", SeedWait{}, view(quiet, 5, 0, 3, true), false, "the routing table to hold the members"},
		{"routing table one k-bucket", SeedWait{}, view(quiet, 40, 0, 20, true), true, ""},
	} {
		ok, why, _ := c.w.formed(c.v, quiet)
		if ok != c.want || why != c.why {
			t.Errorf("%s: formed %v (waiting for %q), want %v (%q)", c.name, ok, why, c.want, c.why)
		}
	}
	if q := (SeedWait{}).quiet(time.Second); q != 3*time.Second {
		t.Errorf("default quiet %v, want three heartbeats", q)
	}
}

// Regression: the seeded node started first, alone, routed its
// seeds over a membership of one — it owned every subnet, fetched, and
// handed hosts over as the others joined: robots.txt fetched two or three
// times per host and pages fetched twice. Now it waits for the membership
// (here: told the network has two members) and the second node joins
// later: every page is fetched once, by its nearest crawler (report), and
// robots.txt once per host.
func TestSeedsWaitForMembership(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 16, HostsPerIP: 2, PagesPerHost: 15, CanonicalLinks: true})
	c := newCluster(t, web, 2)
	boot := c.open(t, 0, nil, true, func(_ int, cfg *Config) { cfg.SeedWait.Members = 2 })
	c.run(0)
	select {
	case <-c.nodes[0].Ready():
	case <-time.After(30 * time.Second):
		t.Fatal("the seeded node did not get ready alone")
	}
	if st := web.Stats(); st.Requests != 0 {
		t.Fatalf("the seeded node alone sent %d requests before anyone joined", st.Requests)
	}
	c.open(t, 1, boot, false)
	c.run(1)
	c.waitCoverage(t, 60*time.Second)
	st := web.Stats()
	if st.DuplicateFetches != 0 {
		t.Errorf("overlap: %d pages fetched twice", st.DuplicateFetches)
	}
	if hosts := len(web.Hosts()); st.RobotsFetches != int64(hosts) {
		t.Errorf("robots.txt fetched %d times for %d hosts", st.RobotsFetches, hosts)
	}
	c.report(t, "seeded node first") // each page fetched by its host's nearest crawler
	for i, nd := range c.nodes {
		if len(fetchedHosts(t, nd)) == 0 {
			t.Errorf("node %d fetched nothing: the seeds were routed before it was known", i)
		}
	}
}

// A node that stops cleanly announces its leave: the others re-route the
// URLs they had handed to it at once — under a failure timeout of an hour,
// so only the leave can explain it — and the crawl still reaches every page.
func TestStoppedNodeReroutedAtOnce(t *testing.T) {
	web := startWeb(t, synthweb.Config{Hosts: 24, HostsPerIP: 2, PagesPerHost: 30, CanonicalLinks: true,
		Latency: 15 * time.Millisecond})
	c := startCluster(t, web, 3, func(_ int, cfg *Config) { cfg.Overlay.FailureTimeout = time.Hour })
	total := int64(web.TotalPages())
	waitFor(t, 30*time.Second, "a third of the pages", func() bool { return web.Stats().UniquePages >= total/3 })
	victim := 2
	c.halt(t, victim) // Run cancelled: the leave goes out
	left := int64(0)
	for _, k := range fetchedHosts(t, c.nodes[victim]) {
		left += int64(k)
	}
	c.stop(t, victim)
	c.waitCoverage(t, 60*time.Second)
	// as after a crash, the pages the node fetched are fetched again by
	// its subnets' new owners (its page history leaves with it), and the
	// fetches the stop cut short (served, not recorded: at most its
	// concurrency, 8), no more
	if st := web.Stats(); st.DuplicateFetches > left+8 {
		t.Errorf("%d pages fetched twice: more than the %d the node that left had fetched plus its in-flight fetches", st.DuplicateFetches, left)
	}
	var rerouted float64
	for i, nd := range c.nodes {
		if nd != nil {
			rerouted += counterValue(t, nd)
			t.Logf("node %d re-routed %v URLs of the node that left", i, counterValue(t, nd))
		}
	}
	if rerouted == 0 {
		t.Error("no URL handed to the node that left was re-routed")
	}
	c.report(t, "after a clean stop")
}

// seed_members in the file form is SeedWait.Members.
func TestSeedMembersFromFile(t *testing.T) {
	c, err := Parse([]byte(`{"data_dir": "x", "seeds": ["http://example.com/"], "seed_members": 12}`))
	if err != nil {
		t.Fatal(err)
	}
	if c.SeedWait.Members != 12 {
		t.Fatalf("SeedWait %+v, want Members 12", c.SeedWait)
	}
}
