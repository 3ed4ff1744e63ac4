package sink

import (
	"encoding/binary"
	"errors"
	"net/url"
	"strconv"
	"strings"
	"time"

	"github.com/micra-crawler/micra/crawl/pack"
)

// Entry versions: 1 had no Prev (its pages' history is in their sp/
// states); 2 links each entry to its page's previous one.
const (
	entryVersion1 = 1
	entryVersion  = 2
)

var errDamaged = errors.New("damaged value")

// encode (version 2): version, carrier, ingest time (µs), overlap, the
// page's previous entry, record. The carrier is its sequence + 1 when its
// id is the record's crawler's (pack.Carrier.ID: always, for the sink's
// entries), else 0 and the id: 2 bytes instead of ~75 in every entry.
func (e *Entry) encode() []byte {
	seq, ok := carrierSeq(e.Carrier, e.Record.CrawlerID)
	return e.encodeCarrier(seq, ok)
}

// encodeCarrier is encode with the carrier's sequence known (ok: e.Carrier
// is e.Record.CrawlerID's carrier seq), as a commit knows it.
func (e *Entry) encodeCarrier(seq uint64, ok bool) []byte {
	b := make([]byte, 0, 32+recordSizeHint(&e.Record))
	b = binary.AppendUvarint(b, entryVersion)
	if ok {
		b = binary.AppendUvarint(b, seq+1)
	} else {
		b = binary.AppendUvarint(b, 0)
		b = appendString(b, e.Carrier)
	}
	b = binary.AppendVarint(b, e.IngestedAt.UnixMicro())
	if e.Overlap {
		b = append(b, 1)
	} else {
		b = append(b, 0)
	}
	b = binary.AppendUvarint(b, e.Prev)
	return e.Record.AppendBinary(b)
}

// recordSizeHint is about the bytes of r's encoding.
func recordSizeHint(r *pack.Record) int {
	n := len(r.URL) + len(r.FinalURL) + len(r.ContentType) + len(r.Title) + len(r.Lang) + len(r.ETag) +
		len(r.LastModified) + len(r.CrawlerID) + len(r.Error) + 96
	for _, k := range r.Keywords {
		n += len(k.Term) + 3
	}
	for _, l := range r.Links {
		n += len(l) + 2
	}
	return n
}

// carrierSeq is the carrier sequence in id when id is crawler's carrier
// id (pack.Carrier.ID).
func carrierSeq(id, crawler string) (uint64, bool) {
	const digits = 20
	if len(id) != len(crawler)+1+digits || id[:len(crawler)] != crawler || id[len(crawler)] != '-' {
		return 0, false
	}
	seq, err := strconv.ParseUint(id[len(crawler)+1:], 10, 64)
	if err != nil || (pack.Carrier{CrawlerID: crawler, Seq: seq}).ID() != id {
		return 0, false
	}
	return seq, true
}

func (e *Entry) decode(b []byte) error {
	d := reader{b: b}
	v := d.uvarint()
	if v != entryVersion && v != entryVersion1 {
		return errDamaged
	}
	var cseq uint64 // (version 2: the carrier's sequence + 1, 0 if its id follows)
	if v == entryVersion1 {
		e.Carrier = d.string()
	} else if cseq = d.uvarint(); cseq == 0 {
		e.Carrier = d.string()
	}
	e.IngestedAt = time.UnixMicro(d.varint()).UTC()
	e.Overlap = d.byte() == 1
	e.Prev = 0
	if v >= entryVersion {
		e.Prev = d.uvarint()
	}
	if d.err != nil {
		return d.err
	}
	if err := e.Record.UnmarshalBinary(d.b); err != nil {
		return err
	}
	if cseq > 0 {
		e.Carrier = pack.Carrier{CrawlerID: e.Record.CrawlerID, Seq: cseq - 1}.ID()
	}
	return nil
}

// skipHeader reads an entry's fields before its record: its version and
// the page's previous entry (0 in version 1).
func (d *reader) skipHeader() (v, prev uint64) {
	v = d.uvarint()
	if v != entryVersion && v != entryVersion1 {
		d.err = errDamaged
		return v, 0
	}
	if v == entryVersion1 || d.uvarint() == 0 {
		d.string()
	}
	d.varint()
	d.byte()
	if v >= entryVersion {
		prev = d.uvarint()
	}
	return v, prev
}

// entryPrev reads an entry's link to its page's previous entry (linked
// false: a version-1 entry, which has none) without decoding the record.
func entryPrev(b []byte) (prev uint64, linked bool, err error) {
	d := reader{b: b}
	v, prev := d.skipHeader()
	return prev, v >= entryVersion, d.err
}

// entryPage reads an entry's URL and crawler (the replay of the page
// table) without decoding the rest of its record.
func entryPage(b []byte) (url, crawler string, err error) {
	d := reader{b: b}
	d.skipHeader()
	if d.err != nil {
		return "", "", d.err
	}
	var r pack.Record
	if err := r.UnmarshalBinary(d.b); err != nil {
		return "", "", err
	}
	return r.URL, r.CrawlerID, nil
}

// pageState is what the sink keeps per page beside the log: its recent
// changes (log sequences, newest last) and the crawlers that delivered it.
type pageState struct {
	history  []uint64
	crawlers []string
}

// maxPageCrawlers bounds the crawlers remembered per page (overlap needs
// only whether the deliverer is a new one).
const maxPageCrawlers = 8

func (p *pageState) hasCrawler(c string) bool {
	for _, x := range p.crawlers {
		if x == c {
			return true
		}
	}
	return false
}

func (p *pageState) add(crawler string, seq uint64, history int) {
	p.history = append(p.history, seq)
	if len(p.history) > history {
		p.history = p.history[len(p.history)-history:]
	}
	if !p.hasCrawler(crawler) {
		p.crawlers = append(p.crawlers, crawler)
		if len(p.crawlers) > maxPageCrawlers {
			p.crawlers = p.crawlers[1:]
		}
	}
}

func (p *pageState) encode() []byte {
	b := binary.AppendUvarint(nil, uint64(len(p.history)))
	for _, s := range p.history {
		b = binary.AppendUvarint(b, s)
	}
	b = binary.AppendUvarint(b, uint64(len(p.crawlers)))
	for _, c := range p.crawlers {
		b = appendString(b, c)
	}
	return b
}

func (p *pageState) decode(b []byte) error {
	d := reader{b: b}
	n := d.uvarint()
	if n > 1<<16 {
		return errDamaged
	}
	p.history = make([]uint64, 0, n)
	for range n {
		p.history = append(p.history, d.uvarint())
	}
	n = d.uvarint()
	if n > maxPageCrawlers {
		return errDamaged
	}
	for range n {
		p.crawlers = append(p.crawlers, d.string())
	}
	return d.err
}

func (c Counts) encode() []byte {
	b := []byte{}
	for _, v := range []int64{c.Records, c.Pages, c.Carriers, c.Duplicates, c.Overlap} {
		b = binary.AppendVarint(b, v)
	}
	return b
}

func decodeCounts(b []byte, c *Counts) error {
	d := reader{b: b}
	for _, p := range []*int64{&c.Records, &c.Pages, &c.Carriers, &c.Duplicates, &c.Overlap} {
		*p = d.varint()
	}
	return d.err
}

func (c CrawlerCounts) encode() []byte {
	b := binary.AppendVarint(nil, c.Carriers)
	b = binary.AppendVarint(b, c.Records)
	b = binary.AppendVarint(b, c.Overlap)
	return binary.AppendVarint(b, c.LastSeen.UnixMicro())
}

func decodeCrawler(b []byte, c *CrawlerCounts) error {
	d := reader{b: b}
	c.Carriers, c.Records, c.Overlap = d.varint(), d.varint(), d.varint()
	c.LastSeen = time.UnixMicro(d.varint()).UTC()
	return d.err
}

// match reports whether r passes the filter.
func (f Filter) match(r *pack.Record) bool {
	if f.Changed && r.Change != pack.ChangeNew && r.Change != pack.ChangeChanged {
		return false
	}
	if f.Lang != "" && !strings.EqualFold(r.Lang, f.Lang) {
		return false
	}
	if f.Host != "" || f.Suffix != "" {
		u, err := url.Parse(r.URL)
		if err != nil {
			return false
		}
		host := strings.ToLower(u.Hostname())
		if f.Host != "" && host != strings.ToLower(f.Host) {
			return false
		}
		if sfx := strings.ToLower(strings.TrimPrefix(f.Suffix, ".")); sfx != "" && host != sfx && !strings.HasSuffix(host, "."+sfx) {
			return false
		}
	}
	if f.Keyword != "" {
		found := false
		for _, k := range r.Keywords {
			if strings.EqualFold(k.Term, f.Keyword) {
				found = true
				break
			}
		}
		if !found {
			return false
		}
	}
	return true
}

func appendString(b []byte, s string) []byte {
	b = binary.AppendUvarint(b, uint64(len(s)))
	return append(b, s...)
}

// reader decodes the sink's values; the first error sticks.
type reader struct {
	b   []byte
	err error
}

func (d *reader) uvarint() uint64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Uvarint(d.b)
	if n <= 0 {
		d.err = errDamaged
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) varint() int64 {
	if d.err != nil {
		return 0
	}
	v, n := binary.Varint(d.b)
	if n <= 0 {
		d.err = errDamaged
		return 0
	}
	d.b = d.b[n:]
	return v
}

func (d *reader) byte() byte {
	if d.err != nil || len(d.b) == 0 {
		d.err = errDamaged
		return 0
	}
	c := d.b[0]
	d.b = d.b[1:]
	return c
}

func (d *reader) string() string {
	n := d.uvarint()
	if d.err != nil || n > uint64(len(d.b)) {
		d.err = errDamaged
		return ""
	}
	s := string(d.b[:n])
	d.b = d.b[n:]
	return s
}
