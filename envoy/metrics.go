package ratekitenvoy

import (
	"sync"

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
	unknown  *domainSeries // the series of every domain not served
}

var _ prometheus.Collector = (*Metrics)(nil)

func newMetrics() *Metrics {
	m := &Metrics{
		requests: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_envoy_requests_total",
			Help: "ShouldRateLimit calls by domain and answer (ok, over_limit, invalid, unknown_domain, internal, canceled).",
		}, []string{"domain", "code"}),
		failOpen: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_envoy_fail_open_descriptors_total",
			Help: "Descriptors answered OK because their check failed open (store error, timeout, breaker open).",
		}, []string{"domain"}),
	}
	m.unknown = m.series(unknownDomainLabel)
	return m
}

// code is the code label of an answer.
type code uint8

const (
	codeOK code = iota
	codeOverLimit
	codeInvalid
	codeUnknownDomain
	codeInternal
	codeCanceled
	numCodes
)

var codeLabels = [numCodes]string{"ok", "over_limit", "invalid", "unknown_domain", "internal", "canceled"}

// domainSeries are the series of one domain label, each resolved from its
// vector once, at its first use, not at every request (WithLabelValues
// hashes the labels and takes the vector's lock): a series appears when
// counted, as with WithLabelValues. There is one per served domain and one
// for the unknown ones, made before serving: nothing a caller sends adds one.
type domainSeries struct {
	requests [numCodes]func() prometheus.Counter
	failOpen func() prometheus.Counter
}

// series returns the series of domain, none of them created yet.
func (m *Metrics) series(domain string) *domainSeries {
	ds := &domainSeries{failOpen: sync.OnceValue(func() prometheus.Counter { return m.failOpen.WithLabelValues(domain) })}
	for c, label := range codeLabels {
		ds.requests[c] = sync.OnceValue(func() prometheus.Counter { return m.requests.WithLabelValues(domain, label) })
	}
	return ds
}

// servedDomain returns the series of a served domain, those of its usual
// answers created at zero, so rates and alerts work before the first request.
func (m *Metrics) servedDomain(domain string) *domainSeries {
	ds := m.series(domain)
	for _, c := range []code{codeOK, codeOverLimit, codeInvalid} {
		ds.requests[c]()
	}
	ds.failOpen()
	return ds
}

func (ds *domainSeries) request(c code) { ds.requests[c]().Inc() }

func (ds *domainSeries) failedOpen(n int) { ds.failOpen().Add(float64(n)) }

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
