package synthweb

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"

	"github.com/micra-crawler/micra/crawl/fetch"
)

// TestRealisticShape: with the realistic knobs, page sizes vary, links to
// other hosts concentrate on a few popular hosts (heavy-tailed in-degree),
// and a flaky page fails once with 503 and Retry-After, then serves.
func TestRealisticShape(t *testing.T) {
	w := start(t, Config{Hosts: 60, PagesPerHost: 20, PageBytesSigma: 0.8, PopularityZipf: 1.3, FlakyRate: 0.2,
		SlowHostRate: 0.25, SlowHostDelay: 1})
	plain := start(t, Config{Hosts: 60, PagesPerHost: 20})

	var sizes []int
	for p := range 20 {
		sizes = append(sizes, len(w.page(3, p, 0)))
	}
	slices.Sort(sizes)
	if sizes[len(sizes)-1] < 2*sizes[0] {
		t.Errorf("page sizes %v: want a spread (largest at least twice the smallest)", sizes)
	}

	inDegree := func(w *Web) []int {
		deg := make([]int, w.cfg.Hosts)
		for h := range w.cfg.Hosts {
			for p := range w.cfg.PagesPerHost {
				for _, l := range w.links(h, p) {
					if rest, ok := strings.CutPrefix(l.href, "http://"); ok {
						name, _, _ := strings.Cut(rest, ":")
						if i := w.HostIndex(name); i >= 0 && i != h {
							deg[i]++
						}
					}
				}
			}
		}
		slices.Sort(deg)
		return deg
	}
	top := func(d []int) float64 { // the busiest host's share over the mean
		sum := 0
		for _, v := range d {
			sum += v
		}
		return float64(d[len(d)-1]) * float64(len(d)) / float64(max(1, sum))
	}
	zipf, uniform := top(inDegree(w)), top(inDegree(plain))
	if zipf < 2*uniform {
		t.Errorf("most-linked host at %.1f× the mean in-degree, uniform targets %.1f×: want a heavy tail", zipf, uniform)
	}

	slow := 0
	for h := range 60 {
		if w.slow(h) {
			slow++
		}
	}
	if slow < 5 || slow > 25 {
		t.Errorf("%d of 60 hosts slow at rate 0.25", slow)
	}

	// a flaky page: 503 once, then the page
	h, p := -1, -1
	for hh := 0; hh < 60 && h < 0; hh++ {
		for pp := 1; pp < 20; pp++ {
			if w.flaky(hh, pp) {
				h, p = hh, pp
				break
			}
		}
	}
	if h < 0 {
		t.Fatal("no flaky page at rate 0.2")
	}
	f := fetcher(t, w)
	_, err := f.Fetch(context.Background(), fetch.Request{URL: w.PageURL(h, p)})
	if err == nil {
		t.Fatal("a flaky page's first fetch succeeded")
	}
	resp, err := f.Fetch(context.Background(), fetch.Request{URL: w.PageURL(h, p)})
	if err != nil || resp.Status != http.StatusOK {
		t.Fatalf("second fetch of a flaky page: %v, %v", resp, err)
	}
	if st := w.Stats(); st.Unavailable != 1 || st.UniquePages != 1 {
		t.Fatalf("stats %+v: want one 503 and one page", st)
	}
}
