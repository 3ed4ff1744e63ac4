// Package pack owns what a crawler ships: the Record (one fetched page reduced
// to ranked keywords and metadata), its compact versioned binary encoding,
// carriers (batches of records bounded by size and hold time, zstd-compressed,
// as UCYMicra's "data carriers"), the durable Badger outbox that keeps every
// carrier until a Receiver acknowledges it, a FileSink receiver and the reader
// that decodes carriers back.
package pack

import (
	"encoding/binary"
	"errors"
	"fmt"
	"net/netip"
	"time"
)

// RecordVersion is the version of the record encoding written by this code.
// Decoders reject versions they do not know rather than guess.
const RecordVersion = 1

// recordVersionLinks is the encoding of a record that carries its
// out-links (Record.Links): version 1 followed by them. A record without
// links is written as version 1, so readers that predate links read it.
const recordVersionLinks = 2

// recordVersionAddr is the encoding of a record that carries the address
// its host was placed at (Record.Addr): version 2 (its link count may be
// 0) followed by the address, 4 or 16 bytes after their count. A record
// without an address is written as version 1 or 2, as before.
const recordVersionAddr = 3

// Source says how the page was obtained.
type Source uint8

const (
	SourceHTTP Source = iota // fetched over HTTP(S)
	SourceFile               // read from a document root on the file system
)

func (s Source) String() string {
	switch s {
	case SourceHTTP:
		return "http"
	case SourceFile:
		return "file"
	}
	return fmt.Sprintf("source(%d)", uint8(s))
}

// Change says how this record relates to the previous fetch of the same URL.
type Change uint8

const (
	ChangeNew       Change = iota // first fetch of the URL by this crawler
	ChangeChanged                 // content hash differs from the last fetch
	ChangeUnchanged               // revisit found the same content (304 or equal hash)
	ChangeGone                    // the page was known and is now 404/410 or removed
)

func (c Change) String() string {
	switch c {
	case ChangeNew:
		return "new"
	case ChangeChanged:
		return "changed"
	case ChangeUnchanged:
		return "unchanged"
	case ChangeGone:
		return "gone"
	}
	return fmt.Sprintf("change(%d)", uint8(c))
}

// Keyword is one stemmed term of a page with its integer ranking weight
// (frequency weighted by where the term occurs: title and headings count more).
type Keyword struct {
	Term   string
	Weight uint32
}

// Timing is the wall-clock breakdown of one fetch (zero for file-system reads).
type Timing struct {
	DNS, Connect, FirstByte, Total time.Duration
}

// Record flags.
const (
	FlagNoIndex   uint8 = 1 << iota // meta robots noindex: keywords withheld
	FlagNoFollow                    // meta robots nofollow: links not followed
	FlagTruncated                   // body cut at the size limit
)

// Record is one page as the crawler ships it to the sink.
type Record struct {
	URL          string // the URL that was queued
	FinalURL     string // after redirects; empty when equal to URL
	Status       int    // HTTP status (200 for file-system reads)
	Source       Source
	Change       Change
	FetchedAt    time.Time
	Timing       Timing
	WireBytes    int64 // bytes received on the wire (compressed body)
	BodyBytes    int64 // decoded body bytes
	TextBytes    int64 // visible text bytes
	ContentType  string
	Title        string
	Lang         string // ISO 639-1 guess, empty if unknown
	Keywords     []Keyword
	OutLinks     int
	ContentHash  [16]byte // truncated SHA-256 of the decoded body
	SimHash      uint64   // near-duplicate fingerprint of the visible text
	ETag         string
	LastModified string
	CrawlerID    string
	Flags        uint8
	Error        string // why the fetch failed, for non-2xx/transport errors
	// Links are the page's out-links as normalised URLs, when the crawl
	// ships them (crawl.Config.ShipLinks): an indexer builds the link
	// graph from them. They count in the carrier bytes.
	Links []string
	// Addr is the address the host was placed at when it was fetched: the
	// one delegation placed it by (a loopback testnet maps each host to the
	// address it emulates). The sink indexes pages by it, so a subnet's new
	// owner recovers the subnet's page history (docs/sink.md). Zero for
	// file-system reads and crawls without delegation.
	Addr netip.Addr
}

// AppendBinary appends the versioned binary encoding of r to b.
func (r *Record) AppendBinary(b []byte) []byte {
	switch {
	case r.Addr.IsValid():
		b = binary.AppendUvarint(b, recordVersionAddr)
	case len(r.Links) > 0:
		b = binary.AppendUvarint(b, recordVersionLinks)
	default:
		b = binary.AppendUvarint(b, RecordVersion)
	}
	b = appendString(b, r.URL)
	b = appendString(b, r.FinalURL)
	b = binary.AppendUvarint(b, uint64(r.Status))
	b = append(b, byte(r.Source), byte(r.Change), r.Flags)
	b = binary.AppendVarint(b, r.FetchedAt.UnixMicro())
	b = binary.AppendUvarint(b, uint64(r.Timing.DNS.Microseconds()))
	b = binary.AppendUvarint(b, uint64(r.Timing.Connect.Microseconds()))
	b = binary.AppendUvarint(b, uint64(r.Timing.FirstByte.Microseconds()))
	b = binary.AppendUvarint(b, uint64(r.Timing.Total.Microseconds()))
	b = binary.AppendUvarint(b, uint64(r.WireBytes))
	b = binary.AppendUvarint(b, uint64(r.BodyBytes))
	b = binary.AppendUvarint(b, uint64(r.TextBytes))
	b = appendString(b, r.ContentType)
	b = appendString(b, r.Title)
	b = appendString(b, r.Lang)
	b = binary.AppendUvarint(b, uint64(len(r.Keywords)))
	for _, k := range r.Keywords {
		b = appendString(b, k.Term)
		b = binary.AppendUvarint(b, uint64(k.Weight))
	}
	b = binary.AppendUvarint(b, uint64(r.OutLinks))
	b = append(b, r.ContentHash[:]...)
	b = binary.LittleEndian.AppendUint64(b, r.SimHash)
	b = appendString(b, r.ETag)
	b = appendString(b, r.LastModified)
	b = appendString(b, r.CrawlerID)
	b = appendString(b, r.Error)
	if len(r.Links) > 0 || r.Addr.IsValid() {
		b = binary.AppendUvarint(b, uint64(len(r.Links)))
		for _, l := range r.Links {
			b = appendString(b, l)
		}
	}
	if r.Addr.IsValid() {
		a := r.Addr.Unmap().AsSlice()
		b = append(b, byte(len(a)))
		b = append(b, a...)
	}
	return b
}

// MarshalBinary encodes r.
func (r *Record) MarshalBinary() ([]byte, error) { return r.AppendBinary(nil), nil }

// UnmarshalBinary decodes a record written by AppendBinary.
func (r *Record) UnmarshalBinary(b []byte) error {
	d := decoder{b: b}
	v := d.uvarint()
	if d.err == nil && v != RecordVersion && v != recordVersionLinks && v != recordVersionAddr {
		return fmt.Errorf("pack: record version %d not supported (want %d to %d)", v, RecordVersion, recordVersionAddr)
	}
	*r = Record{}
	r.URL = d.string()
	r.FinalURL = d.string()
	r.Status = int(d.uvarint())
	r.Source = Source(d.byte())
	r.Change = Change(d.byte())
	r.Flags = d.byte()
	r.FetchedAt = time.UnixMicro(d.varint()).UTC()
	r.Timing.DNS = time.Duration(d.uvarint()) * time.Microsecond
	r.Timing.Connect = time.Duration(d.uvarint()) * time.Microsecond
	r.Timing.FirstByte = time.Duration(d.uvarint()) * time.Microsecond
	r.Timing.Total = time.Duration(d.uvarint()) * time.Microsecond
	r.WireBytes = int64(d.uvarint())
	r.BodyBytes = int64(d.uvarint())
	r.TextBytes = int64(d.uvarint())
	r.ContentType = d.string()
	r.Title = d.string()
	r.Lang = d.string()
	n := d.uvarint()
	if n > uint64(len(d.b))/2 { // each keyword takes at least 2 of the bytes left
		return errors.New("pack: record keyword count exceeds record size")
	}
	if n > 0 {
		r.Keywords = make([]Keyword, n)
		for i := range r.Keywords {
			r.Keywords[i].Term = d.string()
			r.Keywords[i].Weight = uint32(d.uvarint())
		}
	}
	r.OutLinks = int(d.uvarint())
	copy(r.ContentHash[:], d.bytes(16))
	r.SimHash = binary.LittleEndian.Uint64(append(d.bytes(8), make([]byte, 8)...))
	r.ETag = d.string()
	r.LastModified = d.string()
	r.CrawlerID = d.string()
	r.Error = d.string()
	if v >= recordVersionLinks {
		n := d.uvarint()
		if n > uint64(len(d.b)) { // each link takes at least a byte
			return errors.New("pack: record link count exceeds record size")
		}
		if n > 0 {
			r.Links = make([]string, n)
			for i := range r.Links {
				r.Links[i] = d.string()
			}
		}
	}
	if v >= recordVersionAddr {
		n := d.byte()
		if d.err == nil && n != 4 && n != 16 {
			return fmt.Errorf("pack: decode record: address of %d bytes", n)
		}
		if a, ok := netip.AddrFromSlice(d.bytes(int(n))); ok {
			r.Addr = a
		}
	}
	if d.err != nil {
		return fmt.Errorf("pack: decode record: %w", d.err)
	}
	if len(d.b) != 0 {
		return fmt.Errorf("pack: decode record: %d trailing bytes", len(d.b))
	}
	return nil
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

var errShort = errors.New("truncated input")

// decoder reads varint-framed fields; the first error sticks and later reads
// return zero values, so callers check once at the end.
type decoder struct {
	b   []byte
	err error
}

func (d *decoder) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errShort
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *decoder) byte() byte {
	if d.err != nil || len(d.b) < 1 {
		d.err = errShort
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *decoder) bytes(n int) []byte {
	if d.err != nil || len(d.b) < n {
		d.err = errShort
		return nil
	}
	out := d.b[:n:n]
	d.b = d.b[n:]
	return out
}

func (d *decoder) string() string {
	n := d.uvarint()
	if d.err != nil {
		return ""
	}
	if n > uint64(len(d.b)) {
		d.err = errShort
		return ""
	}
	return string(d.bytes(int(n)))
}
