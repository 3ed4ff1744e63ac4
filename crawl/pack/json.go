package pack

import (
	"encoding/hex"
	"fmt"
	"net/netip"
	"time"
)

// RecordJSON is the JSON form of a record, the one schema `micra carriers
// cat --json`, the sink's streams and its export share (docs/sink.md):
// snake_case names throughout, enums as words, hashes in hex, durations in
// milliseconds. Fields are only ever added.
type RecordJSON struct {
	Carrier      string        `json:"carrier"`
	URL          string        `json:"url"`
	FinalURL     string        `json:"final_url,omitempty"`
	Status       int           `json:"status"`
	Source       string        `json:"source"`
	Change       string        `json:"change"`
	FetchedAt    time.Time     `json:"fetched_at"`
	DNSMs        float64       `json:"dns_ms"`
	ConnectMs    float64       `json:"connect_ms"`
	FirstByteMs  float64       `json:"first_byte_ms"`
	TotalMs      float64       `json:"total_ms"`
	WireBytes    int64         `json:"wire_bytes"`
	BodyBytes    int64         `json:"body_bytes"`
	TextBytes    int64         `json:"text_bytes"`
	ContentType  string        `json:"content_type,omitempty"`
	Title        string        `json:"title,omitempty"`
	Lang         string        `json:"lang,omitempty"`
	Keywords     []KeywordJSON `json:"keywords,omitempty"`
	OutLinks     int           `json:"outlinks"`
	ContentHash  string        `json:"content_hash"`
	SimHash      string        `json:"simhash"`
	ETag         string        `json:"etag,omitempty"`
	LastModified string        `json:"last_modified,omitempty"`
	CrawlerID    string        `json:"crawler"`
	Flags        []string      `json:"flags,omitempty"`
	Error        string        `json:"error,omitempty"`
	Links        []string      `json:"links,omitempty"`
	Addr         string        `json:"addr,omitempty"`
}

// KeywordJSON is a keyword in RecordJSON.
type KeywordJSON struct {
	Term   string `json:"term"`
	Weight uint32 `json:"weight"`
}

// JSON returns the JSON form of r; carrier names the carrier it came in
// (Carrier.ID).
func (r *Record) JSON(carrier string) RecordJSON {
	kw := make([]KeywordJSON, len(r.Keywords))
	for i, k := range r.Keywords {
		kw[i] = KeywordJSON{k.Term, k.Weight}
	}
	return RecordJSON{
		Carrier: carrier, URL: r.URL, FinalURL: r.FinalURL, Status: r.Status, Source: r.Source.String(),
		Change: r.Change.String(), FetchedAt: r.FetchedAt.UTC(),
		DNSMs: ms(r.Timing.DNS), ConnectMs: ms(r.Timing.Connect), FirstByteMs: ms(r.Timing.FirstByte), TotalMs: ms(r.Timing.Total),
		WireBytes: r.WireBytes, BodyBytes: r.BodyBytes, TextBytes: r.TextBytes, ContentType: r.ContentType,
		Title: r.Title, Lang: r.Lang, Keywords: kw, OutLinks: r.OutLinks,
		ContentHash: hex.EncodeToString(r.ContentHash[:]), SimHash: fmt.Sprintf("%016x", r.SimHash),
		ETag: r.ETag, LastModified: r.LastModified, CrawlerID: r.CrawlerID, Flags: flagNames(r.Flags), Error: r.Error,
		Links: r.Links, Addr: addrString(r.Addr),
	}
}

func addrString(a netip.Addr) string {
	if !a.IsValid() {
		return ""
	}
	return a.String()
}

func ms(d time.Duration) float64 { return float64(d.Microseconds()) / 1000 }

func flagNames(f uint8) []string {
	var out []string
	for _, x := range []struct {
		bit  uint8
		name string
	}{{FlagNoIndex, "noindex"}, {FlagNoFollow, "nofollow"}, {FlagTruncated, "truncated"}} {
		if f&x.bit != 0 {
			out = append(out, x.name)
		}
	}
	return out
}
