package cluster

import "fmt"

// Check is one invariant of a run on a testnet and whether it held.
type Check struct {
	Invariant string `json:"invariant"`
	Goal      string `json:"goal"`
	Measured  string `json:"measured"`
	Held      bool   `json:"held"`
}

// NotHeld counts the checks that did not hold.
func NotHeld(checks []Check) int {
	n := 0
	for _, c := range checks {
		if !c.Held {
			n++
		}
	}
	return n
}

// CrawlChecks are the invariants a crawl must keep through whatever a run
// puts the testnet through (faults, an upgrade), measured at the sink and
// the subscriber beside it: coverage, overlap, pages fetched twice at the
// web (reported), records acknowledged and lost, records ingested twice,
// and the subscriber's stream without gap or repeat.
func CrawlChecks(res *Result, d Delivery) []Check {
	var out []Check
	add := func(inv, goal, measured string, held bool) {
		out = append(out, Check{Invariant: inv, Goal: goal, Measured: measured, Held: held})
	}
	pct := func(n int64) float64 { return 100 * float64(n) / float64(max(1, res.Pages)) }
	add("coverage", "100 % of the web's pages at the sink",
		fmt.Sprintf("%d of %d (%.1f %%)", res.Pages, res.TotalPages, res.CoveragePct), res.Complete && res.Pages == res.TotalPages)
	add("overlap at the sink", "≤ 1 % of the pages delivered by a second crawler",
		fmt.Sprintf("%d records (%.1f %%)", res.Overlap, pct(res.Overlap)), pct(res.Overlap) <= 1)
	add("fetched twice at the web", "reported (≤ 1 % is the goal of overlap)",
		fmt.Sprintf("%d pages (%.1f %%)", res.DuplicateFetches, pct(res.DuplicateFetches)), true)
	add("acknowledged records lost", "0 (records the subscriber read, missing from the log after)",
		fmt.Sprint(d.Lost), d.Lost == 0 && d.Followed > 0)
	add("ingested twice", "0 (one fetch of a page committed at two sequences)",
		fmt.Sprintf("%d (%d carriers acknowledged again without a change)", d.IngestedTwice, d.RedeliveredCarriers), d.IngestedTwice == 0)
	add("subscriber resumes", "every record once, in order, up to the head",
		fmt.Sprintf("%d of %d, %d gaps, %d repeats", d.Followed, d.Head, d.Gaps, d.Repeats),
		d.Gaps == 0 && d.Repeats == 0 && uint64(d.Followed) == d.Head && d.Head > 0)
	return out
}
