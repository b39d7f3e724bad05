package deliver

import (
	"errors"
	"time"

	"github.com/prometheus/client_golang/prometheus"
)

// metrics are an Endpoint's; Collector exports them.
type metrics struct {
	requests *prometheus.CounterVec // by outcome
	records  *prometheus.CounterVec // by outcome
	seconds  *prometheus.HistogramVec
	waiting  prometheus.Gauge
}

func newMetrics() *metrics {
	return &metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyshare_deliver_requests_total",
			Help: "Requests (gRPC: calls) to the delivery endpoint by outcome: done (2xx; OK), refused (4xx that fails the records; InvalidArgument, FailedPrecondition, OutOfRange, AlreadyExists), trouble (no answer, timeout, 3xx, 5xx, 408, 429, 401, 403, 404, 405; any other status code; or results that are not one per record; sent again). A request cancelled because the member stopped working on its records is not counted.",
		}, []string{"outcome"}),
		records: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "keyshare_deliver_records_total",
			Help: "Records the delivery endpoint answered about, by outcome: done, failed (refused, or \"failed\" in a batch answer or a call's results; retried, then dead-lettered), or fenced (\"fenced\" in a batch answer or a call's results: the endpoint refused the record's fence; retried while the member works on it, never dead-lettered).",
		}, []string{"outcome"}),
		seconds: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "keyshare_deliver_request_seconds",
			Help:    "Latency of requests to the delivery endpoint, by outcome.",
			Buckets: prometheus.ExponentialBuckets(0.0005, 2, 16),
		}, []string{"outcome"}),
		waiting: prometheus.NewGauge(prometheus.GaugeOpts{
			Name: "keyshare_deliver_waiting_calls",
			Help: "Handler calls waiting for the delivery endpoint to answer (0 while it answers).",
		}),
	}
}

func (m *metrics) observe(o outcome, d time.Duration) {
	m.requests.WithLabelValues(o.String()).Inc()
	m.seconds.WithLabelValues(o.String()).Observe(d.Seconds())
}

func (m *metrics) countRecords(res []error) {
	failed, fenced := 0, 0
	for _, err := range res {
		var fe *FencedError
		switch {
		case errors.As(err, &fe):
			fenced++
		case err != nil:
			failed++
		}
	}
	m.records.WithLabelValues("done").Add(float64(len(res) - failed - fenced))
	m.records.WithLabelValues("failed").Add(float64(failed))
	if fenced > 0 {
		m.records.WithLabelValues("fenced").Add(float64(fenced))
	}
}

// Collector returns the Endpoint's metrics (docs/delivery.md lists them),
// to register beside the consumer's; wrap the registerer with the group
// label (prometheus.WrapRegistererWith) as the consumer labels its own.
func (e *Endpoint) Collector() prometheus.Collector { return e.metrics }

// Describe and Collect make metrics a prometheus.Collector.
func (m *metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.records.Describe(ch)
	m.seconds.Describe(ch)
	m.waiting.Describe(ch)
}

func (m *metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.records.Collect(ch)
	m.seconds.Collect(ch)
	m.waiting.Collect(ch)
}
