package node

// The node's local control API: HTTP/JSON on a loopback address, found by
// the CLI through DataDir/api (after Kubo's $IPFS_PATH/api). docs/node.md,
// "Control API", lists the endpoints and their fields.

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/pprof"
	"net/netip"
	"os"
	"path/filepath"
	"strings"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	ma "github.com/multiformats/go-multiaddr"
	"github.com/prometheus/client_golang/prometheus/promhttp"

	"github.com/micra-crawler/micra/crawl"
	"github.com/micra-crawler/micra/crawl/pack"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/node/console"
	"github.com/micra-crawler/micra/overlay"
)

// ControlConfig configures the local control API (embedded in Config).
type ControlConfig struct {
	// ControlAddr is the control API's host:port, on loopback ("" means
	// DefaultControlAddr: a free port, named in DataDir/api); "off"
	// disables the API.
	ControlAddr string
	// ControlAllowRemote allows a ControlAddr that is not loopback. The API
	// has no authentication: whoever reaches it can add seeds and read
	// everything the node knows (prefer an SSH tunnel).
	ControlAllowRemote bool
	// Pprof serves net/http/pprof under /debug/pprof/ on the control API.
	Pprof bool
}

// DefaultControlAddr is where the control API listens unless told.
const DefaultControlAddr = "127.0.0.1:0"

// APIFile is the file in the data directory that holds a running node's
// control API URL (written on start, 0600, removed on a clean stop).
const APIFile = "api"

// controlAddr is the address to listen on, "" when the API is off.
func (c ControlConfig) controlAddr() string {
	switch c.ControlAddr {
	case "":
		return DefaultControlAddr
	case "off":
		return ""
	}
	return c.ControlAddr
}

// validateControl refuses an address that is not host:port, and one that
// is not loopback unless ControlAllowRemote says so.
func (c ControlConfig) validateControl() error {
	addr := c.controlAddr()
	if addr == "" {
		return nil
	}
	host, port, err := net.SplitHostPort(addr)
	if err != nil || port == "" {
		return fmt.Errorf("node: control API address %q: want host:port, e.g. 127.0.0.1:5001 (or \"off\")", c.ControlAddr)
	}
	if c.ControlAllowRemote || isLoopbackHost(host) {
		return nil
	}
	return fmt.Errorf("node: control API address %q is not loopback: the API has no authentication, so anyone who "+
		"reaches it controls the node; listen on 127.0.0.1 or [::1] (reach it from elsewhere through an SSH tunnel), "+
		"or allow it explicitly (ControlAllowRemote)", c.ControlAddr)
}

// isLoopbackHost: "localhost" or a loopback IP literal.
func isLoopbackHost(host string) bool {
	if strings.EqualFold(host, "localhost") {
		return true
	}
	a, err := netip.ParseAddr(strings.Trim(host, "[]"))
	return err == nil && a.Unmap().IsLoopback()
}

// control is the running control server.
type control struct {
	srv    *http.Server
	url    string
	file   string
	cancel context.CancelFunc
	done   chan struct{}
}

// startControl serves the control API (nil when it is off) and writes
// DataDir/api.
func (n *Node) startControl() (*control, error) {
	addr := n.cfg.controlAddr()
	if addr == "" {
		return nil, nil
	}
	if err := n.cfg.validateControl(); err != nil {
		return nil, err
	}
	ln, err := net.Listen("tcp", addr)
	if err != nil {
		return nil, fmt.Errorf("node: control API listener: %w", err)
	}
	base, cancel := context.WithCancel(context.Background())
	c := &control{
		url:    "http://" + ln.Addr().String(),
		file:   filepath.Join(n.cfg.DataDir, APIFile),
		cancel: cancel,
		done:   make(chan struct{}),
	}
	c.srv = &http.Server{
		Handler:           n.controlHandler(),
		ReadHeaderTimeout: 5 * time.Second,
		BaseContext:       func(net.Listener) context.Context { return base },
	}
	if err := overlay.WriteFileAtomic(c.file, []byte(c.url+"\n"), 0o600); err != nil {
		cancel()
		ln.Close()
		return nil, fmt.Errorf("node: control API: %w", err)
	}
	go func() {
		defer close(c.done)
		_ = c.srv.Serve(ln)
	}()
	n.ctlURL.Store(c.url)
	n.log.Info("control api", "url", c.url, "file", c.file)
	return c, nil
}

// stop removes the api file, then ends the server: requests in flight see
// their context end and have a few seconds to answer.
func (n *Node) stopControl(c *control) {
	n.ctlURL.Store("")
	if err := os.Remove(c.file); err != nil && !errors.Is(err, os.ErrNotExist) {
		n.log.Warn("control api: remove api file", "err", err)
	}
	c.cancel()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	if err := c.srv.Shutdown(ctx); err != nil {
		c.srv.Close()
	}
	<-c.done
}

// ControlURL is the control API's base URL while Run serves it, else "".
func (n *Node) ControlURL() string {
	s, _ := n.ctlURL.Load().(string)
	return s
}

// controlHandler routes the control API behind its guards.
func (n *Node) controlHandler() http.Handler {
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/id", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.IDInfo()) })
	mux.HandleFunc("GET /v1/status", func(w http.ResponseWriter, r *http.Request) { writeJSON(w, http.StatusOK, n.Status()) })
	mux.HandleFunc("GET /v1/peers", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, PeersInfo{Peers: n.Peers()})
	})
	mux.HandleFunc("GET /v1/owners", n.serveOwners)
	mux.HandleFunc("GET /v1/calibration", func(w http.ResponseWriter, r *http.Request) {
		writeJSON(w, http.StatusOK, map[string]any{"events": n.Calibration()})
	})
	mux.HandleFunc("POST /v1/seeds", n.serveSeeds)
	mux.HandleFunc("POST /v1/pause", n.servePause)
	mux.HandleFunc("POST /v1/resume", n.serveResume)
	if n.partition != nil {
		mux.HandleFunc("GET /v1/testnet/partition", n.servePartition)
		mux.HandleFunc("POST /v1/testnet/partition", n.servePartition)
	}
	mux.Handle("GET /metrics", promhttp.HandlerFor(n.reg, promhttp.HandlerOpts{}))
	// the web console (docs/console.md), behind the same guards
	mux.Handle("GET "+console.Prefix, n.consoleHandler())
	if n.cfg.Pprof {
		mux.HandleFunc("/debug/pprof/", pprof.Index)
		mux.HandleFunc("/debug/pprof/cmdline", pprof.Cmdline)
		mux.HandleFunc("/debug/pprof/profile", pprof.Profile)
		mux.HandleFunc("/debug/pprof/symbol", pprof.Symbol)
		mux.HandleFunc("/debug/pprof/trace", pprof.Trace)
	}
	return guardLocal(mux, n.cfg.ControlAllowRemote)
}

// guardLocal refuses what a web page in the operator's browser could send
// (as Kubo's API does): a request whose Host is not a loopback host (DNS
// rebinding: a name the attacker controls, resolved to 127.0.0.1) and a
// cross-origin request that changes state (CSRF: a POST whose Origin, or
// Sec-Fetch-Site, names another origin). A remote API (allowRemote) also
// accepts IP literals as Host; names still only "localhost".
func guardLocal(h http.Handler, allowRemote bool) http.Handler {
	cop := http.NewCrossOriginProtection()
	cop.SetDenyHandler(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		writeError(w, http.StatusForbidden, fmt.Errorf("cross-origin request refused (origin %q)", r.Header.Get("Origin")))
	}))
	h = cop.Handler(h)
	return http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		host := r.Host
		if hh, _, err := net.SplitHostPort(host); err == nil {
			host = hh
		}
		ok := isLoopbackHost(host)
		if !ok && allowRemote {
			_, err := netip.ParseAddr(strings.Trim(host, "[]"))
			ok = err == nil
		}
		if !ok {
			writeError(w, http.StatusForbidden, fmt.Errorf("host %q refused: the control API answers loopback hosts only", r.Host))
			return
		}
		h.ServeHTTP(w, r)
	})
}

func writeJSON(w http.ResponseWriter, code int, v any) {
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Cache-Control", "no-store")
	w.WriteHeader(code)
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	_ = enc.Encode(v)
}

// apiError is every error's body.
type apiError struct {
	Error string `json:"error"`
}

func writeError(w http.ResponseWriter, code int, err error) {
	writeJSON(w, code, apiError{Error: err.Error()})
}

// IDInfo is GET /v1/id: who this node is.
type IDInfo struct {
	PeerID string `json:"peer_id"`
	// Addrs are the listen multiaddrs with /p2p/<peer id>, for other
	// nodes' bootstrap.
	Addrs []string `json:"addrs"`
	// Role is "crawler" (crawls and accepts hand-offs) or "peer" (overlay
	// only).
	Role        string `json:"role"`
	CrawlerAddr string `json:"crawler_addr,omitempty"`
	Capacity    int    `json:"capacity"` // pages per day; 0 for a peer
	Policy      string `json:"policy"`
	// Hierarchy is the snapshot id (hex) of the IP hierarchy the node
	// delegates with; peers must share it.
	Hierarchy string    `json:"hierarchy"`
	Sink      string    `json:"sink,omitempty"` // the index sink's multiaddr, when configured
	DataDir   string    `json:"data_dir"`
	Version   BuildInfo `json:"version"`
}

// IDInfo describes this node (GET /v1/id).
func (n *Node) IDInfo() IDInfo {
	id := n.peer.ID()
	v := IDInfo{PeerID: id.String(), Addrs: p2pAddrs(n.peer.Host().Addrs(), id), Role: "peer",
		Capacity: n.cfg.Overlay.Capacity, Policy: n.cfg.Policy, Hierarchy: n.tree.ID().String(),
		Sink: n.cfg.Sink, DataDir: n.cfg.DataDir, Version: Build()}
	if n.cfg.Crawler {
		v.Role = "crawler"
	}
	if a := n.cfg.Overlay.CrawlerAddr; a.IsValid() {
		v.CrawlerAddr = a.String()
	}
	return v
}

func p2pAddrs(addrs []ma.Multiaddr, id peer.ID) []string {
	out := make([]string, 0, len(addrs))
	for _, a := range addrs {
		out = append(out, a.String()+"/p2p/"+id.String())
	}
	return out
}

// StatusInfo is GET /v1/status: what the node is doing. Frontier, Crawl,
// Outbox and Sink are null without the crawler role.
type StatusInfo struct {
	PeerID string    `json:"peer_id"`
	Since  time.Time `json:"since"` // when Run started
	// CaughtUp: nothing is due in the frontier (no URL queued or in
	// flight, no revisit due), the outbox is empty (every record sealed
	// and every carrier acknowledged) and so is the hand-off spool (every
	// URL for another owner acknowledged). It turns false again when
	// links, hand-offs or revisits arrive.
	CaughtUp bool `json:"caught_up"`
	// Paused: the crawl starts no new fetch until resumed (POST
	// /v1/pause, /v1/resume); PausedSince is when it was paused.
	Paused         bool       `json:"paused"`
	PausedSince    *time.Time `json:"paused_since,omitempty"`
	PeersConnected int        `json:"peers_connected"` // libp2p connections (members, the sink, DHT peers)
	MembersLive    int        `json:"members_live"`    // live overlay members, this node included
	CrawlersLive   int        `json:"crawlers_live"`   // live members that crawl
	SubnetsOwned   int        `json:"subnets_owned"`   // cached records naming this node as owner
	BlocksOwned    int        `json:"blocks_owned"`    // block delegations to this node in cached records
	// Network is the network's admission; null: an open network.
	Network *NetworkStatus `json:"network"`

	// Capacity is the crawler's capacity against its load; Windows when
	// it may work (null without the crawler role).
	Capacity *CapacityStatus `json:"capacity"`
	Windows  *WindowsStatus  `json:"windows"`

	Frontier *FrontierStatus `json:"frontier"`
	Crawl    *CrawlStatus    `json:"crawl"`
	Outbox   *OutboxStatus   `json:"outbox"`
	Handoff  HandoffStatus   `json:"handoff"`
	Sink     *SinkStatus     `json:"sink"`
	// Release: signed releases, and whether a verified newer one is
	// available (docs/releases.md).
	Release *ReleaseStatus `json:"release"`
}

// NetworkStatus is this node's membership of a network with admission.
type NetworkStatus struct {
	ID                 string    `json:"id"` // the network key's id
	CertificateExpires time.Time `json:"certificate_expires"`
	Revocations        uint64    `json:"revocations"` // sequence number of the revocation list held (0: none)
}

// CapacityStatus is a crawler's capacity in use.
type CapacityStatus struct {
	PagesPerDay int `json:"pages_per_day"` // the capacity it states
	// Load is the pages it took on over the last day (URLs its frontier
	// admitted: seeds, its own links, hand-offs), what its heartbeats
	// advertise; LoadPct is Load over PagesPerDay. Reported once the crawl
	// runs (null before).
	Load    *int64   `json:"load,omitempty"`
	LoadPct *float64 `json:"load_pct,omitempty"`
}

// WindowsStatus is when the crawler may fetch and probe (the windows
// setting): every day, all day, when it has no spans.
type WindowsStatus struct {
	Spans    []string `json:"spans"`    // as the setting reads them, e.g. "Mon,Tue 22:00-06:00"
	Location string   `json:"location"` // the time zone they are in
	Open     bool     `json:"open"`     // a window is open now
	// NextOpen is when the next window opens (while closed), NextClose
	// when the open one closes (while open, unless the windows never
	// close); minute resolution.
	NextOpen  *time.Time `json:"next_open,omitempty"`
	NextClose *time.Time `json:"next_close,omitempty"`
}

// windowsStatus describes ws at now.
func windowsStatus(ws crawl.Windows, now time.Time) *WindowsStatus {
	w := &WindowsStatus{Spans: []string{}, Location: "UTC", Open: ws.Open(now)}
	if ws.Loc != nil {
		w.Location = ws.Loc.String()
	}
	for _, s := range ws.Spans {
		w.Spans = append(w.Spans, s.String())
	}
	if !w.Open {
		t := ws.NextOpen(now)
		w.NextOpen = &t
	} else if t, ok := ws.NextClose(now); ok {
		w.NextClose = &t
	}
	return w
}

// FrontierStatus is the crawl frontier's state.
type FrontierStatus struct {
	Queued      int64 `json:"queued"`       // URLs waiting in host queues, in flight included
	ActiveHosts int   `json:"active_hosts"` // hosts held by workers
	ReadyHosts  int64 `json:"ready_hosts"`  // hosts waiting for a worker
	Seen        int64 `json:"seen"`         // URLs ever admitted (approximate after a restart)
	Scheduled   int64 `json:"revisits_scheduled"`
	// RevisitsDue: a scheduled revisit's time has come (it is queued at
	// the monitor's next pass).
	RevisitsDue bool       `json:"revisits_due"`
	NextRevisit *time.Time `json:"next_revisit,omitempty"`
	Refused     int64      `json:"refused"` // URLs held back: their address may not be fetched by this configuration
}

// CrawlStatus counts the crawl's work since the node opened.
type CrawlStatus struct {
	Requests       int64            `json:"requests"`      // HTTP fetch attempts
	PagesFetched   int64            `json:"pages_fetched"` // pages with a body
	NotModified    int64            `json:"not_modified"`  // revisits answered 304
	BytesFetched   int64            `json:"bytes_fetched"` // body bytes received on the wire (compressed as sent)
	Errors         int64            `json:"errors"`        // failed visits
	ErrorsByReason map[string]int64 `json:"errors_by_reason,omitempty"`
	HandedOff      int64            `json:"urls_handed_off"` // discovered URLs handed to their owners
	Withdrawn      int64            `json:"urls_withdrawn"`  // queued URLs handed on because their subnet moved
}

// OutboxStatus is the backlog between the crawler and the sink.
type OutboxStatus struct {
	PendingRecords    int   `json:"pending_records"`  // not sealed into a carrier yet
	PendingCarriers   int   `json:"pending_carriers"` // sealed, not acknowledged yet
	CarriersSealed    int64 `json:"carriers_sealed"`
	CarriersDelivered int64 `json:"carriers_delivered"`
	DeliveryErrors    int64 `json:"delivery_errors"`
}

// HandoffStatus is the overlay's durable hand-off spool.
type HandoffStatus struct {
	Pending  int    `json:"pending"`  // URLs waiting for their owner's acknowledgement
	Messages uint64 `json:"messages"` // batches acknowledged
	URLs     uint64 `json:"urls"`     // URLs in them
	Resent   uint64 `json:"resent"`
	Failures uint64 `json:"failures"`
}

// SinkStatus is where the carriers go and how the last delivery went.
type SinkStatus struct {
	// Source is where the carriers go: config (the sink setting),
	// network (the sink the network announces) or files.
	Source string `json:"source"`
	// Addr is the index sink: Config.Sink, or the one found on the
	// network (its first advertised address with /p2p/<id>); empty while
	// none is announced (the carriers wait in the outbox).
	Addr        string `json:"addr,omitempty"`
	CarriersDir string `json:"carriers_dir,omitempty"` // files instead of a sink
	// Connected: a libp2p connection to the sink is open now.
	Connected    bool       `json:"connected"`
	Delivered    int64      `json:"delivered"` // carriers taken since the node opened
	Failed       int64      `json:"failed"`    // failed attempts
	LastDelivery *time.Time `json:"last_delivery,omitempty"`
	// LastOK: the last attempt succeeded (false before any).
	LastOK    bool   `json:"last_ok"`
	LastError string `json:"last_error,omitempty"`
}

// Status reports what the node is doing (GET /v1/status).
func (n *Node) Status() StatusInfo {
	self := n.peer.CrawlerID()
	s := StatusInfo{PeerID: n.peer.ID().String(), PeersConnected: len(n.peer.Host().Network().Peers()),
		MembersLive: n.peer.Members().Count(), CrawlersLive: len(n.peer.Members().Crawlers().Live()),
		SubnetsOwned: len(n.peer.Directory().Owned()), BlocksOwned: len(n.peer.Directory().BlocksOf(self))}
	if t, ok := n.started.Load().(time.Time); ok {
		s.Since = t
	}
	if n.adm != nil {
		_, seq := n.adm.Revocations()
		s.Network = &NetworkStatus{ID: n.adm.Network().String(), CertificateExpires: n.adm.OwnCertificate().NotAfter, Revocations: seq}
	}
	s.Release = n.updates.status()
	hs := n.peer.HandoffStats()
	s.Handoff = HandoffStatus{Pending: hs.Pending, Messages: hs.Messages, URLs: hs.URLs, Resent: hs.Resent, Failures: hs.Failures}
	s.CaughtUp = hs.Pending == 0
	if n.eng == nil {
		return s
	}
	if ps := n.eng.Paused(); ps.Paused {
		t := ps.Since
		s.Paused, s.PausedSince = true, &t
	}
	st := n.eng.Stats()
	s.Capacity = &CapacityStatus{PagesPerDay: n.cfg.Overlay.Capacity}
	if l := n.loadDay.Load(); l >= 0 {
		s.Capacity.Load = &l
		if c := n.cfg.Overlay.Capacity; c > 0 {
			pct := 100 * float64(l) / float64(c)
			s.Capacity.LoadPct = &pct
		}
	}
	s.Windows = windowsStatus(n.cfg.Crawl.Windows, time.Now())
	f := &FrontierStatus{Queued: st.Queued, ActiveHosts: st.ActiveHosts, ReadyHosts: st.ReadyHosts, Seen: st.Seen,
		Scheduled: st.Scheduled, Refused: st.Refused}
	if st.Scheduled > 0 {
		if t, ok, err := n.eng.Frontier().NextRevisit(); err == nil && ok {
			f.NextRevisit = &t
			f.RevisitsDue = !t.After(time.Now())
		}
	}
	s.Frontier = f
	s.Crawl = &CrawlStatus{Requests: st.Requests, PagesFetched: st.Fetched, NotModified: st.NotModified, BytesFetched: st.WireBytes, Errors: st.Errors,
		ErrorsByReason: st.ByReason, HandedOff: st.HandedOff, Withdrawn: st.Withdrawn}
	s.Outbox = &OutboxStatus{PendingRecords: st.PendingRecords, PendingCarriers: st.PendingCarriers,
		CarriersSealed: st.CarriersSealed, CarriersDelivered: st.CarriersDelivered, DeliveryErrors: st.DeliveryErrors}
	s.CaughtUp = s.CaughtUp && f.Queued == 0 && f.ActiveHosts == 0 && !f.RevisitsDue &&
		st.PendingRecords == 0 && st.PendingCarriers == 0
	sk := &SinkStatus{Source: "files"}
	if fs, ok := n.recv.Receiver.(pack.FileSink); ok {
		sk.CarriersDir = fs.Dir
	}
	if f := n.finder; f != nil {
		sk.Source = f.source()
		if ai, ok := f.target(); ok {
			sk.Addr = n.cfg.Sink
			if sk.Addr == "" {
				sk.Addr = "/p2p/" + ai.ID.String()
				if len(ai.Addrs) > 0 {
					sk.Addr = ai.Addrs[0].String() + sk.Addr
				}
			}
			sk.Connected = n.peer.Host().Network().Connectedness(ai.ID) == network.Connected
		}
	}
	ds := n.recv.state()
	sk.Delivered, sk.Failed = ds.ok, ds.failed
	if !ds.lastAt.IsZero() {
		t := ds.lastAt
		sk.LastDelivery = &t
		sk.LastOK = ds.lastErr == nil
		if ds.lastErr != nil {
			sk.LastError = ds.lastErr.Error()
		}
	}
	s.Sink = sk
	return s
}

// PeersInfo is GET /v1/peers.
type PeersInfo struct {
	Peers []PeerInfo `json:"peers"`
}

// PeerInfo is one overlay member as this node sees it.
type PeerInfo struct {
	PeerID string `json:"peer_id"`
	// State is self (this node), alive, suspected (heartbeat: silent for
	// more than two of its heartbeat intervals, not yet for the failure
	// timeout; swim: suspected by the protocol, not refuted yet) or dead
	// (silent for the failure timeout, or under swim not refuted in time;
	// it revives with its next heartbeat or record).
	State       string    `json:"state"`
	Connected   bool      `json:"connected"` // a libp2p connection is open
	Addrs       []string  `json:"addrs"`     // advertised listen multiaddrs, with /p2p/<id>
	CrawlerAddr string    `json:"crawler_addr,omitempty"`
	Position    *Position `json:"position,omitempty"`
	Capacity    int       `json:"capacity"`       // pages per day; 0: not a crawler
	Load        *uint32   `json:"load,omitempty"` // advertised load, pages per day (not for self)
	Sink        bool      `json:"sink,omitempty"` // it announces itself as the index sink
	// LastHeard is when it was last known alive, SilenceMs how long ago
	// (neither for self): heartbeat, its last heartbeat; swim (which sends
	// no record while nothing changes), now while the protocol holds it
	// alive and unsuspected, else when its suspicion began
	// (overlay.MemberInfo.Heard).
	LastHeard *time.Time `json:"last_heard,omitempty"`
	SilenceMs *float64   `json:"silence_ms,omitempty"`
}

// Position is a crawler's advertised position.
type Position struct {
	Lat float64 `json:"lat"`
	Lon float64 `json:"lon"`
}

// Peers lists this node and every member it heard of (GET /v1/peers).
func (n *Node) Peers() []PeerInfo {
	h := n.peer.Host()
	self := PeerInfo{PeerID: h.ID().String(), State: "self", Connected: true, Addrs: p2pAddrs(h.Addrs(), h.ID()),
		Capacity: n.cfg.Overlay.Capacity}
	if a := n.cfg.Overlay.CrawlerAddr; a.IsValid() {
		self.CrawlerAddr = a.String()
	}
	if oc := n.cfg.Overlay; oc.HasPos {
		self.Position = &Position{oc.Lat, oc.Lon}
	}
	out := []PeerInfo{self}
	now := time.Now()
	for _, m := range n.peer.Members().Snapshot() {
		p := PeerInfo{PeerID: m.Peer.String(), State: "alive", Addrs: p2pAddrs(m.Addrs, m.Peer), Sink: m.Sink,
			Connected: h.Network().Connectedness(m.Peer) == network.Connected, Capacity: m.Crawler.Capacity}
		interval := m.Interval
		if interval <= 0 {
			interval = n.cfg.Overlay.HeartbeatInterval
		}
		silence := max(now.Sub(m.Heard), 0)
		switch {
		case m.Dead:
			p.State = "dead"
		case m.Suspected, n.cfg.Overlay.Membership != overlay.MembershipSWIM && interval > 0 && silence > 2*interval:
			p.State = "suspected"
		}
		if m.Crawler.Addr.IsValid() {
			p.CrawlerAddr = m.Crawler.Addr.String()
		}
		if m.Crawler.HasPos {
			p.Position = &Position{m.Crawler.Lat, m.Crawler.Lon}
		}
		load, last, ms := m.Load, m.Heard, float64(silence)/float64(time.Millisecond)
		p.Load, p.LastHeard, p.SilenceMs = &load, &last, &ms
		out = append(out, p)
	}
	return out
}

// OwnersInfo is GET /v1/owners.
type OwnersInfo struct {
	Owners []OwnerInfo `json:"owners"`
}

// OwnerInfo is who crawls an address (or a subnet, when the records are
// listed), and why.
type OwnerInfo struct {
	Query string `json:"query,omitempty"` // the address or host name asked about
	Addr  string `json:"addr,omitempty"`  // its address
	// Mapped is the address delegation works on, when the node's
	// AddrMapper maps Addr elsewhere (a testnet's emulated address).
	Mapped  string `json:"mapped,omitempty"`
	Subnet  uint32 `json:"subnet"` // hierarchy node id (0: none)
	Range   string `json:"range,omitempty"`
	Country string `json:"country,omitempty"`
	Org     string `json:"org,omitempty"`
	// Owner crawls the address: its block's owner when the record gives
	// the block to a live crawler, else the subnet's owner; empty when
	// nobody live does (the next lookup delegates it again).
	Owner string `json:"owner,omitempty"`
	Mine  bool   `json:"mine"` // Owner is this node
	// SubnetOwner is the record's owner, OwnerLive whether it is live.
	SubnetOwner string  `json:"subnet_owner,omitempty"`
	OwnerLive   bool    `json:"owner_live"`
	OwnerRTTMs  float64 `json:"owner_rtt_ms"`
	Epoch       uint64  `json:"epoch"`
	// Block is the address's block delegation, if the record has one.
	Block *BlockInfo `json:"block,omitempty"`
	// Blocks lists every block delegation of the record (when listing
	// records).
	Blocks    []BlockInfo `json:"blocks,omitempty"`
	DecidedBy string      `json:"decided_by,omitempty"`
	DecidedAt *time.Time  `json:"decided_at,omitempty"`
	// Stale: a gossip event said the DHT may hold a newer record; the
	// node reads it again before routing by it.
	Stale bool `json:"stale,omitempty"`
	// Cached: answered from this node's cache; false when the answer is a
	// lookup's (?lookup=1) or nothing is cached.
	Cached bool `json:"cached"`
	// Reason and Explanation are the decision's (delegation.Decision:
	// its reason and its one-line path); Probes are the probe answers the
	// record was decided by.
	Reason      string      `json:"reason,omitempty"`
	Explanation string      `json:"explanation,omitempty"`
	Probes      []ProbeInfo `json:"probes,omitempty"`
	Error       string      `json:"error,omitempty"`
}

// BlockInfo is one block delegation.
type BlockInfo struct {
	Block      string  `json:"block"` // the /24 or /48
	Host       string  `json:"host"`  // the host it was decided for
	Owner      string  `json:"owner"`
	OwnerLive  bool    `json:"owner_live"`
	OwnerRTTMs float64 `json:"owner_rtt_ms"`
}

// ProbeInfo is one probe answer of a decision.
type ProbeInfo struct {
	Crawler string  `json:"crawler"`
	RTTMs   float64 `json:"rtt_ms"`
	OK      bool    `json:"ok"`
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// Owners answers who crawls each address (an IP or a host name, resolved
// as the crawler resolves it), from the cached records; lookup: by a real
// Peer.Delegate (a directory lookup, and a decision with probes when
// nobody live owns the subnet). No address: every cached record; mine:
// only those whose subnet or a block is this node's.
func (n *Node) Owners(ctx context.Context, addrs []string, lookup, mine bool) []OwnerInfo {
	if len(addrs) == 0 {
		var out []OwnerInfo
		self := n.peer.CrawlerID()
		for _, rec := range n.peer.Directory().Records() {
			if mine && rec.Owner != self && !hasBlockOf(rec, self) {
				continue
			}
			o := OwnerInfo{Subnet: uint32(rec.Subnet), Cached: true}
			n.describeSubnet(&o, rec.Subnet)
			_, stale, _ := n.peer.Directory().Peek(rec.Subnet)
			o.Stale = stale
			n.describeRecord(&o, rec)
			o.Owner = o.SubnetOwner
			if !o.OwnerLive {
				o.Owner = ""
			}
			o.Mine = rec.Owner == self
			d := delegation.Decision{Subnet: rec.Subnet, Owner: delegation.CrawlerID(o.Owner), OwnerRTT: rec.OwnerRTT,
				Record: rec, Cached: true, Reason: delegation.ReasonCached}
			o.Reason, o.Explanation = d.Reason.String(), d.String()
			out = append(out, o)
		}
		return out
	}
	out := make([]OwnerInfo, 0, len(addrs))
	for _, q := range addrs {
		out = append(out, n.ownerOf(ctx, q, lookup))
	}
	return out
}

func hasBlockOf(rec delegation.Record, c delegation.CrawlerID) bool {
	for _, b := range rec.Blocks {
		if b.Owner == c {
			return true
		}
	}
	return false
}

func (n *Node) ownerOf(ctx context.Context, q string, lookup bool) OwnerInfo {
	o := OwnerInfo{Query: q}
	ip, err := netip.ParseAddr(q)
	if err != nil {
		if ip, err = n.router.lookup(ctx, q); err != nil {
			o.Error = fmt.Sprintf("resolve %s: %v", q, err)
			return o
		}
	}
	ip = ip.Unmap()
	o.Addr = ip.String()
	a := n.router.mapAddr(ip)
	if a != ip {
		o.Mapped = a.String()
	}
	s := n.tree.SmallestNonUnary(a)
	o.Subnet = uint32(s)
	if s != hierarchy.None {
		n.describeSubnet(&o, s)
	}
	self := n.peer.CrawlerID()
	if lookup {
		d, err := n.peer.Delegate(ctx, a)
		if err != nil {
			o.Error = err.Error()
			return o
		}
		n.describeRecord(&o, d.Record)
		n.describeBlock(&o, d.Record, a)
		o.Owner, o.Mine, o.Cached = string(d.Owner), d.Owner == self, d.Cached
		o.Reason, o.Explanation = d.Reason.String(), d.String()
		return o
	}
	if s == hierarchy.None || s == hierarchy.Root {
		o.Error = "outside the hierarchy: no record (a lookup delegates it by consistent hashing)"
		return o
	}
	rec, stale, ok := n.peer.Directory().Peek(s)
	if !ok {
		// (a subnet no crawler answered a probe for is hashed to one,
		// and no record is published)
		o.Error = "no record cached (?lookup=1 looks it up, or decides it)"
		return o
	}
	o.Cached, o.Stale = true, stale
	n.describeRecord(&o, rec)
	n.describeBlock(&o, rec, a)
	// who crawls a, as the router's cached path answers it
	// (Peer.CachedRoute: its block's live owner, else the live owner)
	d := delegation.Decision{IP: a, Subnet: s, Record: rec, Cached: true, Reason: delegation.ReasonCached}
	live := n.peer.Members().IsLive
	if b, in := rec.LiveBlock(a, live); in {
		d.Owner, d.OwnerRTT = b.Owner, b.OwnerRTT
	} else if live(rec.Owner) {
		d.Owner, d.OwnerRTT = rec.Owner, rec.OwnerRTT
	}
	o.Owner, o.Mine = string(d.Owner), d.Owner == self && d.Owner != ""
	o.Reason, o.Explanation = d.Reason.String(), d.String()
	if d.Owner == "" {
		o.Reason = "owner-not-live"
	}
	return o
}

func (n *Node) describeSubnet(o *OwnerInfo, s hierarchy.NodeID) {
	if int(s) >= n.tree.Len() {
		return
	}
	nd := n.tree.Node(s)
	o.Range, o.Country, o.Org = nd.String(), nd.Country, n.tree.OrgName(nd.Org)
}

func (n *Node) describeRecord(o *OwnerInfo, rec delegation.Record) {
	if rec.Owner == "" {
		return
	}
	live := n.peer.Members().IsLive
	o.SubnetOwner, o.OwnerLive, o.OwnerRTTMs, o.Epoch = string(rec.Owner), live(rec.Owner), ms(rec.OwnerRTT), rec.Epoch
	o.DecidedBy = string(rec.DecidedBy)
	if !rec.At.IsZero() {
		t := rec.At
		o.DecidedAt = &t
	}
	for _, p := range rec.Probes {
		o.Probes = append(o.Probes, ProbeInfo{Crawler: string(p.Crawler), RTTMs: ms(p.RTT), OK: p.OK})
	}
	for _, b := range rec.Blocks {
		o.Blocks = append(o.Blocks, n.blockInfo(b))
	}
}

func (n *Node) describeBlock(o *OwnerInfo, rec delegation.Record, a netip.Addr) {
	if b, ok := rec.BlockOwner(a); ok {
		bi := n.blockInfo(b)
		o.Block = &bi
	}
	o.Blocks = nil // only the address's block is of interest
}

func (n *Node) blockInfo(b delegation.BlockDelegation) BlockInfo {
	return BlockInfo{Block: b.Block().String(), Host: b.Host.String(), Owner: string(b.Owner),
		OwnerLive: n.peer.Members().IsLive(b.Owner), OwnerRTTMs: ms(b.OwnerRTT)}
}

func (n *Node) serveOwners(w http.ResponseWriter, r *http.Request) {
	q := r.URL.Query()
	flag := func(k string) bool {
		v := q.Get(k)
		return v == "1" || strings.EqualFold(v, "true")
	}
	writeJSON(w, http.StatusOK, OwnersInfo{Owners: n.Owners(r.Context(), q["addr"], flag("lookup"), flag("mine"))})
}

// SeedsInfo is POST /v1/seeds' answer.
type SeedsInfo struct {
	Seeds []SeedResult `json:"seeds"`
	// Counts by status (queued, known, handed_off, rejected).
	Queued    int `json:"queued"`
	Known     int `json:"known"`
	HandedOff int `json:"handed_off"`
	Rejected  int `json:"rejected"`
}

// maxSeedBody bounds a POST /v1/seeds body.
const maxSeedBody = 4 << 20

func (n *Node) serveSeeds(w http.ResponseWriter, r *http.Request) {
	if n.eng == nil {
		writeError(w, http.StatusConflict, errors.New("this node has no crawler role: give seeds to a crawler"))
		return
	}
	b, err := io.ReadAll(http.MaxBytesReader(w, r.Body, maxSeedBody))
	if err != nil {
		writeError(w, http.StatusRequestEntityTooLarge, fmt.Errorf("seeds: %w", err))
		return
	}
	seeds, err := parseSeeds(b)
	if err != nil {
		writeError(w, http.StatusBadRequest, err)
		return
	}
	if len(seeds) == 0 {
		writeError(w, http.StatusBadRequest, errors.New("no seeds: send a JSON list of URLs or one URL per line"))
		return
	}
	res, err := n.RouteSeeds(r.Context(), seeds)
	out := SeedsInfo{Seeds: res}
	for _, s := range res {
		switch s.Status {
		case SeedQueued:
			out.Queued++
		case SeedKnown:
			out.Known++
		case SeedHandedOff:
			out.HandedOff++
		default:
			out.Rejected++
		}
	}
	code := http.StatusOK
	if err != nil {
		code = http.StatusServiceUnavailable // the hand-off spool failed; the results say which seeds
	}
	writeJSON(w, code, out)
}

// parseSeeds reads a JSON list of URLs, or text with one URL per line
// (blank lines and # comments skipped).
func parseSeeds(b []byte) ([]string, error) {
	t := strings.TrimSpace(string(b))
	if strings.HasPrefix(t, "[") {
		var seeds []string
		if err := json.Unmarshal([]byte(t), &seeds); err != nil {
			return nil, fmt.Errorf("seeds: want a JSON list of URLs: %w", err)
		}
		return seeds, nil
	}
	var seeds []string
	for line := range strings.Lines(t) {
		s := strings.TrimSpace(line)
		if s == "" || strings.HasPrefix(s, "#") {
			continue
		}
		seeds = append(seeds, s)
	}
	return seeds, nil
}
