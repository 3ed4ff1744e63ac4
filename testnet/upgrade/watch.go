package upgrade

import (
	"context"
	"fmt"
	"time"

	"github.com/micra-crawler/micra/node"
	"github.com/micra-crawler/micra/testnet/cluster"
)

// watch looks at every node's status once a second while the release
// goes through, and fills the table.
type watch struct {
	r    *run
	seen []seen
	// reportedAll: every node's status reported the rollbacks (seconds
	// since publishing; -1: not yet)
	reportedAll float64
	restarts    []span
}

// seen is the last look at a node.
type seen struct {
	since   time.Time // when its running process started (its status)
	lastOK  float64   // seconds since publishing of its last answer
	version string
	trial   bool
}

// span is a node's restart: from its last answer before it to its first
// after (seconds since publishing).
type span struct{ from, to float64 }

func newWatch(r *run) *watch {
	w := &watch{r: r, seen: make([]seen, len(r.t.State.Nodes)), reportedAll: -1}
	r.rep.Nodes = make([]NodeRow, len(r.t.State.Nodes))
	for i, ns := range r.t.State.Nodes {
		r.rep.Nodes[i] = NodeRow{Index: i, PeerID: ns.PeerID, Version: r.rep.FromVersion,
			SwitchedS: -1, ConfirmedS: -1, RolledBackS: -1, HeldBackS: -1}
		w.seen[i] = seen{version: r.rep.FromVersion}
	}
	return w
}

// until looks every second until the release has gone through (done) or
// ctx ends.
func (w *watch) until(ctx context.Context) {
	for {
		if w.look(ctx) {
			return
		}
		select {
		case <-ctx.Done():
			w.r.event("check", "the release did not go through within the limit")
			return
		case <-time.After(time.Second):
		}
	}
}

// final is the last look, once the crawl is over.
func (w *watch) final(ctx context.Context) { w.look(ctx) }

// look reads every node's status once and reports whether the release has
// gone through as expected.
func (w *watch) look(ctx context.Context) bool {
	r := w.r
	sha, from, to := r.rep.ToSHA256, r.rep.FromVersion, r.rep.ToVersion
	answered := 0
	for i := range r.rep.Nodes {
		row, prev := &r.rep.Nodes[i], &w.seen[i]
		sctx, cancel := context.WithTimeout(ctx, 2*time.Second)
		st, err := r.t.Control(i).Status(sctx)
		cancel()
		if err != nil || st.Release == nil {
			continue // (restarting, or too busy to answer within 2 s)
		}
		answered++
		rs := st.Release
		now := r.sincePub()
		started := st.Since.Sub(r.pub).Seconds() // (its new process's start: not when this look saw it)
		if !prev.since.IsZero() && !st.Since.Equal(prev.since) {
			w.restarts = append(w.restarts, span{prev.lastOK, started})
			r.event("restarted", "node %d restarted (last answer %.1f s after publishing, started again at %.1f s), running %s", i, prev.lastOK, started, rs.Running)
		}
		prev.since, prev.lastOK = st.Since, now
		if rs.Running != prev.version {
			r.event("version", "node %d runs %s (was %s)", i, rs.Running, prev.version)
		}
		prev.version = rs.Running
		row.Version = rs.Running
		if rs.OnTrial != nil {
			if !prev.trial {
				r.event("trial", "node %d on trial with %s", i, rs.OnTrial.To)
			}
		}
		prev.trial = rs.OnTrial != nil
		if rs.Running == to && row.SwitchedS < 0 {
			row.SwitchedS = started
		}
		if rs.Running == to && rs.OnTrial == nil && row.ConfirmedS < 0 {
			row.ConfirmedS = r.sincePub()
			r.event("confirmed", "node %d runs %s, confirmed healthy (%.1f s after publishing)", i, to, row.ConfirmedS)
		}
		if rb := rs.RolledBack; rb != nil && rb.SHA256 == sha && rs.Running == from && row.RolledBackS < 0 {
			row.RolledBackS, row.Reason = r.sincePub(), rb.Reason
			r.event("rolled-back", "node %d back on %s (%.1f s after publishing): %s", i, from, row.RolledBackS, rb.Reason)
		}
		if rs.Paused != "" && row.HeldBackS < 0 {
			row.HeldBackS, row.Reason = r.sincePub(), rs.Paused
			r.event("held-back", "node %d holds %s back: %s", i, to, rs.Paused)
		}
		row.Reported = reported(rs, sha)
	}
	r.rep.MostDown = mostAtOnce(w.restarts)
	if answered < len(r.rep.Nodes) {
		return false
	}
	if r.o.Expect == ExpectUpgrade {
		for _, row := range r.rep.Nodes {
			if row.ConfirmedS < 0 || row.Version != to {
				return false
			}
		}
		r.rep.LastS = lastOf(r.rep.Nodes, func(n NodeRow) float64 { return n.SwitchedS })
		return true
	}
	rolled := 0
	for _, row := range r.rep.Nodes {
		if row.Version != from || (row.RolledBackS < 0 && row.HeldBackS < 0) {
			return false
		}
		if row.RolledBackS >= 0 {
			rolled++
		}
	}
	r.rep.LastS = lastOf(r.rep.Nodes, func(n NodeRow) float64 { return max(n.RolledBackS, n.HeldBackS) })
	for _, row := range r.rep.Nodes {
		if row.Reported != rolled {
			return false
		}
	}
	if w.reportedAll < 0 {
		w.reportedAll = r.sincePub()
		r.event("report", "every node's status reports %s rolled back on %d nodes (%.1f s after publishing)", to, rolled, w.reportedAll)
	}
	return true
}

// reported is how many nodes a status says rolled back the release sha.
func reported(rs *node.ReleaseStatus, sha string) int {
	if rs.Network == nil {
		return 0
	}
	for _, rb := range rs.Network.RolledBack {
		if rb.SHA256 == sha {
			return rb.Nodes
		}
	}
	return 0
}

// mostAtOnce is the most spans that overlap at one moment.
func mostAtOnce(spans []span) int {
	most := 0
	for _, a := range spans {
		n := 0
		for _, b := range spans {
			if b.from <= a.from && a.from < b.to {
				n++
			}
		}
		most = max(most, n)
	}
	return most
}

func lastOf(rows []NodeRow, at func(NodeRow) float64) float64 {
	last := 0.0
	for _, row := range rows {
		if at(row) < 0 {
			return -1
		}
		last = max(last, at(row))
	}
	return last
}

// checks fills the table: what the release did, then the crawl's
// invariants.
func (r *run) checks(w *watch) {
	rep := r.rep
	add := func(inv, goal, measured string, held bool) {
		rep.Checks = append(rep.Checks, cluster.Check{Invariant: inv, Goal: goal, Measured: measured, Held: held})
	}
	n := len(rep.Nodes)
	to, from := rep.ToVersion, rep.FromVersion
	switch r.o.Expect {
	case ExpectUpgrade:
		on := 0
		for _, row := range rep.Nodes {
			if row.Version == to && row.ConfirmedS >= 0 {
				on++
			}
		}
		add("every node on B", fmt.Sprintf("%d of %d run %s, confirmed healthy", n, n, to),
			fmt.Sprintf("%d of %d", on, n), on == n)
		limit := r.o.Rollout + r.o.Grace
		add("within the rollout window", fmt.Sprintf("the last node on %s ≤ %v (window %v + %v to fetch, stop and start)", to, limit, r.o.Rollout, r.o.Grace),
			seconds(rep.LastS)+" after publishing", rep.LastS >= 0 && rep.LastS <= limit.Seconds())
	case ExpectRollback:
		rolled, held, other := 0, 0, 0
		for _, row := range rep.Nodes {
			switch {
			case row.Version != from:
				other++
			case row.RolledBackS >= 0:
				rolled++
			case row.HeldBackS >= 0:
				held++
			default:
				other++
			}
		}
		add("every node back on A", fmt.Sprintf("%d of %d run %s: rolled back, or holding %s back", n, n, from, to),
			fmt.Sprintf("%d rolled back, %d held it back, %d neither", rolled, held, other), other == 0 && rolled > 0)
		add("within the limit", fmt.Sprintf("≤ %v after publishing", r.o.RollbackLimit),
			seconds(rep.LastS), rep.LastS >= 0 && rep.LastS <= r.o.RollbackLimit.Seconds())
		ok := rolled > 0
		for _, row := range rep.Nodes {
			ok = ok && row.Reported == rolled
		}
		add("the network reports it", fmt.Sprintf("every node's status: %s rolled back on %d nodes", to, rolled),
			fmt.Sprintf("by every node %s after publishing", seconds(w.reportedAll)), ok)
	}
	add("waves, not all at once", fmt.Sprintf("fewer than %d nodes restarting at once (%d restarts)", n, len(w.restarts)),
		fmt.Sprintf("at most %d", rep.MostDown), n == 1 || rep.MostDown < n)
	if rep.Result != nil {
		rep.Checks = append(rep.Checks, cluster.CrawlChecks(rep.Result, rep.Delivery)...)
	}
	rep.Held = true
	for _, c := range rep.Checks {
		rep.Held = rep.Held && c.Held
	}
}

func seconds(s float64) string {
	if s < 0 {
		return "never"
	}
	return fmt.Sprintf("%.1f s", s)
}
