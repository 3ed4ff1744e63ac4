package node

// The console's network page shows the crawl as the index sink holds it:
// every host with pages at the sink, drawn at its own place in its
// crawler's colour, and the figures of the paper's table. This node reads
// the sink's change log over /micra/subscribe/1 from where it stopped, and
// only while a network page asks for its view: with no page open it reads
// nothing. What it keeps is bounded (maxTallyHosts, maxTallyPages).

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"hash/fnv"
	"io"
	"net/http"
	"net/netip"
	"net/url"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/sink"
	"github.com/micra-crawler/micra/node/sink/pb"
)

// HostWorld places crawled hosts for the console's network page: a
// testnet's emulated world knows each host's own position and its nearest
// crawler in the latency model (testnet/emu's Place).
type HostWorld interface {
	// HostPlace is the position of the host named name and the address
	// its nearest crawler states; false for a host outside the world.
	HostPlace(name string) (lat, lon float64, nearest netip.Addr, ok bool)
	// HostCount is how many hosts the world has.
	HostCount() int
}

const (
	// the most records one view reads from the sink (the next view goes on)
	tallyReadPerView = 20000
	// how long one view may spend reading the sink
	tallyReadTimeout = 2 * time.Second
	// hosts and distinct pages the tally keeps; past them it counts the
	// records but no new host or page (Figures.Truncated)
	maxTallyHosts = 20000
	maxTallyPages = 200000
	// hosts resolved per view to place them at their country (no world)
	tallyResolvePerView = 32
	// hosts listed in one view, most pages first
	maxViewHosts = 4000
	// points of the probes-per-URL curve
	curvePoints = 100
)

// crawlTally is the sink's change log summed up per host.
type crawlTally struct {
	mu       sync.Mutex
	cursor   uint64 // the last sequence read
	records  int64
	overlap  int64
	pages    map[uint64]struct{} // distinct pages fetched (status 200), by URL hash
	hosts    map[string]*hostTally
	crawlers []string // crawler peer ids, indexed by hostTally.by
	crawler  map[string]int
	first    time.Time // first and last fetch
	last     time.Time
	trunc    bool
	sink     string // the sink read last
	err      string // why the last read failed
}

// hostTally is one host's pages at the sink.
type hostTally struct {
	name        string
	pages       int
	by          map[int]int // crawler → pages
	first, last time.Time

	placed   string // "world", "country" or "" (not placed)
	tried    bool   // its place was looked for
	lat, lon float64
	nearest  netip.Addr // the world's nearest crawler
}

// streamRecord is what the tally reads of a sink record.
type streamRecord struct {
	URL       string    `json:"url"`
	Status    int       `json:"status"`
	Crawler   string    `json:"crawler"`
	FetchedAt time.Time `json:"fetched_at"`
	Overlap   bool      `json:"overlap"`
}

// add counts one record of the change log.
func (t *crawlTally) add(seq uint64, b []byte) error {
	var r streamRecord
	if err := json.Unmarshal(b, &r); err != nil {
		return fmt.Errorf("sink record %d: %w", seq, err)
	}
	t.cursor = seq
	t.records++
	if r.Overlap {
		t.overlap++
	}
	if r.Status != http.StatusOK {
		return nil
	}
	u, err := url.Parse(r.URL)
	if err != nil || u.Hostname() == "" {
		return nil
	}
	if t.first.IsZero() || r.FetchedAt.Before(t.first) {
		t.first = r.FetchedAt
	}
	if r.FetchedAt.After(t.last) {
		t.last = r.FetchedAt
	}
	hf := fnv.New64a()
	hf.Write([]byte(r.URL))
	id := hf.Sum64()
	if _, seen := t.pages[id]; !seen {
		if len(t.pages) >= maxTallyPages {
			t.trunc = true
			return nil
		}
		t.pages[id] = struct{}{}
	} else {
		return nil // a revisit, or a second crawler's record: the page counts once
	}
	name := strings.ToLower(u.Hostname())
	h := t.hosts[name]
	if h == nil {
		if len(t.hosts) >= maxTallyHosts {
			t.trunc = true
			return nil
		}
		h = &hostTally{name: name, by: map[int]int{}, first: r.FetchedAt}
		t.hosts[name] = h
	}
	c, ok := t.crawler[r.Crawler]
	if !ok {
		c = len(t.crawlers)
		t.crawlers = append(t.crawlers, r.Crawler)
		t.crawler[r.Crawler] = c
	}
	h.pages++
	h.by[c]++
	if r.FetchedAt.Before(h.first) {
		h.first = r.FetchedAt
	}
	if r.FetchedAt.After(h.last) {
		h.last = r.FetchedAt
	}
	return nil
}

// owner is the crawler that fetched most of h's pages (the lower index on
// a tie, i.e. the one seen first), as `micra testnet run` scores a host.
func (t *crawlTally) owner(h *hostTally) string {
	c, most := -1, 0
	for ci, n := range h.by {
		if n > most || n == most && ci < c {
			c, most = ci, n
		}
	}
	if c < 0 {
		return ""
	}
	return t.crawlers[c]
}

// read goes on reading the sink's change log after the cursor: at most
// tallyReadPerView records, within tallyReadTimeout.
func (n *Node) readSink(ctx context.Context, t *crawlTally) {
	if n.finder == nil {
		t.err = "this node writes its carriers to files: no index sink to read the crawl from"
		if n.eng == nil {
			t.err = "this node has no crawler role and no index sink to read the crawl from"
		}
		return
	}
	ai, ok := n.finder.target()
	if !ok {
		t.err = "no index sink announced on the network yet"
		return
	}
	t.sink = ai.ID.String()
	ctx, cancel := context.WithTimeout(ctx, tallyReadTimeout)
	defer cancel()
	sub, err := sink.Subscribe(ctx, n.peer.Host(), ai, &pb.SubscribeRequest{After: t.cursor, Limit: tallyReadPerView}, tallyReadTimeout)
	if err != nil {
		t.err = err.Error()
		return
	}
	defer sub.Close()
	for {
		seq, b, err := sub.Next(tallyReadTimeout)
		if errors.Is(err, io.EOF) {
			t.err = ""
			return
		}
		if err != nil {
			if ctx.Err() != nil {
				t.err = "" // the view's time is up: the next one reads on
				return
			}
			t.err = err.Error()
			return
		}
		if err := t.add(seq, b); err != nil {
			t.err = err.Error()
			return
		}
	}
}

// place finds where to draw each host not placed yet: the world's place
// (a testnet), else the centroid of its address's registry country (at
// most tallyResolvePerView look-ups through the crawler's resolver, whose
// cache holds the hosts it routed).
func (n *Node) placeHosts(ctx context.Context, t *crawlTally) {
	looked := 0
	for _, h := range t.hosts {
		if h.tried {
			continue
		}
		if w := n.cfg.World; w != nil {
			h.tried = true
			if lat, lon, near, ok := w.HostPlace(h.name); ok {
				h.placed, h.lat, h.lon, h.nearest = "world", lat, lon, near
			}
			continue
		}
		if n.router == nil || looked >= tallyResolvePerView {
			continue
		}
		looked++
		h.tried = true
		lctx, cancel := context.WithTimeout(ctx, time.Second)
		ip, err := n.router.lookup(lctx, h.name)
		cancel()
		if err != nil {
			continue
		}
		s := n.tree.SmallestNonUnary(n.router.mapAddr(ip.Unmap()))
		if s == hierarchy.None || int(s) >= n.tree.Len() {
			continue
		}
		if lat, lon, ok := delegation.CountryCentroid(n.tree.Node(s).Country); ok {
			h.placed, h.lat, h.lon = "country", lat, lon
		}
	}
}

// HostInfo is one crawled host on the network page.
type HostInfo struct {
	Host  string `json:"host"`
	Pages int    `json:"pages"` // distinct pages at the sink
	// Crawler fetched most of its pages (the sink's records say who);
	// Crawlers is how many crawlers delivered its pages.
	Crawler  string `json:"crawler"`
	Crawlers int    `json:"crawlers"`
	// Position is where it is drawn; Placed says from what: "world" (the
	// testnet's emulated world: the host's own place) or "country" (the
	// centroid of its address's registry country); null: not placed.
	Position *Position `json:"position,omitempty"`
	Placed   string    `json:"placed,omitempty"`
	// Nearest is its nearest crawler in the world's latency model (peer
	// id; "" when no running crawler holds that place), AtNearest whether
	// Crawler is it: only in a testnet.
	Nearest   string    `json:"nearest,omitempty"`
	AtNearest *bool     `json:"at_nearest,omitempty"`
	First     time.Time `json:"first_fetch"`
}

// NetworkFigures are the live figures of the paper's table, from the
// sink's change log (read so far) and the delegation records this node
// holds.
type NetworkFigures struct {
	// Sink is the index sink read (peer id); Error why the last read
	// failed (the figures are then those read before).
	Sink  string `json:"sink,omitempty"`
	Error string `json:"error,omitempty"`
	// Cursor is the last record read, Records how many were read.
	Cursor  uint64 `json:"cursor"`
	Records int64  `json:"records"`
	Pages   int    `json:"pages"` // distinct pages fetched (status 200)
	Hosts   int    `json:"hosts"` // hosts with a page at the sink
	// WorldHosts is the emulated world's hosts (a testnet; 0 otherwise),
	// CoveragePct the share of them with a page at the sink.
	WorldHosts  int      `json:"world_hosts,omitempty"`
	CoveragePct *float64 `json:"coverage_pct,omitempty"`
	// Overlap counts records of a page another crawler delivered before
	// (the sink's flag); OverlapPct is per distinct page.
	Overlap    int64   `json:"overlap"`
	OverlapPct float64 `json:"overlap_pct"`
	// Judged is the hosts whose nearest crawler the world knows,
	// AtNearest those crawled by it, OptimalPct their share (a testnet).
	Judged     int      `json:"judged"`
	AtNearest  int      `json:"at_nearest"`
	OptimalPct *float64 `json:"optimal_pct,omitempty"`
	// Probes is the probes the delegation records held were decided by;
	// ProbesPerURL divides them by the hosts crawled (as `micra testnet
	// run`'s probes per host, the simulator's probes per URL).
	Probes       int      `json:"probes"`
	ProbesPerURL *float64 `json:"probes_per_url,omitempty"`
	// MakespanS runs from the first page fetched to the last.
	MakespanS  float64    `json:"makespan_s"`
	FirstFetch *time.Time `json:"first_fetch,omitempty"`
	LastFetch  *time.Time `json:"last_fetch,omitempty"`
	// Truncated: the tally reached its bound of hosts or pages; later ones
	// are not counted.
	Truncated bool `json:"truncated,omitempty"`
}

// CurvePoint is one point of probes per URL as the hierarchy trains: by
// the time the Hosts-th host had its first page fetched, the records held
// had been decided with Probes probes.
type CurvePoint struct {
	At     time.Time `json:"at"`
	Hosts  int       `json:"hosts"`
	Probes int       `json:"probes"`
	PerURL float64   `json:"per_url"` // Probes / Hosts
	// Window is the probes per host since the point before.
	Window float64 `json:"window"`
}

// crawlView reads what the sink has new and answers the hosts, the
// figures and the curve. peers maps a crawler address to its peer id.
func (n *Node) crawlView(ctx context.Context, peers []PeerInfo) ([]HostInfo, NetworkFigures, []CurvePoint) {
	t := &n.tally
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.hosts == nil {
		t.hosts, t.pages, t.crawler = map[string]*hostTally{}, map[uint64]struct{}{}, map[string]int{}
	}
	n.readSink(ctx, t)
	n.placeHosts(ctx, t)

	byAddr := map[netip.Addr]string{}
	for _, p := range peers {
		if a, err := netip.ParseAddr(p.CrawlerAddr); err == nil && p.Capacity > 0 {
			byAddr[a] = p.PeerID
		}
	}
	f := NetworkFigures{Sink: t.sink, Error: t.err, Cursor: t.cursor, Records: t.records, Pages: len(t.pages),
		Hosts: len(t.hosts), Overlap: t.overlap, Truncated: t.trunc}
	if f.Pages > 0 {
		f.OverlapPct = 100 * float64(t.overlap) / float64(f.Pages)
	}
	if !t.first.IsZero() {
		first, last := t.first, t.last
		f.FirstFetch, f.LastFetch, f.MakespanS = &first, &last, last.Sub(first).Seconds()
	}
	if w := n.cfg.World; w != nil {
		f.WorldHosts = w.HostCount()
		if f.WorldHosts > 0 {
			pct := 100 * float64(f.Hosts) / float64(f.WorldHosts)
			f.CoveragePct = &pct
		}
	}
	hosts := make([]HostInfo, 0, len(t.hosts))
	for _, h := range t.hosts {
		hi := HostInfo{Host: h.name, Pages: h.pages, Crawler: t.owner(h), Crawlers: len(h.by), Placed: h.placed, First: h.first}
		if h.placed != "" {
			hi.Position = &Position{Lat: h.lat, Lon: h.lon}
		}
		if h.nearest.IsValid() {
			hi.Nearest = byAddr[h.nearest]
			at := hi.Nearest != "" && hi.Nearest == hi.Crawler
			hi.AtNearest = &at
			f.Judged++
			if at {
				f.AtNearest++
			}
		}
		hosts = append(hosts, hi)
	}
	if f.Judged > 0 {
		pct := 100 * float64(f.AtNearest) / float64(f.Judged)
		f.OptimalPct = &pct
	}
	curve := probeCurve(n.peer.Directory().Records(), hosts, &f)
	// most pages first, then by name: a stable order for the page
	slices.SortFunc(hosts, func(a, b HostInfo) int {
		if a.Pages != b.Pages {
			return b.Pages - a.Pages
		}
		return strings.Compare(a.Host, b.Host)
	})
	if len(hosts) > maxViewHosts {
		hosts = hosts[:maxViewHosts]
	}
	return hosts, f, curve
}

// probeCurve counts the records' probes into f and returns probes per
// URL as the hosts were first crawled: up to curvePoints points along the
// hosts' first fetches, and a last one with every probe and host.
func probeCurve(recs []delegation.Record, hosts []HostInfo, f *NetworkFigures) []CurvePoint {
	type decision struct {
		at     time.Time
		probes int
	}
	ds := make([]decision, 0, len(recs))
	for _, r := range recs {
		ds = append(ds, decision{r.At, len(r.Probes)})
		f.Probes += len(r.Probes)
	}
	if f.Hosts > 0 {
		per := float64(f.Probes) / float64(f.Hosts)
		f.ProbesPerURL = &per
	}
	if len(hosts) == 0 {
		return []CurvePoint{}
	}
	slices.SortFunc(ds, func(a, b decision) int { return a.at.Compare(b.at) })
	firsts := make([]time.Time, len(hosts))
	for i, h := range hosts {
		firsts[i] = h.First
	}
	slices.SortFunc(firsts, func(a, b time.Time) int { return a.Compare(b) })
	out := make([]CurvePoint, 0, curvePoints+1)
	di, probes, prevHosts, prevProbes := 0, 0, 0, 0
	step := max(1, (len(firsts)+curvePoints-1)/curvePoints)
	point := func(at time.Time, k int) {
		p := CurvePoint{At: at, Hosts: k, Probes: probes, PerURL: float64(probes) / float64(k)}
		if k > prevHosts {
			p.Window = float64(probes-prevProbes) / float64(k-prevHosts)
		}
		out = append(out, p)
		prevHosts, prevProbes = k, probes
	}
	for k := step; k <= len(firsts); k += step {
		at := firsts[k-1]
		for di < len(ds) && !ds[di].at.After(at) {
			probes += ds[di].probes
			di++
		}
		point(at, k)
	}
	if prevHosts < len(firsts) || di < len(ds) {
		for ; di < len(ds); di++ {
			probes += ds[di].probes
		}
		at := firsts[len(firsts)-1]
		if len(ds) > 0 && ds[len(ds)-1].at.After(at) {
			at = ds[len(ds)-1].at
		}
		point(at, len(firsts))
	}
	return out
}
