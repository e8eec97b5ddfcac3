package promtest_test

import (
	"testing"

	"github.com/prometheus/client_golang/prometheus"

	"github.com/ratekit/ratekit/internal/promtest"
)

func TestCounter(t *testing.T) {
	reg := prometheus.NewRegistry()
	c := prometheus.NewCounterVec(prometheus.CounterOpts{Name: "requests_total", Help: "h"}, []string{"domain", "code"})
	reg.MustRegister(c)
	c.WithLabelValues("edge", "ok").Add(3)
	c.WithLabelValues("edge", "over_limit").Add(2)
	c.WithLabelValues("api", "ok").Add(7)
	for _, tt := range []struct {
		name   string
		metric string
		labels map[string]string
		want   float64
		found  bool
	}{
		{"all labels", "requests_total", map[string]string{"domain": "edge", "code": "over_limit"}, 2, true},
		{"some labels", "requests_total", map[string]string{"domain": "api"}, 7, true},
		{"no such value", "requests_total", map[string]string{"domain": "edge", "code": "invalid"}, 0, false},
		{"no such label", "requests_total", map[string]string{"tenant": "a"}, 0, false},
		{"no such metric", "other_total", nil, 0, false},
	} {
		t.Run(tt.name, func(t *testing.T) {
			got, found := promtest.Counter(t, reg, tt.metric, tt.labels)
			if got != tt.want || found != tt.found {
				t.Fatalf("Counter = %v, %v; want %v, %v", got, found, tt.want, tt.found)
			}
		})
	}
}
