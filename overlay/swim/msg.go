package swim

import (
	"errors"
	"fmt"

	"google.golang.org/protobuf/encoding/protowire"
)

// MsgKind is a message's role in a probe.
type MsgKind uint8

// Message kinds.
const (
	MsgPing    MsgKind = 1 // are you there? (answered by an Ack of its Seq)
	MsgPingReq MsgKind = 2 // probe Target for me (answered by an Ack naming Target)
	MsgAck     MsgKind = 3 // answer; Target set when relayed by a helper
	MsgGossip  MsgKind = 4 // changes only, to a neighbour (not answered)
	MsgNack    MsgKind = 5 // a helper could not reach Target either (Seq: the asker's)
)

// UpdateKind is what an update says of a member.
type UpdateKind uint8

// Update kinds.
const (
	UpAlive   UpdateKind = 1 // a member's sealed record (Record)
	UpSuspect UpdateKind = 2 // From suspects ID at Inc
	UpDead    UpdateKind = 3 // From declared ID dead at Inc
)

// Update is a membership change piggybacked on a message.
type Update struct {
	Kind   UpdateKind
	Record []byte // UpAlive
	ID     ID     // UpSuspect, UpDead
	Inc    Inc
	From   ID
}

// Msg is one protocol message: its kind, the probe's sequence number, the
// member to probe (or that answered), the updates it carries, and the
// sender's revocation list's sequence (the host's: a member holding an
// older list fetches the sender's).
type Msg struct {
	Kind        MsgKind
	Seq         uint32
	Target      ID
	Updates     []Update
	Revocations uint64
}

// Wire limits: what Decode refuses.
const (
	MaxMsgBytes    = 64 << 10
	MaxUpdates     = 64
	maxIDBytes     = 128
	maxRecordBytes = 8 << 10
)

// Size is the message's encoded size in bytes.
func (m Msg) Size() int { return len(m.Encode()) }

func (u Update) size() int { return len(appendUpdate(nil, u)) + 2 }

// Encode is the message's wire form (protobuf encoding: fields 1 kind, 2
// seq, 3 target, 4 updates, 5 revocations; an update: 1 kind, 2 record, 3
// id, 4 start, 5 seq, 6 from).
func (m Msg) Encode() []byte {
	b := protowire.AppendTag(nil, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(m.Kind))
	if m.Seq != 0 {
		b = protowire.AppendTag(b, 2, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(m.Seq))
	}
	if m.Target != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, string(m.Target))
	}
	for _, u := range m.Updates {
		b = protowire.AppendTag(b, 4, protowire.BytesType)
		b = protowire.AppendBytes(b, appendUpdate(nil, u))
	}
	if m.Revocations != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, m.Revocations)
	}
	return b
}

func appendUpdate(b []byte, u Update) []byte {
	b = protowire.AppendTag(b, 1, protowire.VarintType)
	b = protowire.AppendVarint(b, uint64(u.Kind))
	if len(u.Record) > 0 {
		b = protowire.AppendTag(b, 2, protowire.BytesType)
		b = protowire.AppendBytes(b, u.Record)
	}
	if u.ID != "" {
		b = protowire.AppendTag(b, 3, protowire.BytesType)
		b = protowire.AppendString(b, string(u.ID))
	}
	if u.Inc.Start != 0 {
		b = protowire.AppendTag(b, 4, protowire.VarintType)
		b = protowire.AppendVarint(b, uint64(u.Inc.Start))
	}
	if u.Inc.Seq != 0 {
		b = protowire.AppendTag(b, 5, protowire.VarintType)
		b = protowire.AppendVarint(b, u.Inc.Seq)
	}
	if u.From != "" {
		b = protowire.AppendTag(b, 6, protowire.BytesType)
		b = protowire.AppendString(b, string(u.From))
	}
	return b
}

// Decode parses and checks a message: known kinds, bounded sizes, the
// fields each kind needs. Unknown fields are refused.
func Decode(b []byte) (Msg, error) {
	var m Msg
	if len(b) > MaxMsgBytes {
		return m, fmt.Errorf("swim: message of %d bytes exceeds %d", len(b), MaxMsgBytes)
	}
	err := fields(b, func(num protowire.Number, v uint64, raw []byte) error {
		switch num {
		case 1:
			m.Kind = MsgKind(v)
		case 2:
			if v > 1<<32-1 {
				return errors.New("seq out of range")
			}
			m.Seq = uint32(v)
		case 3:
			if len(raw) > maxIDBytes {
				return errors.New("target too long")
			}
			m.Target = ID(raw)
		case 4:
			if len(m.Updates) == MaxUpdates {
				return fmt.Errorf("more than %d updates", MaxUpdates)
			}
			u, err := decodeUpdate(raw)
			if err != nil {
				return err
			}
			m.Updates = append(m.Updates, u)
		case 5:
			m.Revocations = v
		default:
			return fmt.Errorf("unknown field %d", num)
		}
		return nil
	})
	if err != nil {
		return Msg{}, fmt.Errorf("swim: message: %w", err)
	}
	switch m.Kind {
	case MsgPing, MsgAck, MsgGossip:
	case MsgPingReq, MsgNack:
		if m.Target == "" {
			return Msg{}, fmt.Errorf("swim: message kind %d without a target", m.Kind)
		}
	default:
		return Msg{}, fmt.Errorf("swim: message kind %d unknown", m.Kind)
	}
	return m, nil
}

func decodeUpdate(b []byte) (Update, error) {
	var u Update
	err := fields(b, func(num protowire.Number, v uint64, raw []byte) error {
		switch num {
		case 1:
			u.Kind = UpdateKind(v)
		case 2:
			if len(raw) > maxRecordBytes {
				return fmt.Errorf("record of %d bytes", len(raw))
			}
			u.Record = raw
		case 3:
			if len(raw) > maxIDBytes {
				return errors.New("id too long")
			}
			u.ID = ID(raw)
		case 4:
			u.Inc.Start = int64(v)
		case 5:
			u.Inc.Seq = v
		case 6:
			if len(raw) > maxIDBytes {
				return errors.New("from too long")
			}
			u.From = ID(raw)
		default:
			return fmt.Errorf("unknown update field %d", num)
		}
		return nil
	})
	if err != nil {
		return Update{}, err
	}
	switch u.Kind {
	case UpAlive:
		if len(u.Record) == 0 {
			return Update{}, errors.New("alive update without a record")
		}
	case UpSuspect, UpDead:
		if u.ID == "" || u.From == "" {
			return Update{}, errors.New("suspicion without its member or its author")
		}
	default:
		return Update{}, fmt.Errorf("update kind %d unknown", u.Kind)
	}
	return u, nil
}

// fields walks a protobuf message: varints give v, byte strings raw (a
// copy: messages outlive their buffer).
func fields(b []byte, fn func(protowire.Number, uint64, []byte) error) error {
	for len(b) > 0 {
		num, typ, n := protowire.ConsumeTag(b)
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		var v uint64
		var raw []byte
		switch typ {
		case protowire.VarintType:
			v, n = protowire.ConsumeVarint(b)
		case protowire.BytesType:
			var r []byte
			r, n = protowire.ConsumeBytes(b)
			raw = append([]byte(nil), r...)
		default:
			return fmt.Errorf("field %d of wire type %d", num, typ)
		}
		if n < 0 {
			return protowire.ParseError(n)
		}
		b = b[n:]
		if err := fn(num, v, raw); err != nil {
			return err
		}
	}
	return nil
}
