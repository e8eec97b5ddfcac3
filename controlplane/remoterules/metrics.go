package remoterules

import (
	"time"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/internal/promset"
)

// Lookup is the outcome of one check's cache lookup.
type Lookup string

// The lookup outcomes, each its outcome label in
// ratekit_remoterules_lookups_total.
const (
	LookupHit         Lookup = "hit"          // a fresh cached answer
	LookupStale       Lookup = "stale"        // a stale answer, served while revalidating
	LookupMiss        Lookup = "miss"         // no usable answer: a call (or a wait for one)
	LookupBreakerOpen Lookup = "breaker_open" // no usable answer and the breaker open: no call, local tiers only
)

// CallOutcome is the outcome of one call to the rules service.
type CallOutcome string

// The call outcomes, each its outcome label in
// ratekit_remoterules_calls_total.
const (
	CallOK          CallOutcome = "ok"           // an answer accepted and cached
	CallNotModified CallOutcome = "not_modified" // an answer saying the cached rules still hold
	CallError       CallOutcome = "error"        // transport error, timeout or error status
	CallInvalid     CallOutcome = "invalid"      // an answer rejected by validation
)

// Metrics receives a Client's measurements. Its methods run on the check's
// path and must be fast; they must not block.
type Metrics interface {
	Lookup(limiter string, outcome Lookup)
	Call(limiter string, outcome CallOutcome, latency time.Duration)
}

// PrometheusMetrics is a Metrics backed by Prometheus collectors:
// ratekit_remoterules_lookups_total{limiter,outcome},
// ratekit_remoterules_calls_total{limiter,outcome} and
// ratekit_remoterules_call_seconds{limiter}.
type PrometheusMetrics struct {
	lookups *prometheus.CounterVec
	calls   *prometheus.CounterVec
	latency *prometheus.HistogramVec
	all     promset.Set // the three above
}

var (
	_ Metrics              = (*PrometheusMetrics)(nil)
	_ prometheus.Collector = (*PrometheusMetrics)(nil)
)

// NewPrometheusMetrics returns the collectors; register them with
// prometheus.MustRegister or a registry of your own.
func NewPrometheusMetrics() *PrometheusMetrics {
	m := &PrometheusMetrics{
		lookups: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_remoterules_lookups_total",
			Help: "Cache lookups of per-request rules, by outcome (hit, stale, miss, breaker_open).",
		}, []string{"limiter", "outcome"}),
		calls: prometheus.NewCounterVec(prometheus.CounterOpts{
			Name: "ratekit_remoterules_calls_total",
			Help: "Calls to the rules service, by outcome (ok, not_modified, error, invalid).",
		}, []string{"limiter", "outcome"}),
		latency: prometheus.NewHistogramVec(prometheus.HistogramOpts{
			Name:    "ratekit_remoterules_call_seconds",
			Help:    "Latency of calls to the rules service.",
			Buckets: []float64{.001, .0025, .005, .01, .025, .05, .1, .25},
		}, []string{"limiter"}),
	}
	m.all = promset.Set{m.lookups, m.calls, m.latency}
	return m
}

// Lookup implements Metrics: it counts one lookup in
// ratekit_remoterules_lookups_total.
func (m *PrometheusMetrics) Lookup(limiter string, outcome Lookup) {
	m.lookups.WithLabelValues(limiter, string(outcome)).Inc()
}

// Call implements Metrics: it counts one call in
// ratekit_remoterules_calls_total and observes its latency in
// ratekit_remoterules_call_seconds.
func (m *PrometheusMetrics) Call(limiter string, outcome CallOutcome, latency time.Duration) {
	m.calls.WithLabelValues(limiter, string(outcome)).Inc()
	m.latency.WithLabelValues(limiter).Observe(latency.Seconds())
}

// Describe implements prometheus.Collector.
func (m *PrometheusMetrics) Describe(ch chan<- *prometheus.Desc) { m.all.Describe(ch) }

// Collect implements prometheus.Collector.
func (m *PrometheusMetrics) Collect(ch chan<- prometheus.Metric) { m.all.Collect(ch) }
