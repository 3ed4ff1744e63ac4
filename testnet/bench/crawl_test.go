package bench

import (
	"context"
	"testing"
)

// TestRunCrawlSmall runs the experiment end to end on a tiny web: both
// crawlers cover it, micra fetches nothing twice, obeys robots.txt and ships
// carriers much smaller than the HTML.
func TestRunCrawlSmall(t *testing.T) {
	rep, err := RunCrawl(context.Background(), CrawlOptions{Hosts: 12, HostsPerIP: 4, PagesPerHost: 15, Seed: 3, Workers: 8, PerIP: 2, Rounds: 1})
	if err != nil {
		t.Fatal(err)
	}
	m, c := rep.Micra, rep.Colly
	if m == nil || c == nil {
		t.Fatalf("missing results: %+v", rep)
	}
	if m.Coverage != 1 || c.Coverage != 1 {
		t.Fatalf("coverage micra %.2f colly %.2f", m.Coverage, c.Coverage)
	}
	if m.DuplicateFetches != 0 || m.RobotsViolations != 0 || m.Errors != 0 {
		t.Fatalf("micra: %+v", m)
	}
	if m.Records != m.Pages || m.CarrierBytes <= 0 || m.CarrierRatio < 20 {
		t.Fatalf("micra carriers: records %d pages %d carrier bytes %d ratio %.1f", m.Records, m.Pages, m.CarrierBytes, m.CarrierRatio)
	}
	if rep.SpeedupRatio <= 0 || rep.Web.Pages != 12*15 || rep.Web.AvgPageBytes <= 0 {
		t.Fatalf("report: %+v", rep)
	}
}

// Rounds add up: two rounds of micra alone fetch every page twice (once per
// round, never twice in one) and keep each round's rate; Colly is skipped.
func TestRunCrawlRoundsSkipColly(t *testing.T) {
	rep, err := RunCrawl(context.Background(), CrawlOptions{Hosts: 4, HostsPerIP: 2, PagesPerHost: 5, Seed: 2, Workers: 4, PerIP: 1, Rounds: 2, SkipColly: true})
	if err != nil {
		t.Fatal(err)
	}
	m := rep.Micra
	if rep.Colly != nil || rep.SpeedupRatio != 0 {
		t.Fatalf("Colly ran: %+v", rep.Colly)
	}
	if rep.Rounds != 2 || len(m.RoundPagesPerSec) != 2 || m.Pages != 2*4*5 || m.Coverage != 1 || m.DuplicateFetches != 0 {
		t.Fatalf("micra over 2 rounds: %+v", m)
	}
}

// Options that would start no crawler are refused before the web starts.
func TestRunCrawlRefusesNoWorkers(t *testing.T) {
	for _, o := range []CrawlOptions{{Workers: 0, PerIP: 1}, {Workers: 1, PerIP: 0}} {
		if _, err := RunCrawl(context.Background(), o); err == nil {
			t.Errorf("%+v accepted", o)
		}
	}
}
