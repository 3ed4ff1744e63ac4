package sim

import (
	"bytes"
	"context"
	"fmt"
	"maps"
	"reflect"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/micra-crawler/micra/delegation"
)

// TestReviews: the simulator hands micra (a delegation.Reviewer) the
// owner's crawl timing after every cached delegation unless NoReview; the
// probes it counts per host are the decisions' own; policies that do not
// review run identically either way.
func TestReviews(t *testing.T) {
	ctx := context.Background()
	var names []string
	for _, p := range Policies {
		names = append(names, p.Name)
	}
	cfg := Config{Seed: 1, Crawlers: 12, Hosts: 300, HostDist: HostsZipf, Threshold: 50 * time.Millisecond, Logger: quiet(), Policies: names}.withDefaults()
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	off := cfg
	off.NoReview = true
	for _, spec := range Policies {
		var trace bytes.Buffer
		on := cfg
		on.Trace, on.TracePolicy, on.TraceN = &trace, spec.Name, len(w.Hosts)
		rOn, err := w.runPolicy(ctx, on, spec)
		if err != nil {
			t.Fatal(err)
		}
		rOff, err := w.runPolicy(ctx, off, spec)
		if err != nil {
			t.Fatal(err)
		}
		for _, r := range []*run{rOn, rOff} {
			var sum int64
			for _, p := range r.probes {
				sum += int64(p)
			}
			if sum != r.total {
				t.Errorf("%s: per-host probes sum to %d, the prober counted %d", spec.Name, sum, r.total)
			}
			n := 0
			for _, c := range r.reasons {
				n += c
			}
			if n != len(w.Hosts) {
				t.Errorf("%s: %d reasons for %d hosts: %v", spec.Name, n, len(w.Hosts), r.reasons)
			}
		}
		// per host, the probes counted are those of the decision that
		// ended it (a cached delegation probes nobody, so after a review
		// they are the review's)
		lines := strings.Split(strings.TrimSpace(trace.String()), "\n")
		if len(lines) != len(w.Hosts) {
			t.Fatalf("%s: %d trace lines for %d hosts", spec.Name, len(lines), len(w.Hosts))
		}
		for i, l := range lines {
			want := fmt.Sprintf("%s #%d ", spec.Name, i)
			_, rest, ok := strings.Cut(l, " probes=")
			if !strings.HasPrefix(l, want) || !ok {
				t.Fatalf("%s: trace line %d: %q", spec.Name, i, l)
			}
			num, _, _ := strings.Cut(rest, " ")
			if p, err := strconv.Atoi(num); err != nil || uint32(p) != rOn.probes[i] {
				t.Fatalf("%s host %d: the decision says probes=%s, the run counted %d: %s", spec.Name, i, num, rOn.probes[i], l)
			}
		}

		pol := spec.New(delegation.Deps{Tree: w.Tree, Dir: delegation.NewMemDirectory(w.Tree, nil), Prober: &prober{w: w}, Members: delegation.NewMemMembership()}, delegation.Config{})
		if _, reviews := pol.(delegation.Reviewer); !reviews {
			if !reflect.DeepEqual(rOn.owner, rOff.owner) || !reflect.DeepEqual(rOn.probes, rOff.probes) ||
				!reflect.DeepEqual(rOn.reasons, rOff.reasons) || rOn.total != rOff.total {
				t.Errorf("%s does not review, yet NoReview changed its run: %v vs %v", spec.Name, rOn.reasons, rOff.reasons)
			}
			for r := range rOn.reasons {
				if strings.HasPrefix(r, "review-") {
					t.Errorf("%s does not review, yet reports %q", spec.Name, r)
				}
			}
			continue
		}
		if spec.Name != "micra" {
			t.Errorf("%s reviews: only micra should", spec.Name)
		}
		t.Logf("%s reasons with reviews %v; without %v; probes %d vs %d", spec.Name, rOn.reasons, rOff.reasons, rOn.total, rOff.total)
		// every cached delegation was reviewed: none is left cached
		if rOn.reasons[delegation.ReasonKept.String()] == 0 || rOn.reasons[delegation.ReasonCached.String()] != 0 {
			t.Errorf("%s with reviews: %v, want review-kept and no cached", spec.Name, rOn.reasons)
		}
		if rOff.reasons[delegation.ReasonCached.String()] == 0 {
			t.Errorf("%s without reviews: no cached decision: %v", spec.Name, rOff.reasons)
		}
		for r := range maps.Keys(rOff.reasons) {
			if strings.HasPrefix(r, "review-") {
				t.Errorf("%s without reviews reports %q", spec.Name, r)
			}
		}
		// the reviews probe (they are not free), so the two runs differ
		if rOn.total <= rOff.total && reflect.DeepEqual(rOn.owner, rOff.owner) {
			t.Errorf("%s: reviews changed neither the probes nor an owner", spec.Name)
		}
	}
}
