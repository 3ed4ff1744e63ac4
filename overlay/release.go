package overlay

// Releases over the overlay: signed release bundles announced on gossip
// (micra/release/1, metadata only) and the binaries they name fetched from
// the members that hold them (/micra/release/1: content-addressed by
// SHA-256, resumable from an offset, rate-limited, members only). The
// overlay does not judge a release: the node's Verify does, before an
// announcement is forwarded, and the node checks a fetched binary against
// the signed metadata before it does anything with it.

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"maps"
	"os"
	"path/filepath"
	"slices"
	"sync"
	"time"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	"github.com/libp2p/go-libp2p/core/network"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/protocol"
	"github.com/prometheus/client_golang/prometheus"
	"golang.org/x/time/rate"
)

const (
	// TopicRelease carries release announcements.
	TopicRelease = "micra/release/1"
	// ProtoRelease fetches a release binary by its SHA-256.
	ProtoRelease = protocol.ID("/micra/release/1")

	// maxAnnounceBytes: an announcement must fit gossip's message limit
	// (maxCalibrationBytes+1024); a bundle's wire form with a few root
	// versions is ~2 KB.
	maxAnnounceBytes = 16 << 10
	// announceMagic is an announcement with its author's report;
	// announceMagicV1 one without (builds before reports: still read)
	announceMagic   = "MRA2"
	announceMagicV1 = "MRA1"
	maxRolledBack   = 4
	maxReportText   = 256
	releaseChunk    = 32 << 10
)

// Status bytes of a /micra/release/1 answer.
const (
	relOK byte = iota
	relNotFound
	relNotMember
	relBusy
	relBadOffset
)

var relStatusText = map[byte]string{relNotFound: "not held", relNotMember: "not a member", relBusy: "busy", relBadOffset: "offset past the end"}

// ErrReleaseTryLater is a holder's refusal that passes by itself: it has
// not heard the fetcher's membership yet (a node that just joined), or it
// serves as many fetches as it may.
var ErrReleaseTryLater = errors.New("try again shortly")

// ReleaseVerdict is the node's judgement of an announcement.
type ReleaseVerdict int

const (
	// ReleaseAccept: forward it and deliver it.
	ReleaseAccept ReleaseVerdict = iota
	// ReleaseIgnore: neither forward nor penalise (an older release, no
	// trusted root to judge it).
	ReleaseIgnore
	// ReleaseReject: a forged or malformed announcement; gossip penalises
	// the peers that sent it.
	ReleaseReject
)

// ReleaseAnnouncement is one member's announcement of a release bundle.
type ReleaseAnnouncement struct {
	From   peer.ID // the author, as gossip's signature proves
	Bundle []byte  // the bundle's wire form (node/release)
	// Target is the hex SHA-256 of the release binary the author holds and
	// serves ("" when it holds none yet).
	Target string
	// Report is what the author says of its own releases.
	Report ReleaseReport
}

// ReleaseReport is what a member says of the releases it ran, in each of
// its announcements (signed by gossip as their author): the network learns
// which version each member runs and which releases members rolled back,
// so a bad release is seen network-wide, not only in one node's status.
type ReleaseReport struct {
	Running string // the version the author runs
	// OnTrial: the version it runs is a release still on trial (not yet
	// confirmed healthy by its supervisor).
	OnTrial bool
	// RolledBack are releases the author installed and rolled back, the
	// most recent first (at most 4).
	RolledBack []RolledBack
}

// RolledBack is one release a member rolled back.
type RolledBack struct {
	SHA256  string // the release binary's hex SHA-256
	Version string
	Reason  string
}

// ReleaseLimiter paces the bytes a peer serves (rate.Limiter is one).
type ReleaseLimiter interface {
	WaitN(ctx context.Context, n int) error
}

// ReleaseConfig is what a peer's release channel needs.
type ReleaseConfig struct {
	// Verify judges every announcement received (in gossip's validator,
	// before it is forwarded).
	Verify func(ReleaseAnnouncement) ReleaseVerdict
	// Deliver receives each accepted announcement of another member.
	Deliver func(ReleaseAnnouncement)
	// Store is the directory of binaries served, each named by its hex
	// SHA-256.
	Store string
	// Rate is the most bytes a second served to all members together
	// (default 4 MiB); Limiter, when set, replaces it.
	Rate    int
	Limiter ReleaseLimiter
	// Streams is how many members are served at once (default 4); more
	// are answered busy and try another holder.
	Streams int
	// Every is how often the current announcement is published again, for
	// members that joined since (default 2 min).
	Every time.Duration
}

// Releases is a peer's release channel.
type Releases struct {
	p       *Peer
	cfg     ReleaseConfig
	topic   *pubsub.Topic
	sub     *pubsub.Subscription
	limiter ReleaseLimiter
	slots   chan struct{}
	ctx     context.Context // ends at Close
	cancel  context.CancelFunc
	wg      sync.WaitGroup

	announced *prometheus.CounterVec
	served    prometheus.Counter
	fetched   prometheus.Counter

	mu      sync.Mutex
	current *ReleaseAnnouncement             // the announcement published every Every
	holders map[string]map[peer.ID]time.Time // target → members that announced holding it
	report  ReleaseReport                    // this peer's, carried in its announcements
	reports map[peer.ID]ReleaseReport        // each member's last report
	// early: the last announcement of each peer heard before it was a
	// member here (its heartbeat came second); taken when it joins, as its
	// author does not send it again before Every
	early  map[peer.ID]ReleaseAnnouncement
	joined chan peer.ID
	closed bool
}

// maxEarly bounds the announcements kept from peers not yet members;
// maxReports the members' reports kept.
const (
	maxEarly   = 64
	maxReports = 1 << 16
)

// OpenReleases joins the release topic and serves the release protocol.
// Close it before the peer.
func OpenReleases(p *Peer, cfg ReleaseConfig) (*Releases, error) {
	if cfg.Verify == nil || cfg.Store == "" {
		return nil, errors.New("overlay: releases need Verify and Store")
	}
	if cfg.Rate <= 0 {
		cfg.Rate = 4 << 20
	}
	if cfg.Streams <= 0 {
		cfg.Streams = 4
	}
	if cfg.Every <= 0 {
		cfg.Every = 2 * time.Minute
	}
	if err := os.MkdirAll(cfg.Store, 0o700); err != nil {
		return nil, fmt.Errorf("overlay: release store: %w", err)
	}
	r := &Releases{p: p, cfg: cfg, limiter: cfg.Limiter, slots: make(chan struct{}, cfg.Streams),
		holders: map[string]map[peer.ID]time.Time{}, reports: map[peer.ID]ReleaseReport{}, early: map[peer.ID]ReleaseAnnouncement{}, joined: make(chan peer.ID, maxEarly)}
	if r.limiter == nil {
		r.limiter = rate.NewLimiter(rate.Limit(cfg.Rate), releaseChunk)
	}
	r.announced = prometheus.NewCounterVec(prometheus.CounterOpts{Name: "micra_overlay_release_announcements_total",
		Help: "Release announcements received, by verdict (accept, ignore, reject)."}, []string{"verdict"})
	r.served = prometheus.NewCounter(prometheus.CounterOpts{Name: "micra_overlay_release_served_bytes_total",
		Help: "Bytes of release binaries served to members."})
	r.fetched = prometheus.NewCounter(prometheus.CounterOpts{Name: "micra_overlay_release_fetched_bytes_total",
		Help: "Bytes of release binaries fetched from members."})
	if reg := p.cfg.Registerer; reg != nil {
		reg = prometheus.WrapRegistererWith(prometheus.Labels{"peer": p.ID().String()}, reg)
		for _, c := range []prometheus.Collector{r.announced, r.served, r.fetched} {
			if err := reg.Register(c); err != nil {
				return nil, fmt.Errorf("overlay: register metrics: %w", err)
			}
		}
	}
	if err := p.ps.RegisterTopicValidator(TopicRelease, r.validate); err != nil {
		return nil, fmt.Errorf("overlay: %w", err)
	}
	var err error
	if r.topic, err = p.ps.Join(TopicRelease); err != nil {
		p.ps.UnregisterTopicValidator(TopicRelease)
		return nil, fmt.Errorf("overlay: join %s: %w", TopicRelease, err)
	}
	if r.sub, err = r.topic.Subscribe(); err != nil {
		r.topic.Close()
		p.ps.UnregisterTopicValidator(TopicRelease)
		return nil, fmt.Errorf("overlay: subscribe %s: %w", TopicRelease, err)
	}
	p.h.SetStreamHandler(ProtoRelease, r.handle)
	ctx, cancel := context.WithCancel(context.Background())
	r.ctx, r.cancel = ctx, cancel
	p.members.OnChange(func(ev MemberEvent) {
		if ev.Dead {
			return
		}
		r.mu.Lock()
		_, ok := r.early[ev.Peer]
		r.mu.Unlock()
		if ok {
			select {
			case r.joined <- ev.Peer:
			default:
			}
		}
	})
	r.wg.Add(3)
	go func() { defer r.wg.Done(); r.receive(ctx) }()
	go func() { defer r.wg.Done(); r.republish(ctx) }()
	go func() { defer r.wg.Done(); r.takeEarly(ctx) }()
	return r, nil
}

// Close stops serving and leaves the topic.
func (r *Releases) Close() error {
	r.mu.Lock()
	if r.closed {
		r.mu.Unlock()
		return nil
	}
	r.closed = true
	r.mu.Unlock()
	r.p.h.RemoveStreamHandler(ProtoRelease)
	r.cancel()
	r.sub.Cancel()
	r.wg.Wait()
	err := r.topic.Close()
	r.p.ps.UnregisterTopicValidator(TopicRelease)
	return err
}

// Announce makes bundle (and target, the hex SHA-256 of the binary this
// peer holds and serves, or "") this peer's announcement: published within
// a second, then every Every and to each peer new on the topic, until
// replaced. It does not wait on the network, so it may be called from
// anywhere, a validator included.
func (r *Releases) Announce(bundle []byte, target string) error {
	r.mu.Lock()
	defer r.mu.Unlock()
	a := ReleaseAnnouncement{From: r.p.ID(), Bundle: bundle, Target: target, Report: r.report}
	if _, err := encodeAnnouncement(a); err != nil {
		return err
	}
	r.current = &a
	return nil
}

// Report makes rep this peer's report, carried by its announcements from
// now on (published again within a second when one is current).
func (r *Releases) Report(rep ReleaseReport) error {
	rep.RolledBack = slices.Clone(rep.RolledBack[:min(len(rep.RolledBack), maxRolledBack)])
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.current != nil {
		a := *r.current
		a.Report = rep
		if _, err := encodeAnnouncement(a); err != nil {
			return err
		}
		r.current = &a
	} else if _, err := encodeReport(nil, rep); err != nil {
		return err
	}
	r.report = rep
	return nil
}

// Reports are the last report of each member heard from since this peer
// started (this peer's own not among them), live now or not: a member
// that rolled a release back and is restarting, or held dead for a moment
// under load, still counts against that release.
func (r *Releases) Reports() map[peer.ID]ReleaseReport {
	r.mu.Lock()
	defer r.mu.Unlock()
	return maps.Clone(r.reports)
}

// Holders are the live members that announced holding target, the most
// recent first.
func (r *Releases) Holders(target string) []peer.ID {
	r.mu.Lock()
	defer r.mu.Unlock()
	var ids []peer.ID
	for id := range r.holders[target] {
		if r.p.isMember(id) && id != r.p.ID() {
			ids = append(ids, id)
		}
	}
	slices.SortFunc(ids, func(a, b peer.ID) int { return r.holders[target][b].Compare(r.holders[target][a]) })
	return ids
}

func (r *Releases) validate(_ context.Context, from peer.ID, msg *pubsub.Message) pubsub.ValidationResult {
	author := msg.GetFrom()
	if author == r.p.ID() {
		return pubsub.ValidationAccept
	}
	a, err := decodeAnnouncement(msg.Data)
	if err != nil || a.From != author {
		r.p.log.Debug("overlay: rejected release announcement", "author", author, "via", from, "err", err)
		r.announced.WithLabelValues("reject").Inc()
		return pubsub.ValidationReject
	}
	if !r.p.isMember(author) {
		r.mu.Lock()
		if _, ok := r.early[author]; ok || len(r.early) < maxEarly {
			r.early[author] = a
		}
		r.mu.Unlock()
		r.announced.WithLabelValues("ignore").Inc()
		return pubsub.ValidationIgnore
	}
	switch r.cfg.Verify(a) {
	case ReleaseAccept:
		r.announced.WithLabelValues("accept").Inc()
		msg.ValidatorData = a
		return pubsub.ValidationAccept
	case ReleaseIgnore:
		r.announced.WithLabelValues("ignore").Inc()
		return pubsub.ValidationIgnore
	}
	r.announced.WithLabelValues("reject").Inc()
	return pubsub.ValidationReject
}

func (r *Releases) receive(ctx context.Context) {
	for {
		msg, err := r.sub.Next(ctx)
		if err != nil {
			return
		}
		a, ok := msg.ValidatorData.(ReleaseAnnouncement)
		if !ok {
			continue // this peer's own
		}
		r.take(a)
	}
}

// takeEarly judges, when its author joins, an announcement heard before.
func (r *Releases) takeEarly(ctx context.Context) {
	for {
		var id peer.ID
		select {
		case <-ctx.Done():
			return
		case id = <-r.joined:
		}
		r.mu.Lock()
		a, ok := r.early[id]
		delete(r.early, id)
		r.mu.Unlock()
		if !ok || !r.p.isMember(id) {
			continue
		}
		if r.cfg.Verify(a) == ReleaseAccept {
			r.announced.WithLabelValues("accept").Inc()
			r.take(a)
		}
	}
}

// take records an accepted announcement's holder and report, and
// delivers it.
func (r *Releases) take(a ReleaseAnnouncement) {
	r.mu.Lock()
	if a.Target != "" {
		if r.holders[a.Target] == nil {
			r.holders[a.Target] = map[peer.ID]time.Time{}
		}
		r.holders[a.Target][a.From] = time.Now()
	}
	if a.Report.Running != "" || len(a.Report.RolledBack) > 0 {
		if _, ok := r.reports[a.From]; ok || len(r.reports) < maxReports {
			r.reports[a.From] = a.Report
		}
	}
	r.mu.Unlock()
	if r.cfg.Deliver != nil {
		r.cfg.Deliver(a)
	}
}

// republish publishes the current announcement again every Every, and at
// once when a peer this peer had not published it to joins the topic (a
// member that just started, or one whose subscription arrived after the
// first publish).
func (r *Releases) republish(ctx context.Context) {
	t := time.NewTicker(min(r.cfg.Every, time.Second))
	defer t.Stop()
	var last time.Time
	var sentTo map[peer.ID]bool
	var sent *ReleaseAnnouncement
	for {
		select {
		case <-ctx.Done():
			return
		case <-t.C:
		}
		r.mu.Lock()
		cur := r.current
		r.mu.Unlock()
		if cur == nil {
			continue
		}
		peers := r.topic.ListPeers()
		due := time.Since(last) >= r.cfg.Every || cur != sent
		for _, id := range peers {
			due = due || !sentTo[id]
		}
		if !due || len(peers) == 0 {
			continue
		}
		data, err := encodeAnnouncement(*cur)
		if err != nil {
			continue // (Announce encoded it once)
		}
		if err := r.topic.Publish(ctx, data); err != nil {
			if ctx.Err() == nil {
				r.p.log.Debug("overlay: release announcement not published", "err", err)
			}
			continue
		}
		last, sent, sentTo = time.Now(), cur, map[peer.ID]bool{}
		for _, id := range peers {
			sentTo[id] = true
		}
	}
}

// An announcement on the wire: "MRA2", 8 bytes of the time it was sent
// and the author's peer id (uvarint length, bytes) — gossip's message ids
// are content hashes, so without them a republished announcement, or two
// holders' identical ones, would be dropped as duplicates — then one byte
// of target length (0 or 32) and the SHA-256, the report, then the bundle.
// The report is the running version (uvarint length, bytes), a flags byte
// (1: on trial) and a count byte of releases rolled back, each its
// SHA-256, version and reason (uvarint length, bytes). "MRA1" is the same
// without the report.
func encodeAnnouncement(a ReleaseAnnouncement) ([]byte, error) {
	var sum []byte
	if a.Target != "" {
		var err error
		if sum, err = hex.DecodeString(a.Target); err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("overlay: release target %q is not a hex SHA-256", a.Target)
		}
	}
	id := []byte(a.From)
	data := binary.BigEndian.AppendUint64([]byte(announceMagic), uint64(time.Now().UnixNano()))
	data = binary.AppendUvarint(data, uint64(len(id)))
	data = append(data, id...)
	data = append(data, byte(len(sum)))
	data = append(data, sum...)
	data, err := encodeReport(data, a.Report)
	if err != nil {
		return nil, err
	}
	data = append(data, a.Bundle...)
	if len(data) > maxAnnounceBytes {
		return nil, fmt.Errorf("overlay: release announcement of %d bytes, more than %d", len(data), maxAnnounceBytes)
	}
	return data, nil
}

func encodeReport(data []byte, rep ReleaseReport) ([]byte, error) {
	if len(rep.RolledBack) > maxRolledBack {
		return nil, fmt.Errorf("overlay: release report: %d releases rolled back, at most %d", len(rep.RolledBack), maxRolledBack)
	}
	text := func(s string) {
		s = s[:min(len(s), maxReportText)]
		data = binary.AppendUvarint(data, uint64(len(s)))
		data = append(data, s...)
	}
	text(rep.Running)
	var flags byte
	if rep.OnTrial {
		flags |= 1
	}
	data = append(data, flags, byte(len(rep.RolledBack)))
	for _, rb := range rep.RolledBack {
		sum, err := hex.DecodeString(rb.SHA256)
		if err != nil || len(sum) != sha256.Size {
			return nil, fmt.Errorf("overlay: release rolled back %q is not a hex SHA-256", rb.SHA256)
		}
		data = append(data, sum...)
		text(rb.Version)
		text(rb.Reason)
	}
	return data, nil
}

func decodeReport(rest []byte) (ReleaseReport, []byte, error) {
	var rep ReleaseReport
	bad := errors.New("release announcement: bad report")
	text := func() (string, bool) {
		n, w := binary.Uvarint(rest)
		if w <= 0 || n > maxReportText || uint64(len(rest)-w) < n {
			return "", false
		}
		s := string(rest[w : w+int(n)])
		rest = rest[w+int(n):]
		return s, true
	}
	var ok bool
	if rep.Running, ok = text(); !ok || len(rest) < 2 {
		return rep, nil, bad
	}
	rep.OnTrial = rest[0]&1 != 0
	n := int(rest[1])
	rest = rest[2:]
	if n > maxRolledBack {
		return rep, nil, bad
	}
	for range n {
		if len(rest) < sha256.Size {
			return rep, nil, bad
		}
		rb := RolledBack{SHA256: hex.EncodeToString(rest[:sha256.Size])}
		rest = rest[sha256.Size:]
		if rb.Version, ok = text(); !ok {
			return rep, nil, bad
		}
		if rb.Reason, ok = text(); !ok {
			return rep, nil, bad
		}
		rep.RolledBack = append(rep.RolledBack, rb)
	}
	return rep, rest, nil
}

func decodeAnnouncement(data []byte) (ReleaseAnnouncement, error) {
	var a ReleaseAnnouncement
	if len(data) > maxAnnounceBytes || len(data) < len(announceMagic) {
		return a, errors.New("not a release announcement")
	}
	withReport := string(data[:len(announceMagic)]) == announceMagic
	if !withReport && string(data[:len(announceMagicV1)]) != announceMagicV1 {
		return a, errors.New("not a release announcement")
	}
	rest := data[len(announceMagic):]
	if len(rest) < 8 {
		return a, errors.New("release announcement: truncated")
	}
	rest = rest[8:]
	n, w := binary.Uvarint(rest)
	if w <= 0 || n == 0 || n > 128 || uint64(len(rest)-w) < n {
		return a, errors.New("release announcement: bad author")
	}
	id, err := peer.IDFromBytes(rest[w : w+int(n)])
	if err != nil {
		return a, fmt.Errorf("release announcement: author: %w", err)
	}
	rest = rest[w+int(n):]
	if len(rest) < 1 {
		return a, errors.New("release announcement: truncated")
	}
	tl := int(rest[0])
	if (tl != 0 && tl != sha256.Size) || len(rest) < 1+tl {
		return a, errors.New("release announcement: bad target")
	}
	a.From = id
	if tl > 0 {
		a.Target = hex.EncodeToString(rest[1 : 1+tl])
	}
	rest = rest[1+tl:]
	if withReport {
		if a.Report, rest, err = decodeReport(rest); err != nil {
			return a, err
		}
	}
	a.Bundle = rest
	if len(a.Bundle) == 0 {
		return a, errors.New("release announcement: no bundle")
	}
	return a, nil
}

// handle serves one request: 32 bytes of SHA-256 and 8 of offset (big
// endian); the answer is a status byte and the binary's length (8 bytes),
// then, when the status is OK, its bytes from the offset on, paced by the
// limiter.
func (r *Releases) handle(s network.Stream) {
	defer s.Close()
	rt := r.p.cfg.RequestTimeout
	_ = s.SetReadDeadline(time.Now().Add(rt))
	var req [sha256.Size + 8]byte
	if _, err := io.ReadFull(s, req[:]); err != nil {
		s.Reset()
		return
	}
	answer := func(status byte, size int64) error {
		var hdr [9]byte
		hdr[0] = status
		binary.BigEndian.PutUint64(hdr[1:], uint64(size))
		_ = s.SetWriteDeadline(time.Now().Add(rt))
		_, err := s.Write(hdr[:])
		return err
	}
	if !r.p.isMember(s.Conn().RemotePeer()) {
		_ = answer(relNotMember, 0)
		return
	}
	select {
	case r.slots <- struct{}{}:
		defer func() { <-r.slots }()
	default:
		_ = answer(relBusy, 0)
		return
	}
	f, err := os.Open(filepath.Join(r.cfg.Store, hex.EncodeToString(req[:sha256.Size])))
	if err != nil {
		_ = answer(relNotFound, 0)
		return
	}
	defer f.Close()
	st, err := f.Stat()
	if err != nil {
		_ = answer(relNotFound, 0)
		return
	}
	off := int64(binary.BigEndian.Uint64(req[sha256.Size:]))
	if off < 0 || off > st.Size() {
		_ = answer(relBadOffset, st.Size())
		return
	}
	if err := answer(relOK, st.Size()); err != nil {
		s.Reset()
		return
	}
	buf := make([]byte, releaseChunk)
	for off < st.Size() {
		n, err := f.ReadAt(buf[:min(int64(len(buf)), st.Size()-off)], off)
		if n == 0 && err != nil {
			s.Reset()
			return
		}
		if err := r.limiter.WaitN(r.ctx, n); err != nil {
			// shutting down, or the limiter refuses: end the stream short
			// (what was sent stays usable: the member resumes from there)
			return
		}
		_ = s.SetWriteDeadline(time.Now().Add(rt))
		if _, err := s.Write(buf[:n]); err != nil {
			s.Reset()
			return
		}
		r.served.Add(float64(n))
		off += int64(n)
	}
}

// Fetch gets the binary whose SHA-256 is target (hex) and whose length is
// length into path, from the members that announced holding it (Holders),
// resuming from path+".part" where an earlier attempt stopped. It returns
// the member the last bytes came from once path holds length bytes; it
// does not check them — the caller verifies them against the signed
// metadata before anything else.
func (r *Releases) Fetch(ctx context.Context, target string, length int64, path string) (peer.ID, error) {
	sum, err := hex.DecodeString(target)
	if err != nil || len(sum) != sha256.Size {
		return "", fmt.Errorf("overlay: release target %q is not a hex SHA-256", target)
	}
	holders := r.Holders(target)
	if len(holders) == 0 {
		return "", fmt.Errorf("overlay: no live member announced holding %s", target[:12])
	}
	part := path + ".part"
	var errs []error
	for _, id := range holders {
		done, err := r.fetchFrom(ctx, id, sum, length, part)
		if done {
			if err := os.Rename(part, path); err != nil {
				return "", err
			}
			return id, nil
		}
		errs = append(errs, fmt.Errorf("%s: %w", shortID(id), err))
		if ctx.Err() != nil {
			break
		}
	}
	return "", fmt.Errorf("overlay: release %s: %w", target[:12], errors.Join(errs...))
}

func (r *Releases) fetchFrom(ctx context.Context, id peer.ID, sum []byte, length int64, part string) (bool, error) {
	f, err := os.OpenFile(part, os.O_CREATE|os.O_WRONLY, 0o600)
	if err != nil {
		return false, err
	}
	defer f.Close()
	off, err := f.Seek(0, io.SeekEnd)
	if err != nil {
		return false, err
	}
	if off > length {
		// longer than the release: not its bytes; start afresh
		if err := f.Truncate(0); err != nil {
			return false, err
		}
		if off, err = f.Seek(0, io.SeekStart); err != nil {
			return false, err
		}
	}
	if off == length {
		return true, f.Sync()
	}
	rt := r.p.cfg.RequestTimeout
	sctx, cancel := context.WithTimeout(ctx, rt)
	s, err := r.p.h.NewStream(sctx, id, ProtoRelease)
	cancel()
	if err != nil {
		return false, err
	}
	defer s.Close()
	stop := context.AfterFunc(ctx, func() { s.Reset() })
	defer stop()
	var req [sha256.Size + 8]byte
	copy(req[:], sum)
	binary.BigEndian.PutUint64(req[sha256.Size:], uint64(off))
	_ = s.SetDeadline(time.Now().Add(rt))
	if _, err := s.Write(req[:]); err != nil {
		return false, err
	}
	if err := s.CloseWrite(); err != nil {
		return false, err
	}
	var hdr [9]byte
	if _, err := io.ReadFull(s, hdr[:]); err != nil {
		return false, err
	}
	switch hdr[0] {
	case relOK:
	case relNotMember, relBusy:
		return false, fmt.Errorf("refused: %s: %w", relStatusText[hdr[0]], ErrReleaseTryLater)
	default:
		return false, fmt.Errorf("refused: %s", relStatusText[hdr[0]])
	}
	if size := int64(binary.BigEndian.Uint64(hdr[1:])); size != length {
		return false, fmt.Errorf("holds %d bytes, the release has %d", size, length)
	}
	buf := make([]byte, releaseChunk)
	for off < length {
		_ = s.SetReadDeadline(time.Now().Add(rt))
		n, err := s.Read(buf[:min(int64(len(buf)), length-off)])
		if n > 0 {
			if _, werr := f.Write(buf[:n]); werr != nil {
				return false, werr
			}
			off += int64(n)
			r.fetched.Add(float64(n))
		}
		if err != nil && off < length {
			if ctx.Err() != nil {
				return false, ctx.Err()
			}
			return false, fmt.Errorf("cut at byte %d of %d: %w", off, length, err)
		}
	}
	return true, f.Sync()
}
