package sink

import (
	"bufio"
	"bytes"
	"crypto/rand"
	"encoding/json"
	"errors"
	"io"
	"log/slog"
	"testing"

	"github.com/libp2p/go-libp2p/core/crypto"
	"github.com/libp2p/go-libp2p/core/peer"
	"google.golang.org/protobuf/encoding/protodelim"
	"google.golang.org/protobuf/proto"

	"github.com/micra-crawler/micra/node/sink/pb"
)

// The frames the sink and its subscribers take from others: a crawler's
// carrier push (/micra/carrier/1), a subscriber's request and the record
// frames a subscriber reads (/micra/subscribe/1). Each must refuse what it
// cannot read, never panic, and keep what the rest relies on. `make fuzz`
// runs each briefly; seeds: f.Add below and testdata/fuzz/<target>/.

func fuzzStore(f *testing.F) *Store {
	s, err := Open(Options{Dir: f.TempDir(), NoSync: true})
	if err != nil {
		f.Fatal(err)
	}
	f.Cleanup(func() { s.Close() })
	return s
}

func fuzzPeer(f *testing.F) peer.ID {
	sk, _, err := crypto.GenerateEd25519Key(rand.Reader)
	if err != nil {
		f.Fatal(err)
	}
	id, err := peer.IDFromPrivateKey(sk)
	if err != nil {
		f.Fatal(err)
	}
	return id
}

// FuzzCarrierPush: a crawler's push as the sink takes it. An OK commits the
// carrier once: pushed again, it is a duplicate at the same place in the
// log. Any refusal says why.
func FuzzCarrierPush(f *testing.F) {
	s := fuzzStore(f)
	from := fuzzPeer(f)
	srv := &Server{Store: s, Logger: slog.New(slog.DiscardHandler), waiting: make(chan struct{}, 1)}
	for _, c := range [][]byte{carrier(from.String(), 1, 0, 3), carrier("someone else", 1, 0, 1), nil, []byte("not a carrier")} {
		b, err := proto.Marshal(&pb.CarrierPush{Version: wireVersion, Carrier: c})
		if err != nil {
			f.Fatal(err)
		}
		f.Add(b)
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		var req pb.CarrierPush
		if proto.Unmarshal(data, &req) != nil {
			return
		}
		ack := srv.push(from, &req)
		if ack.Status != pb.Status_OK {
			if ack.Reason == "" {
				t.Fatalf("%v without a reason", ack.Status)
			}
			return
		}
		again := srv.push(from, &req)
		if again.Status != pb.Status_OK || !again.Duplicate || again.First != ack.First || again.Records != ack.Records {
			t.Fatalf("pushed twice: %+v then %+v", ack, again)
		}
		if ack.Records > 0 && s.Head() < ack.First+uint64(ack.Records)-1 {
			t.Fatalf("acknowledged records %d..%d, the log ends at %d", ack.First, ack.First+uint64(ack.Records)-1, s.Head())
		}
	})
}

// FuzzSubscribeRequest: a subscriber's request as the sink reads it, and
// the first batch it serves: only records that pass the filter, after the
// cursor, in order, each a frame within maxFrame.
func FuzzSubscribeRequest(f *testing.F) {
	s := fuzzStore(f)
	if _, err := s.Commit("c1", carrier("c1", 1, 0, 5)); err != nil {
		f.Fatal(err)
	}
	for _, req := range []*pb.SubscribeRequest{
		{Version: wireVersion},
		{Version: wireVersion, After: 2, Host: "h1.example", Limit: 2},
		{Version: wireVersion, Suffix: "example", Keyword: "alpha", Lang: "en", Changed: true, Follow: true},
	} {
		var buf bytes.Buffer
		if _, err := protodelim.MarshalTo(&buf, req); err != nil {
			f.Fatal(err)
		}
		f.Add(buf.Bytes())
	}
	f.Fuzz(func(t *testing.T, data []byte) {
		req, flt, err := readSubscribeRequest(bufio.NewReader(bytes.NewReader(data)))
		if err != nil {
			return
		}
		batch := 1000
		if req.Limit > 0 {
			batch = min(batch, int(req.Limit))
		}
		es, last, err := s.Read(req.After, batch, flt)
		if err != nil {
			var bs *BeforeStartError
			if !errors.As(err, &bs) {
				t.Fatalf("read after %d: %v", req.After, err)
			}
			return
		}
		if len(es) > batch || last < req.After {
			t.Fatalf("%d entries of a batch of %d, cursor %d after %d", len(es), batch, last, req.After)
		}
		prev := req.After
		for i := range es {
			if es[i].Seq <= prev || es[i].Seq > last || !flt.match(&es[i].Record) {
				t.Fatalf("entry %d (seq %d) after %d, cursor %d, filter %+v", i, es[i].Seq, prev, last, flt)
			}
			prev = es[i].Seq
			b, err := json.Marshal(StreamEntry(&es[i]))
			if err != nil || proto.Size(&pb.RecordFrame{Seq: es[i].Seq, Record: b}) > maxFrame {
				t.Fatalf("entry %d: frame of %d bytes, %v", i, len(b), err)
			}
		}
	})
}

// FuzzRecordFrames: the frames a subscriber reads from a sink. Next returns
// records with a sequence, skips keep-alives, and ends with an error or EOF.
func FuzzRecordFrames(f *testing.F) {
	var buf bytes.Buffer
	for _, fr := range []*pb.RecordFrame{{Seq: 1, Record: []byte(`{"url":"http://a/"}`)}, {}, {Seq: 2, Record: []byte(`{}`)}, {Error: "before start: cursor 1, log starts at 5"}} {
		if _, err := protodelim.MarshalTo(&buf, fr); err != nil {
			f.Fatal(err)
		}
	}
	f.Add(buf.Bytes())
	f.Add([]byte{})
	f.Add([]byte{0xff, 0xff, 0xff, 0xff, 0x0f})
	f.Fuzz(func(t *testing.T, data []byte) {
		sub := &Subscription{r: bufio.NewReader(bytes.NewReader(data))}
		for range len(data) + 1 {
			seq, rec, err := sub.Next(0)
			if err != nil {
				if errors.Is(err, io.EOF) && seq != 0 {
					t.Fatalf("EOF with seq %d", seq)
				}
				return
			}
			if seq == 0 || len(rec) > maxFrame {
				t.Fatalf("record seq %d of %d bytes", seq, len(rec))
			}
		}
		t.Fatalf("more records than bytes in %d bytes", len(data))
	})
}
