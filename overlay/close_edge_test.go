package overlay

import (
	"context"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
)

// Work started on demand — Directory.Recheck after a refused hand-off, a
// page recovery, a provider query — added to the peer's WaitGroup without
// checking whether Close had already waited on it: a hand-off handler
// still running while the peer closes started a DHT read on a DHT being
// closed, in a goroutine nothing waits for.
func TestNoBackgroundWorkStartsAfterClose(t *testing.T) {
	p, err := Open(context.Background(), testTree(t), TestnetConfig(), Services{Measurer: modelMeasurer{}})
	if err != nil {
		t.Fatal(err)
	}
	if err := p.Close(); err != nil {
		t.Fatal(err)
	}
	gets := func() uint64 {
		var m dto.Metric
		if err := p.metrics.dhtGet.Write(&m); err != nil {
			t.Fatal(err)
		}
		return m.GetHistogram().GetSampleCount()
	}
	before := gets()
	p.dir.Recheck(5)
	time.Sleep(300 * time.Millisecond)
	if n := gets() - before; n != 0 {
		t.Errorf("Recheck after Close read the DHT %d time(s), in a goroutine Close did not wait for", n)
	}
}
