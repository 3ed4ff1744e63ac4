package hostile

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"net/http"
	"os"
	"sort"
	"strconv"
	"strings"
	"time"
)

// sample is one line of the Prometheus text format.
type sample struct {
	name   string
	labels map[string]string
	value  float64
}

// scrape reads the victim's /metrics (its control API).
func scrape(ctx context.Context, base string) ([]sample, error) {
	body, err := get(ctx, base+"/metrics")
	if err != nil {
		return nil, err
	}
	defer body.Close()
	return parseMetrics(body)
}

// parseMetrics reads the Prometheus text exposition format's samples.
func parseMetrics(r io.Reader) ([]sample, error) {
	var out []sample
	sc := bufio.NewScanner(r)
	sc.Buffer(make([]byte, 64<<10), 1<<20)
	for n := 1; sc.Scan(); n++ {
		line := strings.TrimSpace(sc.Text())
		if line == "" || line[0] == '#' {
			continue
		}
		i := strings.LastIndexByte(line, ' ')
		if i < 0 {
			return nil, fmt.Errorf("metrics line %d: %q has no value", n, line)
		}
		v, err := strconv.ParseFloat(line[i+1:], 64)
		if err != nil {
			return nil, fmt.Errorf("metrics line %d: value %q: %w", n, line[i+1:], err)
		}
		s := sample{name: line[:i], labels: map[string]string{}, value: v}
		if j := strings.IndexByte(s.name, '{'); j >= 0 {
			labels := strings.TrimSuffix(s.name[j+1:], "}")
			s.name = s.name[:j]
			for labels != "" {
				k, rest, ok := strings.Cut(labels, `="`)
				if !ok {
					return nil, fmt.Errorf("metrics line %d: labels %q", n, labels)
				}
				val, rest, ok := strings.Cut(rest, `"`)
				if !ok {
					return nil, fmt.Errorf("metrics line %d: labels %q", n, labels)
				}
				s.labels[k] = val
				labels = strings.TrimPrefix(rest, ",")
			}
		}
		out = append(out, s)
	}
	return out, sc.Err()
}

// sum adds the samples named name whose labels include match.
func sum(ss []sample, name string, match map[string]string) float64 {
	var t float64
next:
	for _, s := range ss {
		if s.name != name {
			continue
		}
		for k, v := range match {
			if s.labels[k] != v {
				continue next
			}
		}
		t += s.value
	}
	return t
}

// Rejected is one count of micra_overlay_gossip_rejected_total.
type Rejected struct {
	Topic  string  `json:"topic"`
	Reason string  `json:"reason"`
	Count  float64 `json:"count"`
}

// rejected lists the gossip the victim rejected or ignored, by topic and
// reason, most first.
func rejected(ss []sample) []Rejected {
	var out []Rejected
	for _, s := range ss {
		if s.name == "micra_overlay_gossip_rejected_total" && s.value > 0 {
			out = append(out, Rejected{Topic: s.labels["topic"], Reason: s.labels["reason"], Count: s.value})
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].Count > out[j].Count })
	return out
}

// saveHeap writes the victim's heap profile (its control API's pprof) to
// file.
func saveHeap(ctx context.Context, base, file string) error {
	body, err := get(ctx, base+"/debug/pprof/heap")
	if err != nil {
		return err
	}
	defer body.Close()
	f, err := os.Create(file)
	if err != nil {
		return err
	}
	if _, err := io.Copy(f, body); err != nil {
		f.Close()
		return err
	}
	return f.Close()
}

func get(ctx context.Context, u string) (io.ReadCloser, error) {
	ctx, cancel := context.WithTimeout(ctx, 30*time.Second)
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, u, nil)
	if err != nil {
		cancel()
		return nil, err
	}
	resp, err := loopbackClient.Do(req)
	if err != nil {
		cancel()
		return nil, fmt.Errorf("hostile: GET %s: %w", u, err)
	}
	if resp.StatusCode != http.StatusOK {
		resp.Body.Close()
		cancel()
		return nil, fmt.Errorf("hostile: GET %s: %s", u, resp.Status)
	}
	return cancelOnClose{resp.Body, cancel}, nil
}

// loopbackClient asks the victim's control API directly (no proxy).
var loopbackClient = &http.Client{Transport: &http.Transport{Proxy: nil}}

type cancelOnClose struct {
	io.ReadCloser
	cancel context.CancelFunc
}

func (c cancelOnClose) Close() error {
	defer c.cancel()
	return c.ReadCloser.Close()
}
