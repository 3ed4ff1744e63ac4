package pack

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
	"hash/crc32"
	"io"
	"sync"
	"time"

	"github.com/klauspost/compress/zstd"
)

// CarrierVersion is the version of the carrier framing written by this code.
const CarrierVersion = 1

// carrierMagic opens every encoded carrier.
var carrierMagic = [4]byte{'M', 'C', 'A', 'R'}

// MaxCarrierRaw caps the decompressed payload a reader accepts, so a forged
// carrier cannot become a decompression bomb at the sink.
const MaxCarrierRaw = 256 << 20

var crcTable = crc32.MakeTable(crc32.Castagnoli)

// MaxCarrierRecords bounds the records of one carrier (the outbox seals at
// it): a sink commits a carrier in one transaction, two entries per
// record, which must fit however small the records are.
const MaxCarrierRecords = 10_000

// Carrier is one sealed batch of records: the unit the outbox stores and a
// Receiver acknowledges. Data is the complete encoded carrier (header and
// zstd payload), ready to be written or sent as is.
type Carrier struct {
	CrawlerID string
	Seq       uint64    // per-crawler sequence number, strictly increasing
	Created   time.Time // when the carrier was sealed
	Records   int
	RawBytes  int // uncompressed record payload
	Data      []byte
}

// ID names the carrier uniquely: crawler id and sequence number. Receivers use
// it to make redelivery idempotent.
func (c Carrier) ID() string { return fmt.Sprintf("%s-%020d", c.CrawlerID, c.Seq) }

// Header is the decoded carrier header.
type Header struct {
	Version   int
	CrawlerID string
	Seq       uint64
	Created   time.Time
	Records   int
	RawBytes  int
}

// carrierWindow is the compression window of carriers: the default
// payload bound (Options.MaxBytes), so a carrier compresses to the same
// bytes as with zstd's default 8 MiB window (checked up to 1 MiB), while
// the encoder keeps a 1.1 MiB history instead of 16 MiB.
const carrierWindow = 1 << 20

var (
	encoderPool = sync.Pool{New: func() any {
		e, err := zstd.NewWriter(nil, zstd.WithEncoderLevel(zstd.SpeedBetterCompression), zstd.WithEncoderConcurrency(1),
			zstd.WithWindowSize(carrierWindow), zstd.WithLowerEncoderMem(true))
		if err != nil {
			panic(err) // only bad options make NewWriter fail
		}
		return e
	}}
	decoderPool = sync.Pool{New: func() any {
		d, err := zstd.NewReader(nil, zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(MaxCarrierRaw))
		if err != nil {
			panic(err)
		}
		return d
	}}
)

// Seal compresses a payload of length-prefixed encoded records into a carrier.
func Seal(crawlerID string, seq uint64, created time.Time, records int, payload []byte) Carrier {
	enc := encoderPool.Get().(*zstd.Encoder)
	compressed := enc.EncodeAll(payload, make([]byte, 0, len(payload)/4+64))
	encoderPool.Put(enc)

	b := make([]byte, 0, len(compressed)+64+len(crawlerID))
	b = append(b, carrierMagic[:]...)
	b = append(b, CarrierVersion)
	b = appendString(b, crawlerID)
	b = binary.AppendUvarint(b, seq)
	b = binary.AppendVarint(b, created.UnixMicro())
	b = binary.AppendUvarint(b, uint64(records))
	b = binary.AppendUvarint(b, uint64(len(payload)))
	b = binary.LittleEndian.AppendUint32(b, crc32.Checksum(compressed, crcTable))
	b = append(b, compressed...)
	return Carrier{CrawlerID: crawlerID, Seq: seq, Created: created.UTC().Truncate(time.Microsecond),
		Records: records, RawBytes: len(payload), Data: b}
}

// EncodeCarrier packs records into one carrier (no size bound: the Packer
// enforces bounds; this is for callers that already chose the batch).
func EncodeCarrier(crawlerID string, seq uint64, created time.Time, recs []Record) Carrier {
	var payload, tmp []byte
	for i := range recs {
		tmp = recs[i].AppendBinary(tmp[:0])
		payload = binary.AppendUvarint(payload, uint64(len(tmp)))
		payload = append(payload, tmp...)
	}
	return Seal(crawlerID, seq, created, len(recs), payload)
}

// DecodeHeader reads the header of an encoded carrier and returns it with the
// compressed payload that follows.
func DecodeHeader(data []byte) (Header, []byte, error) {
	var h Header
	if len(data) < 5 || !bytes.Equal(data[:4], carrierMagic[:]) {
		return h, nil, errors.New("pack: not a carrier (bad magic)")
	}
	h.Version = int(data[4])
	if h.Version != CarrierVersion {
		return h, nil, fmt.Errorf("pack: carrier version %d not supported (want %d)", h.Version, CarrierVersion)
	}
	d := decoder{b: data[5:]}
	h.CrawlerID = d.string()
	h.Seq = d.uvarint()
	h.Created = time.UnixMicro(d.varint()).UTC()
	h.Records = int(d.uvarint())
	raw := d.uvarint()
	sum := d.bytes(4)
	if d.err != nil {
		return h, nil, fmt.Errorf("pack: carrier header: %w", d.err)
	}
	if raw > MaxCarrierRaw {
		return h, nil, fmt.Errorf("pack: carrier claims %d raw bytes, limit %d", raw, MaxCarrierRaw)
	}
	h.RawBytes = int(raw)
	if h.Records < 0 || h.Records > h.RawBytes {
		// (outside the checksum: a damaged count must not size an allocation)
		return h, nil, fmt.Errorf("pack: carrier claims %d records in %d raw bytes", h.Records, h.RawBytes)
	}
	if crc32.Checksum(d.b, crcTable) != binary.LittleEndian.Uint32(sum) {
		return h, nil, errors.New("pack: carrier checksum mismatch")
	}
	return h, d.b, nil
}

// Decode decodes an encoded carrier into its header and records.
func Decode(data []byte) (Header, []Record, error) {
	h, compressed, err := DecodeHeader(data)
	if err != nil {
		return h, nil, err
	}
	dec := decoderPool.Get().(*zstd.Decoder)
	payload, err := dec.DecodeAll(compressed, make([]byte, 0, h.RawBytes))
	decoderPool.Put(dec)
	if err != nil {
		return h, nil, fmt.Errorf("pack: carrier %s-%d: decompress: %w", h.CrawlerID, h.Seq, err)
	}
	return decodePayload(h, payload)
}

// ErrTooLarge is returned (wrapped) by DecodeWithin for a carrier above its
// limit.
var ErrTooLarge = errors.New("pack: carrier above the size limit")

// DecodeWithin is Decode for input from others (the sink): a carrier whose
// header claims more than maxRaw decompressed bytes or more than
// MaxCarrierRecords records is refused before any work, decompression
// stops at the size the header claims (a decompression bomb costs at most
// maxRaw bytes), and decoding stops at the record count it claims; the
// decoded records take at most about 12 × maxRaw (a record's keywords are
// bounded by its bytes). accept, if set, is asked about the header (read
// and checksummed) before any decompression: a refusal of the sender costs
// no decoding.
func DecodeWithin(data []byte, maxRaw int, accept func(Header) error) (Header, []Record, error) {
	h, compressed, err := DecodeHeader(data)
	if err != nil {
		return h, nil, err
	}
	if accept != nil {
		if err := accept(h); err != nil {
			return h, nil, err
		}
	}
	if h.RawBytes > maxRaw {
		return h, nil, fmt.Errorf("%w: carrier %s-%d claims %d raw bytes, limit %d", ErrTooLarge, h.CrawlerID, h.Seq, h.RawBytes, maxRaw)
	}
	if h.Records > MaxCarrierRecords {
		return h, nil, fmt.Errorf("%w: carrier %s-%d claims %d records, limit %d", ErrTooLarge, h.CrawlerID, h.Seq, h.Records, MaxCarrierRecords)
	}
	dec, err := zstd.NewReader(bytes.NewReader(compressed), zstd.WithDecoderConcurrency(1), zstd.WithDecoderMaxMemory(uint64(maxRaw)+1))
	if err != nil {
		return h, nil, err
	}
	defer dec.Close()
	payload := make([]byte, 0, h.RawBytes)
	buf := bytes.NewBuffer(payload)
	if _, err := buf.ReadFrom(io.LimitReader(dec, int64(h.RawBytes)+1)); err != nil {
		return h, nil, fmt.Errorf("pack: carrier %s-%d: decompress: %w", h.CrawlerID, h.Seq, err)
	}
	return decodePayload(h, buf.Bytes())
}

// decodePayload decodes a carrier's decompressed payload into its records.
func decodePayload(h Header, payload []byte) (Header, []Record, error) {
	if len(payload) != h.RawBytes {
		return h, nil, fmt.Errorf("pack: carrier %s-%d: payload is %d bytes, header says %d", h.CrawlerID, h.Seq, len(payload), h.RawBytes)
	}
	recs := make([]Record, 0, min(h.Records, 1024))
	d := decoder{b: payload}
	for len(d.b) > 0 {
		if len(recs) == h.Records { // more than the header said: stop before decoding them
			return h, recs, fmt.Errorf("pack: carrier %s-%d: more records than the %d its header says", h.CrawlerID, h.Seq, h.Records)
		}
		n := d.uvarint()
		if d.err != nil || n > uint64(len(d.b)) {
			return h, recs, fmt.Errorf("pack: carrier %s-%d: record %d: truncated", h.CrawlerID, h.Seq, len(recs))
		}
		var r Record
		if err := r.UnmarshalBinary(d.bytes(int(n))); err != nil {
			return h, recs, fmt.Errorf("pack: carrier %s-%d: record %d: %w", h.CrawlerID, h.Seq, len(recs), err)
		}
		recs = append(recs, r)
	}
	if len(recs) != h.Records {
		return h, recs, fmt.Errorf("pack: carrier %s-%d: %d records, header says %d", h.CrawlerID, h.Seq, len(recs), h.Records)
	}
	return h, recs, nil
}
