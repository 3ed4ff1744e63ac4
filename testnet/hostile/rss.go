package hostile

import (
	"context"
	"os"
	"strconv"
	"strings"
	"sync"
	"time"
)

// vmRSS is a process's resident set (VmRSS of /proc/PID/status) in bytes;
// 0 when the process is gone.
func vmRSS(pid int) uint64 {
	b, err := os.ReadFile("/proc/" + strconv.Itoa(pid) + "/status")
	if err != nil {
		return 0
	}
	for _, line := range strings.Split(string(b), "\n") {
		if rest, ok := strings.CutPrefix(line, "VmRSS:"); ok {
			f := strings.Fields(rest)
			if len(f) == 2 && f[1] == "kB" {
				kb, _ := strconv.ParseUint(f[0], 10, 64)
				return kb << 10
			}
		}
	}
	return 0
}

// RSS is a summary of resident-set samples, in MB.
type RSS struct {
	Samples int     `json:"samples"`
	MeanMB  float64 `json:"mean_mb"`
	PeakMB  float64 `json:"peak_mb"`
	MinMB   float64 `json:"min_mb"`
}

// sampler samples a process's VmRSS every interval until stopped.
type sampler struct {
	mu   sync.Mutex
	vals []uint64
	stop context.CancelFunc
	done chan struct{}
}

func sampleRSS(pid int, every time.Duration) *sampler {
	ctx, cancel := context.WithCancel(context.Background())
	s := &sampler{stop: cancel, done: make(chan struct{})}
	go func() {
		defer close(s.done)
		t := time.NewTicker(every)
		defer t.Stop()
		for {
			if v := vmRSS(pid); v > 0 {
				s.mu.Lock()
				s.vals = append(s.vals, v)
				s.mu.Unlock()
			}
			select {
			case <-ctx.Done():
				return
			case <-t.C:
			}
		}
	}()
	return s
}

// end stops the sampler and summarises its samples.
func (s *sampler) end() RSS {
	s.stop()
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	return summarise(s.vals)
}

func summarise(vals []uint64) RSS {
	if len(vals) == 0 {
		return RSS{}
	}
	r := RSS{Samples: len(vals), MinMB: mb(vals[0])}
	var sum float64
	for _, v := range vals {
		sum += mb(v)
		r.PeakMB = max(r.PeakMB, mb(v))
		r.MinMB = min(r.MinMB, mb(v))
	}
	r.MeanMB = sum / float64(len(vals))
	return r
}

func mb(b uint64) float64 { return float64(b) / (1 << 20) }
