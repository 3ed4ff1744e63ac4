// Package export writes the index sink's records as WARC 1.1 files (ISO
// 28500) with github.com/nlnwa/gowarc/v3: a warcinfo record naming micra
// and the crawl at the head of each file, then one metadata record per
// page record (WARC-Target-URI the page, WARC-Date its fetch, the block
// the record's JSON). micra keeps no raw bodies, so there are no
// request/response records. A package of its own so that the sink's core
// and a crawler node do not link the WARC library.
package export

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"sync/atomic"
	"time"

	"github.com/nlnwa/gowarc/v3"

	"github.com/micra-crawler/micra/node/sink"
)

// WARC writes records into gzip-compressed WARC files in Dir.
type WARC struct {
	w *gowarc.WarcFileWriter
	n atomic.Int64
}

// Options configure a WARC export.
type Options struct {
	Dir string
	// Prefix starts every file name (default "micra-").
	Prefix string
	// MaxFileSize rotates files (default 1 GB, the standard's recommendation).
	MaxFileSize int64
	// Description goes into each file's warcinfo record.
	Description string
}

// names makes the files' names: prefix, time, serial. (gowarc's own
// pattern generator looks up this host's outbound address by a UDP dial
// to a public resolver: an export must not touch the network.)
type names struct {
	dir, prefix string
	serial      atomic.Int32
}

func (g *names) NewWarcfileName() (string, string) {
	return g.dir, fmt.Sprintf("%s%s-%05d.warc", g.prefix, time.Now().UTC().Format("20060102150405"), g.serial.Add(1))
}

// NewWARC starts an export into o.Dir (created if needed).
func NewWARC(o Options) (*WARC, error) {
	if o.Dir == "" {
		return nil, errors.New("export: a directory is required")
	}
	if err := os.MkdirAll(o.Dir, 0o755); err != nil {
		return nil, err
	}
	if o.Prefix == "" {
		o.Prefix = "micra-"
	}
	if o.MaxFileSize <= 0 {
		o.MaxFileSize = 1 << 30
	}
	dir, err := filepath.Abs(o.Dir)
	if err != nil {
		return nil, err
	}
	w := gowarc.NewWarcFileWriter(
		gowarc.WithFileNameGenerator(&names{dir: dir, prefix: o.Prefix}),
		gowarc.WithCompression(true),
		gowarc.WithMaxFileSize(o.MaxFileSize),
		gowarc.WithMaxConcurrentWriters(1),
		gowarc.WithWarcInfoFunc(func(rb gowarc.WarcRecordBuilder) error {
			info := "software: micra (https://github.com/micra-crawler/micra)\r\n" +
				"format: WARC File Format 1.1\r\n" +
				"conformsTo: https://iipc.github.io/warc-specifications/specifications/warc-format/warc-1.1/\r\n" +
				"description: micra index sink export: one metadata record per crawled page, its block the record's JSON (docs/sink.md)\r\n"
			if o.Description != "" {
				info += "isPartOf: " + o.Description + "\r\n"
			}
			_, err := rb.WriteString(info)
			return err
		}),
	)
	return &WARC{w: w}, nil
}

// Write adds one record.
func (x *WARC) Write(r *sink.StreamRecord) error {
	body, err := json.Marshal(r)
	if err != nil {
		return err
	}
	rb := gowarc.NewRecordBuilder(gowarc.Metadata)
	rb.AddWarcHeader(gowarc.WarcTargetURI, r.URL)
	rb.AddWarcHeaderTime(gowarc.WarcDate, r.FetchedAt)
	rb.AddWarcHeader(gowarc.ContentType, "application/json")
	rb.AddWarcHeader("Micra-Seq", strconv.FormatUint(r.Seq, 10))
	if _, err := rb.Write(body); err != nil {
		return err
	}
	rec, _, err := rb.Build()
	if err != nil {
		return fmt.Errorf("export: record %d: %w", r.Seq, err)
	}
	for _, resp := range x.w.Write(rec) {
		if resp.Err != nil {
			return fmt.Errorf("export: record %d: %w", r.Seq, resp.Err)
		}
	}
	x.n.Add(1)
	return nil
}

// Records returns how many records were written.
func (x *WARC) Records() int64 { return x.n.Load() }

// Close finishes the files.
func (x *WARC) Close() error { return x.w.Close() }
