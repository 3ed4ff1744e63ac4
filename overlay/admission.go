package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/overlay/pb"
)

// A network with admission has a network key, held by the operator of its
// index sink (the one central role the design allows). The key signs
// membership certificates, one per admitted peer, and revocation lists.
// Peers of such a network take a heartbeat, a delegation record's owner,
// decider and block owners, only with a valid certificate, so a sybil's
// identities are no members and cannot write records that others keep.
// Without a network key (open mode) anyone who runs the binary is a member.

const (
	certDomain       = "micra-membership-cert"
	revocationDomain = "micra-membership-revocations"

	// maxCertBytes bounds a sealed certificate (about 200 bytes in practice).
	maxCertBytes = 1 << 10
	// maxRevocationBytes bounds a sealed revocation list: about 25,000 peers.
	maxRevocationBytes = 1 << 20
	// revocationEvery: how often the holder of a list republishes it, so a
	// peer that joined later learns it.
	revocationEvery = time.Minute
)

var (
	certCodec       = []byte("/micra/membership/cert/1")
	revocationCodec = []byte("/micra/membership/revocations/1")
)

// TopicRevocations carries the network's revocation lists.
const TopicRevocations = "micra/revocations/1"

type certPayload struct{ pb.MembershipCertificate }

func (*certPayload) Domain() string { return certDomain }
func (*certPayload) Codec() []byte  { return certCodec }
func (c *certPayload) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&c.MembershipCertificate)
}
func (c *certPayload) UnmarshalRecord(b []byte) error {
	return proto.Unmarshal(b, &c.MembershipCertificate)
}

type revocationPayload struct{ pb.RevocationList }

func (*revocationPayload) Domain() string { return revocationDomain }
func (*revocationPayload) Codec() []byte  { return revocationCodec }
func (r *revocationPayload) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&r.RevocationList)
}
func (r *revocationPayload) UnmarshalRecord(b []byte) error {
	return proto.Unmarshal(b, &r.RevocationList)
}

// Certificate is a membership certificate's content.
type Certificate struct {
	Network   peer.ID // the network key that signed it
	Peer      peer.ID
	Sink      bool // it may announce the index sink role
	NotBefore time.Time
	NotAfter  time.Time
	Serial    uint64
}

// IssueCertificate signs c with the network key. c.Network is ignored: the
// key is the network.
func IssueCertificate(network crypto.PrivKey, c Certificate) ([]byte, error) {
	if c.Peer == "" {
		return nil, errors.New("certificate: no peer")
	}
	if !c.NotAfter.After(c.NotBefore) {
		return nil, fmt.Errorf("certificate: expires (%v) before it starts (%v)", c.NotAfter, c.NotBefore)
	}
	env, err := record.Seal(&certPayload{pb.MembershipCertificate{
		Version: wireVersion, Peer: []byte(c.Peer), Sink: c.Sink,
		NotBeforeUnix: c.NotBefore.Unix(), NotAfterUnix: c.NotAfter.Unix(), Serial: c.Serial,
	}}, network)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// OpenCertificate verifies a sealed certificate's signature and returns
// its content; whether it is valid now, and for which network, is the
// caller's (Admission.Check).
func OpenCertificate(raw []byte) (Certificate, error) {
	if len(raw) > maxCertBytes {
		return Certificate{}, fmt.Errorf("certificate of %d bytes exceeds %d", len(raw), maxCertBytes)
	}
	var cp certPayload
	env, err := record.ConsumeTypedEnvelope(raw, &cp)
	if err != nil {
		return Certificate{}, fmt.Errorf("certificate: %w", err)
	}
	if !bytes.Equal(env.PayloadType, certCodec) {
		return Certificate{}, errors.New("certificate: wrong payload type")
	}
	if n := len(cp.ProtoReflect().GetUnknown()); n > 0 {
		return Certificate{}, fmt.Errorf("certificate: %d bytes of fields this version does not know", n)
	}
	netID, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return Certificate{}, fmt.Errorf("certificate: signer: %w", err)
	}
	id, err := peer.IDFromBytes(cp.Peer)
	if err != nil {
		return Certificate{}, fmt.Errorf("certificate: peer: %w", err)
	}
	return Certificate{
		Network: netID, Peer: id, Sink: cp.Sink, Serial: cp.Serial,
		NotBefore: time.Unix(cp.NotBeforeUnix, 0), NotAfter: time.Unix(cp.NotAfterUnix, 0),
	}, nil
}

// Revocations is a revocation list's content.
type Revocations struct {
	Network peer.ID
	Seq     uint64
	At      time.Time
	Peers   []peer.ID
}

// SignRevocations signs r with the network key (r.Network is ignored).
func SignRevocations(network crypto.PrivKey, r Revocations) ([]byte, error) {
	rp := &revocationPayload{pb.RevocationList{Version: wireVersion, Seq: r.Seq, AtUnix: r.At.Unix()}}
	for _, id := range r.Peers {
		rp.Peers = append(rp.Peers, []byte(id))
	}
	env, err := record.Seal(rp, network)
	if err != nil {
		return nil, err
	}
	b, err := env.Marshal()
	if err == nil && len(b) > maxRevocationBytes {
		err = fmt.Errorf("revocation list of %d bytes exceeds %d", len(b), maxRevocationBytes)
	}
	return b, err
}

// OpenRevocations verifies a sealed revocation list's signature and returns
// its content.
func OpenRevocations(raw []byte) (Revocations, error) {
	if len(raw) > maxRevocationBytes {
		return Revocations{}, fmt.Errorf("revocation list of %d bytes exceeds %d", len(raw), maxRevocationBytes)
	}
	var rp revocationPayload
	env, err := record.ConsumeTypedEnvelope(raw, &rp)
	if err != nil {
		return Revocations{}, fmt.Errorf("revocation list: %w", err)
	}
	if !bytes.Equal(env.PayloadType, revocationCodec) {
		return Revocations{}, errors.New("revocation list: wrong payload type")
	}
	if n := len(rp.ProtoReflect().GetUnknown()); n > 0 {
		return Revocations{}, fmt.Errorf("revocation list: %d bytes of fields this version does not know", n)
	}
	netID, err := peer.IDFromPublicKey(env.PublicKey)
	if err != nil {
		return Revocations{}, fmt.Errorf("revocation list: signer: %w", err)
	}
	r := Revocations{Network: netID, Seq: rp.Seq, At: time.Unix(rp.AtUnix, 0)}
	for i, b := range rp.Peers {
		id, err := peer.IDFromBytes(b)
		if err != nil {
			return Revocations{}, fmt.Errorf("revocation list: peer %d: %w", i, err)
		}
		r.Peers = append(r.Peers, id)
	}
	return r, nil
}

// Admission is a peer's view of its network's admission: the network key's
// identity, this peer's own certificate and the latest revocation list. It
// is safe for concurrent use; the zero value is not usable (NewAdmission).
type Admission struct {
	network peer.ID
	own     []byte
	ownCert Certificate
	file    string
	now     func() time.Time

	mu      sync.RWMutex
	checked map[[32]byte]Certificate // certificates whose signature was verified
	revoked map[peer.ID]struct{}
	revSeq  uint64
	revRaw  []byte
}

// maxCheckedCerts bounds Admission's cache of verified certificates
// (cleared when full; a verification is one Ed25519 check).
const maxCheckedCerts = 4096

// NewAdmission returns the admission of network for a peer holding cert
// (nil: a peer that checks others but is no member itself, e.g. a tool).
// revocationFile, if set, keeps the latest revocation list across restarts:
// it is read now (a missing file is no list) and written on every newer one.
func NewAdmission(network peer.ID, cert []byte, revocationFile string) (*Admission, error) {
	if network == "" {
		return nil, errors.New("admission: no network key")
	}
	if _, err := network.ExtractPublicKey(); err != nil {
		return nil, fmt.Errorf("admission: network %s: not a public key identity: %w", network, err)
	}
	a := &Admission{network: network, file: revocationFile, now: time.Now,
		checked: make(map[[32]byte]Certificate), revoked: make(map[peer.ID]struct{})}
	if cert != nil {
		c, err := OpenCertificate(cert)
		if err != nil {
			return nil, fmt.Errorf("admission: own certificate: %w", err)
		}
		if c.Network != network {
			return nil, fmt.Errorf("admission: own certificate is of network %s, not %s", c.Network, network)
		}
		a.own, a.ownCert = cert, c
	}
	if revocationFile != "" {
		raw, err := os.ReadFile(revocationFile)
		switch {
		case errors.Is(err, os.ErrNotExist):
		case err != nil:
			return nil, fmt.Errorf("admission: %w", err)
		default:
			if _, err := a.applyRevocations(raw, false); err != nil {
				return nil, fmt.Errorf("admission: %s: %w", revocationFile, err)
			}
		}
	}
	return a, nil
}

// Network is the network key's identity.
func (a *Admission) Network() peer.ID { return a.network }

// Own is this peer's certificate (nil: none).
func (a *Admission) Own() []byte { return a.own }

// OwnCertificate is the content of this peer's certificate.
func (a *Admission) OwnCertificate() Certificate { return a.ownCert }

// ErrNotAdmitted is wrapped by every refusal of Check.
var ErrNotAdmitted = errors.New("not admitted")

// Check returns raw's content if it is a certificate of this network for
// id, valid now (within clockSkew of its validity) and not revoked.
func (a *Admission) Check(id peer.ID, raw []byte) (Certificate, error) {
	if len(raw) == 0 {
		return Certificate{}, fmt.Errorf("%w: %s has no certificate", ErrNotAdmitted, shortID(id))
	}
	c, err := a.open(raw)
	if err != nil {
		return Certificate{}, fmt.Errorf("%w: %w", ErrNotAdmitted, err)
	}
	now := a.now()
	switch {
	case c.Network != a.network:
		return c, fmt.Errorf("%w: %s's certificate is of network %s", ErrNotAdmitted, shortID(id), shortID(c.Network))
	case c.Peer != id:
		return c, fmt.Errorf("%w: certificate of %s presented for %s", ErrNotAdmitted, shortID(c.Peer), shortID(id))
	case now.Add(clockSkew).Before(c.NotBefore):
		return c, fmt.Errorf("%w: %s's certificate starts at %v", ErrNotAdmitted, shortID(id), c.NotBefore)
	case now.Add(-clockSkew).After(c.NotAfter):
		return c, fmt.Errorf("%w: %s's certificate expired at %v", ErrNotAdmitted, shortID(id), c.NotAfter)
	case a.Revoked(id):
		return c, fmt.Errorf("%w: %s is revoked", ErrNotAdmitted, shortID(id))
	}
	return c, nil
}

// open is OpenCertificate, its signature verified once per certificate.
func (a *Admission) open(raw []byte) (Certificate, error) {
	sum := sha256.Sum256(raw)
	a.mu.RLock()
	c, ok := a.checked[sum]
	a.mu.RUnlock()
	if ok {
		return c, nil
	}
	c, err := OpenCertificate(raw)
	if err != nil {
		return c, err
	}
	a.mu.Lock()
	if len(a.checked) >= maxCheckedCerts {
		clear(a.checked)
	}
	a.checked[sum] = c
	a.mu.Unlock()
	return c, nil
}

// recordSigners are the peers whose certificates a record must carry: its
// owner, its decider and its block owners.
func recordSigners(rec delegation.Record) []delegation.CrawlerID {
	ids := []delegation.CrawlerID{rec.Owner, rec.DecidedBy}
	for _, b := range rec.Blocks {
		ids = append(ids, b.Owner)
	}
	slices.Sort(ids)
	return slices.Compact(ids)
}

// checkRecord refuses a record unless its owner, decider and block owners
// each have a valid certificate among certs: a record that a sybil owns or
// decides is then refused by every peer's DHT validator, without knowing
// the membership.
func (a *Admission) checkRecord(rec delegation.Record, certs [][]byte) error {
	byPeer := make(map[peer.ID][]byte, len(certs))
	for _, raw := range certs {
		c, err := a.open(raw)
		if err != nil {
			return fmt.Errorf("%w: %w", ErrNotAdmitted, err)
		}
		byPeer[c.Peer] = raw
	}
	for _, cid := range recordSigners(rec) {
		id, err := peer.Decode(string(cid))
		if err != nil {
			return fmt.Errorf("%s: %w", cid, err)
		}
		if _, err := a.Check(id, byPeer[id]); err != nil {
			return err
		}
	}
	return nil
}

// recordCerts are the certificates a record this peer seals must carry
// (nil in an open network): its own and those the others' heartbeats
// carried.
func (p *Peer) recordCerts(rec delegation.Record) ([][]byte, error) {
	adm := p.cfg.Admission
	if adm == nil {
		return nil, nil
	}
	var certs [][]byte
	for _, cid := range recordSigners(rec) {
		if cid == p.selfID {
			certs = append(certs, adm.Own())
			continue
		}
		id, err := peer.Decode(string(cid))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", cid, err)
		}
		c := p.members.Certificate(id)
		if c == nil {
			return nil, fmt.Errorf("%w: no certificate of %s heard (not a live member)", ErrNotAdmitted, shortID(id))
		}
		certs = append(certs, c)
	}
	return certs, nil
}

// Revoked reports whether the latest revocation list names id.
func (a *Admission) Revoked(id peer.ID) bool {
	a.mu.RLock()
	defer a.mu.RUnlock()
	_, ok := a.revoked[id]
	return ok
}

// Revocations returns the latest revocation list (sealed) and its
// sequence number; nil if none.
func (a *Admission) Revocations() ([]byte, uint64) {
	a.mu.RLock()
	defer a.mu.RUnlock()
	return a.revRaw, a.revSeq
}

// ApplyRevocations takes a sealed revocation list if it is the network's
// and newer than the one held, keeps it in the revocation file, and
// returns the peers it newly revokes. An older or equal list is no error
// and changes nothing.
func (a *Admission) ApplyRevocations(raw []byte) ([]peer.ID, error) {
	return a.applyRevocations(raw, true)
}

// applyRevocations is ApplyRevocations; keep: write a newer list to the
// revocation file (not when it was read from there).
func (a *Admission) applyRevocations(raw []byte, keep bool) ([]peer.ID, error) {
	r, err := OpenRevocations(raw)
	if err != nil {
		return nil, err
	}
	if r.Network != a.network {
		return nil, fmt.Errorf("revocation list of network %s, not %s", r.Network, a.network)
	}
	a.mu.Lock()
	if r.Seq <= a.revSeq && a.revRaw != nil {
		a.mu.Unlock()
		return nil, nil
	}
	var added []peer.ID
	revoked := make(map[peer.ID]struct{}, len(r.Peers))
	for _, id := range r.Peers {
		if _, ok := a.revoked[id]; !ok {
			added = append(added, id)
		}
		revoked[id] = struct{}{}
	}
	a.revoked, a.revSeq, a.revRaw = revoked, r.Seq, slices.Clone(raw)
	a.mu.Unlock()
	if keep && a.file != "" {
		if err := WriteFileAtomic(a.file, raw, 0o644); err != nil {
			return added, fmt.Errorf("revocation list: keep: %w", err)
		}
	}
	return added, nil
}

// AddRevocations returns the list that follows current (a sealed list of
// the same network, or nil for the first) with peers added: its sequence
// number one higher, signed with the network key.
func AddRevocations(network crypto.PrivKey, current []byte, peers []peer.ID, now time.Time) ([]byte, Revocations, error) {
	netID, err := peer.IDFromPrivateKey(network)
	if err != nil {
		return nil, Revocations{}, err
	}
	next := Revocations{Network: netID, Seq: 1, At: now}
	if current != nil {
		cur, err := OpenRevocations(current)
		if err != nil {
			return nil, Revocations{}, err
		}
		if cur.Network != netID {
			return nil, Revocations{}, fmt.Errorf("the revocation list is of network %s, the key of %s", cur.Network, netID)
		}
		next.Seq, next.Peers = cur.Seq+1, cur.Peers
	}
	for _, id := range peers {
		if !slices.Contains(next.Peers, id) {
			next.Peers = append(next.Peers, id)
		}
	}
	raw, err := SignRevocations(network, next)
	return raw, next, err
}
