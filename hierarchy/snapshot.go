package hierarchy

import (
	"bytes"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"math/bits"
	"unicode/utf8"
)

// Snapshot format, version 1 (all integers little-endian; "uv" is an
// unsigned LEB128 varint that must be minimal; "u128" is a byte t = number
// of trailing zero bits (128 for zero) followed, when t < 128, by uv128 of
// the value shifted right by t, which must be odd):
//
//	magic      "MICRAHIE"                      8 bytes
//	version    u32 = 1
//	nodes      u32   number of nodes incl. Root
//	orgs       u32   number of organisation ids incl. 0
//	countries  u32   number of country ids incl. 0
//	org names  (orgs-1) × { uv length, UTF-8 bytes }, strictly ascending
//	countries  (countries-1) × 2 bytes A–Z, strictly ascending
//	node 1..nodes-1, in ID (pre)order:
//	  flags    byte: bit 0 = IPv6, bits 1–3 registry, bits 4–7 status
//	  parent   uv  id − parent (≥ 1)
//	  start    u128 start − start of the previous node of the same family
//	  span     u128 end − start
//	  org      uv
//	  asn      uv
//	  country  uv
//	crc32c     u32 of all preceding bytes
//
// Every organisation and country id above 0 must be used by some node. The
// decoder checks every bound and the tree invariants (a child lies strictly
// inside its parent, siblings are disjoint and ordered), so any byte string
// either decodes to a valid tree whose Encode is that same string, or fails.
const (
	snapMagic   = "MICRAHIE"
	snapVersion = 1
	// MaxSnapshotBytes bounds what Decode accepts.
	MaxSnapshotBytes = 1 << 30
)

var castagnoli = crc32.MakeTable(crc32.Castagnoli)

// Encode returns the canonical snapshot bytes of t.
func (t *Tree) Encode() []byte {
	buf := make([]byte, 0, 24+t.Len()*14+len(t.orgNames)+t.NumOrgs()*2)
	buf = append(buf, snapMagic...)
	buf = binary.LittleEndian.AppendUint32(buf, snapVersion)
	buf = binary.LittleEndian.AppendUint32(buf, uint32(t.Len()))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(t.NumOrgs()))
	buf = binary.LittleEndian.AppendUint32(buf, uint32(len(t.countries)))
	for o := 1; o < t.NumOrgs(); o++ {
		name := t.OrgName(OrgID(o))
		buf = binary.AppendUvarint(buf, uint64(len(name)))
		buf = append(buf, name...)
	}
	for _, c := range t.countries[1:] {
		buf = append(buf, c...)
	}
	var prev4, prev6 u128
	for id := NodeID(1); int(id) < t.Len(); id++ {
		s, e := t.bounds(id)
		prev := &prev4
		flags := byte(t.registry(id))<<1 | byte(t.status(id))<<4
		if id >= t.first6 {
			prev, flags = &prev6, flags|1
		}
		buf = append(buf, flags)
		buf = binary.AppendUvarint(buf, uint64(uint32(id)-uint32(t.parent[id])))
		buf = appendU128(buf, s.sub(*prev))
		*prev = s
		buf = appendU128(buf, e.sub(s))
		buf = binary.AppendUvarint(buf, uint64(t.org[id]))
		buf = binary.AppendUvarint(buf, uint64(t.asn[id]))
		buf = binary.AppendUvarint(buf, uint64(t.cc[id]))
	}
	return binary.LittleEndian.AppendUint32(buf, crc32.Checksum(buf, castagnoli))
}

func appendU128(buf []byte, v u128) []byte {
	tz := v.trailingZeros()
	buf = append(buf, byte(tz))
	if tz == 128 {
		return buf
	}
	w := v.shr(tz)
	for w.hi != 0 || w.lo >= 0x80 {
		buf = append(buf, byte(w.lo)|0x80)
		w = w.shr(7)
	}
	return append(buf, byte(w.lo))
}

// ErrSnapshot is wrapped by every decoding error.
var ErrSnapshot = errors.New("hierarchy: bad snapshot")

type snapReader struct {
	b   []byte
	off int
}

func (r *snapReader) fail(format string, a ...any) error {
	return fmt.Errorf("%w: offset %d: %s", ErrSnapshot, r.off, fmt.Sprintf(format, a...))
}

func (r *snapReader) byte() (byte, error) {
	if r.off >= len(r.b) {
		return 0, r.fail("truncated")
	}
	c := r.b[r.off]
	r.off++
	return c, nil
}

// uv reads a minimal unsigned varint of at most 64 bits.
func (r *snapReader) uv() (uint64, error) {
	if r.off < len(r.b) && r.b[r.off] < 0x80 { // one byte: the common case
		c := r.b[r.off]
		r.off++
		return uint64(c), nil
	}
	return r.uvSlow()
}

func (r *snapReader) uvSlow() (uint64, error) {
	var x uint64
	for i := 0; ; i++ {
		if r.off >= len(r.b) {
			return 0, r.fail("truncated varint")
		}
		c := r.b[r.off]
		r.off++
		if i == 9 && c > 1 {
			return 0, r.fail("varint overflows 64 bits")
		}
		x |= uint64(c&0x7f) << (7 * i)
		if c < 0x80 {
			if c == 0 && i > 0 {
				return 0, r.fail("non-minimal varint")
			}
			return x, nil
		}
	}
}

func (r *snapReader) u128(maxBits uint) (u128, error) {
	if r.off+1 < len(r.b) { // fast path: value fits one varint byte
		tz, c := uint(r.b[r.off]), r.b[r.off+1]
		if tz == 128 {
			r.off++
			return u128{}, nil
		}
		if tz < maxBits && c < 0x80 && c&1 == 1 && uint(bits.Len8(c))+tz <= maxBits {
			r.off += 2
			return u128{0, uint64(c)}.shl(tz), nil
		}
	}
	return r.u128Slow(maxBits)
}

func (r *snapReader) u128Slow(maxBits uint) (u128, error) {
	tz, err := r.byte()
	if err != nil {
		return u128{}, err
	}
	if tz == 128 {
		return u128{}, nil
	}
	if uint(tz) >= maxBits {
		return u128{}, r.fail("shift %d out of range", tz)
	}
	var w u128
	for shift := uint(0); ; shift += 7 {
		if r.off >= len(r.b) {
			return u128{}, r.fail("truncated varint")
		}
		c := r.b[r.off]
		r.off++
		v := uint64(c & 0x7f)
		switch {
		case shift < 64:
			w.lo |= v << shift
			if shift > 57 {
				w.hi |= v >> (64 - shift)
			}
		case shift < 128:
			if shift > 121 && c>>(128-shift) != 0 {
				return u128{}, r.fail("varint overflows 128 bits")
			}
			w.hi |= v << (shift - 64)
		default:
			return u128{}, r.fail("varint overflows 128 bits")
		}
		if c < 0x80 {
			if c == 0 && shift > 0 {
				return u128{}, r.fail("non-minimal varint")
			}
			break
		}
	}
	if w.lo&1 == 0 {
		return u128{}, r.fail("non-canonical shifted value")
	}
	if w.bitLen()+uint(tz) > maxBits {
		return u128{}, r.fail("value exceeds %d bits", maxBits)
	}
	return w.shl(uint(tz)), nil
}

// Decode parses and fully validates snapshot bytes (which may be hostile).
func Decode(b []byte) (*Tree, error) {
	if len(b) > MaxSnapshotBytes {
		return nil, fmt.Errorf("%w: %d bytes exceeds the %d-byte limit", ErrSnapshot, len(b), MaxSnapshotBytes)
	}
	if len(b) < len(snapMagic)+16+4 || string(b[:len(snapMagic)]) != snapMagic {
		return nil, fmt.Errorf("%w: not a micra hierarchy snapshot", ErrSnapshot)
	}
	body := b[:len(b)-4]
	if crc32.Checksum(body, castagnoli) != binary.LittleEndian.Uint32(b[len(b)-4:]) {
		return nil, fmt.Errorf("%w: checksum mismatch", ErrSnapshot)
	}
	le := binary.LittleEndian
	h := body[len(snapMagic):]
	if v := le.Uint32(h); v != snapVersion {
		return nil, fmt.Errorf("%w: unsupported version %d", ErrSnapshot, v)
	}
	nNodes, nOrgs, nCountries := le.Uint32(h[4:]), le.Uint32(h[8:]), le.Uint32(h[12:])
	r := &snapReader{b: body, off: len(snapMagic) + 16}
	rest := uint64(len(body) - r.off)
	// Every node takes ≥ 6 bytes, every org ≥ 2, every country 2.
	if nNodes == 0 || nNodes > maxNodes || uint64(nNodes-1)*6 > rest || nOrgs == 0 || uint64(nOrgs-1)*2 > rest ||
		nCountries == 0 || nCountries > 26*26+1 {
		return nil, r.fail("implausible counts: %d nodes, %d orgs, %d countries", nNodes, nOrgs, nCountries)
	}
	t := &Tree{countries: make([]string, nCountries)}
	// The names are checked where they lie, then copied into one string.
	namesAt, total := r.off, 0
	var prev []byte
	for o := 1; o < int(nOrgs); o++ {
		n, err := r.uv()
		if err != nil {
			return nil, err
		}
		if n == 0 || n > MaxOrgLen || n > uint64(len(body)-r.off) {
			return nil, r.fail("organisation name length %d", n)
		}
		s := body[r.off : r.off+int(n)]
		r.off += int(n)
		if !utf8.Valid(s) {
			return nil, r.fail("organisation name not UTF-8")
		}
		if o > 1 && bytes.Compare(s, prev) <= 0 {
			return nil, r.fail("organisation names not strictly ascending")
		}
		prev, total = s, total+len(s)
	}
	t.setOrgNames(body[namesAt:r.off], int(nOrgs), total)
	for c := 1; c < int(nCountries); c++ {
		if len(body)-r.off < 2 {
			return nil, r.fail("truncated country table")
		}
		s := string(body[r.off : r.off+2])
		r.off += 2
		if !validCountry(s) || (c > 1 && s <= t.countries[c-1]) {
			return nil, r.fail("bad country code %q", s)
		}
		t.countries[c] = s
	}
	if err := t.decodeNodes(r, nNodes); err != nil {
		return nil, err
	}
	if r.off != len(body) {
		return nil, r.fail("%d trailing bytes", len(body)-r.off)
	}
	t.id = sha256.Sum256(b)
	t.idOnce.Do(func() {})
	t.finish()
	return t, nil
}

func (t *Tree) decodeNodes(r *snapReader, nNodes uint32) error {
	t.alloc(int(nNodes))
	orgUsed := make([]bool, t.NumOrgs())
	ccUsed := make([]bool, len(t.countries))
	var prev4, prev6 u128
	// stack: the open chain of the previous node; lastClosed: the most
	// recently closed child of the stack top (its previous sibling).
	stack := make([]NodeID, 1, 64)
	seen6 := false
	for id := uint32(1); id < nNodes; id++ {
		flags, err := r.byte()
		if err != nil {
			return err
		}
		reg, stb := Registry(flags>>1&7), Status(flags>>4)
		if reg >= numRegistries || stb >= numStatuses {
			return r.fail("node %d: registry %d / status %d out of range", id, reg, stb)
		}
		nd := nodeRec{fam: fam4, reg: reg, st: stb}
		maxBits, prev := uint(32), &prev4
		if flags&1 == 1 {
			nd.fam, maxBits, prev = fam6, 128, &prev6
			seen6 = true
		} else if seen6 {
			return r.fail("node %d: IPv4 node after IPv6 nodes", id)
		}
		pd, err := r.uv()
		if err != nil {
			return err
		}
		if pd == 0 || pd > uint64(id) {
			return r.fail("node %d: parent delta %d", id, pd)
		}
		nd.parent = NodeID(uint64(id) - pd)
		ds, err := r.u128(maxBits)
		if err != nil {
			return err
		}
		s, carry := prev.add(ds)
		if carry || (nd.fam == fam4 && s.lo > 0xFFFFFFFF) {
			return r.fail("node %d: start out of range", id)
		}
		span, err := r.u128(maxBits)
		if err != nil {
			return err
		}
		e, carry := s.add(span)
		if carry || (nd.fam == fam4 && e.lo > 0xFFFFFFFF) {
			return r.fail("node %d: end out of range", id)
		}
		if mapped := func(x u128) bool { return x.hi == 0 && x.lo>>32 == 0xffff }; nd.fam == fam6 && (mapped(s) || mapped(e)) {
			// the Builder makes such ends IPv4: no tree it builds has them
			return r.fail("node %d: IPv6 end in the IPv4-mapped space ::ffff:0:0/96", id)
		}
		nd.s, nd.e = s, e
		*prev = s
		org, err := r.uv()
		if err != nil {
			return err
		}
		if org >= uint64(t.NumOrgs()) {
			return r.fail("node %d: organisation %d out of range", id, org)
		}
		nd.org = OrgID(org)
		orgUsed[org] = true
		asn, err := r.uv()
		if err != nil {
			return err
		}
		if asn > 0xFFFFFFFF {
			return r.fail("node %d: ASN out of range", id)
		}
		nd.asn = uint32(asn)
		cc, err := r.uv()
		if err != nil {
			return err
		}
		if cc >= uint64(len(t.countries)) {
			return r.fail("node %d: country %d out of range", id, cc)
		}
		nd.cc = uint16(cc)
		ccUsed[cc] = true

		// Tree invariants: the parent is on the open chain; everything
		// popped above it (the previous sibling's subtree) ends before nd.
		var prevSibling NodeID = None
		for len(stack) > 0 && stack[len(stack)-1] != nd.parent {
			prevSibling = stack[len(stack)-1]
			stack = stack[:len(stack)-1]
		}
		if len(stack) == 0 {
			return r.fail("node %d: parent %d is not an open ancestor", id, nd.parent)
		}
		if nd.parent != Root {
			ps, pe := t.bounds(nd.parent)
			if t.fam(nd.parent) != nd.fam || nd.s.less(ps) || pe.less(nd.e) || (ps == nd.s && pe == nd.e) {
				return r.fail("node %d: not strictly inside its parent %d", id, nd.parent)
			}
		}
		if prevSibling != None {
			_, pe := t.bounds(prevSibling)
			if t.fam(prevSibling) == nd.fam && !pe.less(nd.s) {
				return r.fail("node %d: overlaps its previous sibling %d", id, prevSibling)
			}
		}
		if len(stack) > MaxDepth {
			return r.fail("node %d: deeper than %d", id, MaxDepth)
		}
		nd.depth = uint8(len(stack))
		t.put(NodeID(id), &nd)
		stack = append(stack, NodeID(id))
	}
	for o := 1; o < len(orgUsed); o++ {
		if !orgUsed[o] {
			return r.fail("organisation %d unused", o)
		}
	}
	for c := 1; c < len(ccUsed); c++ {
		if !ccUsed[c] {
			return r.fail("country %d unused", c)
		}
	}
	return nil
}
