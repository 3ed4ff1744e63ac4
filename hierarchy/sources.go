package hierarchy

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"fmt"
	"io"
	"log/slog"
	"os"
	"time"
)

// Sources names the input files of a build. Files may be gzip-compressed.
type Sources struct {
	IANA   []string // IANA IPv4 address-space CSV
	RIR    []string // RIR statistics exchange files
	RPSL   []string // RPSL inetnum/inet6num dumps
	Ranges []string // flat range CSVs (start,end,asn,organisation)
	// Countries are country-range CSVs (start,end,cc): a node without a
	// country of its own takes the one covering most (> half) of its range.
	Countries []string
	// NoDerive turns off DeriveAggregates on the range CSVs.
	NoDerive bool
	Lenient  bool
	Logger   *slog.Logger // nil: slog.Default()
}

// SourceReport is what BuildSources read and built.
type SourceReport struct {
	Loads      []LoadReport
	Aggregates int // ranges added by DeriveAggregates
	LoadTime   time.Duration
	Stats      BuildStats
}

// BuildSources loads every source, adds them coarse to fine (IANA, RIR
// statistics, RPSL, range CSVs with their derived aggregates) and builds the
// tree. ctx is checked between files.
func BuildSources(ctx context.Context, src Sources) (*Tree, SourceReport, error) {
	log := src.Logger
	if log == nil {
		log = slog.Default()
	}
	var rep SourceReport
	t0 := time.Now()
	b := NewBuilder()
	kinds := []struct {
		files []string
		load  func(io.Reader, LoadOptions) ([]Range, LoadReport, error)
	}{{src.IANA, LoadIANA}, {src.RIR, LoadRIRStats}, {src.RPSL, LoadRPSL}}
	add := func(rs []Range, file string) error {
		for _, r := range rs {
			if err := b.Add(r); err != nil {
				return fmt.Errorf("%s: %w", file, err)
			}
		}
		return nil
	}
	var coarse [][]Range
	for _, k := range kinds {
		for _, f := range k.files {
			if err := ctx.Err(); err != nil {
				return nil, rep, err
			}
			rs, lr, err := LoadFile(f, k.load, src.Lenient)
			if err != nil {
				return nil, rep, err
			}
			rep.Loads = append(rep.Loads, lr)
			log.Info("hierarchy source loaded", "file", f, "ranges", lr.Records, "skipped", lr.Skipped)
			coarse = append(coarse, rs)
		}
	}
	var flat []Range
	for _, f := range src.Ranges {
		if err := ctx.Err(); err != nil {
			return nil, rep, err
		}
		rs, lr, err := LoadFile(f, LoadRangeCSV, src.Lenient)
		if err != nil {
			return nil, rep, err
		}
		rep.Loads = append(rep.Loads, lr)
		log.Info("hierarchy source loaded", "file", f, "ranges", lr.Records, "skipped", lr.Skipped)
		if flat == nil {
			flat = rs
		} else {
			flat = append(flat, rs...)
		}
	}
	var agg []Range
	if !src.NoDerive {
		agg = DeriveAggregates(flat)
		rep.Aggregates = len(agg)
	}
	total := len(flat) + len(agg)
	for _, rs := range coarse {
		total += len(rs)
	}
	b.Grow(total)
	for i, rs := range coarse {
		if err := add(rs, rep.Loads[i].File); err != nil {
			return nil, rep, err
		}
	}
	if err := add(agg, "derived aggregates"); err != nil {
		return nil, rep, err
	}
	if err := add(flat, "range CSV"); err != nil {
		return nil, rep, err
	}
	for _, f := range src.Countries {
		if err := ctx.Err(); err != nil {
			return nil, rep, err
		}
		rs, lr, err := LoadFile(f, LoadCountryCSV, src.Lenient)
		if err != nil {
			return nil, rep, err
		}
		rep.Loads = append(rep.Loads, lr)
		log.Info("hierarchy source loaded", "file", f, "country ranges", lr.Records, "skipped", lr.Skipped)
		for _, r := range rs {
			if err := b.AddCountry(r); err != nil {
				return nil, rep, fmt.Errorf("%s: %w", f, err)
			}
		}
	}
	rep.LoadTime = time.Since(t0)
	if err := ctx.Err(); err != nil {
		return nil, rep, err
	}
	t, st, err := b.Build()
	rep.Stats = st
	return t, rep, err
}

// LoadFile opens path (gunzipping it when it is gzip data) and runs load on
// it; errors name the file.
func LoadFile(path string, load func(io.Reader, LoadOptions) ([]Range, LoadReport, error), lenient bool) ([]Range, LoadReport, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, LoadReport{File: path}, err
	}
	defer f.Close()
	r, err := maybeGunzip(f)
	if err != nil {
		return nil, LoadReport{File: path}, fmt.Errorf("%s: %w", path, err)
	}
	return load(r, LoadOptions{Name: path, Lenient: lenient})
}

func maybeGunzip(r io.Reader) (io.Reader, error) {
	br := bufio.NewReaderSize(r, 256*1024)
	head, _ := br.Peek(2)
	if bytes.Equal(head, []byte{0x1f, 0x8b}) {
		return gzip.NewReader(br)
	}
	return br, nil
}
