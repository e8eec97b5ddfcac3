// Package promset describes and collects several Prometheus collectors as
// one, for the metric types of ratekit's packages that hold a few vectors.
package promset

import "github.com/prometheus/client_golang/prometheus"

// Set is a prometheus.Collector made of other collectors, described and
// collected in order.
type Set []prometheus.Collector

var _ prometheus.Collector = Set(nil)

// Describe implements prometheus.Collector.
func (s Set) Describe(ch chan<- *prometheus.Desc) {
	for _, c := range s {
		c.Describe(ch)
	}
}

// Collect implements prometheus.Collector.
func (s Set) Collect(ch chan<- prometheus.Metric) {
	for _, c := range s {
		c.Collect(ch)
	}
}
