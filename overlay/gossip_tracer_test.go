package overlay

import (
	"testing"

	pubsub "github.com/libp2p/go-libp2p-pubsub"
	pubsubpb "github.com/libp2p/go-libp2p-pubsub/pb"
	"google.golang.org/protobuf/proto"
)

// A valid message gossipsub drops because this peer's reader of the topic
// is behind is counted by topic, beside the rejected ones: a flood of
// heartbeats that outpaces the membership reader shows in the metrics.
func TestTracerCountsUndeliverable(t *testing.T) {
	m, err := newMetrics(nil, "")
	if err != nil {
		t.Fatal(err)
	}
	tr := newGossipTracer(m)
	for range 3 {
		tr.UndeliverableMessage(&pubsub.Message{Message: &pubsubpb.Message{Topic: proto.String(TopicMembership)}})
	}
	if got := counterValue(t, m.gossipRejected.WithLabelValues(TopicMembership, ReasonSubscriberBehind)); got != 3 {
		t.Fatalf("counted %v, want 3", got)
	}
	if got := counterValue(t, m.gossipRejected.WithLabelValues(TopicCalibration, ReasonSubscriberBehind)); got != 0 {
		t.Fatalf("counted %v on another topic", got)
	}
}
