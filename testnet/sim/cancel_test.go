package sim

import (
	"bytes"
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"sync/atomic"
	"testing"

	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/testnet/world"
)

// Regression (the defect these tests caught): `micra sim --preset scale`
// took about 8 s to stop on SIGINT, because placing its crawlers and million
// hosts and computing their optimal crawlers never looked at the context.
// The tests assert errors and the work done, never a duration.

// cancelAfter is a context whose Err reports context.Canceled from its
// (left+1)-th call on, and counts the calls: a cancellation at an exact,
// reproducible point of a computation that looks at ctx.Err() (Done is
// Background's: the code under test only polls Err).
type cancelAfter struct {
	context.Context
	left, looks atomic.Int64
}

func newCancelAfter(left int64) *cancelAfter {
	c := &cancelAfter{Context: context.Background()}
	c.left.Store(left)
	return c
}

func (c *cancelAfter) Err() error {
	c.looks.Add(1)
	if c.left.Add(-1) < 0 {
		return context.Canceled
	}
	return nil
}

// countingSource counts the values drawn from it: the work a placement did.
type countingSource struct {
	rand.Source
	n int
}

func (s *countingSource) Uint64() uint64 {
	s.n++
	return s.Source.Uint64()
}

func cancelled() context.Context {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	return ctx
}

func defaultPlacer(t *testing.T) *placer {
	t.Helper()
	tree, err := hierarchy.Default()
	if err != nil {
		t.Fatal(err)
	}
	return placerOn(t, tree)
}

// The scale preset's world, asked for with a context already cancelled:
// context.Canceled, nothing placed (it took seconds).
func TestNewWorldContextCancelled(t *testing.T) {
	cfg, err := Preset("scale")
	if err != nil {
		t.Fatal(err)
	}
	cfg.Logger = quiet()
	if w, err := NewWorldContext(cancelled(), cfg); !errors.Is(err, context.Canceled) || w != nil {
		t.Errorf("NewWorldContext(cancelled, scale) = %v, %v; want nil, context.Canceled", w, err)
	}
	if rep, w, err := Run(cancelled(), cfg, nil); !errors.Is(err, context.Canceled) || rep != nil || w != nil {
		t.Errorf("Run(cancelled, scale) = %v, %v, %v; want context.Canceled and nothing else", rep, w, err)
	}
	var out bytes.Buffer
	if err := WriteWorldStats(cancelled(), cfg, &out); !errors.Is(err, context.Canceled) || out.Len() != 0 {
		t.Errorf("WriteWorldStats(cancelled, scale) = %v, wrote %q; want context.Canceled and nothing written", err, out.String())
	}
}

// placeHosts looks at ctx before it draws, and again every few thousand
// draws: cancelled, it returns context.Canceled having drawn nothing, or
// far less than the million hosts asked for need.
func TestPlaceHostsStopsWhenCancelled(t *testing.T) {
	p := defaultPlacer(t)
	const n = 1_000_000 // at least two values drawn per host
	for _, dist := range []string{HostsUniform, HostsZipf} {
		src := &countingSource{Source: rand.NewPCG(1, 2)}
		hosts, err := p.placeHosts(cancelled(), rand.New(src), n, dist, 0.1)
		if !errors.Is(err, context.Canceled) || hosts != nil {
			t.Fatalf("%s: placeHosts(cancelled) = %d hosts, %v; want none, context.Canceled", dist, len(hosts), err)
		}
		setup := src.n // the zipf ranking is drawn before the first host
		if dist == HostsUniform && setup != 0 {
			t.Errorf("%s: placeHosts(cancelled) drew %d values before returning, want none", dist, setup)
		}
		src = &countingSource{Source: rand.NewPCG(1, 2)}
		ctx := newCancelAfter(3)
		hosts, err = p.placeHosts(ctx, rand.New(src), n, dist, 0.1)
		if !errors.Is(err, context.Canceled) || hosts != nil {
			t.Fatalf("%s: placeHosts cancelled at its 4th look = %d hosts, %v; want none, context.Canceled", dist, len(hosts), err)
		}
		if ctx.looks.Load() != 4 || src.n-setup >= 100*ctxEvery {
			t.Errorf("%s: placeHosts cancelled at its 4th look at ctx looked %d times and drew %d values: want 4 looks, every %d draws",
				dist, ctx.looks.Load(), src.n-setup, ctxEvery)
		}
	}
}

// placeCrawlers looks at ctx while it draws its pool and while it spreads
// the crawlers over it: cancelled at any look, it returns context.Canceled;
// never cancelled, it places the same crawlers as before.
func TestPlaceCrawlersStopsWhenCancelled(t *testing.T) {
	p := defaultPlacer(t)
	src := &countingSource{Source: rand.NewPCG(1, 2)}
	if crawlers, err := p.placeCrawlers(cancelled(), rand.New(src), 10000); !errors.Is(err, context.Canceled) || crawlers != nil || src.n != 0 {
		t.Fatalf("placeCrawlers(cancelled, 10000) = %d crawlers, %v after %d values drawn; want none, context.Canceled, none drawn", len(crawlers), err, src.n)
	}
	const k = 300 // a 2000-candidate pool, then 300 rounds of D² sampling
	count := newCancelAfter(math.MaxInt64)
	want, err := p.placeCrawlers(count, rand.New(rand.NewPCG(1, 2)), k)
	if err != nil {
		t.Fatal(err)
	}
	looks := count.looks.Load()
	if looks < 3 {
		t.Fatalf("placeCrawlers(%d) looked at ctx %d times: want the pool and the sampling to look", k, looks)
	}
	for cut := int64(0); cut <= looks; cut++ {
		got, err := p.placeCrawlers(newCancelAfter(cut), rand.New(rand.NewPCG(1, 2)), k)
		switch {
		case cut < looks && (!errors.Is(err, context.Canceled) || got != nil):
			t.Errorf("placeCrawlers cancelled at look %d of %d = %d crawlers, %v; want none, context.Canceled", cut+1, looks, len(got), err)
		case cut == looks && (err != nil || !reflect.DeepEqual(got, want)):
			t.Errorf("placeCrawlers never cancelled: %v, or not the crawlers placed before", err)
		}
	}
}

// Every look NewWorldContext takes at ctx ends the placement with
// context.Canceled when ctx has ended; a world never cut short is
// NewWorld's. Formula and matrix latency (computeOptimal differs).
func TestNewWorldContextStopsAtEveryLook(t *testing.T) {
	hubs, err := world.HubMatrix(1, 0.08)
	if err != nil {
		t.Fatal(err)
	}
	for _, mx := range []*world.Matrix{nil, hubs} {
		cfg := small(7)
		cfg.Workers, cfg.Matrix = 2, mx
		want, err := NewWorld(cfg)
		if err != nil {
			t.Fatal(err)
		}
		count := newCancelAfter(math.MaxInt64)
		if _, err := NewWorldContext(count, cfg); err != nil {
			t.Fatal(err)
		}
		looks := count.looks.Load()
		if looks < 8 {
			t.Fatalf("matrix %v: NewWorldContext looked at ctx only %d times", mx != nil, looks)
		}
		for cut := int64(0); cut <= looks; cut++ {
			w, err := NewWorldContext(newCancelAfter(cut), cfg)
			if cut < looks {
				if !errors.Is(err, context.Canceled) || w != nil {
					t.Errorf("matrix %v: NewWorldContext cancelled at look %d of %d = %v, %v; want nil, context.Canceled", mx != nil, cut+1, looks, w, err)
				}
				continue
			}
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(w.Hosts, want.Hosts) || !reflect.DeepEqual(w.CrawlerE, want.CrawlerE) || !reflect.DeepEqual(w.Crawlers, want.Crawlers) ||
				!reflect.DeepEqual(w.Optimal, want.Optimal) || !reflect.DeepEqual(w.OptimalRTT, want.OptimalRTT) || !reflect.DeepEqual(w.floor, want.floor) {
				t.Errorf("matrix %v: the world NewWorldContext placed is not NewWorld's", mx != nil)
			}
		}
	}
}

// The country oracle's prior (seconds per country with --oracle-samples
// 16384) stops at every look at ctx, and so do the oracle's integrals.
func TestOracleCountryPriorsStopWhenCancelled(t *testing.T) {
	cfg := small(5)
	cfg.Workers = 2
	w, err := NewWorld(cfg)
	if err != nil {
		t.Fatal(err)
	}
	o := newOracleModel(w, oracleCells, oraclePost)
	count := newCancelAfter(math.MaxInt64)
	want, _, err := w.countryPriors(count, cfg, o, 32, 5000)
	if err != nil {
		t.Fatal(err)
	}
	looks := count.looks.Load()
	if looks < 10 {
		t.Fatalf("countryPriors looked at ctx only %d times", looks)
	}
	// the draws', the hosts' and the first prior's looks, then a sample of
	// the priors' (every one would take a minute)
	cuts := []int64{0, 1, 2, 3, 4, 5}
	for k := int64(1); k <= 8; k++ {
		cuts = append(cuts, looks*k/8-1)
	}
	for _, cut := range append(cuts, looks) {
		got, _, err := w.countryPriors(newCancelAfter(cut), cfg, o, 32, 5000)
		switch {
		case cut < looks && (!errors.Is(err, context.Canceled) || got != nil):
			t.Fatalf("countryPriors cancelled at look %d of %d = %d priors, %v; want none, context.Canceled", cut+1, looks, len(got), err)
		case cut == looks && (err != nil || len(got) != len(want) || *got[0].prior != *want[0].prior):
			t.Fatalf("countryPriors never cancelled: %v, or not the priors computed before", err)
		}
	}
	if rep, err := w.Oracle(cancelled(), cfg, OracleConfig{HostInfo: OracleHostCountry}); !errors.Is(err, context.Canceled) || rep != nil {
		t.Errorf("Oracle(cancelled, country) = %v, %v; want nil, context.Canceled", rep, err)
	}

	v := o.mixView(0, want[0].pi, want[0].d, nil)
	if p, err := o.priorChoiceCtx(cancelled(), &v); !errors.Is(err, context.Canceled) || p != nil || v.prior != nil {
		t.Errorf("priorChoiceCtx(cancelled) = %v, %v (cached %v); want nil, context.Canceled, nothing cached", p, err, v.prior)
	}
	probed := 0
	probe := func(c int32) (float64, bool) { probed++; return 10 + float64(c), true }
	if _, err := o.traceCtx(cancelled(), &v, probe, 0, len(w.Crawlers)); !errors.Is(err, context.Canceled) || probed != 0 {
		t.Errorf("traceCtx(cancelled) = %v after %d probes; want context.Canceled, none", err, probed)
	}
	count = newCancelAfter(math.MaxInt64)
	full, err := o.traceCtx(count, &v, probe, 0, len(w.Crawlers))
	if err != nil {
		t.Fatal(err)
	}
	looks = count.looks.Load()
	for cut := int64(0); cut < looks; cut++ {
		v := o.mixView(0, want[0].pi, want[0].d, nil)
		if _, err := o.traceCtx(newCancelAfter(cut), &v, probe, 0, len(w.Crawlers)); !errors.Is(err, context.Canceled) {
			t.Errorf("traceCtx cancelled at look %d of %d = %v; want context.Canceled", cut+1, looks, err)
		}
	}
	if looks < int64(2+len(full.order)) {
		t.Errorf("traceCtx looked at ctx %d times for %d probes: want the prior's looks and one before each probe", looks, len(full.order))
	}
}

// parallelCtx runs nothing once ctx has ended, and everything otherwise.
func TestParallelCtx(t *testing.T) {
	var ran atomic.Int64
	if err := parallelCtx(cancelled(), 4, 10000, 1, func(int) { ran.Add(1) }); !errors.Is(err, context.Canceled) || ran.Load() != 0 {
		t.Errorf("parallelCtx(cancelled) = %v after %d items; want context.Canceled, none", err, ran.Load())
	}
	seen := make([]atomic.Int32, 10000)
	if err := parallelCtx(context.Background(), 4, len(seen), 7, func(i int) { seen[i].Add(1) }); err != nil {
		t.Fatal(err)
	}
	for i := range seen {
		if seen[i].Load() != 1 {
			t.Fatalf("parallelCtx ran item %d %d times, want once", i, seen[i].Load())
		}
	}
}
