package ratekitenvoy

import (
	"github.com/prometheus/client_golang/prometheus"
)

// unknownDomainLabel is the domain label of requests for a domain the service
// does not serve: a caller's string never becomes a label value, so the
// number of series stays bounded.
const unknownDomainLabel = "<unknown>"

// Metrics is the service's Prometheus collector. Per-rule outcomes (blocks,
// shadow rules exceeded, store errors) are counted by the limiters' own
// observer (observability/observe); these count what only the gateway sees.
//
//   - ratekit_envoy_requests_total{domain,code}: ShouldRateLimit calls by
//     answer: ok, over_limit, invalid (INVALID_ARGUMENT), unknown_domain
//     (NOT_FOUND), internal (a recovered panic) or canceled (the caller's
//     deadline passed, or it canceled, before its checks ended:
//     DEADLINE_EXCEEDED or CANCELED).
//   - ratekit_envoy_fail_open_descriptors_total{domain}: descriptors answered
//     OK because their check failed open (store down, slow or breaker open).
type Metrics struct {
	requests *prometheus.CounterVec
	failOpen *prometheus.CounterVec
}

var _ prometheus.Collector = (*Metrics)(nil)

func newMetrics() *Metrics {
	return &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_envoy_requests_total",
			Help: "ShouldRateLimit calls by domain and answer (ok, over_limit, invalid, unknown_domain, internal, canceled).",
		}, []string{"domain", "code"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_envoy_fail_open_descriptors_total",
			Help: "Descriptors answered OK because their check failed open (store error, timeout, breaker open).",
		}, []string{"domain"}),
	}
}

// initDomain creates a served domain's series at zero, so rates and alerts
// work before the first request.
func (m *Metrics) initDomain(domain string) {
	for _, code := range []string{"ok", "over_limit", "invalid"} {
		m.requests.WithLabelValues(domain, code)
	}
	m.failOpen.WithLabelValues(domain)
}

func (m *Metrics) request(domain, code string) { m.requests.WithLabelValues(domain, code).Inc() }

func (m *Metrics) failedOpen(domain string, n int) {
	m.failOpen.WithLabelValues(domain).Add(float64(n))
}

// Describe implements prometheus.Collector.
func (m *Metrics) Describe(ch chan<- *prometheus.Desc) {
	m.requests.Describe(ch)
	m.failOpen.Describe(ch)
}

// Collect implements prometheus.Collector.
func (m *Metrics) Collect(ch chan<- prometheus.Metric) {
	m.requests.Collect(ch)
	m.failOpen.Collect(ch)
}
