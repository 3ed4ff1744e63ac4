package overlay

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"strconv"
	"sync"
	"syscall"
	"time"

	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"golang.org/x/time/rate"

	"github.com/micra-crawler/micra/crawl/netguard"
	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// ProbeTarget is one latency measurement to make.
type ProbeTarget struct {
	Addr   netip.Addr
	Method pb.ProbeMethod
	Port   uint16 // 0: 80 for TCP connect and HTTP HEAD
	URL    string // HTTP HEAD: the URL (its host is dialled at Addr)
}

// Measurer measures this peer's RTT to a target. NetMeasurer is the real
// one; simulations plug in a latency model.
type Measurer interface {
	Measure(ctx context.Context, t ProbeTarget) (time.Duration, error)
}

// NetMeasurer measures by TCP connect or HTTP HEAD. Guard is enforced again
// at dial time (the dialer's Control hook), so no redirect or resolution can
// make it touch a refused address. ICMP needs privileges and is refused.
type NetMeasurer struct {
	Guard Guard
}

// Measure implements Measurer.
func (m NetMeasurer) Measure(ctx context.Context, t ProbeTarget) (time.Duration, error) {
	if m.Guard == nil {
		return 0, errors.New("probe: NetMeasurer without a guard")
	}
	if err := m.Guard(t.Addr); err != nil {
		return 0, err
	}
	port := t.Port
	if port == 0 {
		port = 80
	}
	dialer := &net.Dialer{Control: func(_, address string, _ syscall.RawConn) error {
		ap, err := netip.ParseAddrPort(address)
		if err != nil {
			return fmt.Errorf("probe: dial %s: %w", address, err)
		}
		return m.Guard(ap.Addr())
	}}
	addr := netip.AddrPortFrom(t.Addr, port).String()
	switch t.Method {
	case pb.ProbeMethod_TCP_CONNECT:
		start := time.Now()
		c, err := dialer.DialContext(ctx, "tcp", addr)
		if err != nil {
			return 0, fmt.Errorf("probe: tcp connect %s: %w", addr, err)
		}
		rtt := time.Since(start)
		c.Close()
		return rtt, nil
	case pb.ProbeMethod_HTTP_HEAD:
		u := t.URL
		if u == "" {
			u = "http://" + addr + "/"
		}
		tr := &http.Transport{
			DialContext: func(ctx context.Context, network, _ string) (net.Conn, error) {
				return dialer.DialContext(ctx, network, addr) // always the probed address
			},
			DisableKeepAlives: true,
		}
		defer tr.CloseIdleConnections()
		cl := &http.Client{Transport: tr, CheckRedirect: func(*http.Request, []*http.Request) error { return http.ErrUseLastResponse }}
		req, err := http.NewRequestWithContext(ctx, http.MethodHead, u, nil)
		if err != nil {
			return 0, fmt.Errorf("probe: HEAD %s: %w", u, err)
		}
		req.Header.Set("User-Agent", "micra-probe/1")
		start := time.Now()
		resp, err := cl.Do(req)
		if err != nil {
			return 0, fmt.Errorf("probe: HEAD %s: %w", u, err)
		}
		rtt := time.Since(start)
		resp.Body.Close()
		return rtt, nil
	case pb.ProbeMethod_ICMP:
		return 0, errors.New("probe: ICMP is not permitted for this process")
	}
	return 0, fmt.Errorf("probe: unknown method %d", t.Method)
}

// probeLog remembers RTTs this peer reported, per requester and the latest
// to anyone, so that an endorsement request can be checked against what
// was really measured.
type probeLog struct {
	mu     sync.Mutex
	by     map[peer.ID][]probeEntry
	recent []probeEntry // the latest probeLogRecent entries, any requester
	adds   int          // entries added (every 256th sweeps stale requesters)
}

type probeEntry struct {
	target netip.Addr
	rtt    time.Duration
	at     time.Time
}

const (
	probeLogPerPeer = 256
	probeLogRecent  = 4096
	probeLogAge     = 10 * time.Minute
)

func (l *probeLog) add(p peer.ID, target netip.Addr, rtt time.Duration) {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.by == nil {
		l.by = make(map[peer.ID][]probeEntry)
	}
	e := probeEntry{target, rtt, time.Now()}
	es := append(l.by[p], e)
	if len(es) > probeLogPerPeer {
		es = es[len(es)-probeLogPerPeer:]
	}
	l.by[p] = es
	if l.recent = append(l.recent, e); len(l.recent) > probeLogRecent {
		l.recent = l.recent[len(l.recent)-probeLogRecent:]
	}
	// requesters are not members necessarily: forget those whose newest
	// entry is past probeLogAge, now and then, or the map grows with every
	// peer ID that ever asked
	if l.adds++; l.adds%256 == 0 {
		for id, es := range l.by {
			if len(es) == 0 || time.Since(es[len(es)-1].at) > probeLogAge {
				delete(l.by, id)
			}
		}
	}
}

// consistent reports whether rtt agrees with what this peer reported to p
// for targets matching in(): true when nothing was reported to p (the
// record may come from an older measurement) or rtt is 0 (the record
// claims no measurement: a decision without a probe of its owner), else
// true only if a sample reported for them matches, to p or lately to any
// requester: a record's probe answers gather the measurements of every
// decider that moved it, and a recorded move republishes one of them.
// What is refused is an RTT this peer did not measure.
func (l *probeLog) consistent(p peer.ID, in func(netip.Addr) bool, rtt time.Duration) bool {
	if rtt == 0 {
		return true
	}
	l.mu.Lock()
	defer l.mu.Unlock()
	any := false
	for _, e := range l.by[p] {
		if time.Since(e.at) > probeLogAge || !in(e.target) {
			continue
		}
		any = true
		if e.rtt == rtt {
			return true
		}
	}
	if !any {
		return true
	}
	for _, e := range l.recent {
		if e.rtt == rtt && time.Since(e.at) <= probeLogAge && in(e.target) {
			return true
		}
	}
	return false
}

// measureLocal runs one probe on this peer, honouring window and guard.
func (p *Peer) measureLocal(ctx context.Context, t ProbeTarget, samples int) ([]time.Duration, pb.Status, error) {
	if !p.cfg.ProbeWindow.Open(time.Now()) {
		return nil, pb.Status_OUTSIDE_WINDOW, errors.New("outside this crawler's time window")
	}
	if err := p.cfg.ProbeGuard(t.Addr); err != nil {
		return nil, pb.Status_REFUSED, err
	}
	if t.Port != 0 && netguard.BadPort(int(t.Port)) {
		// a probe connects, or sends a HEAD: not to the ports of protocols
		// a request could be smuggled into (SMTP, SSH, IRC, …), as the
		// fetcher does not, or any peer could scan them through this one
		return nil, pb.Status_REFUSED, fmt.Errorf("%w: port %d", ErrGuard, t.Port)
	}
	var out []time.Duration
	var last error
	for range samples {
		rtt, err := p.measurer.Measure(ctx, t)
		if err != nil {
			last = err
			continue
		}
		out = append(out, rtt)
	}
	if len(out) == 0 {
		return nil, pb.Status_UNAVAILABLE, last
	}
	return out, pb.Status_OK, nil
}

func (p *Peer) handleProbe(s network.Stream) {
	defer s.Close()
	st := newStream(s, maxProbeMsg, p.cfg.RequestTimeout)
	var req pb.ProbeRequest
	if err := st.read(&req); err != nil {
		s.Reset()
		return
	}
	resp := p.serveProbe(s.Conn().RemotePeer(), &req)
	p.metrics.probesServed.Inc()
	if err := st.write(resp); err != nil {
		s.Reset()
	}
}

// serveProbe answers a probe request from a peer: the checks, then the
// measurement.
func (p *Peer) serveProbe(from peer.ID, req *pb.ProbeRequest) *pb.ProbeResponse {
	resp := &pb.ProbeResponse{Version: wireVersion}
	target, ok := netip.AddrFromSlice(req.Target)
	switch {
	case !p.isMember(from):
		// a probe makes this peer send traffic: members only
		resp.Status, resp.Error = pb.Status_REFUSED, fmt.Sprintf("%s is not a live member of this network", shortID(from))
	case !p.probeLimit.allow(from, probeRate, probeBurst, time.Now()):
		resp.Status, resp.Error = pb.Status_UNAVAILABLE, fmt.Sprintf("more than %d probes a second from %s", probeRate, shortID(from))
	case !ok:
		resp.Status, resp.Error = pb.Status_BAD_REQUEST, fmt.Sprintf("target of %d bytes is not an IP address", len(req.Target))
	case req.Samples > 5:
		resp.Status, resp.Error = pb.Status_BAD_REQUEST, "at most 5 samples per probe"
	case req.Port > 65535:
		resp.Status, resp.Error = pb.Status_BAD_REQUEST, "port out of range"
	case len(req.Url) > maxURLLen:
		resp.Status, resp.Error = pb.Status_TOO_LARGE, "url too long"
	case req.Port != 0 && req.Port != 80 && req.Port != 443 && req.Port != uint32(p.cfg.ProbePort):
		// what every peer probes (its ProbePort, shared by a network's
		// config, or HTTP's): not a port scanner for any port
		resp.Status, resp.Error = pb.Status_REFUSED, fmt.Sprintf("port %d is not one this network probes", req.Port)
	case req.Url != "" && !probeURLAllowed(req.Url, target):
		resp.Status, resp.Error = pb.Status_REFUSED, "a probe URL must be / or /robots.txt of the target address itself"
	case !p.probeSubnetOK(hierarchy.NodeID(req.Subnet), target.Unmap()):
		resp.Status, resp.Error = pb.Status_REFUSED, fmt.Sprintf("target %v is not an address of subnet %d being decided (by this peer's hierarchy, a decision for it decides subnet %d)",
			target.Unmap(), req.Subnet, p.tree.SmallestNonUnary(target.Unmap()))
	default:
		if why := p.probeScope.admit(from, hierarchy.NodeID(req.Subnet), target.Unmap(), p.now()); why != "" {
			resp.Status, resp.Error = pb.Status_REFUSED, fmt.Sprintf("%s from %s (%d addresses a subnet, %d new subnets a second)", why, shortID(from), probeTargetsPerSubnet, probeSubnetRate)
			break
		}
		timeout := min(time.Duration(req.TimeoutMs)*time.Millisecond, p.cfg.RequestTimeout)
		if timeout <= 0 {
			timeout = p.cfg.RequestTimeout
		}
		ctx, cancel := context.WithTimeout(p.ctx, timeout)
		rtts, status, err := p.measureLocal(ctx, ProbeTarget{Addr: target.Unmap(), Method: req.Method, Port: uint16(req.Port), URL: req.Url}, max(int(req.Samples), 1))
		cancel()
		resp.Status = status
		if err != nil {
			resp.Error = err.Error()
		}
		for _, r := range rtts {
			resp.RttNs = append(resp.RttNs, int64(r))
		}
		if len(rtts) > 0 {
			p.probes.add(from, target.Unmap(), minDur(rtts))
		}
	}
	return resp
}

func minDur(ds []time.Duration) time.Duration {
	m := ds[0]
	for _, d := range ds[1:] {
		m = min(m, d)
	}
	return m
}

// Prober is the probe-RPC delegation.Prober: it asks each crawler, in
// parallel, for its RTT to the target over /micra/probe/1 (this peer
// measures itself directly). Every crawler asked is one probe.
type Prober struct{ p *Peer }

// Probe implements delegation.Prober.
func (pr *Prober) Probe(ctx context.Context, target netip.Addr, crawlers []delegation.CrawlerID) []delegation.ProbeResult {
	p := pr.p
	out := make([]delegation.ProbeResult, len(crawlers))
	took := make([]time.Duration, len(crawlers))
	t := ProbeTarget{Addr: target.Unmap(), Method: p.cfg.ProbeMethod, Port: p.cfg.ProbePort}
	var wg sync.WaitGroup
	for i, c := range crawlers {
		out[i].Crawler = c
		wg.Add(1)
		go func() {
			defer wg.Done()
			start := time.Now()
			rtt, err := p.ProbeOne(ctx, c, t)
			took[i] = time.Since(start)
			if err != nil {
				p.log.Debug("overlay: probe failed", "crawler", c, "target", target, "err", err)
				return
			}
			out[i].RTT, out[i].OK = rtt, true
		}()
	}
	wg.Wait()
	p.metrics.probesSent.Add(float64(len(crawlers)))
	p.audit.probed(ctx, target.Unmap(), out, took) // impossible answers leave the decision
	return out
}

// ProbeOne asks one crawler for its RTT to t (the minimum of its samples).
func (p *Peer) ProbeOne(ctx context.Context, c delegation.CrawlerID, t ProbeTarget) (time.Duration, error) {
	// one probe is bounded by RequestTimeout whatever the caller's deadline:
	// a target dropping SYNs (asked here) or a crawler that never answers
	// would otherwise hold the whole decision
	ctx, cancel := context.WithTimeout(ctx, p.cfg.RequestTimeout)
	defer cancel()
	if c == p.selfID {
		rtts, _, err := p.measureLocal(ctx, t, 1)
		if err != nil {
			return 0, err
		}
		return rtts[0], nil
	}
	id, err := peer.Decode(string(c))
	if err != nil {
		return 0, fmt.Errorf("probe: crawler %q: %w", c, err)
	}
	req := &pb.ProbeRequest{Version: wireVersion, Target: t.Addr.AsSlice(), Method: t.Method, Port: uint32(t.Port), Url: t.URL,
		Subnet: uint32(p.tree.SmallestNonUnary(t.Addr)), Samples: 1, TimeoutMs: uint32(p.cfg.RequestTimeout / time.Millisecond)}
	var resp pb.ProbeResponse
	if err := roundTrip(ctx, p.h, id, ProtoProbe, maxProbeMsg, p.cfg.RequestTimeout, req, &resp); err != nil {
		return 0, err
	}
	if err := remoteErr(id, ProtoProbe, resp.Status, resp.Error); err != nil {
		return 0, err
	}
	if len(resp.RttNs) == 0 {
		return 0, &RemoteError{Peer: id, Protocol: ProtoProbe, Status: pb.Status_BAD_REQUEST, Msg: "OK without samples"}
	}
	best := time.Duration(resp.RttNs[0])
	for _, r := range resp.RttNs[1:] {
		best = min(best, time.Duration(r))
	}
	if best < 0 || best > maxOwnerRTT {
		return 0, fmt.Errorf("probe: %s answered implausible rtt %v", shortID(id), best)
	}
	return best, nil
}

var _ delegation.Prober = (*Prober)(nil)
var _ = strconv.Itoa

// probeSubnetOK reports whether s is the subnet a decision for target
// decides, by this peer's hierarchy (probe_scope.go).
func (p *Peer) probeSubnetOK(s hierarchy.NodeID, target netip.Addr) bool {
	return s != hierarchy.Root && s != hierarchy.None && int(s) < p.tree.Len() && p.tree.SmallestNonUnary(target) == s
}

// probeURLAllowed: an HTTP probe asks for / or /robots.txt of the target
// address itself, never a requester's host name or path (the prober would
// carry someone else's request to a server).
func probeURLAllowed(raw string, target netip.Addr) bool {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.RawQuery != "" || u.User != nil {
		return false
	}
	h, err := netip.ParseAddr(u.Hostname())
	if err != nil || h.Unmap() != target.Unmap() {
		return false
	}
	return u.Path == "" || u.Path == "/" || u.Path == "/robots.txt"
}

// probeRate and probeBurst bound the probes one requester has this peer
// send: a decision asks each candidate once, so honest deciders stay far
// below, and a member cannot turn this peer into a fast scanner.
const (
	probeRate  = 100
	probeBurst = 500
)

// peerLimiter is a token bucket per peer (a probe's requester, a
// calibration event's author). The table is cleared past maxLimitedPeers,
// which only lets each peer's burst through again.
type peerLimiter struct {
	mu sync.Mutex
	m  map[peer.ID]*rate.Limiter
}

const maxLimitedPeers = 4096

// allow takes a token of id's bucket (every r a second, burst b) at now.
func (l *peerLimiter) allow(id peer.ID, r float64, b int, now time.Time) bool {
	return l.allowN(id, r, b, now, 1)
}

// allowN takes n tokens of id's bucket at once, or none.
func (l *peerLimiter) allowN(id peer.ID, r float64, b int, now time.Time, n int) bool {
	return l.limiter(id, r, b).AllowN(now, n)
}

// limiter returns id's bucket (every r a second, burst b).
func (l *peerLimiter) limiter(id peer.ID, r float64, b int) *rate.Limiter {
	l.mu.Lock()
	defer l.mu.Unlock()
	if l.m == nil || len(l.m) >= maxLimitedPeers {
		l.m = make(map[peer.ID]*rate.Limiter)
	}
	lim := l.m[id]
	if lim == nil {
		lim = rate.NewLimiter(rate.Limit(r), b)
		l.m[id] = lim
	}
	return lim
}
