package sink

import "github.com/prometheus/client_golang/prometheus"

type metrics struct {
	records, carriers, duplicates, trimmed prometheus.Counter
	rejected                               *prometheus.CounterVec
}

func newMetrics(reg prometheus.Registerer, s *Store) *metrics {
	c := func(name, help string) prometheus.Counter {
		return prometheus.NewCounter(prometheus.CounterOpts{Namespace: "micra", Subsystem: "sink", Name: name, Help: help})
	}
	m := &metrics{
		records:    c("records_total", "Records committed to the change log."),
		carriers:   c("carriers_total", "Carriers committed."),
		duplicates: c("duplicate_carriers_total", "Carriers delivered again after their commit, acknowledged without a change."),
		trimmed:    c("trimmed_records_total", "Records dropped from the log's start by its retention."),
		rejected: prometheus.NewCounterVec(prometheus.CounterOpts{Namespace: "micra", Subsystem: "sink", Name: "rejected_carriers_total",
			Help: "Carriers refused (NACKed) by status: malformed, too_large, wrong_sender, refused, internal."}, []string{"status"}),
	}
	if reg == nil {
		return m
	}
	gauge := func(name, help string, f func() float64) prometheus.Collector {
		return prometheus.NewGaugeFunc(prometheus.GaugeOpts{Namespace: "micra", Subsystem: "sink", Name: name, Help: help}, f)
	}
	for _, col := range []prometheus.Collector{m.records, m.carriers, m.duplicates, m.trimmed, m.rejected,
		gauge("head", "Sequence of the last committed record.", func() float64 { return float64(s.Head()) }),
		gauge("start", "First sequence the log holds (past 1 once its retention dropped records).", func() float64 { return float64(s.Start()) }),
		gauge("pages", "Distinct pages in the change log.", func() float64 { c, _ := s.Counts(); return float64(c.Pages) }),
		gauge("overlap_records", "Records of pages another crawler delivered before.", func() float64 { c, _ := s.Counts(); return float64(c.Overlap) }),
	} {
		if err := reg.Register(col); err != nil {
			s.log.Warn("metric not registered", "err", err)
		}
	}
	return m
}
