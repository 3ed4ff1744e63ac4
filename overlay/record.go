package overlay

import (
	"bytes"
	"crypto/sha256"
	"errors"
	"fmt"
	"net/netip"
	"slices"
	"strconv"
	"strings"
	"sync"
	"time"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"github.com/libp2p/go-libp2p/core/record"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/delegation"
	"github.com/micra-crawler/micra/hierarchy"
	"github.com/micra-crawler/micra/overlay/pb"
)

// A delegation record in the DHT is two nested signed envelopes:
//
//	outer (signed by the deciding peer, domain micra-deleg-decision)
//	  └ inner (signed by the owner, domain micra-deleg-owner)
//	      └ DelegationRecord
//
// The owner's signature is obtained over /micra/endorse/1: the decider sends
// the unsigned record, the owner checks it (its snapshot, an RTT it really
// reported, a plausible epoch) and returns its sealed envelope. When the
// decider is the owner (joining, republishing) it signs both layers itself.
// Nobody can thus make a peer own a subnet against its will, and nobody can
// claim to have decided a delegation they did not sign.

const (
	// DelegNamespace is the DHT validator namespace (the key's first segment).
	DelegNamespace = "micra"
	delegPrefix    = "/micra/deleg/"

	maxRecordBytes = 12 << 10 // 16 blocks with consents and 18 certificates: about 8 KiB
	maxProbes      = 64
	maxOwnerRTT    = 5 * time.Minute
	clockSkew      = 5 * time.Minute

	ownerDomain    = "micra-deleg-owner"
	decisionDomain = "micra-deleg-decision"
)

var (
	ownerCodec    = []byte("/micra/deleg/owner/1")
	decisionCodec = []byte("/micra/deleg/decision/1")
)

// DelegKey is the DHT key of subnet s's delegation.
func DelegKey(s hierarchy.NodeID) string { return delegPrefix + strconv.FormatUint(uint64(s), 10) }

// parseDelegKey returns the subnet named by a DHT key.
func parseDelegKey(key string) (hierarchy.NodeID, error) {
	rest, ok := strings.CutPrefix(key, delegPrefix)
	if !ok {
		return 0, fmt.Errorf("key %q: not under %s", key, delegPrefix)
	}
	n, err := strconv.ParseUint(rest, 10, 32)
	if err != nil || hierarchy.NodeID(n) == hierarchy.None || strconv.FormatUint(n, 10) != rest {
		return 0, fmt.Errorf("key %q: subnet is not a canonical node id", key)
	}
	return hierarchy.NodeID(n), nil
}

// ownerPayload is the inner envelope's payload type.
type ownerPayload struct{ pb.DelegationRecord }

func (*ownerPayload) Domain() string { return ownerDomain }
func (*ownerPayload) Codec() []byte  { return ownerCodec }
func (o *ownerPayload) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&o.DelegationRecord)
}
func (o *ownerPayload) UnmarshalRecord(b []byte) error {
	return proto.Unmarshal(b, &o.DelegationRecord)
}

// decisionPayload is the outer envelope's payload type.
type decisionPayload struct{ pb.Decision }

func (*decisionPayload) Domain() string { return decisionDomain }
func (*decisionPayload) Codec() []byte  { return decisionCodec }
func (d *decisionPayload) MarshalRecord() ([]byte, error) {
	return proto.MarshalOptions{Deterministic: true}.Marshal(&d.Decision)
}
func (d *decisionPayload) UnmarshalRecord(b []byte) error { return proto.Unmarshal(b, &d.Decision) }

// toPB converts an engine record to its wire form.
func toPB(r delegation.Record) (*pb.DelegationRecord, error) {
	owner, err := peer.Decode(string(r.Owner))
	if err != nil {
		return nil, fmt.Errorf("record owner %q: %w", r.Owner, err)
	}
	dec, err := peer.Decode(string(r.DecidedBy))
	if err != nil {
		return nil, fmt.Errorf("record decided_by %q: %w", r.DecidedBy, err)
	}
	if len(r.Probes) > maxProbes {
		r.Probes = r.Probes[:maxProbes]
	}
	m := &pb.DelegationRecord{
		Version:    wireVersion,
		Subnet:     uint32(r.Subnet),
		Snapshot:   append([]byte(nil), r.Snapshot[:]...),
		Owner:      []byte(owner),
		OwnerRttNs: int64(r.OwnerRTT),
		Epoch:      r.Epoch,
		DecidedBy:  []byte(dec),
		AtUnixNano: r.At.UnixNano(),
	}
	for i, p := range r.Probes {
		if slices.ContainsFunc(r.Probes[:i], func(q delegation.ProbeResult) bool { return q.Crawler == p.Crawler }) {
			continue // one answer a crawler (fromPB refuses two): the first, the best ranked
		}
		id, err := peer.Decode(string(p.Crawler))
		if err != nil {
			return nil, fmt.Errorf("record probe crawler %q: %w", p.Crawler, err)
		}
		m.Probes = append(m.Probes, &pb.ProbeSample{Crawler: []byte(id), RttNs: int64(p.RTT), Ok: p.OK})
	}
	for _, b := range r.Blocks {
		id, err := peer.Decode(string(b.Owner))
		if err != nil {
			return nil, fmt.Errorf("record block %v owner %q: %w", b.Host, b.Owner, err)
		}
		if !b.Host.IsValid() {
			return nil, fmt.Errorf("record block owned by %s has no host", b.Owner)
		}
		m.Blocks = append(m.Blocks, &pb.BlockDelegation{Host: b.Host.Unmap().AsSlice(), Owner: []byte(id), OwnerRttNs: int64(b.OwnerRTT), Consent: b.Consent})
	}
	return m, nil
}

// fromPB converts and checks the wire form (without signatures). Every
// field it carries steers other peers' policies, so nothing is taken on
// trust: fields this version does not know (bytes a signer's peers would
// store and pass on unread) and a crawler probed twice are refused.
func fromPB(m *pb.DelegationRecord) (delegation.Record, error) {
	var r delegation.Record
	if n := len(m.ProtoReflect().GetUnknown()); n > 0 {
		return r, fmt.Errorf("%d bytes of fields this version does not know", n)
	}
	if len(m.Snapshot) != len(r.Snapshot) {
		return r, fmt.Errorf("snapshot id has %d bytes, want %d", len(m.Snapshot), len(r.Snapshot))
	}
	owner, err := peer.IDFromBytes(m.Owner)
	if err != nil {
		return r, fmt.Errorf("owner: %w", err)
	}
	dec, err := peer.IDFromBytes(m.DecidedBy)
	if err != nil {
		return r, fmt.Errorf("decided_by: %w", err)
	}
	if m.OwnerRttNs < 0 || time.Duration(m.OwnerRttNs) > maxOwnerRTT {
		return r, fmt.Errorf("owner rtt %v implausible", time.Duration(m.OwnerRttNs))
	}
	if len(m.Probes) > maxProbes {
		return r, fmt.Errorf("%d probes, limit %d", len(m.Probes), maxProbes)
	}
	if hierarchy.NodeID(m.Subnet) == hierarchy.None {
		return r, errors.New("subnet is None")
	}
	r.Subnet = hierarchy.NodeID(m.Subnet)
	copy(r.Snapshot[:], m.Snapshot)
	r.Owner = delegation.CrawlerID(owner.String())
	r.OwnerRTT = time.Duration(m.OwnerRttNs)
	r.Epoch = m.Epoch
	r.DecidedBy = delegation.CrawlerID(dec.String())
	r.At = time.Unix(0, m.AtUnixNano)
	for i, p := range m.Probes {
		id, err := peer.IDFromBytes(p.Crawler)
		if err != nil {
			return r, fmt.Errorf("probe %d crawler: %w", i, err)
		}
		if p.RttNs < 0 || time.Duration(p.RttNs) > maxOwnerRTT {
			return r, fmt.Errorf("probe %d rtt implausible", i)
		}
		if len(p.ProtoReflect().GetUnknown()) > 0 {
			return r, fmt.Errorf("probe %d: fields this version does not know", i)
		}
		c := delegation.CrawlerID(id.String())
		if slices.ContainsFunc(r.Probes, func(q delegation.ProbeResult) bool { return q.Crawler == c }) {
			return r, fmt.Errorf("probe %d: crawler %s probed twice", i, c)
		}
		r.Probes = append(r.Probes, delegation.ProbeResult{Crawler: c, RTT: time.Duration(p.RttNs), OK: p.Ok})
	}
	if len(m.Blocks) > delegation.MaxBlocks {
		return r, fmt.Errorf("%d block delegations, limit %d", len(m.Blocks), delegation.MaxBlocks)
	}
	for i, b := range m.Blocks {
		host, ok := netip.AddrFromSlice(b.Host)
		if !ok || host.Is4In6() {
			return r, fmt.Errorf("block %d: host of %d bytes is not an address", i, len(b.Host))
		}
		id, err := peer.IDFromBytes(b.Owner)
		if err != nil {
			return r, fmt.Errorf("block %d owner: %w", i, err)
		}
		if b.OwnerRttNs < 0 || time.Duration(b.OwnerRttNs) > maxOwnerRTT {
			return r, fmt.Errorf("block %d owner rtt implausible", i)
		}
		if len(b.ProtoReflect().GetUnknown()) > 0 {
			return r, fmt.Errorf("block %d: fields this version does not know", i)
		}
		bd := delegation.BlockDelegation{Host: host, Owner: delegation.CrawlerID(id.String()), OwnerRTT: time.Duration(b.OwnerRttNs), Consent: b.Consent}
		if bd.Owner == r.Owner {
			return r, fmt.Errorf("block %d: %v delegated to the subnet's own owner", i, bd.Block())
		}
		for _, o := range r.Blocks {
			if o.Block() == bd.Block() {
				return r, fmt.Errorf("block %d: %v delegated twice", i, bd.Block())
			}
		}
		r.Blocks = append(r.Blocks, bd)
	}
	return r, nil
}

// sealOwner signs rec as its owner (sk must be the owner's key).
func sealOwner(m *pb.DelegationRecord, sk crypto.PrivKey) ([]byte, error) {
	env, err := record.Seal(&ownerPayload{DelegationRecord: *proto.CloneOf(m)}, sk)
	if err != nil {
		return nil, err
	}
	return env.Marshal()
}

// sealDecision wraps the owner's envelope in the decider's signature,
// with the membership certificates a network with admission asks of a
// record (Peer.recordCerts; none in an open network).
func sealDecision(ownerEnv []byte, sk crypto.PrivKey, certs ...[]byte) ([]byte, error) {
	env, err := record.Seal(&decisionPayload{Decision: pb.Decision{Version: wireVersion, OwnerEnvelope: ownerEnv, Certificates: certs}}, sk)
	if err != nil {
		return nil, err
	}
	b, err := env.Marshal()
	if err != nil {
		return nil, err
	}
	if len(b) > maxRecordBytes {
		return nil, fmt.Errorf("delegation record of %d bytes exceeds %d", len(b), maxRecordBytes)
	}
	return b, nil
}

// openRecord verifies both signatures of a DHT value and returns the record.
// It checks that the owner signed the inner and the decider the outer
// envelope; snapshot and time checks are the validator's.
func openRecord(value []byte) (delegation.Record, error) {
	rec, _, err := openSealed(value)
	return rec, err
}

// openSealed is openRecord, also returning the membership certificates
// the decision carries (unchecked: Admission.checkRecord).
func openSealed(value []byte) (delegation.Record, [][]byte, error) {
	rec, err := openEnvelopes(value)
	if err != nil {
		return rec.Record, nil, err
	}
	return rec.Record, rec.certs, nil
}

// sealedRecord is a verified record and the certificates its decision carries.
type sealedRecord struct {
	delegation.Record
	certs [][]byte
}

func openEnvelopes(value []byte) (sealedRecord, error) {
	var zero sealedRecord
	if len(value) > maxRecordBytes {
		return zero, fmt.Errorf("record of %d bytes exceeds %d", len(value), maxRecordBytes)
	}
	var dp decisionPayload
	outer, err := record.ConsumeTypedEnvelope(value, &dp)
	if err != nil {
		return zero, fmt.Errorf("decision envelope: %w", err)
	}
	if !bytes.Equal(outer.PayloadType, decisionCodec) {
		return zero, errors.New("decision envelope: wrong payload type")
	}
	if n := len(dp.ProtoReflect().GetUnknown()); n > 0 {
		return zero, fmt.Errorf("decision: %d bytes of fields this version does not know", n)
	}
	if n := len(dp.Certificates); n > maxRecordCerts {
		return zero, fmt.Errorf("decision: %d certificates, limit %d", n, maxRecordCerts)
	}
	var op ownerPayload
	inner, err := record.ConsumeTypedEnvelope(dp.OwnerEnvelope, &op)
	if err != nil {
		return zero, fmt.Errorf("owner envelope: %w", err)
	}
	if !bytes.Equal(inner.PayloadType, ownerCodec) {
		return zero, errors.New("owner envelope: wrong payload type")
	}
	rec, err := fromPB(&op.DelegationRecord)
	if err != nil {
		return zero, err
	}
	for _, b := range rec.Blocks {
		if err := checkConsent(rec.Snapshot, rec.Subnet, b); err != nil {
			return zero, err
		}
	}
	decider, err := peer.IDFromPublicKey(outer.PublicKey)
	if err != nil {
		return zero, err
	}
	owner, err := peer.IDFromPublicKey(inner.PublicKey)
	if err != nil {
		return zero, err
	}
	if string(rec.Owner) != owner.String() {
		return zero, fmt.Errorf("owner envelope signed by %s, record names owner %s", owner, rec.Owner)
	}
	if string(rec.DecidedBy) != decider.String() {
		return zero, fmt.Errorf("decision envelope signed by %s, record names decider %s", decider, rec.DecidedBy)
	}
	return sealedRecord{rec, dp.Certificates}, nil
}

// maxRecordCerts: a record names at most an owner, a decider and
// delegation.MaxBlocks block owners.
const maxRecordCerts = 2 + delegation.MaxBlocks

// RecordValidator is the DHT validator for namespace "micra". Keys
// /micra/deleg/<subnet> hold delegation records; other sub-namespaces are
// rejected.
type RecordValidator struct {
	Snapshot hierarchy.SnapshotID
	MaxAge   time.Duration
	Now      func() time.Time
	// Nodes, if set, is the tree's node count: subnets must be below it
	// (and not the root).
	Nodes int
	// Tree, if set, is the hierarchy: every block delegation's host must
	// be in the record's subnet.
	Tree delegation.Tree
	// Verified, if set, remembers values whose signatures were checked, so
	// the DHT's repeated Validate/Select calls on the same bytes cost a
	// hash instead of two Ed25519 verifications.
	Verified *VerifiedCache
	// Admission, if set (a network with admission): the record's owner,
	// decider and block owners must each have a valid, unrevoked
	// certificate among those the decision carries.
	Admission *Admission
}

// VerifiedCache maps SHA-256(value) to its verified record. Bounded: it is
// cleared when full (entries are cheap to recompute).
type VerifiedCache struct {
	mu  sync.Mutex
	max int
	m   map[[32]byte]sealedRecord
}

// NewVerifiedCache returns a cache of at most max entries.
func NewVerifiedCache(max int) *VerifiedCache {
	return &VerifiedCache{max: max, m: make(map[[32]byte]sealedRecord)}
}

// open verifies and decodes value, and returns it with its SHA-256 (the
// cache's key, which the directory keeps in place of the value).
func (c *VerifiedCache) open(value []byte) (sealedRecord, [32]byte, error) {
	if c == nil {
		rec, err := openEnvelopes(value)
		return rec, sha256.Sum256(value), err
	}
	if len(value) > maxRecordBytes {
		return sealedRecord{}, [32]byte{}, fmt.Errorf("record of %d bytes exceeds %d", len(value), maxRecordBytes)
	}
	h := sha256.Sum256(value)
	c.mu.Lock()
	rec, ok := c.m[h]
	c.mu.Unlock()
	if ok {
		rec.Probes = slices.Clone(rec.Probes) // callers own what they get
		rec.Blocks = slices.Clone(rec.Blocks)
		return rec, h, nil
	}
	rec, err := openEnvelopes(value)
	if err != nil {
		return rec, h, err
	}
	c.mu.Lock()
	if len(c.m) >= c.max {
		clear(c.m)
	}
	c.m[h] = rec
	c.mu.Unlock()
	// the cache keeps its own slices: callers own what they get
	rec.Probes, rec.Blocks = slices.Clone(rec.Probes), slices.Clone(rec.Blocks)
	return rec, h, nil
}

// Validate implements record.Validator.
func (v RecordValidator) Validate(key string, value []byte) error {
	if !strings.HasPrefix(key, delegPrefix) {
		return fmt.Errorf("micra validator: unknown key %q (only %s<subnet> is stored)", key, delegPrefix)
	}
	_, _, err := v.check(key, value)
	return err
}

// check verifies value as the record under key and returns it (the
// caller's own copy) with the value's SHA-256.
func (v RecordValidator) check(key string, value []byte) (delegation.Record, [32]byte, error) {
	s, err := parseDelegKey(key)
	if err != nil {
		return delegation.Record{}, [32]byte{}, fmt.Errorf("micra validator: %w", err)
	}
	sealed, sum, err := v.Verified.open(value)
	rec := sealed.Record
	if err != nil {
		return rec, sum, fmt.Errorf("micra validator: %s: %w", key, err)
	}
	if rec.Subnet != s {
		return rec, sum, fmt.Errorf("micra validator: %s: record is for subnet %d", key, rec.Subnet)
	}
	if v.Nodes > 0 && (int(s) >= v.Nodes || s == hierarchy.Root) {
		return rec, sum, fmt.Errorf("micra validator: %s: subnet %d is not a subnet of the hierarchy (%d nodes)", key, s, v.Nodes)
	}
	if rec.Snapshot != v.Snapshot {
		return rec, sum, fmt.Errorf("micra validator: %s: snapshot %x, this peer runs %x", key, rec.Snapshot[:6], v.Snapshot[:6])
	}
	if v.Tree != nil {
		for _, b := range rec.Blocks {
			if v.Tree.SmallestNonUnary(b.Host) != s {
				return rec, sum, fmt.Errorf("micra validator: %s: block %v is not in subnet %d", key, b.Block(), s)
			}
		}
	}
	now := time.Now
	if v.Now != nil {
		now = v.Now
	}
	t := now()
	if rec.At.After(t.Add(clockSkew)) {
		return rec, sum, fmt.Errorf("micra validator: %s: record time %v is in the future", key, rec.At)
	}
	if c := delegation.EpochCeiling(rec.At); rec.Epoch > c {
		// an epoch far ahead of its time would win over every honest
		// successor (delegation.NextEpoch)
		return rec, sum, fmt.Errorf("micra validator: %s: epoch %d is past its time's ceiling %d", key, rec.Epoch, c)
	}
	if v.MaxAge > 0 && rec.At.Before(t.Add(-v.MaxAge-clockSkew)) {
		return rec, sum, fmt.Errorf("micra validator: %s: record from %v is older than %v", key, rec.At, v.MaxAge)
	}
	if v.Admission != nil {
		if err := v.Admission.checkRecord(rec, sealed.certs); err != nil {
			return rec, sum, fmt.Errorf("micra validator: %s: %w", key, err)
		}
	}
	return rec, sum, nil
}

// Select implements record.Validator: the best of vals, by Better. Invalid
// values always lose. Ties (identical records) return the lowest index,
// which the DHT needs to accept re-puts of identical bytes.
func (v RecordValidator) Select(key string, vals [][]byte) (int, error) {
	best := -1
	var bestRec delegation.Record
	for i, val := range vals {
		rec, _, err := v.check(key, val)
		if err != nil {
			continue
		}
		if best < 0 || Better(rec, val, bestRec, vals[best]) {
			best, bestRec = i, rec
		}
	}
	if best < 0 {
		return 0, errors.New("micra validator: no valid record to select")
	}
	return best, nil
}

// Better is the DHT's Select rule: delegation.Compare, the one Select order,
// and where that ties, the lower SHA-256 of the sealed bytes. It reports
// whether a strictly beats b.
//
// The last step compares digests, not bytes, so that a peer's cache can keep
// 32 bytes per record instead of the whole sealed value (Directory). It is
// reached only by two different values with the same epoch, owner, RTT,
// decider and time to the nanosecond: one decider sealing two records of the
// same instant.
func Better(a delegation.Record, aRaw []byte, b delegation.Record, bRaw []byte) bool {
	return better(a, b, func() int {
		sa, sb := sha256.Sum256(aRaw), sha256.Sum256(bRaw)
		return bytes.Compare(sa[:], sb[:])
	})
}

// betterSum is Better over records whose sealed values are known by their
// SHA-256 only.
func betterSum(a delegation.Record, aSum [32]byte, b delegation.Record, bSum [32]byte) bool {
	return better(a, b, func() int { return bytes.Compare(aSum[:], bSum[:]) })
}

// better is Better with the last step, a comparison of the sealed values'
// digests, left to digestCmp (called only when delegation.Compare ties).
func better(a, b delegation.Record, digestCmp func() int) bool {
	if c := delegation.Compare(a, b); c != 0 {
		return c < 0
	}
	return digestCmp() < 0
}
