package swim

import "testing"

// FuzzDecode: a message decodes or is refused, never panics, and what
// decodes encodes to bytes that decode to the same message.
func FuzzDecode(f *testing.F) {
	f.Add(Msg{Kind: MsgPing, Seq: 1}.Encode())
	f.Add(Msg{Kind: MsgPingReq, Seq: 2, Target: "t", Revocations: 3}.Encode())
	f.Add(Msg{Kind: MsgAck, Updates: []Update{{Kind: UpAlive, Record: []byte("rec")}, {Kind: UpDead, ID: "a", From: "b", Inc: Inc{1, 2}}}}.Encode())
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := Decode(b)
		if err != nil {
			return
		}
		again, err := Decode(m.Encode())
		if err != nil {
			t.Fatalf("re-encoded message refused: %v", err)
		}
		if again.Size() != m.Size() || again.Kind != m.Kind || again.Seq != m.Seq || len(again.Updates) != len(m.Updates) {
			t.Fatalf("round trip changed the message: %+v → %+v", m, again)
		}
	})
}
