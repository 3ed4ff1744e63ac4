package fetch

import (
	"errors"

	"github.com/prometheus/client_golang/prometheus"
)

type metrics struct {
	requests         *prometheus.CounterVec   // method, class
	errors           *prometheus.CounterVec   // reason
	phase            *prometheus.HistogramVec // phase
	bytes            *prometheus.CounterVec   // kind: wire, decoded
	politenessWait   prometheus.Histogram
	robots           *prometheus.CounterVec // outcome
	crawlDelayCapped prometheus.Counter
	backoffs         prometheus.Counter
	charsetRepaired  prometheus.Counter
	charsetConverted prometheus.Counter
	transportReplays prometheus.Counter
}

func newMetrics(reg prometheus.Registerer) *metrics {
	buckets := []float64{.0005, .001, .0025, .005, .01, .025, .05, .1, .25, .5, 1, 2.5, 5, 10, 30}
	m := &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "micra_fetch_requests_total", Help: "HTTP requests sent (each redirect hop counts), by method and status class.",
		}, []string{"method", "class"}),
		errors: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "micra_fetch_errors_total", Help: "Failed fetches by reason (limits, guard, robots, network …).",
		}, []string{"reason"}),
		phase: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name: "micra_fetch_phase_seconds", Help: "Per-request timing by phase (dns, connect, tls, first_byte, total).", Buckets: buckets,
		}, []string{"phase"}),
		bytes: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "micra_fetch_body_bytes_total", Help: "Body bytes fetched: as transferred (wire) and after decoding (decoded).",
		}, []string{"kind"}),
		politenessWait: prometheus.NewHistogram(prometheus.HistogramOpts{
			Name: "micra_fetch_politeness_wait_seconds", Help: "Time a request waited for its host slot, rest and back-off.", Buckets: buckets,
		}),
		robots: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "micra_fetch_robots_total", Help: "robots.txt fetches by outcome (rules, allow_all, disallow_all).",
		}, []string{"outcome"}),
		crawlDelayCapped: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "micra_fetch_crawl_delay_capped_total", Help: "robots.txt Crawl-delay values above MaxCrawlDelay.",
		}),
		backoffs: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "micra_fetch_backoffs_total", Help: "429/503 answers that backed a host off.",
		}),
		charsetRepaired: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "micra_fetch_charset_repaired_total", Help: "Bodies declared UTF-8 with invalid bytes, repaired with U+FFFD.",
		}),
		charsetConverted: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "micra_fetch_charset_converted_total", Help: "Bodies converted from another charset to UTF-8.",
		}),
		transportReplays: prometheus.NewCounter(prometheus.CounterOpts{
			Name: "micra_fetch_transport_replays_total",
			Help: "Requests re-sent by the HTTP transport on its own, after a reused connection closed unanswered: copies the server may have received beyond the requests the crawler decided to send, outside politeness pacing.",
		}),
	}
	m.requests = register(reg, m.requests)
	m.errors = register(reg, m.errors)
	m.phase = register(reg, m.phase)
	m.bytes = register(reg, m.bytes)
	m.politenessWait = register(reg, m.politenessWait)
	m.robots = register(reg, m.robots)
	m.crawlDelayCapped = register(reg, m.crawlDelayCapped)
	m.backoffs = register(reg, m.backoffs)
	m.charsetRepaired = register(reg, m.charsetRepaired)
	m.charsetConverted = register(reg, m.charsetConverted)
	m.transportReplays = register(reg, m.transportReplays)
	return m
}

// register registers c, or returns the collector already registered under
// the same description so several fetchers can share one registry.
func register[C prometheus.Collector](reg prometheus.Registerer, c C) C {
	if err := reg.Register(c); err != nil {
		var are prometheus.AlreadyRegisteredError
		if errors.As(err, &are) {
			if existing, ok := are.ExistingCollector.(C); ok {
				return existing
			}
		}
	}
	return c
}
