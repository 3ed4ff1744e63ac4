// Package emu owns the testnet's emulated world on the wire. A loopback
// testnet has no geography: every host is 127.x and every round trip is
// sub-millisecond, so location-aware delegation has nothing to go on. emu
// gives it one: the simulator places the testnet's crawlers and its
// synthetic web's hosts at real addresses of the embedded hierarchy (the
// same world as `micra sim` for the same seed), and each node applies the
// world's latency model to what it does on the wire.
//
// One Spec, written by `micra testnet up` to the testnet's directory, is
// read by every node with its own peer index (Place). The supervisor places
// the world (Build: the simulator's placement over the hierarchy and the
// geolocation table) and the Spec it writes carries that placement, so a
// node rebuilds the same world from the file alone (BuildPlaced), without
// the ≈ 20 MB geolocation table or a second placement:
//   - fetches: Place is the fetcher's Emulator (each connect and each
//     request/response waits the modelled round trip to the host) and its
//     Resolver (synthetic names resolve to their loopback addresses);
//   - delegation: Place maps a host's loopback address onto its place in
//     the world (node.AddrMapper), so subnets are the world's subnets, and
//     answers probes with the modelled round trip after waiting it
//     (overlay.Measurer);
//   - the node states the world's address, position and capacity as its own.
//
// Traffic between peers (DHT, gossip, hand-offs) is not delayed.
package emu

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"math/rand/v2"
	"net/netip"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/micra-crawler/micra/data/geo"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay"
	"github.com/micra-crawler/micra/testnet/sim"
	"github.com/micra-crawler/micra/testnet/world"
)

// Spec is the emulated world, as the testnet writes it and every node reads it.
type Spec struct {
	Seed     uint64 `json:"seed"`
	Crawlers int    `json:"crawlers"`
	// HostDist is how hosts spread over the address space: zipf (default:
	// clustered in hosting subnets, as real URL lists are) or uniform.
	HostDist string `json:"host_dist,omitempty"`
	// Latency is the model: formula (default), hubs, or matrix (Sites and
	// RTT name the measured matrix's files).
	Latency string `json:"latency,omitempty"`
	Sites   string `json:"sites,omitempty"`
	RTT     string `json:"rtt,omitempty"`
	// WireScale multiplies the modelled round trips between peers on
	// their connections (Place.WireRTT): 1 as modelled, 0 none.
	WireScale float64 `json:"wire_scale,omitempty"`
	// CapacityFactor sets each crawler's capacity to this many times its
	// even share of the hosts (the simulator's; 0: its default, 2).
	CapacityFactor float64 `json:"capacity_factor,omitempty"`
	// Hosts are the synthetic web's hosts: host i stands at the world's
	// host i.
	Hosts []Host `json:"hosts"`
	// Places are the world's crawlers as Build placed them (empty until
	// then); with the hosts' places they make the Spec placed (Placed).
	Places []CrawlerPlace `json:"crawler_places,omitempty"`
}

// Host is one synthetic web host: its name, the loopback address it is
// served on, and its place in the world (Build sets Addr, Lat, Lon,
// Nearest).
type Host struct {
	Name     string     `json:"name"`
	Loopback netip.Addr `json:"loopback"`
	Addr     netip.Addr `json:"addr,omitempty"`
	// Lat, Lon are the host's position in the latency model; Nearest is
	// its nearest crawler (lowest modelled mean RTT).
	Lat     float64 `json:"lat,omitempty"`
	Lon     float64 `json:"lon,omitempty"`
	Nearest int     `json:"nearest,omitempty"`
}

// CrawlerPlace is one crawler of the world: the simulator's crawler (what
// it states: id, address, position rounded to half a degree, capacity) and
// its exact position in the latency model.
type CrawlerPlace struct {
	ID       string     `json:"id"`
	Addr     netip.Addr `json:"addr"`
	Capacity int        `json:"capacity"`
	// StatedLat, StatedLon are the position the crawler states
	// (delegation.Crawler); Lat, Lon its exact position in the model.
	StatedLat float64 `json:"stated_lat"`
	StatedLon float64 `json:"stated_lon"`
	HasPos    bool    `json:"has_pos"`
	Lat       float64 `json:"lat"`
	Lon       float64 `json:"lon"`
}

// Load reads a Spec written by WriteFile.
func Load(path string) (Spec, error) {
	b, err := os.ReadFile(path)
	if err != nil {
		return Spec{}, err
	}
	var s Spec
	if err := json.Unmarshal(b, &s); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", path, err)
	}
	if err := s.validate(); err != nil {
		return Spec{}, fmt.Errorf("%s: %w", path, err)
	}
	// the matrix's files are named relative to the spec's directory
	for _, f := range []*string{&s.Sites, &s.RTT} {
		if *f != "" && !filepath.IsAbs(*f) {
			*f = filepath.Join(filepath.Dir(path), *f)
		}
	}
	return s, nil
}

// WriteFile writes s as indented JSON.
func (s Spec) WriteFile(path string) error {
	b, err := json.MarshalIndent(s, "", "  ")
	if err != nil {
		return err
	}
	return os.WriteFile(path, append(b, '\n'), 0o644)
}

func (s Spec) validate() error {
	var errs []error
	if s.Crawlers < 1 {
		errs = append(errs, fmt.Errorf("crawlers: %d, want at least 1", s.Crawlers))
	}
	if len(s.Hosts) == 0 {
		errs = append(errs, errors.New("hosts: none"))
	}
	switch s.Latency {
	case "", "formula", "hubs":
	case "matrix":
		if s.Sites == "" || s.RTT == "" {
			errs = append(errs, errors.New("latency matrix needs sites and rtt files"))
		}
	default:
		errs = append(errs, fmt.Errorf("latency %q: want formula, hubs or matrix", s.Latency))
	}
	switch s.HostDist {
	case "", sim.HostsZipf, sim.HostsUniform:
	default:
		errs = append(errs, fmt.Errorf("host_dist %q: want %s or %s", s.HostDist, sim.HostsZipf, sim.HostsUniform))
	}
	if s.Placed() {
		if len(s.Places) != s.Crawlers {
			errs = append(errs, fmt.Errorf("crawler_places: %d, want one per crawler (%d)", len(s.Places), s.Crawlers))
		}
		for i, c := range s.Places {
			if !c.Addr.IsValid() {
				errs = append(errs, fmt.Errorf("crawler_places[%d]: no address", i))
			}
		}
		for i, h := range s.Hosts {
			if !h.Addr.IsValid() || h.Nearest < 0 || h.Nearest >= len(s.Places) {
				errs = append(errs, fmt.Errorf("hosts[%d] (%s): no place in the world (addr %v, nearest %d)", i, h.Name, h.Addr, h.Nearest))
			}
		}
	}
	return errors.Join(errs...)
}

// Placed reports whether s carries the world's placement, as Build writes
// it: every crawler's place, every host's place and nearest crawler.
func (s Spec) Placed() bool { return len(s.Places) > 0 }

// SimConfig is the simulator's configuration for the same world: `micra
// sim` with it places the same crawlers and hosts and draws the same
// latencies (threshold and policies are the caller's).
func (s Spec) SimConfig(tree *hierarchy.Tree) (sim.Config, error) {
	cfg, _ := sim.Preset("paper")
	cfg.Seed, cfg.Crawlers, cfg.Hosts, cfg.Tree = s.Seed, s.Crawlers, len(s.Hosts), tree
	cfg.HostDist = s.HostDist
	if cfg.HostDist == "" {
		cfg.HostDist = sim.HostsZipf
	}
	cfg.Train = -1
	if s.CapacityFactor > 0 {
		cfg.CapacityFactor = s.CapacityFactor
	}
	var err error
	switch s.Latency {
	case "hubs":
		cfg.Matrix, err = world.HubMatrix(1, 0.08)
	case "matrix":
		cfg.Matrix, err = world.LoadMatrixFiles(s.Sites, s.RTT)
	}
	return cfg, err
}

// World is a Spec built: the places of its crawlers and hosts, the latency
// model between them, and the host tables.
type World struct {
	Spec Spec
	// Sim is the simulator's world Build placed (nil for BuildPlaced's).
	Sim *sim.World

	model    *world.Model
	crawlers []delegation.Crawler
	crawlerE []world.Endpoint
	hosts    []world.Endpoint
	optimal  []int32

	byLoopback map[netip.Addr]int
	byAddr     map[netip.Addr]int
	byName     map[string]int
}

// Build places the world (the simulator's NewWorld for SimConfig) and
// writes the placement into the World's Spec (Placed), so that the Spec
// WriteFile writes lets nodes rebuild the world with BuildPlaced.
func (s Spec) Build(ctx context.Context, tree *hierarchy.Tree) (*World, error) {
	s.Places, s.Hosts = nil, slices.Clone(s.Hosts)
	if err := s.validate(); err != nil {
		return nil, err
	}
	cfg, err := s.SimConfig(tree)
	if err != nil {
		return nil, err
	}
	sw, err := sim.NewWorldContext(ctx, cfg)
	if err != nil {
		return nil, err
	}
	w := &World{Spec: s, Sim: sw, model: sw.Model, crawlers: sw.Crawlers, crawlerE: sw.CrawlerE, hosts: sw.Hosts, optimal: sw.Optimal}
	for i, c := range sw.Crawlers {
		e := &sw.CrawlerE[i]
		w.Spec.Places = append(w.Spec.Places, CrawlerPlace{ID: string(c.ID), Addr: c.Addr, Capacity: c.Capacity,
			StatedLat: c.Lat, StatedLon: c.Lon, HasPos: c.HasPos, Lat: e.Loc.Lat, Lon: e.Loc.Lon})
	}
	for i := range w.Spec.Hosts {
		h := &w.Spec.Hosts[i]
		h.Addr, h.Lat, h.Lon, h.Nearest = sw.Hosts[i].Addr, sw.Hosts[i].Loc.Lat, sw.Hosts[i].Loc.Lon, int(sw.Optimal[i])
	}
	return w, w.index()
}

// BuildPlaced rebuilds the world a placed Spec (Placed) carries, without
// placing it again: no hierarchy and no geolocation table. The latency
// model is SimConfig's; every endpoint stands where Build placed it, so
// round trips, nearest crawlers and mapped addresses are Build's.
func (s Spec) BuildPlaced() (*World, error) {
	if !s.Placed() {
		return nil, errors.New("emu: the world is not placed (no crawler_places): build it with Build")
	}
	if err := s.validate(); err != nil {
		return nil, err
	}
	cfg, err := s.SimConfig(nil)
	if err != nil {
		return nil, err
	}
	// an empty geolocation table: the model places nothing itself, every
	// endpoint below is placed already
	cfg.Geo = &geo.Table{}
	m, err := sim.NewModel(cfg)
	if err != nil {
		return nil, err
	}
	w := &World{Spec: s, model: m}
	for _, c := range s.Places {
		w.crawlers = append(w.crawlers, delegation.Crawler{ID: delegation.CrawlerID(c.ID), Addr: c.Addr, Capacity: c.Capacity,
			Lat: c.StatedLat, Lon: c.StatedLon, HasPos: c.HasPos})
		w.crawlerE = append(w.crawlerE, m.EndpointAt(c.Addr, geo.Point{Lat: c.Lat, Lon: c.Lon}))
	}
	for _, h := range s.Hosts {
		w.hosts = append(w.hosts, m.EndpointAt(h.Addr, geo.Point{Lat: h.Lat, Lon: h.Lon}))
		w.optimal = append(w.optimal, int32(h.Nearest))
	}
	return w, w.index()
}

// index fills the host tables.
func (w *World) index() error {
	w.byLoopback, w.byAddr, w.byName = map[netip.Addr]int{}, map[netip.Addr]int{}, map[string]int{}
	for i, h := range w.Spec.Hosts {
		if _, dup := w.byLoopback[h.Loopback]; dup {
			return fmt.Errorf("emu: host %s: loopback address %v given twice (one address per host)", h.Name, h.Loopback)
		}
		w.byLoopback[h.Loopback] = i
		w.byAddr[w.hosts[i].Addr] = i
		w.byName[strings.ToLower(h.Name)] = i
	}
	return nil
}

// Crawler is peer i's place: its address, position and capacity.
func (w *World) Crawler(i int) delegation.Crawler { return w.crawlers[i] }

// HostOf returns the host index of a loopback or emulated address.
func (w *World) HostOf(a netip.Addr) (int, bool) {
	a = a.Unmap()
	if i, ok := w.byLoopback[a]; ok {
		return i, true
	}
	i, ok := w.byAddr[a]
	return i, ok
}

// HostNamed returns the index of a host name.
func (w *World) HostNamed(name string) (int, bool) {
	i, ok := w.byName[strings.ToLower(name)]
	return i, ok
}

// Optimal is the index of host i's nearest crawler (lowest mean RTT).
func (w *World) Optimal(i int) int { return int(w.optimal[i]) }

// MeanRTT is the modelled mean round trip between crawler c and host h.
func (w *World) MeanRTT(c, h int) time.Duration {
	return world.Duration(w.model.MeanRTT(&w.crawlerE[c], &w.hosts[h]))
}

// Place is peer self's view of the world: its fetches' network, its
// resolver, its address mapper and its prober.
type Place struct {
	w    *World
	self int
	mu   sync.Mutex
	rng  *rand.Rand
}

// At returns crawler self's place (0 ≤ self < Spec.Crawlers).
func (w *World) At(self int) (*Place, error) {
	if self < 0 || self >= len(w.crawlers) {
		return nil, fmt.Errorf("emu: peer %d: the world has crawlers 0…%d", self, len(w.crawlers)-1)
	}
	return &Place{w: w, self: self, rng: rand.New(rand.NewPCG(w.Spec.Seed, 0x656d75+uint64(self)))}, nil
}

// HostPlace is where the world places the host named name: its position
// in the latency model and the address its nearest crawler states (for
// the console's network page: each crawled host at its own place, and
// whether its nearest crawler crawls it).
func (p *Place) HostPlace(name string) (lat, lon float64, nearest netip.Addr, ok bool) {
	i, ok := p.w.HostNamed(name)
	if !ok {
		return 0, 0, netip.Addr{}, false
	}
	h := p.w.Spec.Hosts[i]
	return h.Lat, h.Lon, p.w.crawlers[p.w.Optimal(i)].Addr, true
}

// HostCount is the number of the world's hosts.
func (p *Place) HostCount() int { return len(p.w.Spec.Hosts) }

// Self is this place's crawler (address, position, capacity).
func (p *Place) Self() delegation.Crawler { return p.w.Crawler(p.self) }

// sample draws one round trip to host h (the model's jitter included).
func (p *Place) sample(h int) time.Duration {
	p.mu.Lock()
	defer p.mu.Unlock()
	return world.Duration(p.w.model.SampleRTT(&p.w.crawlerE[p.self], &p.w.hosts[h], p.rng))
}

// RTT implements fetch.Emulator: a sampled round trip to the host served
// at remote (0 for an address outside the world: other peers, the sink).
func (p *Place) RTT(remote netip.Addr) time.Duration {
	h, ok := p.w.HostOf(remote)
	if !ok {
		return 0
	}
	return p.sample(h)
}

// PeerLoopback is the loopback address testnet peer i listens on; the
// emulated wire (WireRTT) knows the peers by it. The synthetic web's hosts
// are served from 127.77/16.
func PeerLoopback(i int) netip.Addr {
	return netip.AddrFrom4([4]byte{127, 88, byte(i / 250), byte(i%250 + 1)})
}

// peerAt is the index of the peer listening at a (PeerLoopback).
func (w *World) peerAt(a netip.Addr) (int, bool) {
	a = a.Unmap()
	b := a.As4()
	if !a.Is4() || b[0] != 127 || b[1] != 88 || b[3] == 0 || b[3] > 250 {
		return 0, false
	}
	i := int(b[2])*250 + int(b[3]) - 1
	return i, i < len(w.crawlers)
}

// WireRTT implements overlay.Config.WireDelay: the modelled mean round trip
// between this place and the peer listening at remote, times the Spec's
// WireScale (0 for itself and for addresses that are not a peer's: the
// sink).
func (p *Place) WireRTT(remote netip.Addr) time.Duration {
	j, ok := p.w.peerAt(remote)
	if !ok || j == p.self {
		return 0
	}
	return time.Duration(p.w.Spec.WireScale * float64(world.Duration(p.w.model.MeanRTT(&p.w.crawlerE[p.self], &p.w.crawlerE[j]))))
}

// PeerRTT implements overlay.PeerRTTs: the modelled mean round trip
// between this place and the peer listening at remote, unscaled — the
// world the probes answer in, against which the overlay audits other
// peers' probe answers (WireRTT may be scaled down, so a request's round
// trip is not that world's).
func (p *Place) PeerRTT(remote netip.Addr) (time.Duration, bool) {
	j, ok := p.w.peerAt(remote)
	if !ok {
		return 0, false
	}
	if j == p.self {
		return 0, true
	}
	return world.Duration(p.w.model.MeanRTT(&p.w.crawlerE[p.self], &p.w.crawlerE[j])), true
}

var _ overlay.PeerRTTs = (*Place)(nil)

// MapAddr implements node.AddrMapper: a host's loopback address becomes its
// place in the world; other addresses stay as they are.
func (p *Place) MapAddr(a netip.Addr) netip.Addr {
	if i, ok := p.w.byLoopback[a.Unmap()]; ok {
		return p.w.hosts[i].Addr
	}
	return a
}

// Measure implements overlay.Measurer: the probe takes the modelled round
// trip to the target's place, and answers it.
func (p *Place) Measure(ctx context.Context, t overlay.ProbeTarget) (time.Duration, error) {
	h, ok := p.w.HostOf(t.Addr)
	if !ok {
		return 0, fmt.Errorf("emu: %v is no host of the emulated world", t.Addr)
	}
	d := p.sample(h)
	tm := time.NewTimer(d)
	defer tm.Stop()
	select {
	case <-tm.C:
		return d, nil
	case <-ctx.Done():
		return 0, ctx.Err()
	}
}

// Guard is the probe guard of a node in the world (overlay.Guard): it
// probes the world's hosts only. Probes never reach the wire (Measure
// answers them), so the guard only keeps peers from asking about
// anything else.
func (p *Place) Guard(a netip.Addr) error {
	if _, ok := p.w.HostOf(a); ok {
		return nil
	}
	return fmt.Errorf("%w: %v is no host of the emulated world", overlay.ErrGuard, a)
}

// LookupNetIP implements fetch.Resolver for the synthetic web's names.
func (p *Place) LookupNetIP(_ context.Context, _, host string) ([]netip.Addr, error) {
	if i, ok := p.w.HostNamed(strings.TrimSuffix(host, ".")); ok {
		return []netip.Addr{p.w.Spec.Hosts[i].Loopback}, nil
	}
	if a, err := netip.ParseAddr(host); err == nil {
		return []netip.Addr{a}, nil
	}
	return nil, fmt.Errorf("emu: no such host %q in the emulated world", host)
}
